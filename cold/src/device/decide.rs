//! The business rules of `ColdDevice`: which events each command produces, or why not.

use crate::error::ColdError;
use crate::ids::{ColdOpId, PayloadFingerprint, ReclaimId};

use super::event::*;
use super::state::{
    ColdOpState, ColdOperation, ReclaimRecord, ReclaimState, ReleaseCause, ReleasedFrom,
};
use super::{ColdDevice, ColdDeviceCommand, ColdDeviceEvent, DeviceHealth};

pub(super) type Decision = Result<Vec<ColdDeviceEvent>, ColdError>;

const OPERATION: &str = "cold operation";
const RECLAIM: &str = "reclaim";

fn transition(
    what: &'static str,
    id: String,
    state: &'static str,
    action: &'static str,
) -> ColdError {
    ColdError::InvalidTransition {
        what,
        id,
        state,
        action,
    }
}

fn op_transition(op: &ColdOperation, action: &'static str) -> ColdError {
    transition(OPERATION, op.op_id.to_string(), op.state.as_str(), action)
}

fn reclaim_transition(r: &ReclaimRecord, action: &'static str) -> ColdError {
    transition(RECLAIM, r.reclaim_id.to_string(), r.state.as_str(), action)
}

pub(super) fn conflict(
    what: &'static str,
    id: impl ToString,
    reason: impl Into<String>,
) -> ColdError {
    ColdError::Conflict {
        what,
        id: id.to_string(),
        reason: reason.into(),
    }
}

impl ColdDevice {
    pub(super) fn decide_command(&self, cmd: &ColdDeviceCommand, at_ms: i64) -> Decision {
        use ColdDeviceCommand as C;
        match cmd {
            C::Configure {
                device_id,
                kind,
                root,
                capacity,
                tags,
                schedulable,
            } => self.decide_configure(DeviceConfigured {
                device_id: device_id.clone(),
                kind: *kind,
                root: root.clone(),
                capacity: *capacity,
                tags: {
                    let mut t = tags.clone();
                    t.sort();
                    t.dedup();
                    t
                },
                schedulable: *schedulable,
                at_ms,
            }),
            C::SetHealth { health, reason } => self.decide_set_health(*health, reason, at_ms),
            C::AssignOwner { owner_id, endpoint } => {
                self.decide_assign_owner(owner_id, endpoint, at_ms)
            }
            C::SetSchedulable { schedulable } => self.decide_set_schedulable(*schedulable, at_ms),
            C::PlanOffload {
                op_id,
                object_key,
                content_op,
                expected_length,
                expected_checksum,
            } => self.decide_plan(OperationPlanned {
                op_id: *op_id,
                object_key: object_key.clone(),
                content_op: *content_op,
                expected_length: *expected_length,
                expected_checksum: *expected_checksum,
                at_ms,
            }),
            C::Reserve { op_id } => self.decide_reserve(op_id, at_ms),
            C::RecordPayloadWritten {
                op_id,
                locator,
                length,
                checksum,
                fingerprint,
            } => {
                self.decide_payload_written(op_id, locator, *length, *checksum, *fingerprint, at_ms)
            }
            C::CommitRoute {
                op_id,
                route_version,
            } => self.decide_commit_route(op_id, *route_version, at_ms),
            C::CommitUsage { op_id } => self.decide_commit_usage(op_id, at_ms),
            C::Cancel { op_id, cause } => self.decide_cancel(op_id, *cause, at_ms),
            C::PlanReclaim { reclaim_id, op_id } => {
                self.decide_plan_reclaim(reclaim_id, op_id, at_ms)
            }
            C::CancelReclaim { reclaim_id } => self.decide_cancel_reclaim(reclaim_id, at_ms),
            C::RecordBackendDeleted { reclaim_id } => {
                self.decide_backend_deleted(reclaim_id, at_ms)
            }
            C::ReleaseUsage { reclaim_id, op_id } => {
                self.decide_release_usage(reclaim_id, op_id, at_ms)
            }
            C::PruneTerminal { released_before_ms } => {
                self.decide_prune_terminal(*released_before_ms, at_ms)
            }
        }
    }

    fn decide_commit_usage(&self, op_id: &ColdOpId, at_ms: i64) -> Decision {
        let op = self.op(op_id)?;
        match op.state {
            ColdOpState::RouteCommitted => {
                Ok(vec![ColdDeviceEvent::UsageCommitted(UsageCommitted {
                    op_id: *op_id,
                    bytes: op.expected_length,
                    at_ms,
                })])
            }
            ColdOpState::UsageCommitted => Ok(vec![]),
            _ => Err(op_transition(op, "commit usage")),
        }
    }

    fn decide_cancel(&self, op_id: &ColdOpId, cause: ReleaseCause, at_ms: i64) -> Decision {
        let op = self.op(op_id)?;
        let released_reserved = match op.state {
            ColdOpState::Planned => 0,
            ColdOpState::Reserved => op.expected_length,
            ColdOpState::Released if op.release_cause == Some(cause) => return Ok(vec![]),
            _ => return Err(op_transition(op, "cancel")),
        };
        Ok(vec![ColdDeviceEvent::OperationCancelled(
            OperationCancelled {
                op_id: *op_id,
                cause,
                released_reserved,
                at_ms,
            },
        )])
    }

    fn decide_backend_deleted(&self, reclaim_id: &ReclaimId, at_ms: i64) -> Decision {
        let r = self.reclaim_record(reclaim_id)?;
        match r.state {
            ReclaimState::Planned => Ok(vec![ColdDeviceEvent::BackendDeleted(BackendDeleted {
                reclaim_id: *reclaim_id,
                op_id: r.op_id,
                at_ms,
            })]),
            ReclaimState::BackendDeleted | ReclaimState::UsageReleased => Ok(vec![]),
            ReclaimState::Cancelled => Err(reclaim_transition(r, "record backend deleted")),
        }
    }

    pub(super) fn check_configured(&self) -> Result<&super::DeviceConfig, ColdError> {
        self.config
            .as_ref()
            .ok_or_else(|| ColdError::DeviceNotEligible {
                device_id: String::new(),
                reason: "not configured".into(),
            })
    }

    /// Configured, healthy and schedulable: may take new work.
    pub(super) fn check_eligible(&self) -> Result<(), ColdError> {
        let config = self.check_configured()?;
        let reason = if self.health != DeviceHealth::Healthy {
            format!("health is {}", self.health.as_str())
        } else if !self.schedulable {
            "not schedulable".to_string()
        } else {
            return Ok(());
        };
        Err(ColdError::DeviceNotEligible {
            device_id: config.device_id.clone(),
            reason,
        })
    }

    fn op(&self, op_id: &ColdOpId) -> Result<&ColdOperation, ColdError> {
        self.operations
            .get(op_id)
            .ok_or_else(|| ColdError::NotFound {
                what: OPERATION,
                id: op_id.to_string(),
            })
    }

    fn reclaim_record(&self, reclaim_id: &ReclaimId) -> Result<&ReclaimRecord, ColdError> {
        self.reclaims
            .get(reclaim_id)
            .ok_or_else(|| ColdError::NotFound {
                what: RECLAIM,
                id: reclaim_id.to_string(),
            })
    }

    fn decide_configure(&self, e: DeviceConfigured) -> Decision {
        let Some(current) = &self.config else {
            return Ok(vec![ColdDeviceEvent::DeviceConfigured(e)]);
        };
        let immutable = [
            ("device id", current.device_id != e.device_id),
            ("kind", current.kind != e.kind),
            ("root", current.root != e.root),
        ];
        if let Some((field, _)) = immutable.iter().find(|(_, differs)| *differs) {
            return Err(conflict(
                "device",
                &current.device_id,
                format!("its {field} cannot change: every locator on it depends on it"),
            ));
        }
        let held = self.used + self.reserved;
        if e.capacity < held {
            return Err(conflict(
                "device",
                &current.device_id,
                format!(
                    "capacity {} is below the {held} bytes used or reserved",
                    e.capacity
                ),
            ));
        }
        let current_tags: Vec<String> = current.tags.iter().cloned().collect();
        if current.capacity == e.capacity
            && current_tags == e.tags
            && self.schedulable == e.schedulable
        {
            return Ok(vec![]);
        }
        Ok(vec![ColdDeviceEvent::DeviceConfigured(e)])
    }

    fn decide_plan(&self, e: OperationPlanned) -> Decision {
        if let Some(op) = self.operations.get(&e.op_id) {
            let same = op.object_key == e.object_key
                && op.content_op == e.content_op
                && op.expected_length == e.expected_length
                && op.expected_checksum == e.expected_checksum;
            return if same {
                Ok(vec![])
            } else {
                Err(conflict(
                    OPERATION,
                    e.op_id,
                    "already planned for other content",
                ))
            };
        }
        self.check_eligible()?;
        if e.expected_length > self.capacity() {
            return Err(ColdError::invalid(
                "expected_length",
                format!(
                    "{} bytes exceed the device capacity {}",
                    e.expected_length,
                    self.capacity()
                ),
            ));
        }
        Ok(vec![ColdDeviceEvent::OperationPlanned(e)])
    }

    fn decide_reserve(&self, op_id: &ColdOpId, at_ms: i64) -> Decision {
        let op = self.op(op_id)?;
        match op.state {
            ColdOpState::Planned => {
                self.check_placement(op.expected_length)?;
                Ok(vec![ColdDeviceEvent::CapacityReserved(CapacityReserved {
                    op_id: *op_id,
                    bytes: op.expected_length,
                    at_ms,
                })])
            }
            ColdOpState::Released => Err(op_transition(op, "reserve")),
            // Reserve is idempotent: every later state holds (or held) the reservation.
            _ => Ok(vec![]),
        }
    }

    fn decide_payload_written(
        &self,
        op_id: &ColdOpId,
        locator: &str,
        length: u64,
        checksum: u32,
        fingerprint: PayloadFingerprint,
        at_ms: i64,
    ) -> Decision {
        let op = self.op(op_id)?;
        if op.state.has_payload() {
            let p = op
                .payload
                .as_ref()
                .expect("states with a payload record it");
            let same = p.locator == locator
                && p.length == length
                && p.checksum == checksum
                && p.fingerprint == fingerprint;
            return if same {
                Ok(vec![])
            } else {
                Err(conflict(
                    OPERATION,
                    op_id,
                    format!("payload already recorded at {}", p.locator),
                ))
            };
        }
        if op.state != ColdOpState::Reserved {
            return Err(op_transition(op, "record payload written"));
        }
        if length != op.expected_length || checksum != op.expected_checksum {
            return Err(conflict(
                OPERATION,
                op_id,
                format!(
                    "written {length} bytes with checksum {checksum:08x}, planned {} bytes with {:08x}",
                    op.expected_length, op.expected_checksum
                ),
            ));
        }
        Ok(vec![ColdDeviceEvent::PayloadWritten(PayloadWritten {
            op_id: *op_id,
            locator: locator.to_string(),
            length,
            checksum,
            fingerprint,
            at_ms,
        })])
    }

    fn decide_commit_route(&self, op_id: &ColdOpId, route_version: u64, at_ms: i64) -> Decision {
        let op = self.op(op_id)?;
        match op.state {
            ColdOpState::PayloadWritten => {}
            ColdOpState::RouteCommitted | ColdOpState::UsageCommitted => return Ok(vec![]),
            _ => return Err(op_transition(op, "commit route")),
        }
        if let Some(other) = self
            .cold_routes
            .get(&op.object_key)
            .and_then(|id| self.operations.get(id))
        {
            // The previous materialized backing of this key must be under reclaim before a new
            // one commits (the overwrite plans its reclaim before its route CAS).
            let reason = if other.content_op >= op.content_op {
                format!(
                    "operation {} of content {} is already materialized",
                    other.op_id, other.content_op
                )
            } else {
                format!(
                    "the backing of operation {} has no reclaim record",
                    other.op_id
                )
            };
            return Err(conflict("object", &op.object_key, reason));
        }
        Ok(vec![ColdDeviceEvent::RouteCommitted(RouteCommitted {
            op_id: *op_id,
            route_version,
            at_ms,
        })])
    }

    fn decide_plan_reclaim(
        &self,
        reclaim_id: &ReclaimId,
        op_id: &ColdOpId,
        at_ms: i64,
    ) -> Decision {
        if let Some(r) = self.reclaims.get(reclaim_id) {
            return if r.op_id == *op_id {
                Ok(vec![])
            } else {
                Err(conflict(
                    RECLAIM,
                    reclaim_id,
                    format!("already reclaims operation {}", r.op_id),
                ))
            };
        }
        let op = self.op(op_id)?;
        let orphan = match op.state {
            ColdOpState::PayloadWritten => true,
            ColdOpState::RouteCommitted | ColdOpState::UsageCommitted | ColdOpState::Reclaiming => {
                if let Some(active) = op.reclaim {
                    return Err(conflict(
                        OPERATION,
                        op_id,
                        format!("already reclaimed by {active}"),
                    ));
                }
                false
            }
            ColdOpState::Planned | ColdOpState::Reserved | ColdOpState::Released => {
                return Err(op_transition(op, "plan a reclaim"))
            }
        };
        Ok(vec![ColdDeviceEvent::ReclaimPlanned(ReclaimPlanned {
            reclaim_id: *reclaim_id,
            op_id: *op_id,
            orphan,
            at_ms,
        })])
    }

    fn decide_cancel_reclaim(&self, reclaim_id: &ReclaimId, at_ms: i64) -> Decision {
        let r = self.reclaim_record(reclaim_id)?;
        match r.state {
            ReclaimState::Planned => {}
            ReclaimState::Cancelled => return Ok(vec![]),
            _ => return Err(reclaim_transition(r, "cancel")),
        }
        let op = self.op(&r.op_id)?;
        if op.state == ColdOpState::Reclaiming {
            // An orphan's obsolescence was proven by exact lookup: nothing references it.
            return Err(op_transition(op, "cancel its reclaim"));
        }
        if let Some(other) = self
            .cold_routes
            .get(&op.object_key)
            .and_then(|id| self.operations.get(id))
        {
            return Err(conflict(
                "object",
                &op.object_key,
                format!(
                    "operation {} is materialized since; this locator is obsolete",
                    other.op_id
                ),
            ));
        }
        Ok(vec![ColdDeviceEvent::ReclaimCancelled(ReclaimCancelled {
            reclaim_id: *reclaim_id,
            op_id: r.op_id,
            at_ms,
        })])
    }

    fn decide_release_usage(
        &self,
        reclaim_id: &ReclaimId,
        op_id: &ColdOpId,
        at_ms: i64,
    ) -> Decision {
        let r = self.reclaim_record(reclaim_id)?;
        if r.op_id != *op_id {
            return Err(conflict(
                RECLAIM,
                reclaim_id,
                format!("reclaims operation {}, not {op_id}", r.op_id),
            ));
        }
        match r.state {
            ReclaimState::BackendDeleted => {}
            // Repeating the handoff returns the existing terminal result.
            ReclaimState::UsageReleased => return Ok(vec![]),
            ReclaimState::Planned | ReclaimState::Cancelled => {
                return Err(reclaim_transition(r, "release usage"))
            }
        }
        let op = self.op(op_id)?;
        let from = match op.state {
            ColdOpState::RouteCommitted | ColdOpState::Reclaiming => ReleasedFrom::Reserved,
            ColdOpState::UsageCommitted => ReleasedFrom::Used,
            _ => return Err(op_transition(op, "release usage")),
        };
        Ok(vec![ColdDeviceEvent::UsageReleased(UsageReleased {
            reclaim_id: *reclaim_id,
            op_id: *op_id,
            from,
            bytes: op.expected_length,
            at_ms,
        })])
    }
}
