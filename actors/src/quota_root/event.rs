//! QuotaRoot events: msgpack (compact form), one schema version per kind.
//!
//! Version history: every kind is at v1.

use serde::{Deserialize, Serialize};

use crate::aggregate::{DecodeError, DomainEvent};
use crate::event_payload::{check_version, from_msgpack, schema_version, to_msgpack};

use super::state::{AbortReason, OpKind};

pub const QUOTA_POLICY_SET: &str = "quota_policy_set";
pub const QUOTA_RESERVED: &str = "quota_reserved";
pub const QUOTA_PUBLISHING: &str = "quota_publishing";
pub const QUOTA_FINALIZED: &str = "quota_finalized";
pub const QUOTA_ABORTED: &str = "quota_aborted";
pub const QUOTA_TERMINAL_PRUNED: &str = "quota_terminal_pruned";

const SCHEMA: &[(&str, u16)] = &[
    (QUOTA_POLICY_SET, 1),
    (QUOTA_RESERVED, 1),
    (QUOTA_PUBLISHING, 1),
    (QUOTA_FINALIZED, 1),
    (QUOTA_ABORTED, 1),
    (QUOTA_TERMINAL_PRUNED, 1),
];

/// The policy was created (`policy_version` 1) or changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicySet {
    pub max_bytes: Option<u64>,
    pub max_objects: Option<u64>,
    pub schema_version: u32,
    pub policy_version: u64,
    pub fingerprint: String,
}

/// An operation was admitted: it holds `reserved_bytes` / `reserved_objects` pending and
/// locks `key` until it ends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reserved {
    pub op_id: String,
    pub key: String,
    pub kind: OpKind,
    pub next_bytes: u64,
    pub predecessor_bytes: u64,
    pub predecessor_version: Option<u64>,
    pub reserved_bytes: u64,
    pub reserved_objects: u64,
    pub deadline_ms: i64,
}

/// Pending -> Publishing: the route mutation carrying `route_version` may now be applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Publishing {
    pub op_id: String,
    pub route_version: u64,
    /// When reconciliation looks at it if it is still publishing.
    pub deadline_ms: i64,
}

/// Publishing -> Finalized: the committed delta (derived from the committed row at reserve
/// time) moved into usage and the key's row now says what this operation committed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finalized {
    pub op_id: String,
    pub key: String,
    pub route_version: u64,
    pub bytes_delta: i64,
    pub objects_delta: i64,
}

/// Pending -> Aborted: the reservation is released.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Aborted {
    pub op_id: String,
    pub key: String,
    pub reason: AbortReason,
    pub released_bytes: u64,
    pub released_objects: u64,
}

/// Terminal operations forgotten (oldest first).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TerminalPruned {
    pub op_ids: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
// Serialized as the variant's payload: what tools show as the event's data.
#[serde(untagged)]
pub enum QuotaEvent {
    PolicySet(PolicySet),
    Reserved(Reserved),
    Publishing(Publishing),
    Finalized(Finalized),
    Aborted(Aborted),
    TerminalPruned(TerminalPruned),
}

impl DomainEvent for QuotaEvent {
    fn kind(&self) -> &'static str {
        match self {
            QuotaEvent::PolicySet(_) => QUOTA_POLICY_SET,
            QuotaEvent::Reserved(_) => QUOTA_RESERVED,
            QuotaEvent::Publishing(_) => QUOTA_PUBLISHING,
            QuotaEvent::Finalized(_) => QUOTA_FINALIZED,
            QuotaEvent::Aborted(_) => QUOTA_ABORTED,
            QuotaEvent::TerminalPruned(_) => QUOTA_TERMINAL_PRUNED,
        }
    }

    fn version(&self) -> u16 {
        schema_version(SCHEMA, self.kind()).expect("every kind is in SCHEMA")
    }

    fn encode(&self) -> Vec<u8> {
        match self {
            QuotaEvent::PolicySet(e) => to_msgpack(e),
            QuotaEvent::Reserved(e) => to_msgpack(e),
            QuotaEvent::Publishing(e) => to_msgpack(e),
            QuotaEvent::Finalized(e) => to_msgpack(e),
            QuotaEvent::Aborted(e) => to_msgpack(e),
            QuotaEvent::TerminalPruned(e) => to_msgpack(e),
        }
    }

    fn decode(kind: &str, version: u16, payload: &[u8]) -> Result<Self, DecodeError> {
        check_version(super::STREAM_KIND, SCHEMA, kind, version)?;
        Ok(match kind {
            QUOTA_POLICY_SET => Self::PolicySet(from_msgpack(kind, version, payload)?),
            QUOTA_RESERVED => Self::Reserved(from_msgpack(kind, version, payload)?),
            QUOTA_PUBLISHING => Self::Publishing(from_msgpack(kind, version, payload)?),
            QUOTA_FINALIZED => Self::Finalized(from_msgpack(kind, version, payload)?),
            QUOTA_ABORTED => Self::Aborted(from_msgpack(kind, version, payload)?),
            _ => Self::TerminalPruned(from_msgpack(kind, version, payload)?),
        })
    }

    fn schema() -> &'static [(&'static str, u16)] {
        SCHEMA
    }
}
