use super::*;
use crescent_cold::ColdOpId;

fn device(dir: &tempfile::TempDir) -> LocalDirDevice {
    LocalDirDevice::open("dev-a", dir.path()).unwrap()
}

fn payload(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn staging(units: u64, ttl_ms: u64) -> OwnerStaging {
    OwnerStaging::new(
        "o/staging0".into(),
        units * OWNER_STAGING_UNIT,
        ttl_ms,
        OwnerStagingMetrics::unregistered(),
        first_owner_staging_id(1_000),
    )
    .unwrap()
}

fn write(dev: &LocalDirDevice, n: u128, data: &[u8]) -> String {
    dev.write(ColdOpId::new(uuid::Uuid::from_u128(n)), data)
        .unwrap()
        .locator
}

fn slot_bytes(staging: &OwnerStaging, slot: &StagedSlot) -> Vec<u8> {
    staging
        .region()
        .try_with_read(slot.offset, slot.length, |b| b.to_vec())
        .unwrap()
        .unwrap()
}

#[test]
fn owner_tokens_are_disjoint_from_crescentd_tokens_and_grow_across_runs() {
    let now = 1_800_000_000_000u64;
    let crescentd_first = now << 16;
    let owner = first_owner_staging_id(now);
    assert!(owner >= 1 << 63 && crescentd_first < 1 << 63);
    assert!(first_owner_staging_id(now + 1) > owner);
    assert_eq!(staging_segment_id_for("o1"), "o1/staging0");
}

#[test]
fn a_staged_payload_is_the_verified_bytes_and_recycles_once_released() {
    let dir = tempfile::tempdir().unwrap();
    let dev = device(&dir);
    let data = payload(3 * OWNER_STAGING_UNIT as usize + 17, 5);
    let locator = write(&dev, 1, &data);
    let staging = staging(8, 5_000);
    let slot = staging
        .stage(
            &dev,
            &locator,
            data.len() as u64,
            crescent_cold::payload_checksum(&data),
            100,
        )
        .unwrap();
    assert_eq!(slot.length, data.len() as u64);
    assert_eq!(slot.expires_at_ms, 5_100);
    assert!(slot.token >= 1 << 63);
    assert_eq!(slot_bytes(&staging, &slot), data);
    assert_eq!(staging.used_bytes(), 4 * OWNER_STAGING_UNIT);
    assert_eq!(staging.release(&[slot.token], 200), 1);
    assert_eq!(staging.used_bytes(), 0);
    // Idempotent: a repeat and an unknown token change nothing.
    assert_eq!(staging.release(&[slot.token, 42], 300), 0);
    assert_eq!(staging.metrics.acks("released"), 1);
    assert_eq!(staging.metrics.acks("unknown"), 2);
    assert_eq!(staging.metrics.stages("staged"), 1);
}

#[test]
fn a_damaged_payload_is_never_staged_and_frees_its_slot() {
    let dir = tempfile::tempdir().unwrap();
    let dev = device(&dir);
    let data = payload(100_000, 9);
    let locator = write(&dev, 2, &data);
    let path = dev.path_of(&locator).unwrap();
    let mut file = std::fs::read(&path).unwrap();
    let last = file.len() - 10;
    file[last] ^= 0x01;
    std::fs::write(&path, file).unwrap();
    let staging = staging(4, 5_000);
    let err = staging
        .stage(
            &dev,
            &locator,
            data.len() as u64,
            crescent_cold::payload_checksum(&data),
            0,
        )
        .unwrap_err();
    assert!(matches!(err, ColdError::ChecksumMismatch { .. }), "{err:?}");
    assert_eq!(staging.used_bytes(), 0);
    assert_eq!(staging.metrics.stages("failed"), 1);
}

#[test]
fn saturation_is_explicit_backpressure_until_a_release() {
    let dir = tempfile::tempdir().unwrap();
    let dev = device(&dir);
    let data = payload(3 * OWNER_STAGING_UNIT as usize, 1);
    let locator = write(&dev, 3, &data);
    let crc = crescent_cold::payload_checksum(&data);
    let staging = staging(4, 5_000);
    let held = staging
        .stage(&dev, &locator, data.len() as u64, crc, 0)
        .unwrap();
    let busy = staging
        .stage(&dev, &locator, data.len() as u64, crc, 1)
        .unwrap_err();
    assert_eq!(busy.code().as_str(), "BUSY", "{busy:?}");
    assert_eq!(staging.metrics.stages("busy"), 1);
    // Larger than the whole region: refused as such, not as backpressure.
    let never = staging.stage(&dev, &locator, 5 * OWNER_STAGING_UNIT, crc, 1);
    assert_eq!(never.unwrap_err().code().as_str(), "INVALID_ARGUMENT");
    staging.release(&[held.token], 2);
    let again = staging
        .stage(&dev, &locator, data.len() as u64, crc, 3)
        .unwrap();
    assert_eq!(slot_bytes(&staging, &again), data);
}

#[test]
fn expiry_fences_the_token_and_frees_the_slot_and_a_late_release_is_fenced() {
    let dir = tempfile::tempdir().unwrap();
    let dev = device(&dir);
    let data = payload(70_000, 2);
    let locator = write(&dev, 4, &data);
    let crc = crescent_cold::payload_checksum(&data);
    let staging = staging(2, 1_000);
    let slot = staging
        .stage(&dev, &locator, data.len() as u64, crc, 10)
        .unwrap();
    staging.expire(1_010);
    assert_eq!(staging.used_bytes(), 2 * OWNER_STAGING_UNIT, "not yet due");
    staging.expire(1_011);
    assert_eq!(staging.used_bytes(), 0);
    assert_eq!(staging.metrics.expired(), 1);
    // Retired: the late release is unknown and has no effect.
    assert_eq!(staging.release(&[slot.token], 1_020), 0);
    assert_eq!(staging.metrics.acks("released"), 0);
}

#[test]
fn an_expired_slot_is_kept_while_a_transfer_holds_its_range() {
    let dir = tempfile::tempdir().unwrap();
    let dev = device(&dir);
    let data = payload(70_000, 3);
    let locator = write(&dev, 5, &data);
    let crc = crescent_cold::payload_checksum(&data);
    let staging = staging(2, 100);
    let slot = staging
        .stage(&dev, &locator, data.len() as u64, crc, 0)
        .unwrap();
    let region = staging.region();
    // A transfer reading the slot (a shared range lock) outlives the deadline.
    region
        .try_with_read(slot.offset, slot.length, |_| {
            staging.expire(500);
            assert_eq!(staging.used_bytes(), 2 * OWNER_STAGING_UNIT);
        })
        .unwrap()
        .unwrap();
    staging.expire(600);
    assert_eq!(staging.used_bytes(), 0);
}
