//! The records a `ColdDevice` keeps: its config facts, cold operations and reclaim records.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::ids::{ColdOpId, PayloadFingerprint, ReclaimId};

/// The backend kind of a device. Only `local_dir` (a directory on SSD or an NFS mount) exists
/// today; the enum is the place where `extent_store` would go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceKind {
    LocalDir,
}

impl DeviceKind {
    pub fn as_str(&self) -> &'static str {
        match self {
            DeviceKind::LocalDir => "local_dir",
        }
    }
}

/// Device health as the owner's probes report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceHealth {
    /// Readable and writable.
    Healthy,
    /// Readable, but takes no new offloads (errors, slow, nearly full filesystem).
    Degraded,
    /// Neither: reads fail over to hot replicas; last-hot eviction to it is refused.
    Unavailable,
}

impl DeviceHealth {
    pub fn as_str(&self) -> &'static str {
        match self {
            DeviceHealth::Healthy => "healthy",
            DeviceHealth::Degraded => "degraded",
            DeviceHealth::Unavailable => "unavailable",
        }
    }

    pub fn readable(&self) -> bool {
        !matches!(self, DeviceHealth::Unavailable)
    }

    pub const ALL: [DeviceHealth; 3] = [
        DeviceHealth::Healthy,
        DeviceHealth::Degraded,
        DeviceHealth::Unavailable,
    ];
}

/// The config facts of a device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceConfig {
    pub device_id: String,
    pub kind: DeviceKind,
    /// The directory the device stores into (for `local_dir`).
    pub root: String,
    pub capacity: u64,
    pub tags: BTreeSet<String>,
    pub configured_at_ms: i64,
}

/// The cold operation state machine of (docs/cold-tier.md, "States").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ColdOpState {
    /// The pending cold intent is authoritative; nothing reserved.
    Planned,
    /// Device capacity reserved (counted in `reserved`).
    Reserved,
    /// The payload is on the device; locator, length, checksum and fingerprint recorded.
    PayloadWritten,
    /// The route's active cold backing is `Materialized` with this operation.
    RouteCommitted,
    /// Reserved bytes moved to used bytes.
    UsageCommitted,
    /// An orphaned payload (the route never referenced it, or a different backing won) waits
    /// for backend delete and release of its reservation.
    Reclaiming,
    /// Terminal: every byte it held is released.
    Released,
}

impl ColdOpState {
    pub fn as_str(&self) -> &'static str {
        match self {
            ColdOpState::Planned => "planned",
            ColdOpState::Reserved => "reserved",
            ColdOpState::PayloadWritten => "payload_written",
            ColdOpState::RouteCommitted => "route_committed",
            ColdOpState::UsageCommitted => "usage_committed",
            ColdOpState::Reclaiming => "reclaiming",
            ColdOpState::Released => "released",
        }
    }

    pub fn is_terminal(&self) -> bool {
        matches!(self, ColdOpState::Released)
    }

    /// Bytes of the operation's length counted in `reserved` in this state.
    pub fn holds_reservation(&self) -> bool {
        matches!(
            self,
            ColdOpState::Reserved
                | ColdOpState::PayloadWritten
                | ColdOpState::RouteCommitted
                | ColdOpState::Reclaiming
        )
    }

    /// The payload has been recorded as written (a locator exists).
    pub fn has_payload(&self) -> bool {
        matches!(
            self,
            ColdOpState::PayloadWritten
                | ColdOpState::RouteCommitted
                | ColdOpState::UsageCommitted
                | ColdOpState::Reclaiming
        )
    }
}

/// Why an operation was released.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReleaseCause {
    /// Cancelled before its payload was written (shutdown, device drained, gave up).
    Cancelled,
    /// Its content was overwritten or deleted before its payload was written.
    Replaced,
    /// A reclaim record's handoff released it (after backend delete).
    Reclaimed,
}

/// Where the payload lives, as the backend reported it at `PayloadWritten`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WrittenPayload {
    pub locator: String,
    pub length: u64,
    pub checksum: u32,
    pub fingerprint: PayloadFingerprint,
}

/// One cold operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ColdOperation {
    pub op_id: ColdOpId,
    /// The object the content belongs to (namespace-qualified by the server).
    pub object_key: String,
    /// The accounting/content operation id of the value offloaded.
    pub content_op: u64,
    pub expected_length: u64,
    pub expected_checksum: u32,
    pub state: ColdOpState,
    /// Set from `PayloadWritten` on.
    pub payload: Option<WrittenPayload>,
    /// The route version of the materialization CAS (from `RouteCommitted` on).
    pub route_version: Option<u64>,
    /// The reclaim record handling it, once one is planned (and not cancelled).
    pub reclaim: Option<ReclaimId>,
    pub release_cause: Option<ReleaseCause>,
    pub planned_at_ms: i64,
    pub updated_at_ms: i64,
}

/// The reclaim state machine (docs/cold-tier.md, "States"): `Planned -> BackendDeleted ->
/// UsageReleased`, plus `Cancelled` for a reclaim whose overwrite/delete route CAS lost (exact
/// lookup shows the route still references the locator, so it must not be deleted).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReclaimState {
    Planned,
    BackendDeleted,
    UsageReleased,
    Cancelled,
}

impl ReclaimState {
    pub fn as_str(&self) -> &'static str {
        match self {
            ReclaimState::Planned => "planned",
            ReclaimState::BackendDeleted => "backend_deleted",
            ReclaimState::UsageReleased => "usage_released",
            ReclaimState::Cancelled => "cancelled",
        }
    }

    pub fn is_terminal(&self) -> bool {
        matches!(self, ReclaimState::UsageReleased | ReclaimState::Cancelled)
    }
}

/// Which counter the reclaim handoff decremented.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReleasedFrom {
    /// `RouteCommitted` or `Reclaiming`: the outstanding reservation, never exposed as used.
    Reserved,
    /// `UsageCommitted`: committed usage.
    Used,
}

/// A `ColdReclaimRecord`: one obsolete locator on its way out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReclaimRecord {
    pub reclaim_id: ReclaimId,
    pub op_id: ColdOpId,
    pub content_op: u64,
    pub object_key: String,
    pub locator: String,
    pub length: u64,
    pub state: ReclaimState,
    /// Set by the handoff.
    pub released_from: Option<ReleasedFrom>,
    pub planned_at_ms: i64,
    pub updated_at_ms: i64,
}

/// The journaled cold route of one object: enough to read a cold-only object after a failover
/// or restart without any owner replay.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ColdRoute {
    pub object_key: String,
    pub device_id: String,
    pub op_id: ColdOpId,
    pub content_op: u64,
    pub locator: String,
    pub length: u64,
    pub checksum: u32,
    pub fingerprint: PayloadFingerprint,
    /// The route version the materialization CAS produced.
    pub route_version: u64,
    /// `RouteCommitted` or `UsageCommitted` (eviction of the last hot copy needs the latter).
    pub state: ColdOpState,
}
