//! ColdDevice events and their codec (`domain_events!`): compact msgpack (array form), one
//! schema version per kind.
//!
//! Version history: every kind is at v1 (the first written). Within a version, fields are only
//! ever appended with `#[serde(default)]`; any other change is a new version whose decoder
//! upcasts the old payload (an `upcast` entry of its line below).

use serde::{Deserialize, Serialize};

use crate::ids::{ColdOpId, PayloadFingerprint, ReclaimId};

use super::state::{DeviceHealth, DeviceKind, ReleaseCause, ReleasedFrom};
use super::STREAM_KIND;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceConfigured {
    pub device_id: String,
    pub kind: DeviceKind,
    pub root: String,
    pub capacity: u64,
    pub tags: Vec<String>,
    pub schedulable: bool,
    pub at_ms: i64,
}

/// The device's IO is performed by a storage owner (`crescent owner --cold-device`), not by
/// crescentd: who it is and where it listens. Journaled so the device survives a restart or
/// failover of crescentd as an owner device (unavailable until its owner polls again).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceOwnerAssigned {
    pub owner_id: String,
    pub endpoint: String,
    pub at_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceHealthChanged {
    pub health: DeviceHealth,
    pub reason: String,
    pub at_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceSchedulableChanged {
    pub schedulable: bool,
    pub at_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperationPlanned {
    pub op_id: ColdOpId,
    pub object_key: String,
    pub content_op: u64,
    pub expected_length: u64,
    pub expected_checksum: u32,
    pub at_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapacityReserved {
    pub op_id: ColdOpId,
    pub bytes: u64,
    pub at_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PayloadWritten {
    pub op_id: ColdOpId,
    pub locator: String,
    pub length: u64,
    pub checksum: u32,
    pub fingerprint: PayloadFingerprint,
    pub at_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteCommitted {
    pub op_id: ColdOpId,
    pub route_version: u64,
    pub at_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageCommitted {
    pub op_id: ColdOpId,
    pub bytes: u64,
    pub at_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperationCancelled {
    pub op_id: ColdOpId,
    pub cause: ReleaseCause,
    /// Reserved bytes given back (0 when cancelled in `Planned`).
    pub released_reserved: u64,
    pub at_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReclaimPlanned {
    pub reclaim_id: ReclaimId,
    pub op_id: ColdOpId,
    /// The operation was `PayloadWritten` and moves to `Reclaiming` (an orphan payload);
    /// otherwise it was materialized and its journaled cold route is dropped.
    pub orphan: bool,
    pub at_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReclaimCancelled {
    pub reclaim_id: ReclaimId,
    pub op_id: ColdOpId,
    pub at_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackendDeleted {
    pub reclaim_id: ReclaimId,
    pub op_id: ColdOpId,
    pub at_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageReleased {
    pub reclaim_id: ReclaimId,
    pub op_id: ColdOpId,
    pub from: ReleasedFrom,
    pub bytes: u64,
    pub at_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TerminalPruned {
    pub released_before_ms: i64,
    pub op_ids: Vec<ColdOpId>,
    pub reclaim_ids: Vec<ReclaimId>,
    pub at_ms: i64,
}

crescent_actors::domain_events! {
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub enum ColdDeviceEvent for STREAM_KIND {
        DeviceConfigured(DeviceConfigured):
            DEVICE_CONFIGURED = "cold_device_configured", version 1;
        DeviceHealthChanged(DeviceHealthChanged):
            DEVICE_HEALTH_CHANGED = "cold_device_health_changed", version 1;
        DeviceSchedulableChanged(DeviceSchedulableChanged):
            DEVICE_SCHEDULABLE_CHANGED = "cold_device_schedulable_changed", version 1;
        OperationPlanned(OperationPlanned): OPERATION_PLANNED = "cold_op_planned", version 1;
        CapacityReserved(CapacityReserved):
            CAPACITY_RESERVED = "cold_capacity_reserved", version 1;
        PayloadWritten(PayloadWritten): PAYLOAD_WRITTEN = "cold_payload_written", version 1;
        RouteCommitted(RouteCommitted): ROUTE_COMMITTED = "cold_route_committed", version 1;
        UsageCommitted(UsageCommitted): USAGE_COMMITTED = "cold_usage_committed", version 1;
        OperationCancelled(OperationCancelled):
            OPERATION_CANCELLED = "cold_op_cancelled", version 1;
        ReclaimPlanned(ReclaimPlanned): RECLAIM_PLANNED = "cold_reclaim_planned", version 1;
        ReclaimCancelled(ReclaimCancelled):
            RECLAIM_CANCELLED = "cold_reclaim_cancelled", version 1;
        BackendDeleted(BackendDeleted): BACKEND_DELETED = "cold_backend_deleted", version 1;
        UsageReleased(UsageReleased): USAGE_RELEASED = "cold_usage_released", version 1;
        TerminalPruned(TerminalPruned): TERMINAL_PRUNED = "cold_terminal_pruned", version 1;
        DeviceOwnerAssigned(DeviceOwnerAssigned):
            DEVICE_OWNER_ASSIGNED = "cold_device_owner_assigned", version 1;
    }
}
