//! Lost members and their repair: a published revision degrades when members are lost, and a
//! repair operation brings it back to READY.

use crescent_actors::Ctx;

use crate::error::WeightError;
use crate::policy::Residency;

use super::decide::unavailable;
use super::event::*;
use super::types::{Availability, OperationKind, OperationStatus, OperationTrigger};
use super::WeightRevision;

type Decided = Result<Vec<WeightRevisionEvent>, WeightError>;

impl WeightRevision {
    /// Starts the repair of a DEGRADED revision (not a retired one: it is about to be deleted).
    pub(super) fn decide_start_repair(&self, expected: u64, ctx: &Ctx) -> Decided {
        let rec = self.rec()?;
        if rec.availability != Availability::Degraded {
            return Err(WeightError::Conflict {
                what: "revision",
                id: rec.identity.to_string(),
                reason: format!(
                    "is {}, only DEGRADED is repaired",
                    rec.availability.as_str()
                ),
            });
        }
        // A retired base is about to be deleted: a repair would only block that.
        if let Some(e) = super::decide::retired_conflict(rec) {
            return Err(e);
        }
        Self::check_generation(rec, expected)?;
        self.busy_if_operation(rec)?;
        Ok(vec![self.start_operation(
            ctx,
            OperationKind::Repairing,
            None,
            OperationTrigger::Repair,
            Some(rec.lost_members),
            None,
            rec.metadata_generation + 1,
        )])
    }

    /// Ends a running repair with the HOT bytes it left.
    pub(super) fn decide_complete_repair(
        &self,
        operation_id: &str,
        hot_bytes: u64,
        now: i64,
    ) -> Decided {
        self.running_op(operation_id, OperationKind::Repairing)?;
        self.check_hot_bytes(hot_bytes)?;
        Ok(vec![WeightRevisionEvent::OperationFinished(
            OperationFinished {
                operation_id: operation_id.to_string(),
                status: OperationStatus::Succeeded,
                error: None,
                hot_bytes: Some(hot_bytes),
                metadata_generation: self.rec()?.metadata_generation + 1,
                at_ms: now,
            },
        )])
    }

    pub(super) fn decide_members_lost(
        &self,
        lost_members: u64,
        hot_bytes: Option<u64>,
        now: i64,
    ) -> Decided {
        let rec = self.rec()?;
        if let Some(h) = hot_bytes {
            self.check_hot_bytes(h)?;
        }
        let same_residency = hot_bytes.is_none_or(|h| {
            h == rec.hot_bytes
                && (rec.residency == Residency::Absent) == self.all_lost(lost_members)
        });
        match rec.availability {
            Availability::Ready => {}
            Availability::Degraded if rec.lost_members == lost_members && same_residency => {
                return Ok(Vec::new())
            }
            Availability::Degraded => {}
            _ => return Err(unavailable(rec, "only a published revision can degrade")),
        }
        let payloads = rec.summary.as_ref().map_or(0, |s| s.payload_count);
        if lost_members > payloads {
            return Err(WeightError::invalid(
                "lost_members",
                format!("{lost_members} exceeds the {payloads} payloads"),
            ));
        }
        Ok(vec![WeightRevisionEvent::MembersLost(MembersLost {
            lost_members,
            metadata_generation: rec.metadata_generation + 1,
            at_ms: now,
            hot_bytes,
        })])
    }

    /// Whether `lost_members` is every payload of the published summary.
    pub(super) fn all_lost(&self, lost_members: u64) -> bool {
        self.record()
            .and_then(|r| r.summary.as_ref())
            .is_some_and(|s| s.payload_count > 0 && lost_members >= s.payload_count)
    }
}
