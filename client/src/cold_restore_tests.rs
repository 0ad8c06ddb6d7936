//! Local restore: only a root stamped for the device is read, nothing unverified is returned,
//! and a failed read forgets the checked root.

use super::*;
use crate::cold_restore_target::BLOCKING_READ_BYTES;
use crescent_transport::SegmentMemory;
use crescent_wire::cold::COLD_BACKING_REF_VERSION;

fn backing(root: &std::path::Path, device: &str, locator: &str, payload: &[u8]) -> ColdBackingRef {
    ColdBackingRef {
        version: COLD_BACKING_REF_VERSION,
        device_id: device.into(),
        kind: "local_dir".into(),
        root: root.display().to_string(),
        locator: locator.into(),
        length: payload.len() as u64,
        checksum: crescent_checksum::crc32c(payload),
        route_version: 1,
    }
}

/// Flips one bit of payload byte `at` in the backing's file.
fn flip_payload_byte(b: &ColdBackingRef, at: usize) {
    let path = std::path::Path::new(&b.root).join(&b.locator);
    let mut file = std::fs::read(&path).unwrap();
    file[96 + at] ^= 0x10;
    std::fs::write(&path, &file).unwrap();
}

/// The error reading `b` fails with; no checked reader of its root is kept afterwards.
fn refused_with_no_reader_kept(b: &ColdBackingRef) -> ColdError {
    let restore = LocalColdRestore::new(true);
    let e = restore.read_blocking(b).unwrap_err();
    assert!(restore.readers.lock().unwrap().is_empty(), "{e}");
    e
}

fn device_with(payload: &[u8]) -> (tempfile::TempDir, ColdBackingRef) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("dev");
    let owner = LocalDirDevice::open("dev", &root).unwrap();
    let op = crescent_cold::ColdOpId(uuid::Uuid::from_u128(42));
    let receipt = owner.write(op, payload).unwrap();
    let b = backing(&root, "dev", &receipt.locator, payload);
    (dir, b)
}

#[test]
fn a_verified_payload_is_read_from_the_device_directory() {
    let payload: Vec<u8> = (0..300_000u32).map(|i| (i * 7) as u8).collect();
    let (_dir, b) = device_with(&payload);
    let restore = LocalColdRestore::new(true);
    assert_eq!(restore.read_blocking(&b).unwrap(), payload);
    assert_eq!(
        restore.readers.lock().unwrap().len(),
        1,
        "the root check is cached"
    );
}

#[test]
fn a_flipped_byte_is_a_checksum_error_and_no_bytes_come_back() {
    let payload = vec![5u8; 10_000];
    let (_dir, b) = device_with(&payload);
    flip_payload_byte(&b, 4321);
    let e = refused_with_no_reader_kept(&b);
    assert!(matches!(e, ColdError::ChecksumMismatch { .. }), "{e}");
}

#[test]
fn another_devices_root_a_missing_root_or_a_different_backing_is_refused() {
    let payload = b"cold bytes".to_vec();
    let (_dir, b) = device_with(&payload);
    let restore = LocalColdRestore::new(true);
    // The stamp names "dev", not "other".
    let other = ColdBackingRef {
        device_id: "other".into(),
        ..b.clone()
    };
    assert!(matches!(
        restore.read_blocking(&other),
        Err(ColdError::Conflict { .. })
    ));
    // No such directory on this host.
    let elsewhere = ColdBackingRef {
        root: "/nonexistent/crescent/cold/dev".into(),
        ..b.clone()
    };
    assert!(matches!(
        restore.read_blocking(&elsewhere),
        Err(ColdError::NotFound { .. })
    ));
    // Expected length or checksum not those of the file.
    let longer = ColdBackingRef {
        length: b.length + 1,
        ..b.clone()
    };
    assert!(restore.read_blocking(&longer).is_err());
    let other_sum = ColdBackingRef {
        checksum: b.checksum ^ 1,
        ..b.clone()
    };
    assert!(matches!(
        restore.read_blocking(&other_sum),
        Err(ColdError::ChecksumMismatch { .. })
    ));
    // A future descriptor version is not guessed at.
    let future = ColdBackingRef {
        version: COLD_BACKING_REF_VERSION + 1,
        ..b.clone()
    };
    assert!(matches!(
        restore.read_blocking(&future),
        Err(ColdError::InvalidArgument { .. })
    ));
    assert_eq!(restore.read_blocking(&b).unwrap(), payload);
}

fn reply_of(payload: &[u8], inline: Option<Vec<u8>>) -> GetReply {
    GetReply {
        size: payload.len() as u64,
        put_id: 7,
        data_type: Default::default(),
        checksum: Some(crescent_checksum::crc32c(payload)),
        replicas: Vec::new(),
        lease_until_ms: 0,
        inline,
        cold_backing: None,
        staged: None,
    }
}

#[test]
fn an_inline_value_is_checked_once_and_moved_out_of_the_reply() {
    let payload = vec![9u8; 5_000];
    let answer = verified_inline("k", reply_of(&payload, Some(payload.clone()))).unwrap();
    assert!(matches!(&answer.value, Some(Restored::Value(v)) if v == &payload));
    assert!(answer.reply.inline.is_none(), "moved, not copied");
    assert_eq!(
        answer.reply.put_id, 7,
        "the lease is still released from it"
    );
    // No inline value: the reply passes unchanged (a hot object).
    let hot = verified_inline("k", reply_of(&payload, None)).unwrap();
    assert!(hot.value.is_none());
}

#[test]
fn an_inline_value_with_a_flipped_byte_or_a_wrong_length_is_refused() {
    let payload = vec![9u8; 5_000];
    let mut flipped = payload.clone();
    flipped[1234] ^= 1;
    let e = verified_inline("k", reply_of(&payload, Some(flipped))).unwrap_err();
    assert!(matches!(e, ClientError::ChecksumMismatch { .. }), "{e}");
    let e = verified_inline("k", reply_of(&payload, Some(payload[..4_999].to_vec()))).unwrap_err();
    assert!(matches!(e, ClientError::Protocol(_)), "{e}");
}

#[test]
fn a_backing_must_describe_the_object_the_reply_describes() {
    let payload = vec![3u8; 1_000];
    let (_dir, b) = device_with(&payload);
    matches_reply(&b, &reply_of(&payload, None)).unwrap();
    let other = vec![4u8; 1_000];
    let e = matches_reply(&b, &reply_of(&other, None)).unwrap_err();
    assert!(matches!(e, ColdError::InvalidArgument { .. }), "{e}");
    let longer = vec![3u8; 1_001];
    assert!(matches_reply(&b, &reply_of(&longer, None)).is_err());
}

/// The async read on both runtime flavors, above [`BLOCKING_READ_BYTES`] (the blocking-pool
/// hop on a current-thread runtime, `block_in_place` on a multi-thread one) and below it:
/// a new value of exactly its length, or the bytes straight in a region's range with the
/// bytes around it untouched; a flipped byte refused either way, and a region range zeroed
/// then (no unverified byte stays visible); a range outside the region gets a new value.
#[test]
fn the_async_read_lands_verified_bytes_in_a_value_or_a_region_on_both_runtimes() {
    let large: Vec<u8> = (0..(BLOCKING_READ_BYTES as u32 + 4321))
        .map(|i| (i * 13) as u8)
        .collect();
    let small = large[..5_000].to_vec();
    for flavor in ["current_thread", "multi_thread"] {
        let rt = match flavor {
            "current_thread" => tokio::runtime::Builder::new_current_thread().build(),
            _ => tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .build(),
        }
        .unwrap();
        for payload in [&large, &small] {
            let (_dir, b) = device_with(payload);
            let restore = Arc::new(LocalColdRestore::new(true));
            let value = rt.block_on(restore.read(&b, &RestoreTarget::NewValue));
            let Ok(Restored::Value(value)) = value else {
                panic!("{flavor}: {value:?}");
            };
            assert_eq!(&value, payload, "{flavor}");
            assert_eq!(value.capacity(), payload.len(), "{flavor}: never regrown");

            let memory = Arc::new(
                SegmentMemory::from_boxed_slice(vec![0xEEu8; payload.len() + 100].into()).unwrap(),
            );
            let region = RestoreTarget::Region {
                memory: memory.clone(),
                offset: 40,
            };
            let read = rt.block_on(restore.read(&b, &region));
            assert!(
                matches!(read, Ok(Restored::InPlace(n)) if n == payload.len()),
                "{read:?}"
            );
            let landed = rt
                .block_on(memory.read_to_vec(0, memory.len() as u64))
                .unwrap();
            assert_eq!(&landed[40..40 + payload.len()], &payload[..], "{flavor}");
            assert!(landed[..40]
                .iter()
                .chain(&landed[40 + payload.len()..])
                .all(|&x| x == 0xEE));
            let outside = RestoreTarget::Region {
                memory: memory.clone(),
                offset: 101,
            };
            let read = rt.block_on(restore.read(&b, &outside));
            assert!(
                matches!(&read, Ok(Restored::Value(v)) if v == payload),
                "{read:?}"
            );

            flip_payload_byte(&b, payload.len() / 2);
            for target in [&RestoreTarget::NewValue, &region] {
                let e = rt.block_on(restore.read(&b, target)).unwrap_err();
                assert!(
                    matches!(e, ColdError::ChecksumMismatch { .. }),
                    "{flavor}: {e}"
                );
            }
            let zeroed = rt
                .block_on(memory.read_to_vec(40, payload.len() as u64))
                .unwrap();
            assert!(
                zeroed.iter().all(|&x| x == 0),
                "{flavor}: unverified bytes left visible"
            );
        }
    }
}

#[test]
fn a_length_that_cannot_be_allocated_is_refused_before_any_io() {
    let payload = vec![1u8; 100];
    let (_dir, b) = device_with(&payload);
    let huge = ColdBackingRef {
        length: u64::MAX,
        ..b.clone()
    };
    // The device directory is not even opened.
    let e = refused_with_no_reader_kept(&huge);
    assert!(matches!(e, ColdError::InvalidArgument { .. }), "{e}");
}
