//! Cold devices on storage owners (wire version 1): the owner registers its device with
//! crescentd, then long-polls crescentd for its device's IO work and reports each result on
//! its next poll. crescentd drives the cold state machines; the owner only performs the IO
//! (write keyed by cold operation id, verified read, delete, scan), so an owner stays a plain
//! client and a poll simply goes to the new leader after a failover. Fields are only ever
//! appended as optional; every message carries `version`.

use serde::{Deserialize, Serialize};

use crate::store::{ObjectId, ReplicaDesc};

pub const OWNER_DEVICE_WIRE_VERSION: u32 = 1;

pub mod routes {
    pub const REGISTER: &str = "/v1/cold/owner_devices/register";
    pub const POLL: &str = "/v1/cold/owner_devices/poll";
}

/// An owner's device, registered (again) at every owner start. The device id is stable and
/// keeps its owner and root for life (CONFLICT otherwise).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterOwnerDeviceRequest {
    pub version: u32,
    pub owner_id: String,
    /// The owner process's incarnation (grows across restarts): a new one fails the IO the
    /// previous incarnation had taken but not answered.
    pub incarnation: u64,
    /// The owner's advertised transfer endpoint (journaled as the device owner's address).
    pub endpoint: String,
    pub device_id: String,
    /// The device directory on the owner's host.
    pub root: String,
    pub capacity: u64,
    #[serde(default)]
    pub tags: Vec<String>,
    pub schedulable: bool,
    /// The owner's remote-restore staging region (optional; absent from an older owner or
    /// one started with `--cold-staging-bytes 0`). Its presence is what tells crescentd that
    /// this owner performs [`OwnerIoWork::Stage`] and [`OwnerIoWork::ReleaseStaged`]; an
    /// owner without it only ever gets the version-1 work kinds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staging: Option<OwnerStagingRegion>,
}

/// An owner's staging region: a segment its transfer listener serves (at the registration's
/// `endpoint`), whose slots hold verified payloads for remote readers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerStagingRegion {
    pub version: u32,
    pub segment_id: String,
    pub capacity_bytes: u64,
}

/// Version of [`OwnerStagingRegion`] and of the staging work kinds.
pub const OWNER_STAGING_VERSION: u32 = 1;

const STAGING_SEGMENT_SUFFIX: &str = "/staging0";

/// The id of a storage owner's staging segment (served beside `<owner_id>/seg0`).
pub fn staging_segment_id(owner_id: &str) -> String {
    format!("{owner_id}{STAGING_SEGMENT_SUFFIX}")
}

/// The owner whose staging segment `segment_id` is, if it names one
/// ([`staging_segment_id`] read backwards).
pub fn staging_owner(segment_id: &str) -> Option<&str> {
    segment_id.strip_suffix(STAGING_SEGMENT_SUFFIX)
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterOwnerDeviceReply {
    pub version: u32,
    pub device_id: String,
    /// How long a poll may wait for work (the owner polls at least this often; a device
    /// whose owner stops polling becomes unavailable).
    pub poll_wait_ms: u64,
}

/// One poll: the results of the work taken by the previous poll, and a wait for new work.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerDevicePollRequest {
    pub version: u32,
    pub owner_id: String,
    pub incarnation: u64,
    pub device_id: String,
    /// The owner's own probe of the device (write, sync, read back, delete) failed: why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe_error: Option<String>,
    #[serde(default)]
    pub results: Vec<OwnerIoResult>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerDevicePollReply {
    pub version: u32,
    pub items: Vec<OwnerIoItem>,
}

/// One piece of IO for the owner to perform; `id` correlates its result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerIoItem {
    pub id: u64,
    pub work: OwnerIoWork,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OwnerIoWork {
    /// Write the current content of `object` (read from the replica the owner's host holds,
    /// checked against `length` and `checksum`) as the payload of cold operation `op_id`.
    Write {
        op_id: String,
        object: ObjectId,
        length: u64,
        checksum: u32,
        /// The object's hot replicas, each with its read grant (docs/security.md, "The data
        /// plane"): the owner reads one of them over the data plane. Empty from servers that
        /// predate it; the owner then reads the object with a get (which an `owner` token
        /// may not call under `[auth]`).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        replicas: Vec<ReplicaDesc>,
    },
    /// Read and verify the payload at `locator`.
    Read {
        locator: String,
        length: u64,
        checksum: u32,
    },
    Delete {
        locator: String,
    },
    Scan,
    RemoveStaleTemps,
    /// Read and verify the payload at `locator` into a slot of the owner's staging region
    /// for one remote reader (sent only to an owner that registered a staging region).
    /// Answered [`OwnerIoOutcome::Staged`], or `Failed` with kind `busy` when the region is
    /// saturated (explicit backpressure) or the payload's own error kind.
    Stage {
        locator: String,
        length: u64,
        checksum: u32,
    },
    /// Remote readers are done with these staged tokens (acked through crescentd): their
    /// reader and transfer pins are released. Idempotent; late and unknown tokens change
    /// nothing. Answered [`OwnerIoOutcome::StagedReleased`].
    ReleaseStaged {
        tokens: Vec<u64>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerIoResult {
    pub id: u64,
    pub outcome: OwnerIoOutcome,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OwnerIoOutcome {
    Written {
        locator: String,
        length: u64,
        checksum: u32,
        /// SHA-256 of the payload (32 bytes).
        #[serde(with = "serde_bytes")]
        fingerprint: Vec<u8>,
        already_present: bool,
    },
    Read {
        #[serde(with = "serde_bytes")]
        bytes: Vec<u8>,
    },
    Deleted {
        existed: bool,
    },
    Scanned {
        payloads: Vec<ScannedPayloadInfo>,
        stale_temps: u64,
        unknown: u64,
    },
    TempsRemoved {
        count: u64,
    },
    Failed(OwnerIoError),
    /// The verified payload lies at `offset` of the owner's staging segment `segment_id`;
    /// `token` is the reader's claim, valid until `expires_at_ms` (the owner's clock).
    Staged {
        segment_id: String,
        offset: u64,
        length: u64,
        checksum: u32,
        token: u64,
        expires_at_ms: i64,
    },
    /// How many of the tokens released a live reader pin now.
    StagedReleased {
        released: u64,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScannedPayloadInfo {
    pub op_id: String,
    pub locator: String,
    pub file_len: u64,
}

/// A failed piece of IO. `kind` is the cold error's kind (`checksum_mismatch`,
/// `length_mismatch`, `corrupt_file`, `payload_missing`, `conflict`, `invalid_argument`,
/// `busy` (a saturated staging region), `io`), so crescentd answers the reader with the same code the local path would.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerIoError {
    pub kind: String,
    pub message: String,
    #[serde(default)]
    pub locator: String,
    #[serde(default)]
    pub expected: u64,
    #[serde(default)]
    pub actual: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poll_messages_round_trip_in_msgpack_and_json() {
        let reply = OwnerDevicePollReply {
            version: OWNER_DEVICE_WIRE_VERSION,
            items: vec![
                OwnerIoItem {
                    id: 1,
                    work: OwnerIoWork::Write {
                        op_id: "00000000000000000000000000000001".into(),
                        object: ObjectId {
                            tenant: Some("t".into()),
                            domain: None,
                            key: "k".into(),
                        },
                        length: 3,
                        checksum: 9,
                        replicas: Vec::new(),
                    },
                },
                OwnerIoItem {
                    id: 2,
                    work: OwnerIoWork::Scan,
                },
            ],
        };
        let bytes = rmp_serde::to_vec_named(&reply).unwrap();
        assert_eq!(
            rmp_serde::from_slice::<OwnerDevicePollReply>(&bytes).unwrap(),
            reply
        );
        let req = OwnerDevicePollRequest {
            version: OWNER_DEVICE_WIRE_VERSION,
            owner_id: "o".into(),
            incarnation: 7,
            device_id: "d".into(),
            probe_error: None,
            results: vec![
                OwnerIoResult {
                    id: 1,
                    outcome: OwnerIoOutcome::Read {
                        bytes: vec![1, 2, 3],
                    },
                },
                OwnerIoResult {
                    id: 2,
                    outcome: OwnerIoOutcome::Failed(OwnerIoError {
                        kind: "checksum_mismatch".into(),
                        message: "m".into(),
                        locator: "l".into(),
                        expected: 1,
                        actual: 2,
                    }),
                },
            ],
        };
        let bytes = rmp_serde::to_vec_named(&req).unwrap();
        assert_eq!(
            rmp_serde::from_slice::<OwnerDevicePollRequest>(&bytes).unwrap(),
            req
        );
        let json = serde_json::to_string(&req).unwrap();
        assert_eq!(
            serde_json::from_str::<OwnerDevicePollRequest>(&json).unwrap(),
            req
        );
        // A poll without results or probe (the optional fields) decodes.
        let bare = r#"{"version":1,"owner_id":"o","incarnation":1,"device_id":"d"}"#;
        let bare: OwnerDevicePollRequest = serde_json::from_str(bare).unwrap();
        assert!(bare.results.is_empty() && bare.probe_error.is_none());
    }

    fn registration(staging: Option<OwnerStagingRegion>) -> RegisterOwnerDeviceRequest {
        RegisterOwnerDeviceRequest {
            version: OWNER_DEVICE_WIRE_VERSION,
            owner_id: "o".into(),
            incarnation: 3,
            endpoint: "127.0.0.1:1".into(),
            device_id: "d".into(),
            root: "/r".into(),
            capacity: 10,
            tags: vec![],
            schedulable: true,
            staging,
        }
    }

    #[test]
    fn staging_work_and_registration_round_trip_and_stay_compatible() {
        let with = registration(Some(OwnerStagingRegion {
            version: OWNER_STAGING_VERSION,
            segment_id: "o/staging0".into(),
            capacity_bytes: 64 << 20,
        }));
        let bytes = rmp_serde::to_vec_named(&with).unwrap();
        assert_eq!(
            rmp_serde::from_slice::<RegisterOwnerDeviceRequest>(&bytes).unwrap(),
            with
        );
        // An older owner's registration (no staging field) decodes as "no staging region",
        // and a registration without one does not carry the field at all.
        let without = registration(None);
        let json = serde_json::to_string(&without).unwrap();
        assert!(!json.contains("staging"), "{json}");
        assert_eq!(
            serde_json::from_str::<RegisterOwnerDeviceRequest>(&json).unwrap(),
            without
        );
        let reply = OwnerDevicePollReply {
            version: OWNER_DEVICE_WIRE_VERSION,
            items: vec![
                OwnerIoItem {
                    id: 4,
                    work: OwnerIoWork::Stage {
                        locator: "ab/cd.cold".into(),
                        length: 40 << 20,
                        checksum: 0xdead_beef,
                    },
                },
                OwnerIoItem {
                    id: 5,
                    work: OwnerIoWork::ReleaseStaged {
                        tokens: vec![1 << 63, (1 << 63) + 1],
                    },
                },
            ],
        };
        let bytes = rmp_serde::to_vec_named(&reply).unwrap();
        assert_eq!(
            rmp_serde::from_slice::<OwnerDevicePollReply>(&bytes).unwrap(),
            reply
        );
        let req = OwnerDevicePollRequest {
            version: OWNER_DEVICE_WIRE_VERSION,
            owner_id: "o".into(),
            incarnation: 3,
            device_id: "d".into(),
            probe_error: None,
            results: vec![
                OwnerIoResult {
                    id: 4,
                    outcome: OwnerIoOutcome::Staged {
                        segment_id: "o/staging0".into(),
                        offset: 65536,
                        length: 40 << 20,
                        checksum: 0xdead_beef,
                        token: 1 << 63,
                        expires_at_ms: 1_700_000_000_000,
                    },
                },
                OwnerIoResult {
                    id: 5,
                    outcome: OwnerIoOutcome::StagedReleased { released: 1 },
                },
            ],
        };
        let json = serde_json::to_string(&req).unwrap();
        assert_eq!(
            serde_json::from_str::<OwnerDevicePollRequest>(&json).unwrap(),
            req
        );
        let bytes = rmp_serde::to_vec_named(&req).unwrap();
        assert_eq!(
            rmp_serde::from_slice::<OwnerDevicePollRequest>(&bytes).unwrap(),
            req
        );
    }
}
