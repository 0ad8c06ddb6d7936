//! QuotaRoot events and their codec (`domain_events!`): compact msgpack, one version per kind.
//!
//! Version history: every kind is at v1.

use serde::{Deserialize, Serialize};

use super::state::{AbortReason, OpKind};
use super::STREAM_KIND;

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

/// The object directory's usage of the tenant, recorded write-behind (docs/tenants.md,
/// "Journaled usage and reconciliation").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageRecorded {
    pub used_bytes: u64,
    pub used_objects: u64,
    pub at_ms: i64,
}

/// After a rebuild: the usage last recorded and the rebuilt one, which becomes the record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageReconciled {
    pub recorded_bytes: u64,
    pub recorded_objects: u64,
    pub rebuilt_bytes: u64,
    pub rebuilt_objects: u64,
    pub at_ms: i64,
}

/// The home's record of what another cluster of the mesh may hold of the tenant (docs/tenants.md,
/// "Quota across a mesh").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllowanceRecorded {
    pub cluster: String,
    pub bytes: u64,
    pub objects: u64,
}

/// The home no longer counts an allowance of `cluster`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllowanceReleased {
    pub cluster: String,
}

crate::domain_events! {
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub enum QuotaEvent for STREAM_KIND {
        PolicySet(PolicySet): pub QUOTA_POLICY_SET = "quota_policy_set", version 1;
        Reserved(Reserved): pub QUOTA_RESERVED = "quota_reserved", version 1;
        Publishing(Publishing): pub QUOTA_PUBLISHING = "quota_publishing", version 1;
        Finalized(Finalized): pub QUOTA_FINALIZED = "quota_finalized", version 1;
        Aborted(Aborted): pub QUOTA_ABORTED = "quota_aborted", version 1;
        TerminalPruned(TerminalPruned):
            pub QUOTA_TERMINAL_PRUNED = "quota_terminal_pruned", version 1;
        UsageRecorded(UsageRecorded): pub QUOTA_USAGE_RECORDED = "quota_usage_recorded", version 1;
        UsageReconciled(UsageReconciled):
            pub QUOTA_USAGE_RECONCILED = "quota_usage_reconciled", version 1;
        AllowanceRecorded(AllowanceRecorded):
            pub QUOTA_ALLOWANCE_RECORDED = "quota_allowance_recorded", version 1;
        AllowanceReleased(AllowanceReleased):
            pub QUOTA_ALLOWANCE_RELEASED = "quota_allowance_released", version 1;
    }
}
