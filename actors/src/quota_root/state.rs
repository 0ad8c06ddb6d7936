//! The records a quota root keeps: its policy, its accounting operations and the committed
//! accounting row of each object (docs/tenants.md, "QuotaRoot").

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Schema of the stored policy: part of its fingerprint.
pub const POLICY_SCHEMA: u32 = 1;

/// The hard limits of a tenant root. `None` is unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuotaLimits {
    pub max_bytes: Option<u64>,
    pub max_objects: Option<u64>,
}

impl QuotaLimits {
    /// The deterministic fingerprint of these limits under the current policy schema:
    /// SHA-256 (hex) of `quota-policy/v{schema}/max_bytes={n|unlimited}/max_objects={n|unlimited}`.
    pub fn fingerprint(&self) -> String {
        let limit = |v: Option<u64>| v.map_or_else(|| "unlimited".to_string(), |n| n.to_string());
        let canonical = format!(
            "quota-policy/v{POLICY_SCHEMA}/max_bytes={}/max_objects={}",
            limit(self.max_bytes),
            limit(self.max_objects)
        );
        hex::encode(Sha256::digest(canonical.as_bytes()))
    }
}

/// The stored policy of a tenant root.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuotaPolicy {
    pub limits: QuotaLimits,
    pub schema_version: u32,
    /// 1 when created, + 1 at every change.
    pub policy_version: u64,
    pub fingerprint: String,
}

/// What an operation does to its object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    /// A put of a key with no committed accounting row.
    Create,
    /// A put of a key with a committed row: charges the new size minus the row's size.
    Overwrite,
    /// A remove: refunds the committed row (nothing if the key has none).
    Delete,
}

/// The seed's accounting-operation states. `Aborted` and `Finalized` are terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpState {
    /// Reserved; no route may publish it yet. Abortable, expires at its deadline.
    Pending,
    /// The route mutation may be applied or in flight: never aborted, only finalized.
    Publishing,
    Finalized,
    Aborted,
}

impl OpState {
    pub fn as_str(self) -> &'static str {
        match self {
            OpState::Pending => "pending",
            OpState::Publishing => "publishing",
            OpState::Finalized => "finalized",
            OpState::Aborted => "aborted",
        }
    }

    pub fn is_terminal(self) -> bool {
        matches!(self, OpState::Finalized | OpState::Aborted)
    }
}

/// Why a pending operation was aborted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AbortReason {
    /// The writer gave the put up (a revoke).
    Revoked,
    /// The write failed before publication.
    Failed,
    /// Its deadline passed while it was still pending (`ExpireDue`).
    Expired,
}

/// One accounting operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuotaOperation {
    pub op_id: String,
    pub key: String,
    pub kind: OpKind,
    pub state: OpState,
    /// The object's size once finalized (0 for a delete).
    pub next_bytes: u64,
    /// The committed row at reserve time (0 and `None` when the key had none).
    pub predecessor_bytes: u64,
    pub predecessor_version: Option<u64>,
    /// What the operation holds in `pending_bytes` / `pending_objects` until it ends.
    pub reserved_bytes: u64,
    pub reserved_objects: u64,
    /// Pending: when it expires. Publishing: when reconciliation looks at it.
    pub deadline_ms: i64,
    /// The route version its publication carries (set by `Publish`).
    pub route_version: Option<u64>,
    pub abort_reason: Option<AbortReason>,
}

impl QuotaOperation {
    /// The signed change of committed bytes and objects this operation makes when finalized,
    /// derived from the committed row it was reserved against (never supplied by a client).
    pub fn committed_delta(&self) -> (i64, i64) {
        let bytes = self.next_bytes as i64 - self.predecessor_bytes as i64;
        let objects = match (self.kind, self.predecessor_version) {
            (OpKind::Create, _) => 1,
            (OpKind::Overwrite, _) => 0,
            (OpKind::Delete, Some(_)) => -1,
            (OpKind::Delete, None) => 0,
        };
        (bytes, objects)
    }
}

/// The committed accounting of one object: what its last finalized put charged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectAccount {
    pub bytes: u64,
    /// The route version of the put that committed it.
    pub version: u64,
    /// The operation that committed it.
    pub op_id: String,
}
