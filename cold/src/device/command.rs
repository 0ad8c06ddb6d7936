//! ColdDevice commands and their state-independent checks.

use serde::{Deserialize, Serialize};

use crate::error::ColdError;
use crate::ids::{ColdOpId, PayloadFingerprint, ReclaimId};

use super::state::{DeviceHealth, DeviceKind, ReleaseCause};

/// Longest device id, tag or locator, in bytes.
pub const MAX_ID_BYTES: usize = 256;
/// Longest object key (namespace-qualified), in bytes.
pub const MAX_KEY_BYTES: usize = 1024;
/// Longest root path or free-text reason, in bytes.
pub const MAX_TEXT_BYTES: usize = 4096;
/// Most tags per device.
pub const MAX_TAGS: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "snake_case")]
pub enum ColdDeviceCommand {
    /// The device's config facts, sent at every start of its owner. The same facts again are a
    /// no-op; capacity, tags and schedulability may change (capacity never below what is used
    /// or reserved); id, kind and root may not (every locator is relative to them).
    Configure {
        device_id: String,
        kind: DeviceKind,
        root: String,
        capacity: u64,
        tags: Vec<String>,
        schedulable: bool,
    },
    SetHealth {
        health: DeviceHealth,
        reason: String,
    },
    /// The device's IO is performed by this storage owner (registered by the owner). A
    /// device keeps its owner: another owner id is refused (CONFLICT); the same owner with
    /// a new endpoint (a restart) is recorded; the same again is a no-op.
    AssignOwner {
        owner_id: String,
        endpoint: String,
    },
    SetSchedulable {
        schedulable: bool,
    },
    /// Records a pending cold intent (the route already carries `PendingOffload` for it).
    PlanOffload {
        op_id: ColdOpId,
        object_key: String,
        content_op: u64,
        expected_length: u64,
        expected_checksum: u32,
    },
    /// Planned -> Reserved: reserves `expected_length` bytes of device capacity.
    Reserve {
        op_id: ColdOpId,
    },
    /// Reserved -> PayloadWritten, after the idempotent backend put and before the route CAS.
    RecordPayloadWritten {
        op_id: ColdOpId,
        locator: String,
        length: u64,
        checksum: u32,
        fingerprint: PayloadFingerprint,
    },
    /// PayloadWritten -> RouteCommitted: the materialization CAS succeeded at `route_version`.
    CommitRoute {
        op_id: ColdOpId,
        route_version: u64,
    },
    /// RouteCommitted -> UsageCommitted: reserved bytes become used bytes.
    CommitUsage {
        op_id: ColdOpId,
    },
    /// Planned/Reserved -> Released (cause `cancelled` or `replaced`).
    Cancel {
        op_id: ColdOpId,
        cause: ReleaseCause,
    },
    /// Creates a reclaim record for a written payload. For a materialized operation it is
    /// created before the overwrite/delete route CAS and drops the journaled cold route; for a
    /// `PayloadWritten` orphan (exact lookup proved the route does not reference it) it moves
    /// the operation to `Reclaiming`.
    PlanReclaim {
        reclaim_id: ReclaimId,
        op_id: ColdOpId,
    },
    /// The overwrite/delete CAS lost: the route still references the locator. Planned ->
    /// Cancelled; the journaled cold route is restored.
    CancelReclaim {
        reclaim_id: ReclaimId,
    },
    /// Planned -> BackendDeleted, after the idempotent backend delete.
    RecordBackendDeleted {
        reclaim_id: ReclaimId,
    },
    /// The correlated handoff keyed by (op_id, reclaim_id): BackendDeleted -> UsageReleased
    /// together with the operation's -> Released, releasing its bytes exactly once.
    ReleaseUsage {
        reclaim_id: ReclaimId,
        op_id: ColdOpId,
    },
    /// Forgets terminal operations and reclaims last changed before `released_before_ms`
    /// (after which repeats of their commands get NOT_FOUND instead of a no-op).
    PruneTerminal {
        released_before_ms: i64,
    },
}

fn invalid(field: &'static str, reason: impl Into<String>) -> ColdError {
    ColdError::invalid(field, reason)
}

/// Non-empty, at most `max` bytes, no control characters.
pub(crate) fn check_text(field: &'static str, value: &str, max: usize) -> Result<(), ColdError> {
    if value.is_empty() {
        return Err(invalid(field, "must not be empty"));
    }
    if value.len() > max {
        return Err(invalid(
            field,
            format!("{} bytes, at most {max} allowed", value.len()),
        ));
    }
    if value.chars().any(char::is_control) {
        return Err(invalid(field, "must not contain control characters"));
    }
    Ok(())
}

impl ColdDeviceCommand {
    /// Checks that do not depend on state.
    pub fn validate(&self) -> Result<(), ColdError> {
        match self {
            ColdDeviceCommand::Configure {
                device_id,
                root,
                capacity,
                tags,
                ..
            } => {
                check_device_id(device_id)?;
                check_text("root", root, MAX_TEXT_BYTES)?;
                if *capacity == 0 {
                    return Err(invalid("capacity", "must be greater than 0"));
                }
                if tags.len() > MAX_TAGS {
                    return Err(invalid(
                        "tags",
                        format!("{} tags, at most {MAX_TAGS} allowed", tags.len()),
                    ));
                }
                for tag in tags {
                    check_text("tags", tag, MAX_ID_BYTES)?;
                }
            }
            ColdDeviceCommand::SetHealth { reason, .. } => {
                if reason.len() > MAX_TEXT_BYTES {
                    return Err(invalid("reason", format!("at most {MAX_TEXT_BYTES} bytes")));
                }
            }
            ColdDeviceCommand::AssignOwner { owner_id, endpoint } => {
                check_text("owner_id", owner_id, MAX_ID_BYTES)?;
                check_text("endpoint", endpoint, MAX_TEXT_BYTES)?;
            }
            // Any length, 0 included: an empty value offloads as an empty payload (docs/api.md
            // "Empty values").
            ColdDeviceCommand::PlanOffload { object_key, .. } => {
                check_text("object_key", object_key, MAX_KEY_BYTES)?;
            }
            ColdDeviceCommand::RecordPayloadWritten { locator, .. } => {
                check_text("locator", locator, MAX_ID_BYTES)?;
            }
            ColdDeviceCommand::Cancel { cause, .. } => {
                if *cause == ReleaseCause::Reclaimed {
                    return Err(invalid(
                        "cause",
                        "reclaimed is reached through a reclaim record, not a cancel",
                    ));
                }
            }
            ColdDeviceCommand::SetSchedulable { .. }
            | ColdDeviceCommand::Reserve { .. }
            | ColdDeviceCommand::CommitRoute { .. }
            | ColdDeviceCommand::CommitUsage { .. }
            | ColdDeviceCommand::PlanReclaim { .. }
            | ColdDeviceCommand::CancelReclaim { .. }
            | ColdDeviceCommand::RecordBackendDeleted { .. }
            | ColdDeviceCommand::ReleaseUsage { .. }
            | ColdDeviceCommand::PruneTerminal { .. } => {}
        }
        Ok(())
    }
}

/// A device id: as any id, and usable as a directory name.
pub fn check_device_id(device_id: &str) -> Result<(), ColdError> {
    check_text("device_id", device_id, MAX_ID_BYTES)?;
    if device_id == "." || device_id == ".." || device_id.contains('/') || device_id.contains('\\')
    {
        return Err(invalid(
            "device_id",
            "must not be a path (no '/', '\\', '.' or '..')",
        ));
    }
    Ok(())
}
