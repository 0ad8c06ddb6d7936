//! Storage owners and segments.

use serde::{Deserialize, Serialize};

/// Owner id of a standalone crescentd's embedded segment in the registry. The embedded segment
/// lives inside crescentd, which keeps its own directory: writers send it no owner notices.
pub const EMBEDDED_OWNER_ID: &str = "crescentd-embedded";

/// How bytes reach a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum TransportKind {
    /// Crescent's built-in TCP transfer listener on the owner.
    #[default]
    Tcp,
    /// A transfer-engine C library loaded through FFI.
    TransferEngine,
    /// The embedded segment of a standalone crescentd.
    Embedded,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterOwnerRequest {
    pub owner_id: String,
    pub endpoint: String,
    pub incarnation: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MountSegmentRequest {
    pub owner_id: String,
    pub segment_id: String,
    #[serde(default)]
    pub base: u64,
    pub size: u64,
    #[serde(default)]
    pub transport: TransportKind,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnmountSegmentRequest {
    pub segment_id: String,
}

/// What a journaled command answers: the seq range its events got (empty for an idempotent
/// repeat, which journals nothing).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandReply {
    /// Event kinds appended, in order.
    pub events: Vec<String>,
    pub first_seq: Option<u64>,
    pub last_seq: Option<u64>,
}

/// What registering an owner answers: the journaled command's reply, and with `[auth]` the
/// owner's data-plane grant key (as [`crate::store::HeartbeatReply::data_key`]), so its
/// listener can require grants before its segment is mounted. A superset of
/// [`CommandReply`]'s fields: either side may be older.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterOwnerReply {
    pub events: Vec<String>,
    pub first_seq: Option<u64>,
    pub last_seq: Option<u64>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::cold::opt_bytes"
    )]
    pub data_key: Option<Vec<u8>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerInfo {
    pub owner_id: String,
    pub endpoint: Option<String>,
    pub incarnation: u64,
    pub registered_at_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentInfo {
    pub segment_id: String,
    pub owner_id: String,
    pub base: u64,
    pub size: u64,
    pub transport: TransportKind,
    pub mounted_at_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct SegmentList {
    pub owners: Vec<OwnerInfo>,
    pub segments: Vec<SegmentInfo>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_request_defaults_optional_fields_in_both_formats() {
        let r: MountSegmentRequest =
            serde_json::from_str(r#"{"owner_id":"o","segment_id":"s","size":10}"#).unwrap();
        assert_eq!(r.base, 0);
        assert_eq!(r.transport, TransportKind::Tcp);
        let bytes = rmp_serde::to_vec_named(&r).unwrap();
        let back: MountSegmentRequest = rmp_serde::from_slice(&bytes).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn missing_required_field_is_an_error() {
        let e = serde_json::from_str::<MountSegmentRequest>(r#"{"owner_id":"o","size":10}"#)
            .unwrap_err();
        assert!(e.to_string().contains("segment_id"), "{e}");
    }
}
