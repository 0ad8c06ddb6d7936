//! The on-disk format of a `local_dir` cold payload file (version 1).
//!
//! A 96-byte header followed by the payload; integers little-endian:
//!
//! | offset | size | field                                               |
//! |--------|------|-----------------------------------------------------|
//! | 0      | 8    | magic `CRSCOLD\0`                                   |
//! | 8      | 2    | format version (1)                                  |
//! | 10     | 2    | header length (96)                                  |
//! | 12     | 4    | flags (0)                                           |
//! | 16     | 8    | payload length                                      |
//! | 24     | 4    | payload CRC32C                                      |
//! | 28     | 4    | reserved (0)                                        |
//! | 32     | 16   | cold operation id                                   |
//! | 48     | 32   | payload fingerprint (SHA-256)                       |
//! | 80     | 8    | device tag: first 8 bytes of SHA-256(device id)     |
//! | 88     | 4    | reserved (0)                                        |
//! | 92     | 4    | CRC32C of bytes 0..92                               |

use sha2::{Digest, Sha256};

use crate::ids::{ColdOpId, PayloadFingerprint};

pub const MAGIC: [u8; 8] = *b"CRSCOLD\0";
pub const FORMAT_VERSION: u16 = 1;
pub const HEADER_LEN: usize = 96;

/// The fields of a payload file header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileHeader {
    pub length: u64,
    pub checksum: u32,
    pub op_id: ColdOpId,
    pub fingerprint: PayloadFingerprint,
    pub device_tag: [u8; 8],
}

/// The 8-byte tag of a device id stored in every header: a file copied or mounted under
/// another device is recognised as foreign.
pub fn device_tag(device_id: &str) -> [u8; 8] {
    let digest: [u8; 32] = Sha256::digest(device_id.as_bytes()).into();
    let mut tag = [0u8; 8];
    tag.copy_from_slice(&digest[..8]);
    tag
}

impl FileHeader {
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..10].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        b[10..12].copy_from_slice(&(HEADER_LEN as u16).to_le_bytes());
        b[16..24].copy_from_slice(&self.length.to_le_bytes());
        b[24..28].copy_from_slice(&self.checksum.to_le_bytes());
        b[32..48].copy_from_slice(self.op_id.0.as_bytes());
        b[48..80].copy_from_slice(&self.fingerprint.0);
        b[80..88].copy_from_slice(&self.device_tag);
        let crc = crescent_checksum::crc32c(&b[..92]);
        b[92..96].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Parses and checks a header; the error says what is wrong.
    pub fn decode(b: &[u8; HEADER_LEN]) -> Result<Self, String> {
        if b[0..8] != MAGIC {
            return Err("bad magic".into());
        }
        let crc = u32::from_le_bytes(b[92..96].try_into().expect("4 bytes"));
        if crescent_checksum::crc32c(&b[..92]) != crc {
            return Err("header checksum mismatch".into());
        }
        let version = u16::from_le_bytes([b[8], b[9]]);
        if version != FORMAT_VERSION {
            return Err(format!(
                "format version {version}, this binary reads {FORMAT_VERSION}"
            ));
        }
        let header_len = u16::from_le_bytes([b[10], b[11]]) as usize;
        if header_len != HEADER_LEN {
            return Err(format!("header length {header_len}, expected {HEADER_LEN}"));
        }
        let op = uuid::Uuid::from_bytes(b[32..48].try_into().expect("16 bytes"));
        Ok(Self {
            length: u64::from_le_bytes(b[16..24].try_into().expect("8 bytes")),
            checksum: u32::from_le_bytes(b[24..28].try_into().expect("4 bytes")),
            op_id: ColdOpId(op),
            fingerprint: PayloadFingerprint(b[48..80].try_into().expect("32 bytes")),
            device_tag: b[80..88].try_into().expect("8 bytes"),
        })
    }
}
