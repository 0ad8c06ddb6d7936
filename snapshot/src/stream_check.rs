//! Checking a snapshot file as it streams in, without holding it (docs/ha.md, "Reseeding"):
//! the header (format version first, its CRC, and the position it names) as soon as its bytes
//! are in, and at the end the trailer and the file CRC32C over every byte before it. The
//! per-section SHA-256s are checked when the node restores from the file, as for any snapshot.

use std::path::{Path, PathBuf};

use crate::error::{Result, SnapshotError};
use crate::format::{decode_header_only, decode_trailer_only, Position, HEADER_BYTES};
use crate::format::{SnapshotHeader, TRAILER_BYTES};

/// A running check of one file's bytes, fed in order.
#[derive(Debug)]
pub struct StreamCheck {
    file: PathBuf,
    expected: Position,
    head: Vec<u8>,
    header: Option<SnapshotHeader>,
    /// CRC of every byte fed except the last [`TRAILER_BYTES`], which `tail` holds.
    crc: crescent_checksum::Crc32c,
    tail: Vec<u8>,
    len: u64,
}

impl StreamCheck {
    /// A check that the file is a snapshot at `expected` (`file` names errors).
    pub fn new(file: &Path, expected: Position) -> Self {
        Self {
            file: file.to_path_buf(),
            expected,
            head: Vec::with_capacity(HEADER_BYTES),
            header: None,
            crc: crescent_checksum::Crc32c::new(),
            tail: Vec::with_capacity(2 * TRAILER_BYTES),
            len: 0,
        }
    }

    /// Feeds the next bytes; fails as soon as the header is in and does not check out.
    pub fn update(&mut self, bytes: &[u8]) -> Result<()> {
        self.len += bytes.len() as u64;
        if self.header.is_none() {
            let want = (HEADER_BYTES - self.head.len()).min(bytes.len());
            self.head.extend_from_slice(&bytes[..want]);
            if self.head.len() == HEADER_BYTES {
                self.header = Some(self.check_header()?);
            }
        }
        // Keep the last TRAILER_BYTES back: all but the file CRC's own 4 bytes are covered.
        self.tail.extend_from_slice(bytes);
        if self.tail.len() > TRAILER_BYTES {
            let spill = self.tail.len() - TRAILER_BYTES;
            self.crc.update(&self.tail[..spill]);
            self.tail.drain(..spill);
        }
        Ok(())
    }

    fn check_header(&self) -> Result<SnapshotHeader> {
        let header = decode_header_only(&self.file, &self.head)?;
        if header.position != self.expected {
            return Err(SnapshotError::Corrupt {
                file: self.file.clone(),
                section: "header".into(),
                reason: format!(
                    "the header names seq {} term {}, the active announced seq {} term {} \
                     (or another digest)",
                    header.position.seq,
                    header.position.term,
                    self.expected.seq,
                    self.expected.term
                ),
            });
        }
        Ok(header)
    }

    /// Ends the check: the whole header was seen, the trailer is right and the file CRC
    /// matches.
    pub fn finish(mut self) -> Result<SnapshotHeader> {
        let Some(header) = self.header else {
            return Err(SnapshotError::Truncated {
                file: self.file,
                reason: format!("{} bytes, shorter than the header", self.len),
            });
        };
        let stored = decode_trailer_only(&self.file, &self.tail, self.len)?;
        // The trailer's magic and offset are covered by the CRC too; its CRC field is not.
        self.crc.update(&self.tail[..TRAILER_BYTES - 4]);
        let actual = self.crc.finish();
        if actual != stored {
            return Err(SnapshotError::Corrupt {
                file: self.file,
                section: "trailer".into(),
                reason: format!("file CRC32C {actual:08x} != stored {stored:08x}"),
            });
        }
        Ok(header)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{encode, Section};

    fn file() -> (Position, Vec<u8>) {
        let position = Position {
            seq: 42,
            term: 3,
            digest: [7; 32],
        };
        let sections = vec![Section {
            name: "meta".into(),
            optional: false,
            schema: 1,
            body: (0..5000u32).map(|i| i as u8).collect(),
        }];
        (position, encode(&position, 1, &sections).unwrap())
    }

    fn check(expected: Position, bytes: &[u8], chunk: usize) -> Result<SnapshotHeader> {
        let mut c = StreamCheck::new(Path::new("x"), expected);
        for part in bytes.chunks(chunk) {
            c.update(part)?;
        }
        c.finish()
    }

    #[test]
    fn a_whole_file_checks_out_in_any_chunking() {
        let (position, bytes) = file();
        for chunk in [1, 3, 19, 20, 21, 96, 4096, bytes.len()] {
            let h = check(position, &bytes, chunk).unwrap();
            assert_eq!(h.position, position, "chunk {chunk}");
        }
    }

    #[test]
    fn a_flipped_byte_a_cut_file_and_a_wrong_position_fail() {
        let (position, bytes) = file();
        for at in [100, bytes.len() / 2, bytes.len() - 10, bytes.len() - 1] {
            let mut bad = bytes.clone();
            bad[at] ^= 1;
            assert!(check(position, &bad, 64).is_err(), "flip at {at}");
        }
        assert!(check(position, &bytes[..bytes.len() - 1], 64).is_err());
        assert!(check(position, &bytes[..30], 64).is_err());
        let other = Position {
            seq: 41,
            ..position
        };
        assert!(check(other, &bytes, 64).is_err());
        let other = Position {
            digest: [8; 32],
            ..position
        };
        assert!(check(other, &bytes, 64).is_err());
    }
}
