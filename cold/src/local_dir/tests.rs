//! local_dir IO tests: layout, idempotent writes, verified reads, corruption, scans.

use super::*;

fn op(n: u128) -> ColdOpId {
    ColdOpId(uuid::Uuid::from_u128(n))
}

fn device(dir: &tempfile::TempDir) -> LocalDirDevice {
    LocalDirDevice::open("dev1", dir.path().join("dev1")).unwrap()
}

fn payload(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn locators_are_deterministic_and_parsed_strictly() {
    let id = op(0xabcdef);
    let loc = locator_for(id);
    assert_eq!(loc, format!("objects/00/{:032x}.cold", 0xabcdef));
    assert_eq!(locator_for(id), loc);
    assert_eq!(parse_locator(&loc), Some(id));
    for bad in [
        "../etc/passwd",
        "objects/00/../../x.cold",
        "objects/01/000000000000000000000000000abcdef.cold",
        "objects/00/xyz.cold",
        "objects/00/000000000000000000000000000ABCDEF.cold",
    ] {
        assert_eq!(parse_locator(bad), None, "{bad}");
    }
}

#[test]
fn write_then_read_returns_the_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let dev = device(&dir);
    let data = payload(10_000, 1);
    let r = dev.write(op(1), &data).unwrap();
    assert_eq!(
        (r.length, r.checksum, r.already_present),
        (10_000, payload_checksum(&data), false)
    );
    assert_eq!(r.fingerprint, PayloadFingerprint::of(&data));
    assert_eq!(dev.read(&r.locator, r.length, r.checksum).unwrap(), data);
    let len = fs::metadata(dev.path_of(&r.locator).unwrap())
        .unwrap()
        .len();
    assert_eq!(len, 10_000 + HEADER_LEN as u64);
    assert!(
        dev.scan().unwrap().stale_temps.is_empty(),
        "the temp file was renamed"
    );
}

#[test]
fn write_is_idempotent_by_operation_id() {
    let dir = tempfile::tempdir().unwrap();
    let dev = device(&dir);
    let data = payload(100, 2);
    let first = dev.write(op(1), &data).unwrap();
    let again = dev.write(op(1), &data).unwrap();
    assert!(again.already_present);
    assert_eq!(
        WriteReceipt {
            already_present: false,
            ..again
        },
        first
    );
    let err = dev.write(op(1), &payload(100, 3)).unwrap_err();
    assert_eq!(err.code().as_str(), "CONFLICT");
    assert_eq!(
        dev.read(&first.locator, 100, first.checksum).unwrap(),
        data,
        "the original stays"
    );
}

#[test]
fn a_damaged_file_is_replaced_by_a_rewrite() {
    let dir = tempfile::tempdir().unwrap();
    let dev = device(&dir);
    let data = payload(100, 2);
    let r = dev.write(op(1), &data).unwrap();
    let path = dev.path_of(&r.locator).unwrap();
    fs::write(&path, b"torn").unwrap();
    let again = dev.write(op(1), &data).unwrap();
    assert!(!again.already_present);
    assert_eq!(dev.read(&r.locator, 100, r.checksum).unwrap(), data);
}

#[test]
fn every_flipped_byte_is_detected_and_no_bytes_are_returned() {
    let dir = tempfile::tempdir().unwrap();
    let dev = device(&dir);
    let data = payload(300, 4);
    let r = dev.write(op(1), &data).unwrap();
    let path = dev.path_of(&r.locator).unwrap();
    let original = fs::read(&path).unwrap();
    for i in 0..original.len() {
        let mut bad = original.clone();
        bad[i] ^= 0x01;
        fs::write(&path, &bad).unwrap();
        let mut buf = vec![7u8; 3];
        let err = dev
            .read_into(&r.locator, r.length, r.checksum, &mut buf)
            .unwrap_err();
        assert!(buf.is_empty(), "byte {i}: no unverified bytes visible");
        if i >= HEADER_LEN {
            assert_eq!(
                err,
                ColdError::ChecksumMismatch {
                    locator: r.locator.clone(),
                    expected: r.checksum,
                    actual: payload_checksum(&bad[HEADER_LEN..])
                },
                "byte {i}"
            );
        } else {
            assert_eq!(
                err.class(),
                crescent_actors::ErrorClass::Fatal,
                "byte {i}: {err}"
            );
        }
    }
}

#[test]
fn read_checks_expected_length_checksum_and_extra_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let dev = device(&dir);
    let data = payload(64, 5);
    let r = dev.write(op(1), &data).unwrap();
    assert!(matches!(
        dev.read(&r.locator, 63, r.checksum),
        Err(ColdError::LengthMismatch { .. })
    ));
    assert!(matches!(
        dev.read(&r.locator, 64, r.checksum ^ 1),
        Err(ColdError::ChecksumMismatch { .. })
    ));
    let path = dev.path_of(&r.locator).unwrap();
    let mut f = OpenOptions::new().append(true).open(&path).unwrap();
    f.write_all(b"x").unwrap();
    assert_eq!(
        dev.read(&r.locator, 64, r.checksum).unwrap_err(),
        ColdError::LengthMismatch {
            locator: r.locator.clone(),
            expected: 64,
            actual: 65
        }
    );
    fs::write(&path, &fs::read(&path).unwrap()[..HEADER_LEN + 10]).unwrap();
    assert!(matches!(
        dev.read(&r.locator, 64, r.checksum),
        Err(ColdError::LengthMismatch { actual: 10, .. })
    ));
}

#[test]
fn a_file_of_another_operation_or_device_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let dev = device(&dir);
    let a = dev.write(op(1), &payload(10, 1)).unwrap();
    let b = dev.write(op(2), &payload(10, 1)).unwrap();
    fs::copy(
        dev.path_of(&a.locator).unwrap(),
        dev.path_of(&b.locator).unwrap(),
    )
    .unwrap();
    assert!(matches!(
        dev.read(&b.locator, 10, b.checksum),
        Err(ColdError::CorruptFile { .. })
    ));
    let other = LocalDirDevice::open("dev2", dir.path().join("dev2")).unwrap();
    let c = other.write(op(3), &payload(10, 1)).unwrap();
    let target = dev.root().join(&c.locator);
    fs::create_dir_all(target.parent().unwrap()).unwrap();
    fs::copy(other.path_of(&c.locator).unwrap(), &target).unwrap();
    assert_eq!(
        dev.read(&c.locator, 10, c.checksum).unwrap_err(),
        ColdError::CorruptFile {
            locator: c.locator.clone(),
            reason: "written by another device".into()
        }
    );
}

#[test]
fn a_root_of_another_device_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    LocalDirDevice::open("dev1", dir.path()).unwrap();
    LocalDirDevice::open("dev1", dir.path()).unwrap();
    assert_eq!(
        LocalDirDevice::open("dev2", dir.path()).unwrap_err().code(),
        crescent_actors::ErrorCode::Conflict
    );
    assert_eq!(
        LocalDirDevice::open("../x", dir.path()).unwrap_err().code(),
        crescent_actors::ErrorCode::InvalidArgument
    );
}

#[test]
fn missing_payload_and_idempotent_delete() {
    let dir = tempfile::tempdir().unwrap();
    let dev = device(&dir);
    let r = dev.write(op(1), &payload(10, 1)).unwrap();
    assert!(dev.exists(&r.locator).unwrap());
    assert!(dev.delete(&r.locator).unwrap());
    assert!(!dev.delete(&r.locator).unwrap());
    assert!(!dev.exists(&r.locator).unwrap());
    assert_eq!(
        dev.read(&r.locator, 10, r.checksum).unwrap_err(),
        ColdError::PayloadMissing {
            locator: r.locator.clone()
        }
    );
    assert_eq!(
        dev.delete("/etc/passwd").unwrap_err().code(),
        crescent_actors::ErrorCode::InvalidArgument
    );
}

#[test]
fn scan_lists_payloads_temps_and_strangers() {
    let dir = tempfile::tempdir().unwrap();
    let dev = device(&dir);
    dev.write(op(2), &payload(10, 1)).unwrap();
    dev.write(op(1), &payload(20, 1)).unwrap();
    fs::write(dev.root().join("tmp").join("x.tmp"), b"partial").unwrap();
    fs::write(dev.root().join("objects").join("00").join("junk"), b"?").unwrap();
    let scan = dev.scan().unwrap();
    assert_eq!(
        scan.payloads.iter().map(|p| p.op_id).collect::<Vec<_>>(),
        vec![op(1), op(2)]
    );
    assert_eq!(scan.payloads[0].file_len, 20 + HEADER_LEN as u64);
    assert_eq!(scan.stale_temps.len(), 1);
    assert_eq!(scan.unknown.len(), 1);
    assert_eq!(dev.remove_stale_temps().unwrap(), 1);
    assert!(dev.scan().unwrap().stale_temps.is_empty());
}

#[test]
fn header_round_trips_and_rejects_other_versions() {
    let h = FileHeader {
        length: 5,
        checksum: 9,
        op_id: op(3),
        fingerprint: PayloadFingerprint([4; 32]),
        device_tag: device_tag("d"),
    };
    let mut b = h.encode();
    assert_eq!(FileHeader::decode(&b).unwrap(), h);
    b[8] = 2;
    let crc = crescent_checksum::crc32c(&b[..92]);
    b[92..96].copy_from_slice(&crc.to_le_bytes());
    assert_eq!(
        FileHeader::decode(&b).unwrap_err(),
        "format version 2, this binary reads 1"
    );
}

#[test]
fn the_probe_writes_reads_and_removes_its_file_and_fails_when_the_device_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let dev = device(&dir);
    dev.probe().unwrap();
    dev.probe().unwrap();
    let scan = dev.scan().unwrap();
    assert!(scan.stale_temps.is_empty(), "{scan:?}");
    // The directory vanished (an unmounted share): the probe fails with an IO error.
    std::fs::remove_dir_all(dir.path().join("dev1")).unwrap();
    assert!(matches!(dev.probe(), Err(ColdError::Io { .. })));
}

#[test]
fn open_existing_refuses_an_unstamped_directory() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("dev1");
    assert!(matches!(
        LocalDirDevice::open_existing("dev1", &root),
        Err(ColdError::NotFound { .. })
    ));
    LocalDirDevice::open("dev1", &root).unwrap();
    LocalDirDevice::open_existing("dev1", &root).unwrap();
    assert!(matches!(
        LocalDirDevice::open_existing("dev2", &root),
        Err(ColdError::Conflict { .. })
    ));
}

#[test]
fn a_reader_opens_only_a_root_stamped_for_its_device_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let owner = device(&dir);
    let receipt = owner.write(op(7), &payload(100, 3)).unwrap();
    let reader = LocalDirDevice::open_reader("dev1", dir.path().join("dev1")).unwrap();
    assert_eq!(
        reader
            .read(&receipt.locator, receipt.length, receipt.checksum)
            .unwrap(),
        payload(100, 3)
    );
    // Stamped for another device: refused (its locators are not this device's).
    assert!(matches!(
        LocalDirDevice::open_reader("dev2", dir.path().join("dev1")),
        Err(ColdError::Conflict { .. })
    ));
    // No stamp: refused, and nothing is created there.
    let empty = dir.path().join("nothing");
    assert!(matches!(
        LocalDirDevice::open_reader("dev1", &empty),
        Err(ColdError::NotFound { .. })
    ));
    assert!(!empty.exists());
}
