//! The decisions on the device itself (health, its storage owner, schedulability) and the
//! pruning of terminal records: the rules of `ColdDevice` beside those of its operations.

use crate::ids::{ColdOpId, ReclaimId};

use super::decide::{conflict, Decision};
use super::event::*;
use super::{ColdDevice, ColdDeviceEvent, DeviceHealth};

impl ColdDevice {
    pub(super) fn decide_set_health(
        &self,
        health: DeviceHealth,
        reason: &str,
        at_ms: i64,
    ) -> Decision {
        self.check_configured()?;
        if health == self.health {
            return Ok(vec![]);
        }
        Ok(vec![ColdDeviceEvent::DeviceHealthChanged(
            DeviceHealthChanged {
                health,
                reason: reason.to_string(),
                at_ms,
            },
        )])
    }

    /// The device's IO is performed by one storage owner: another owner is refused, the same
    /// one at the same endpoint changes nothing.
    pub(super) fn decide_assign_owner(
        &self,
        owner_id: &str,
        endpoint: &str,
        at_ms: i64,
    ) -> Decision {
        self.check_configured()?;
        match &self.owner {
            Some(o) if o.owner_id != owner_id => Err(conflict(
                "device",
                self.device_id().unwrap_or_default(),
                format!("its IO is performed by owner {:?}", o.owner_id),
            )),
            Some(o) if o.endpoint == endpoint => Ok(vec![]),
            _ => Ok(vec![ColdDeviceEvent::DeviceOwnerAssigned(
                DeviceOwnerAssigned {
                    owner_id: owner_id.to_string(),
                    endpoint: endpoint.to_string(),
                    at_ms,
                },
            )]),
        }
    }

    pub(super) fn decide_set_schedulable(&self, schedulable: bool, at_ms: i64) -> Decision {
        self.check_configured()?;
        if schedulable == self.schedulable {
            return Ok(vec![]);
        }
        Ok(vec![ColdDeviceEvent::DeviceSchedulableChanged(
            DeviceSchedulableChanged { schedulable, at_ms },
        )])
    }

    /// Forgets terminal operations (whose reclaim, if any, is terminal too) and terminal
    /// reclaims last changed before `released_before_ms`.
    pub(super) fn decide_prune_terminal(&self, released_before_ms: i64, at_ms: i64) -> Decision {
        let op_ids: Vec<ColdOpId> = self
            .operations
            .values()
            .filter(|op| op.state.is_terminal() && op.updated_at_ms < released_before_ms)
            .filter(|op| {
                op.reclaim
                    .and_then(|r| self.reclaims.get(&r))
                    .is_none_or(|r| r.state.is_terminal())
            })
            .map(|op| op.op_id)
            .collect();
        let reclaim_ids: Vec<ReclaimId> = self
            .reclaims
            .values()
            .filter(|r| r.state.is_terminal() && r.updated_at_ms < released_before_ms)
            .map(|r| r.reclaim_id)
            .collect();
        if op_ids.is_empty() && reclaim_ids.is_empty() {
            return Ok(vec![]);
        }
        Ok(vec![ColdDeviceEvent::TerminalPruned(TerminalPruned {
            released_before_ms,
            op_ids,
            reclaim_ids,
            at_ms,
        })])
    }
}
