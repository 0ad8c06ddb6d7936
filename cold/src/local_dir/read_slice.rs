//! Reading a payload straight into memory the caller already has (a staging slot of a remote
//! restore), with the same checks as [`LocalDirDevice::read_into`]: no fresh allocation and no
//! second copy on the owner's side of a remote restore.

use std::io::Read;

use super::{checksum_matches, corrupt, LocalDirDevice};
use crate::error::ColdError;

impl LocalDirDevice {
    /// Reads and verifies the payload at `locator` into `dst`, whose length must be the
    /// expected length: the header must be intact and of this device and operation, and the
    /// length and CRC32C of the bytes read must equal the expected ones. On error `dst` holds
    /// unverified bytes: the caller must not expose them (a staging slot is aborted).
    pub fn read_into_slice(
        &self,
        locator: &str,
        expected_checksum: u32,
        dst: &mut [u8],
    ) -> Result<(), ColdError> {
        let _span =
            tracing::debug_span!("cold_read_slice", device = %self.device_id, locator).entered();
        let expected_length = dst.len() as u64;
        let (mut file, header, path) =
            self.open_expected(locator, expected_length, expected_checksum)?;
        // Read and checksum chunk by chunk: each chunk is checked while it is still in the
        // cache the read just filled, instead of a second pass over the whole payload.
        let mut crc = crescent_checksum::Crc32c::new();
        for chunk in dst.chunks_mut(CHECK_CHUNK_BYTES) {
            file.read_exact(chunk).map_err(|e| match e.kind() {
                std::io::ErrorKind::UnexpectedEof => ColdError::LengthMismatch {
                    locator: locator.to_string(),
                    expected: expected_length,
                    actual: 0,
                },
                _ => ColdError::io(&path, e),
            })?;
            crc.update(chunk);
        }
        // A file longer than its header claims is damaged too.
        let mut probe = [0u8; 1];
        if file.read(&mut probe).map_err(|e| ColdError::io(&path, e))? != 0 {
            return Err(corrupt(locator, "longer than its header"));
        }
        checksum_matches(locator, &header, crc.finish())
    }
}

/// Bytes read between two checksum updates: small enough to stay in a core's cache.
const CHECK_CHUNK_BYTES: usize = 256 << 10;

#[cfg(test)]
mod tests {
    use crate::ids::{payload_checksum, ColdOpId};
    use crate::local_dir::LocalDirDevice;
    use crate::ColdError;

    #[test]
    fn reads_verified_bytes_into_a_slice_and_refuses_damage() {
        let dir = tempfile::tempdir().unwrap();
        let dev = LocalDirDevice::open("dev-a", dir.path()).unwrap();
        let payload: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
        let op = ColdOpId(uuid::Uuid::from_u128(42));
        let receipt = dev.write(op, &payload).unwrap();
        let sum = payload_checksum(&payload);
        let mut dst = vec![0u8; payload.len()];
        dev.read_into_slice(&receipt.locator, sum, &mut dst)
            .unwrap();
        assert_eq!(dst, payload);
        // A wrong expected length (the slice) or checksum is refused before reading.
        let mut short = vec![0u8; payload.len() - 1];
        assert!(matches!(
            dev.read_into_slice(&receipt.locator, sum, &mut short),
            Err(ColdError::LengthMismatch { .. })
        ));
        assert!(matches!(
            dev.read_into_slice(&receipt.locator, sum ^ 1, &mut dst),
            Err(ColdError::ChecksumMismatch { .. })
        ));
        // One flipped payload byte: checksum error.
        let path = dev.path_of(&receipt.locator).unwrap();
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        assert!(matches!(
            dev.read_into_slice(&receipt.locator, sum, &mut dst),
            Err(ColdError::ChecksumMismatch { .. })
        ));
    }
}
