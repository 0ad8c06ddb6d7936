//! QuotaRoot commands and their argument checks (docs/tenants.md, "Commands").

use serde::{Deserialize, Serialize};

use super::allowance::{check_cluster, Allowance};
use super::error::QuotaError;
use super::state::{AbortReason, QuotaLimits};

/// Longest operation id, in bytes.
pub const MAX_OP_ID_BYTES: usize = 128;
/// Longest object key: a 4096-byte key scoped by a 64-byte domain and a separator.
pub const MAX_KEY_BYTES: usize = 4096 + 64 + 1;
/// Most operations in one `ReserveBatch` (the store's batch limit).
pub const MAX_BATCH_OPS: usize = 1024;
/// Most operations one `ExpireDue` or `PruneTerminal` ends or forgets.
pub const MAX_PAGE: u32 = 1024;
/// Largest object size or limit: byte deltas are signed 64-bit.
pub const MAX_BYTES: u64 = i64::MAX as u64;

/// How a policy is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PolicyMode {
    /// Startup from configuration: create if absent; a stored policy with other limits is
    /// refused (`PolicyMismatch`), never overwritten.
    Bootstrap,
    /// The admin command: create or replace, bumping the policy version.
    Change,
}

/// What a reservation does to its object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ObjectChange {
    /// A put of `size` bytes (create or overwrite, decided from the committed row).
    Put { size: u64 },
    /// A remove (the refund is derived from the committed row).
    Delete,
}

/// One operation to reserve.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReserveItem {
    pub op_id: String,
    pub key: String,
    pub change: ObjectChange,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "snake_case")]
pub enum QuotaCommand {
    SetPolicy {
        limits: QuotaLimits,
        mode: PolicyMode,
    },
    /// Admits one operation against `used + pending + positive delta` and locks its key.
    Reserve { item: ReserveItem, deadline_ms: i64 },
    /// Several operations, admitted in key order, all or none.
    ReserveBatch {
        items: Vec<ReserveItem>,
        deadline_ms: i64,
    },
    /// Pending -> Publishing, immediately before the route mutation carrying `route_version`.
    Publish {
        op_id: String,
        route_version: u64,
        deadline_ms: i64,
    },
    /// Publishing -> Finalized for the published `route_version`: charges or refunds the
    /// committed delta and unlocks the key.
    Finalize { op_id: String, route_version: u64 },
    /// Pending -> Aborted (revoked or failed): releases the reservation.
    Abort { op_id: String, reason: AbortReason },
    /// Aborts up to `limit` Pending operations whose deadline is at or before `now_ms`.
    ExpireDue { now_ms: i64, limit: u32 },
    /// Forgets the oldest terminal operations beyond the newest `keep` (up to [`MAX_PAGE`]).
    PruneTerminal { keep: u32 },
    /// Records the object directory's usage of the tenant (nothing if unchanged).
    RecordUsage {
        used_bytes: u64,
        used_objects: u64,
        at_ms: i64,
    },
    /// After a rebuild: compares the last record with the rebuilt usage, which becomes the
    /// record.
    ReconcileUsage {
        rebuilt_bytes: u64,
        rebuilt_objects: u64,
        at_ms: i64,
    },
    /// At the tenant's home cluster: what another cluster of the mesh may hold of the tenant
    /// (nothing if it is the record already).
    RecordAllowance {
        cluster: String,
        allowance: Allowance,
    },
    /// At the home: forgets another cluster's allowance.
    ReleaseAllowance { cluster: String },
}

pub(super) fn invalid(field: &'static str, reason: impl Into<String>) -> QuotaError {
    QuotaError::InvalidArgument {
        field,
        reason: reason.into(),
    }
}

pub(super) fn check_op_id(op_id: &str) -> Result<(), QuotaError> {
    if op_id.is_empty() || op_id.len() > MAX_OP_ID_BYTES {
        return Err(invalid(
            "op_id",
            format!("{} bytes, 1..={MAX_OP_ID_BYTES} allowed", op_id.len()),
        ));
    }
    if op_id.chars().any(char::is_control) {
        return Err(invalid("op_id", "must not contain control characters"));
    }
    Ok(())
}

fn check_item(item: &ReserveItem) -> Result<(), QuotaError> {
    check_op_id(&item.op_id)?;
    if item.key.is_empty() || item.key.len() > MAX_KEY_BYTES {
        return Err(invalid(
            "key",
            format!("{} bytes, 1..={MAX_KEY_BYTES} allowed", item.key.len()),
        ));
    }
    match item.change {
        ObjectChange::Put { size } if size > MAX_BYTES => Err(invalid(
            "size",
            format!("{size} bytes, at most {MAX_BYTES} allowed"),
        )),
        _ => Ok(()),
    }
}

fn check_limit(field: &'static str, limit: Option<u64>) -> Result<(), QuotaError> {
    match limit {
        Some(n) if n > MAX_BYTES => Err(invalid(field, format!("{n}, at most {MAX_BYTES}"))),
        _ => Ok(()),
    }
}

fn check_page(field: &'static str, n: u32) -> Result<(), QuotaError> {
    match n {
        1..=MAX_PAGE => Ok(()),
        _ => Err(invalid(field, format!("{n}, 1..={MAX_PAGE} allowed"))),
    }
}

impl QuotaCommand {
    /// Checks that do not depend on state.
    pub fn validate(&self) -> Result<(), QuotaError> {
        match self {
            QuotaCommand::SetPolicy { limits, .. } => {
                check_limit("max_bytes", limits.max_bytes)?;
                check_limit("max_objects", limits.max_objects)
            }
            QuotaCommand::Reserve { item, .. } => check_item(item),
            QuotaCommand::ReserveBatch { items, .. } => check_batch(items),
            QuotaCommand::Publish { op_id, .. } | QuotaCommand::Finalize { op_id, .. } => {
                check_op_id(op_id)
            }
            QuotaCommand::Abort { op_id, reason } => {
                check_op_id(op_id)?;
                match reason {
                    AbortReason::Expired => Err(invalid(
                        "reason",
                        "expiry is decided from the deadline by expire_due",
                    )),
                    _ => Ok(()),
                }
            }
            QuotaCommand::ExpireDue { limit, .. } => check_page("limit", *limit),
            QuotaCommand::PruneTerminal { .. }
            | QuotaCommand::RecordUsage { .. }
            | QuotaCommand::ReconcileUsage { .. } => Ok(()),
            QuotaCommand::RecordAllowance { cluster, allowance } => {
                check_cluster(cluster)?;
                check_limit("bytes", Some(allowance.bytes))
            }
            QuotaCommand::ReleaseAllowance { cluster } => check_cluster(cluster),
        }
    }
}

/// 1..=[`MAX_BATCH_OPS`] valid items, no op id and no key twice.
fn check_batch(items: &[ReserveItem]) -> Result<(), QuotaError> {
    if items.is_empty() || items.len() > MAX_BATCH_OPS {
        return Err(invalid(
            "items",
            format!("{} items, 1..={MAX_BATCH_OPS} allowed", items.len()),
        ));
    }
    let mut op_ids = std::collections::BTreeSet::new();
    let mut keys = std::collections::BTreeSet::new();
    for item in items {
        check_item(item)?;
        if !op_ids.insert(item.op_id.as_str()) {
            return Err(invalid(
                "op_id",
                format!("{:?} twice in a batch", item.op_id),
            ));
        }
        if !keys.insert(item.key.as_str()) {
            return Err(invalid("key", format!("{:?} twice in a batch", item.key)));
        }
    }
    Ok(())
}
