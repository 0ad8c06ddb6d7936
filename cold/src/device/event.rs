//! ColdDevice events: compact msgpack (array form), one schema version per kind.
//!
//! Version history: every kind is at v1 (the first written). Within a version, fields are only
//! ever appended with `#[serde(default)]`; any other change is a new version whose decoder
//! upcasts the old payload (see `segment_registry/event.rs` for the pattern).

use serde::{Deserialize, Serialize};

use crescent_actors::event_payload::{check_version, from_msgpack, schema_version, to_msgpack};
use crescent_actors::{DecodeError, DomainEvent};

use crate::ids::{ColdOpId, PayloadFingerprint, ReclaimId};

use super::state::{DeviceHealth, DeviceKind, ReleaseCause, ReleasedFrom};

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

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
// Serialized as the variant's payload: what tools show as the event's data.
#[serde(untagged)]
pub enum ColdDeviceEvent {
    DeviceConfigured(DeviceConfigured),
    DeviceHealthChanged(DeviceHealthChanged),
    DeviceSchedulableChanged(DeviceSchedulableChanged),
    OperationPlanned(OperationPlanned),
    CapacityReserved(CapacityReserved),
    PayloadWritten(PayloadWritten),
    RouteCommitted(RouteCommitted),
    UsageCommitted(UsageCommitted),
    OperationCancelled(OperationCancelled),
    ReclaimPlanned(ReclaimPlanned),
    ReclaimCancelled(ReclaimCancelled),
    BackendDeleted(BackendDeleted),
    UsageReleased(UsageReleased),
    TerminalPruned(TerminalPruned),
    DeviceOwnerAssigned(DeviceOwnerAssigned),
}

const DEVICE_CONFIGURED: &str = "cold_device_configured";
const DEVICE_HEALTH_CHANGED: &str = "cold_device_health_changed";
const DEVICE_SCHEDULABLE_CHANGED: &str = "cold_device_schedulable_changed";
const OPERATION_PLANNED: &str = "cold_op_planned";
const CAPACITY_RESERVED: &str = "cold_capacity_reserved";
const PAYLOAD_WRITTEN: &str = "cold_payload_written";
const ROUTE_COMMITTED: &str = "cold_route_committed";
const USAGE_COMMITTED: &str = "cold_usage_committed";
const OPERATION_CANCELLED: &str = "cold_op_cancelled";
const RECLAIM_PLANNED: &str = "cold_reclaim_planned";
const RECLAIM_CANCELLED: &str = "cold_reclaim_cancelled";
const BACKEND_DELETED: &str = "cold_backend_deleted";
const USAGE_RELEASED: &str = "cold_usage_released";
const TERMINAL_PRUNED: &str = "cold_terminal_pruned";
const DEVICE_OWNER_ASSIGNED: &str = "cold_device_owner_assigned";

const SCHEMA: &[(&str, u16)] = &[
    (DEVICE_CONFIGURED, 1),
    (DEVICE_HEALTH_CHANGED, 1),
    (DEVICE_SCHEDULABLE_CHANGED, 1),
    (OPERATION_PLANNED, 1),
    (CAPACITY_RESERVED, 1),
    (PAYLOAD_WRITTEN, 1),
    (ROUTE_COMMITTED, 1),
    (USAGE_COMMITTED, 1),
    (OPERATION_CANCELLED, 1),
    (RECLAIM_PLANNED, 1),
    (RECLAIM_CANCELLED, 1),
    (BACKEND_DELETED, 1),
    (USAGE_RELEASED, 1),
    (TERMINAL_PRUNED, 1),
    (DEVICE_OWNER_ASSIGNED, 1),
];

impl DomainEvent for ColdDeviceEvent {
    fn kind(&self) -> &'static str {
        match self {
            ColdDeviceEvent::DeviceConfigured(_) => DEVICE_CONFIGURED,
            ColdDeviceEvent::DeviceHealthChanged(_) => DEVICE_HEALTH_CHANGED,
            ColdDeviceEvent::DeviceSchedulableChanged(_) => DEVICE_SCHEDULABLE_CHANGED,
            ColdDeviceEvent::OperationPlanned(_) => OPERATION_PLANNED,
            ColdDeviceEvent::CapacityReserved(_) => CAPACITY_RESERVED,
            ColdDeviceEvent::PayloadWritten(_) => PAYLOAD_WRITTEN,
            ColdDeviceEvent::RouteCommitted(_) => ROUTE_COMMITTED,
            ColdDeviceEvent::UsageCommitted(_) => USAGE_COMMITTED,
            ColdDeviceEvent::OperationCancelled(_) => OPERATION_CANCELLED,
            ColdDeviceEvent::ReclaimPlanned(_) => RECLAIM_PLANNED,
            ColdDeviceEvent::ReclaimCancelled(_) => RECLAIM_CANCELLED,
            ColdDeviceEvent::BackendDeleted(_) => BACKEND_DELETED,
            ColdDeviceEvent::UsageReleased(_) => USAGE_RELEASED,
            ColdDeviceEvent::TerminalPruned(_) => TERMINAL_PRUNED,
            ColdDeviceEvent::DeviceOwnerAssigned(_) => DEVICE_OWNER_ASSIGNED,
        }
    }

    fn version(&self) -> u16 {
        schema_version(SCHEMA, self.kind()).expect("every kind is in SCHEMA")
    }

    fn encode(&self) -> Vec<u8> {
        match self {
            ColdDeviceEvent::DeviceConfigured(e) => to_msgpack(e),
            ColdDeviceEvent::DeviceHealthChanged(e) => to_msgpack(e),
            ColdDeviceEvent::DeviceSchedulableChanged(e) => to_msgpack(e),
            ColdDeviceEvent::OperationPlanned(e) => to_msgpack(e),
            ColdDeviceEvent::CapacityReserved(e) => to_msgpack(e),
            ColdDeviceEvent::PayloadWritten(e) => to_msgpack(e),
            ColdDeviceEvent::RouteCommitted(e) => to_msgpack(e),
            ColdDeviceEvent::UsageCommitted(e) => to_msgpack(e),
            ColdDeviceEvent::OperationCancelled(e) => to_msgpack(e),
            ColdDeviceEvent::ReclaimPlanned(e) => to_msgpack(e),
            ColdDeviceEvent::ReclaimCancelled(e) => to_msgpack(e),
            ColdDeviceEvent::BackendDeleted(e) => to_msgpack(e),
            ColdDeviceEvent::UsageReleased(e) => to_msgpack(e),
            ColdDeviceEvent::TerminalPruned(e) => to_msgpack(e),
            ColdDeviceEvent::DeviceOwnerAssigned(e) => to_msgpack(e),
        }
    }

    fn decode(kind: &str, version: u16, payload: &[u8]) -> Result<Self, DecodeError> {
        check_version(super::STREAM_KIND, SCHEMA, kind, version)?;
        let (k, v, b) = (kind, version, payload);
        Ok(match kind {
            DEVICE_CONFIGURED => Self::DeviceConfigured(from_msgpack(k, v, b)?),
            DEVICE_HEALTH_CHANGED => Self::DeviceHealthChanged(from_msgpack(k, v, b)?),
            DEVICE_SCHEDULABLE_CHANGED => Self::DeviceSchedulableChanged(from_msgpack(k, v, b)?),
            OPERATION_PLANNED => Self::OperationPlanned(from_msgpack(k, v, b)?),
            CAPACITY_RESERVED => Self::CapacityReserved(from_msgpack(k, v, b)?),
            PAYLOAD_WRITTEN => Self::PayloadWritten(from_msgpack(k, v, b)?),
            ROUTE_COMMITTED => Self::RouteCommitted(from_msgpack(k, v, b)?),
            USAGE_COMMITTED => Self::UsageCommitted(from_msgpack(k, v, b)?),
            OPERATION_CANCELLED => Self::OperationCancelled(from_msgpack(k, v, b)?),
            RECLAIM_PLANNED => Self::ReclaimPlanned(from_msgpack(k, v, b)?),
            RECLAIM_CANCELLED => Self::ReclaimCancelled(from_msgpack(k, v, b)?),
            BACKEND_DELETED => Self::BackendDeleted(from_msgpack(k, v, b)?),
            USAGE_RELEASED => Self::UsageReleased(from_msgpack(k, v, b)?),
            TERMINAL_PRUNED => Self::TerminalPruned(from_msgpack(k, v, b)?),
            DEVICE_OWNER_ASSIGNED => Self::DeviceOwnerAssigned(from_msgpack(k, v, b)?),
            _ => {
                return Err(DecodeError::UnknownKind {
                    aggregate: super::STREAM_KIND,
                    kind: kind.to_string(),
                })
            }
        })
    }

    fn schema() -> &'static [(&'static str, u16)] {
        SCHEMA
    }
}
