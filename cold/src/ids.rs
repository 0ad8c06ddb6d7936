//! Identities of the cold tier: cold operations, reclaim records, payload fingerprints.

use std::fmt;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use uuid::Uuid;

/// One offload of one content value to one device. Allocated by the offload planner (from
/// the runtime's fresh id), never reused: reserve, backend put, commit and release are all
/// idempotent by this id, and `local_dir` derives the payload's path from it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ColdOpId(pub Uuid);

/// One reclaim of one obsolete locator (a `ColdReclaimRecord`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ReclaimId(pub Uuid);

macro_rules! uuid_id {
    ($t:ident) => {
        impl $t {
            pub fn new(id: Uuid) -> Self {
                Self(id)
            }

            /// 32 lowercase hex digits (the form used in paths and logs).
            pub fn to_hex(&self) -> String {
                self.0.simple().to_string()
            }

            /// Parses the 32-hex-digit form (or any form `Uuid` accepts).
            pub fn parse(s: &str) -> Option<Self> {
                Uuid::parse_str(s).ok().map(Self)
            }
        }

        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}", self.0.simple())
            }
        }

        impl fmt::Debug for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({})", stringify!($t), self.0.simple())
            }
        }
    };
}

uuid_id!(ColdOpId);
uuid_id!(ReclaimId);

/// SHA-256 of a payload, recorded with `PayloadWritten` before the route changes. A
/// materialization that must rebase after a CAS conflict proves with it that it still carries
/// the same bytes; the CRC32C checksum guards reads, this guards identity.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PayloadFingerprint(#[serde(with = "serde_bytes")] pub [u8; 32]);

impl PayloadFingerprint {
    pub fn of(payload: &[u8]) -> Self {
        Self(Sha256::digest(payload).into())
    }

    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }
}

impl fmt::Debug for PayloadFingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PayloadFingerprint({})", &self.to_hex()[..16])
    }
}

/// The read checksum of cold payloads: CRC32C (Castagnoli), the same function the object
/// store uses for hot payloads, so a put's checksum can be carried into `PendingOffload` and
/// checked against the bytes read back. Hardware-accelerated (`crescent_checksum`), so
/// verifying costs little next to the read itself.
pub fn payload_checksum(payload: &[u8]) -> u32 {
    crescent_checksum::crc32c(payload)
}
