//! CRC32C (Castagnoli, the iSCSI polynomial): the one checksum of every Crescent format and
//! payload (journal frames and segment headers, snapshot files, cold file headers, object
//! payloads on the put, get, restore and staging paths).
//!
//! One place, so every crate computes it the same way and the implementation can change
//! without touching the formats: the values are the standard CRC-32/ISCSI ones, whatever
//! computes them. `crc-fast` folds with carry-less multiplication (VPCLMULQDQ on AVX-512,
//! PCLMULQDQ, or the ARMv8 equivalents), chosen at run time. On this project's machine it
//! checks a 256 KiB chunk still in cache about four times as fast as the SSE 4.2 `crc32`
//! instruction loop of the `crc32c` crate, which made the CRC of a restored 4 MiB payload
//! (read and checked chunk by chunk) almost free next to the read itself
//! (docs/cold-tier.md, "Checksum speed").

use crc_fast::{CrcAlgorithm, Digest};

/// The CRC32C of `bytes`.
pub fn crc32c(bytes: &[u8]) -> u32 {
    // A CRC-32 algorithm's value fits in 32 bits (the crate returns every width as u64).
    crc_fast::checksum(CrcAlgorithm::Crc32Iscsi, bytes) as u32
}

/// A CRC32C computed over bytes that arrive in pieces (e.g. a file read chunk by chunk):
/// after updates with `a` then `b`, [`Crc32c::finish`] is `crc32c(a ++ b)`.
#[derive(Debug, Clone)]
pub struct Crc32c(Digest);

impl Crc32c {
    pub fn new() -> Self {
        Self(Digest::new(CrcAlgorithm::Crc32Iscsi))
    }

    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    /// The CRC32C of every byte given so far.
    pub fn finish(&self) -> u32 {
        self.0.finalize() as u32
    }
}

impl Default for Crc32c {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_standard_check_value_and_the_empty_input() {
        // CRC-32/ISCSI's catalogue check value.
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(crc32c(b""), 0);
        assert_eq!(Crc32c::new().finish(), 0);
    }

    #[test]
    fn pieces_give_the_crc_of_the_whole_at_every_split() {
        let bytes: Vec<u8> = (0..5000u32).map(|i| (i * 7 + i / 13) as u8).collect();
        let whole = crc32c(&bytes);
        for split in [0, 1, 63, 64, 65, 255, 256, 4095, 4999, 5000] {
            let mut c = Crc32c::new();
            c.update(&bytes[..split]);
            c.update(&bytes[split..]);
            assert_eq!(c.finish(), whole, "split at {split}");
        }
        // Known values at the sizes the folding paths switch at (the bytes are i as u8).
        let ramp: Vec<u8> = (0..=255u8).collect();
        assert_eq!(crc32c(&ramp[..32]), 0x46dd_794e);
        assert_eq!(crc32c(&[0u8; 32]), 0x8a91_36aa);
    }
}
