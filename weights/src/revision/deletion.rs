//! `WeightRevision::decide` for deletion: DELETING, payloads in batches, the manifest last,
//! then DELETED + ABSENT once the group is verified empty. A failed batch keeps DELETING and
//! its progress; the driver resumes from the next batch.

use crescent_actors::Ctx;

use crate::error::WeightError;

use super::event::*;
use super::types::{Availability, OperationKind, OperationTrigger};
use super::workflow::conflict;
use super::WeightRevision;

type Decided = Result<Vec<WeightRevisionEvent>, WeightError>;

impl WeightRevision {
    pub(super) fn decide_remove(&self, expected: u64, ctx: &Ctx) -> Decided {
        let rec = self.rec()?;
        if matches!(
            rec.availability,
            Availability::Deleting | Availability::Deleted
        ) {
            // A duplicate remove returns the existing deletion or tombstone.
            return Ok(Vec::new());
        }
        Self::check_generation(rec, expected)?;
        self.busy_if_operation(rec)?;
        self.busy_if_leased(ctx.now_ms, "deletion")?;
        let mut events = self.expire_due(ctx.now_ms);
        events.push(self.start_operation(
            ctx,
            OperationKind::Deleting,
            None,
            OperationTrigger::Removal,
            rec.summary.as_ref().map(|s| s.payload_count),
            rec.summary.as_ref().map(|s| s.logical_bytes),
            rec.metadata_generation + 1,
        ));
        Ok(events)
    }

    pub(super) fn decide_deletion_batch(
        &self,
        operation_id: &str,
        batch: u64,
        members: u64,
        bytes: u64,
        now: i64,
    ) -> Decided {
        let op = self.running_op(operation_id, OperationKind::Deleting)?;
        let p = &op.progress;
        if batch <= p.rounds_completed {
            return Ok(Vec::new());
        }
        if batch != p.rounds_completed + 1 {
            return Err(conflict(
                operation_id,
                format!(
                    "batch {batch} recorded, batch {} is next",
                    p.rounds_completed + 1
                ),
            ));
        }
        if op.manifest_deleted {
            return Err(conflict(
                operation_id,
                "the manifest is already deleted: payload batches come first",
            ));
        }
        let over = |done: u64, add: u64, total: Option<u64>| {
            total.is_some_and(|t| done.checked_add(add).is_none_or(|sum| sum > t))
        };
        if over(p.members_done, members, p.members_total)
            || over(p.bytes_done, bytes, p.bytes_total)
        {
            return Err(WeightError::invalid(
                "batch",
                format!(
                    "{members} members / {bytes} bytes exceed what remains of {:?} / {:?}",
                    p.members_total.map(|t| t - p.members_done),
                    p.bytes_total.map(|t| t - p.bytes_done)
                ),
            ));
        }
        Ok(vec![WeightRevisionEvent::DeletionBatchDeleted(
            DeletionBatchDeleted {
                operation_id: operation_id.to_string(),
                batch,
                members,
                bytes,
                at_ms: now,
            },
        )])
    }

    pub(super) fn decide_complete_deletion(
        &self,
        operation_id: &str,
        remaining: u64,
        now: i64,
    ) -> Decided {
        let rec = self.rec()?;
        if rec.availability == Availability::Deleted
            && self
                .operations
                .get(operation_id)
                .is_some_and(|o| o.kind == OperationKind::Deleting)
        {
            return Ok(Vec::new());
        }
        let op = self.running_op(operation_id, OperationKind::Deleting)?;
        if !op.manifest_deleted {
            return Err(conflict(operation_id, "the manifest is not deleted yet"));
        }
        if remaining > 0 {
            return Err(conflict(
                operation_id,
                format!("the group still holds {remaining} member(s)"),
            ));
        }
        Ok(vec![WeightRevisionEvent::RevisionDeleted(
            RevisionDeleted {
                operation_id: operation_id.to_string(),
                metadata_generation: rec.metadata_generation + 1,
                at_ms: now,
            },
        )])
    }

    pub(super) fn decide_manifest_deleted(&self, operation_id: &str, now: i64) -> Decided {
        let op = self.running_op(operation_id, OperationKind::Deleting)?;
        if op.manifest_deleted {
            return Ok(Vec::new());
        }
        if let Some(total) = op.progress.members_total {
            if op.progress.members_done < total {
                return Err(conflict(
                    operation_id,
                    format!(
                        "{} of {total} payloads remain: the manifest is deleted last",
                        total - op.progress.members_done
                    ),
                ));
            }
        }
        Ok(vec![WeightRevisionEvent::ManifestDeleted(
            ManifestDeleted {
                operation_id: operation_id.to_string(),
                at_ms: now,
            },
        )])
    }
}
