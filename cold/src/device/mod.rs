//! The `ColdDevice` aggregate: one per cold device id. It holds the device's config facts,
//! capacity accounting (used, reserved), its cold operations and reclaim records, and the
//! journaled cold route of every object materialized on it, so that cold-only objects are
//! readable after a failover or restart from this aggregate's events alone.
//!
//! Invariants (kept by `decide`, checked by the property tests):
//! - `used + reserved <= capacity`, and neither counter ever goes below zero;
//! - `reserved` is the sum of the lengths of operations in Reserved, PayloadWritten,
//!   RouteCommitted and Reclaiming; `used` the sum over UsageCommitted;
//! - every operation ends in exactly one `Released`, reached once;
//! - an object key's cold route names an operation in RouteCommitted or UsageCommitted with no
//!   active reclaim.

mod command;
mod decide;
mod decide_device;
mod event;
#[cfg(test)]
mod owner_tests;
mod placement;
#[cfg(test)]
mod placement_tests;
mod state;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crescent_actors::{Aggregate, Ctx};

use crate::error::ColdError;
use crate::ids::{ColdOpId, ReclaimId};

pub use command::{
    check_device_id, ColdDeviceCommand, MAX_ID_BYTES, MAX_KEY_BYTES, MAX_TAGS, MAX_TEXT_BYTES,
};
pub use event::{
    BackendDeleted, CapacityReserved, ColdDeviceEvent, DeviceConfigured, DeviceHealthChanged,
    DeviceOwnerAssigned, DeviceSchedulableChanged, OperationCancelled, OperationPlanned,
    PayloadWritten, ReclaimCancelled, ReclaimPlanned, RouteCommitted, TerminalPruned,
    UsageCommitted, UsageReleased,
};
pub use placement::{choose_device, DeviceSummary};
pub use state::{
    ColdOpState, ColdOperation, ColdRoute, DeviceConfig, DeviceHealth, DeviceKind, ReclaimRecord,
    ReclaimState, ReleaseCause, ReleasedFrom, WrittenPayload,
};

/// Stream kind in the journal and section name in snapshots.
pub const STREAM_KIND: &str = "cold_device";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ColdDevice {
    config: Option<DeviceConfig>,
    health: DeviceHealth,
    schedulable: bool,
    used: u64,
    reserved: u64,
    operations: BTreeMap<ColdOpId, ColdOperation>,
    reclaims: BTreeMap<ReclaimId, ReclaimRecord>,
    /// Non-terminal operations and reclaims: the state index that resumption pages through
    /// without visiting terminal records.
    active_ops: BTreeSet<ColdOpId>,
    active_reclaims: BTreeSet<ReclaimId>,
    /// Object key -> the operation whose materialized locator is its authoritative cold route.
    cold_routes: BTreeMap<String, ColdOpId>,
    /// The storage owner that performs the device's IO (`None`: crescentd itself).
    #[serde(default)]
    owner: Option<DeviceOwner>,
}

/// The storage owner of an owner device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceOwner {
    pub owner_id: String,
    pub endpoint: String,
}

impl Default for ColdDevice {
    fn default() -> Self {
        Self {
            config: None,
            // Unconfigured: nothing may be read from or written to it.
            health: DeviceHealth::Unavailable,
            schedulable: false,
            used: 0,
            reserved: 0,
            operations: BTreeMap::new(),
            reclaims: BTreeMap::new(),
            active_ops: BTreeSet::new(),
            active_reclaims: BTreeSet::new(),
            cold_routes: BTreeMap::new(),
            owner: None,
        }
    }
}

impl ColdDevice {
    pub fn config(&self) -> Option<&DeviceConfig> {
        self.config.as_ref()
    }

    /// The storage owner that performs the device's IO, if it is not crescentd.
    pub fn owner(&self) -> Option<&DeviceOwner> {
        self.owner.as_ref()
    }

    pub fn device_id(&self) -> Option<&str> {
        self.config.as_ref().map(|c| c.device_id.as_str())
    }

    pub fn health(&self) -> DeviceHealth {
        self.health
    }

    pub fn schedulable(&self) -> bool {
        self.schedulable
    }

    pub fn capacity(&self) -> u64 {
        self.config.as_ref().map_or(0, |c| c.capacity)
    }

    pub fn used(&self) -> u64 {
        self.used
    }

    pub fn reserved(&self) -> u64 {
        self.reserved
    }

    /// Capacity neither used nor reserved.
    pub fn free(&self) -> u64 {
        self.capacity()
            .saturating_sub(self.used)
            .saturating_sub(self.reserved)
    }

    /// Configured and not unavailable: its materialized payloads can be read.
    pub fn readable(&self) -> bool {
        self.config.is_some() && self.health.readable()
    }

    /// Placement may choose it for a payload of `length` bytes.
    pub fn check_placement(&self, length: u64) -> Result<(), ColdError> {
        self.check_eligible()?;
        if self.free() < length {
            return Err(ColdError::InsufficientCapacity {
                device_id: self.device_id().unwrap_or_default().to_string(),
                requested: length,
                free: self.free(),
            });
        }
        Ok(())
    }

    pub fn operation(&self, op_id: &ColdOpId) -> Option<&ColdOperation> {
        self.operations.get(op_id)
    }

    pub fn operations(&self) -> &BTreeMap<ColdOpId, ColdOperation> {
        &self.operations
    }

    pub fn reclaim(&self, reclaim_id: &ReclaimId) -> Option<&ReclaimRecord> {
        self.reclaims.get(reclaim_id)
    }

    pub fn reclaims(&self) -> &BTreeMap<ReclaimId, ReclaimRecord> {
        &self.reclaims
    }

    /// Up to `limit` non-terminal operations with ids after `after`, in id order: the bounded
    /// pages restart resumption reads.
    pub fn active_operations(&self, after: Option<ColdOpId>, limit: usize) -> Vec<&ColdOperation> {
        page(&self.active_ops, after, limit)
            .filter_map(|id| self.operations.get(id))
            .collect()
    }

    /// Up to `limit` non-terminal reclaim records with ids after `after`.
    pub fn active_reclaims(&self, after: Option<ReclaimId>, limit: usize) -> Vec<&ReclaimRecord> {
        page(&self.active_reclaims, after, limit)
            .filter_map(|id| self.reclaims.get(id))
            .collect()
    }

    pub fn active_operation_count(&self) -> usize {
        self.active_ops.len()
    }

    pub fn active_reclaim_count(&self) -> usize {
        self.active_reclaims.len()
    }

    /// The journaled cold route of `object_key` on this device. Across devices, the route with
    /// the highest `content_op` is the object's (an older one is always under reclaim first).
    pub fn cold_route(&self, object_key: &str) -> Option<ColdRoute> {
        let op_id = self.cold_routes.get(object_key)?;
        self.route_of(op_id)
    }

    /// Every journaled cold route, by object key.
    pub fn cold_routes(&self) -> impl Iterator<Item = ColdRoute> + '_ {
        self.cold_routes.values().filter_map(|id| self.route_of(id))
    }

    /// Sum of the lengths of operations holding a live materialized payload (RouteCommitted or
    /// UsageCommitted): after every reclaim has run, `used + reserved` equals it.
    pub fn live_materialized_bytes(&self) -> u64 {
        self.active_ops
            .iter()
            .filter_map(|id| self.operations.get(id))
            .filter(|op| {
                matches!(
                    op.state,
                    ColdOpState::RouteCommitted | ColdOpState::UsageCommitted
                )
            })
            .map(|op| op.expected_length)
            .sum()
    }

    fn route_of(&self, op_id: &ColdOpId) -> Option<ColdRoute> {
        let op = self.operations.get(op_id)?;
        let payload = op.payload.as_ref()?;
        Some(ColdRoute {
            object_key: op.object_key.clone(),
            device_id: self.device_id()?.to_string(),
            op_id: op.op_id,
            content_op: op.content_op,
            locator: payload.locator.clone(),
            length: payload.length,
            checksum: payload.checksum,
            fingerprint: payload.fingerprint,
            route_version: op.route_version.unwrap_or(0),
            state: op.state,
        })
    }
}

fn page<T: Ord + Copy>(
    set: &BTreeSet<T>,
    after: Option<T>,
    limit: usize,
) -> impl Iterator<Item = &T> + '_ {
    use std::ops::Bound;
    let lower = match after {
        Some(a) => Bound::Excluded(a),
        None => Bound::Unbounded,
    };
    set.range((lower, Bound::Unbounded)).take(limit)
}

impl Aggregate for ColdDevice {
    const KIND: &'static str = STREAM_KIND;
    const SNAPSHOT_SCHEMA: u32 = 1;

    type Command = ColdDeviceCommand;
    type Event = ColdDeviceEvent;
    type Error = ColdError;

    fn decide(
        &self,
        cmd: &ColdDeviceCommand,
        ctx: &Ctx,
    ) -> Result<Vec<ColdDeviceEvent>, ColdError> {
        cmd.validate()?;
        self.decide_command(cmd, ctx.now_ms)
    }

    fn apply(&mut self, event: &ColdDeviceEvent) {
        self.apply_owned(event.clone());
    }

    fn apply_owned(&mut self, event: ColdDeviceEvent) {
        match event {
            ColdDeviceEvent::DeviceConfigured(e) => self.apply_configured(e),
            ColdDeviceEvent::DeviceHealthChanged(e) => self.health = e.health,
            ColdDeviceEvent::DeviceOwnerAssigned(e) => {
                self.owner = Some(DeviceOwner {
                    owner_id: e.owner_id,
                    endpoint: e.endpoint,
                })
            }
            ColdDeviceEvent::DeviceSchedulableChanged(e) => self.schedulable = e.schedulable,
            ColdDeviceEvent::OperationPlanned(e) => self.apply_operation_planned(e),
            ColdDeviceEvent::CapacityReserved(e) => {
                self.reserved = self.reserved.saturating_add(e.bytes);
                self.set_op_state(&e.op_id, ColdOpState::Reserved, e.at_ms);
            }
            ColdDeviceEvent::PayloadWritten(e) => {
                if let Some(op) = self.operations.get_mut(&e.op_id) {
                    op.payload = Some(WrittenPayload {
                        locator: e.locator,
                        length: e.length,
                        checksum: e.checksum,
                        fingerprint: e.fingerprint,
                    });
                }
                self.set_op_state(&e.op_id, ColdOpState::PayloadWritten, e.at_ms);
            }
            ColdDeviceEvent::RouteCommitted(e) => {
                if let Some(op) = self.operations.get_mut(&e.op_id) {
                    op.route_version = Some(e.route_version);
                    self.cold_routes.insert(op.object_key.clone(), e.op_id);
                }
                self.set_op_state(&e.op_id, ColdOpState::RouteCommitted, e.at_ms);
            }
            ColdDeviceEvent::UsageCommitted(e) => {
                self.reserved = self.reserved.saturating_sub(e.bytes);
                self.used = self.used.saturating_add(e.bytes);
                self.set_op_state(&e.op_id, ColdOpState::UsageCommitted, e.at_ms);
            }
            ColdDeviceEvent::OperationCancelled(e) => {
                self.reserved = self.reserved.saturating_sub(e.released_reserved);
                if let Some(op) = self.operations.get_mut(&e.op_id) {
                    op.release_cause = Some(e.cause);
                }
                self.set_op_state(&e.op_id, ColdOpState::Released, e.at_ms);
            }
            ColdDeviceEvent::ReclaimPlanned(e) => self.apply_reclaim_planned(e),
            ColdDeviceEvent::ReclaimCancelled(e) => {
                self.set_reclaim_state(&e.reclaim_id, ReclaimState::Cancelled, e.at_ms);
                if let Some(op) = self.operations.get_mut(&e.op_id) {
                    op.reclaim = None;
                    self.cold_routes.insert(op.object_key.clone(), e.op_id);
                }
            }
            ColdDeviceEvent::BackendDeleted(e) => {
                self.set_reclaim_state(&e.reclaim_id, ReclaimState::BackendDeleted, e.at_ms);
            }
            ColdDeviceEvent::UsageReleased(e) => self.apply_usage_released(e),
            ColdDeviceEvent::TerminalPruned(e) => {
                for id in &e.op_ids {
                    self.operations.remove(id);
                }
                for id in &e.reclaim_ids {
                    self.reclaims.remove(id);
                }
            }
        }
    }
}

impl ColdDevice {
    fn set_op_state(&mut self, op_id: &ColdOpId, state: ColdOpState, at_ms: i64) {
        if let Some(op) = self.operations.get_mut(op_id) {
            op.state = state;
            op.updated_at_ms = at_ms;
            if state.is_terminal() {
                self.active_ops.remove(op_id);
            }
        }
    }

    fn set_reclaim_state(&mut self, reclaim_id: &ReclaimId, state: ReclaimState, at_ms: i64) {
        if let Some(r) = self.reclaims.get_mut(reclaim_id) {
            r.state = state;
            r.updated_at_ms = at_ms;
            if state.is_terminal() {
                self.active_reclaims.remove(reclaim_id);
            }
        }
    }

    /// The device configured (again): a first configuration makes it healthy.
    fn apply_configured(&mut self, e: DeviceConfigured) {
        if self.config.is_none() {
            self.health = DeviceHealth::Healthy;
        }
        self.schedulable = e.schedulable;
        self.config = Some(DeviceConfig {
            device_id: e.device_id,
            kind: e.kind,
            root: e.root,
            capacity: e.capacity,
            tags: e.tags.into_iter().collect(),
            configured_at_ms: e.at_ms,
        });
    }

    /// A planned operation, active until it ends.
    fn apply_operation_planned(&mut self, e: OperationPlanned) {
        self.active_ops.insert(e.op_id);
        self.operations.insert(
            e.op_id,
            ColdOperation {
                op_id: e.op_id,
                object_key: e.object_key,
                content_op: e.content_op,
                expected_length: e.expected_length,
                expected_checksum: e.expected_checksum,
                state: ColdOpState::Planned,
                payload: None,
                route_version: None,
                reclaim: None,
                release_cause: None,
                planned_at_ms: e.at_ms,
                updated_at_ms: e.at_ms,
            },
        );
    }

    /// A reclaim released its bytes: the operation ends as reclaimed and its object loses
    /// this cold route.
    fn apply_usage_released(&mut self, e: UsageReleased) {
        match e.from {
            ReleasedFrom::Reserved => self.reserved = self.reserved.saturating_sub(e.bytes),
            ReleasedFrom::Used => self.used = self.used.saturating_sub(e.bytes),
        }
        if let Some(r) = self.reclaims.get_mut(&e.reclaim_id) {
            r.released_from = Some(e.from);
        }
        self.set_reclaim_state(&e.reclaim_id, ReclaimState::UsageReleased, e.at_ms);
        if let Some(op) = self.operations.get_mut(&e.op_id) {
            op.release_cause = Some(ReleaseCause::Reclaimed);
            if self.cold_routes.get(&op.object_key) == Some(&e.op_id) {
                self.cold_routes.remove(&op.object_key);
            }
        }
        self.set_op_state(&e.op_id, ColdOpState::Released, e.at_ms);
    }

    fn apply_reclaim_planned(&mut self, e: ReclaimPlanned) {
        let Some(op) = self.operations.get_mut(&e.op_id) else {
            return;
        };
        op.reclaim = Some(e.reclaim_id);
        op.updated_at_ms = e.at_ms;
        let (locator, length) = op
            .payload
            .as_ref()
            .map(|p| (p.locator.clone(), p.length))
            .unwrap_or_default();
        if e.orphan {
            op.state = ColdOpState::Reclaiming;
        } else if self.cold_routes.get(&op.object_key) == Some(&e.op_id) {
            // The overwrite/delete is about to make this locator obsolete: from now on the
            // journal no longer offers it as the object's cold route.
            self.cold_routes.remove(&op.object_key);
        }
        self.active_reclaims.insert(e.reclaim_id);
        self.reclaims.insert(
            e.reclaim_id,
            ReclaimRecord {
                reclaim_id: e.reclaim_id,
                op_id: e.op_id,
                content_op: op.content_op,
                object_key: op.object_key.clone(),
                locator,
                length,
                state: ReclaimState::Planned,
                released_from: None,
                planned_at_ms: e.at_ms,
                updated_at_ms: e.at_ms,
            },
        );
    }
}
