//! `WeightRevision::decide` for the multi-step workflows: migration (explicit and AUTO) in
//! bounded rounds, repair, and deletion in batches. Each physical step the server performs is
//! recorded here before the next one may start; a stale or repeated step is refused or is a
//! no-op, so a driver resuming after a restart continues from the persisted progress.

use crescent_actors::Ctx;

use crate::error::WeightError;
use crate::planner::MoveDirection;
use crate::policy::{MigrationLimits, MigrationMode, Residency, ResidencyTarget};

use super::command::{WeightRevisionCommand, MAX_ERROR_BYTES};
use super::decide::cooldown_passed;
use super::event::*;
use super::types::{Operation, OperationKind, OperationStatus, OperationTrigger};
use super::WeightRevision;

type Decided = Result<Vec<WeightRevisionEvent>, WeightError>;

/// At most [`MAX_ERROR_BYTES`], cut at a character boundary.
fn truncate_error(error: &str) -> String {
    if error.len() <= MAX_ERROR_BYTES {
        return error.to_string();
    }
    let mut end = MAX_ERROR_BYTES;
    while !error.is_char_boundary(end) {
        end -= 1;
    }
    error[..end].to_string()
}

pub(super) fn conflict(operation_id: &str, reason: impl Into<String>) -> WeightError {
    WeightError::Conflict {
        what: "operation",
        id: operation_id.to_string(),
        reason: reason.into(),
    }
}

impl WeightRevision {
    /// The running operation `operation_id` of `kind`.
    pub(super) fn running_op(
        &self,
        operation_id: &str,
        kind: OperationKind,
    ) -> Result<&Operation, WeightError> {
        let op = self
            .operations
            .get(operation_id)
            .ok_or_else(|| WeightError::NotFound {
                what: "operation",
                id: operation_id.to_string(),
            })?;
        if op.kind != kind {
            return Err(conflict(
                operation_id,
                format!("is {:?}, not {kind:?}", op.kind),
            ));
        }
        if !op.is_running() {
            return Err(conflict(
                operation_id,
                format!("has finished as {:?}", op.status),
            ));
        }
        Ok(op)
    }

    fn logical_bytes(&self) -> u64 {
        self.record
            .as_ref()
            .and_then(|r| r.summary.as_ref())
            .map_or(0, |s| s.logical_bytes)
    }

    pub(super) fn check_hot_bytes(&self, hot_bytes: u64) -> Result<(), WeightError> {
        let total = self.logical_bytes();
        if hot_bytes > total {
            return Err(WeightError::invalid(
                "hot_bytes",
                format!("{hot_bytes} exceeds the {total} logical payload bytes"),
            ));
        }
        Ok(())
    }

    /// The generation after a change of HOT bytes (residency and observed ratio are part of
    /// the metadata record), or the current one when nothing changed.
    fn generation_for_hot_bytes(&self, hot_bytes: u64) -> u64 {
        let rec = self.record.as_ref().expect("checked by the caller");
        rec.metadata_generation + u64::from(rec.hot_bytes != hot_bytes)
    }

    pub(super) fn decide_workflow(&self, cmd: &WeightRevisionCommand, ctx: &Ctx) -> Decided {
        use WeightRevisionCommand as C;
        let now = ctx.now_ms;
        match cmd {
            C::Migrate {
                target,
                expected_metadata_generation,
            } => self.decide_migrate(*target, *expected_metadata_generation, ctx),
            C::AutoDemote {
                expected_metadata_generation,
                limits,
            } => self.decide_auto_demote(*expected_metadata_generation, limits, ctx),
            C::PlanMigration {
                operation_id,
                members_total,
                bytes_total,
            } => self.decide_plan_migration(operation_id, *members_total, *bytes_total, now),
            C::RecordRoundCopied {
                operation_id,
                round,
                direction,
                units,
                members,
                bytes,
                hot_bytes,
                limits,
            } => self.decide_round_copied(
                operation_id,
                *round,
                *direction,
                (*units, *members, *bytes),
                *hot_bytes,
                limits,
                now,
            ),
            C::RecordRoundReleased {
                operation_id,
                round,
                hot_bytes,
            } => self.decide_round_released(operation_id, *round, *hot_bytes, now),
            C::CompleteMigration {
                operation_id,
                hot_bytes,
            } => self.decide_complete_migration(operation_id, *hot_bytes, now),
            C::RecordOperationFailure {
                operation_id,
                error,
                terminal,
            } => self.decide_failure(operation_id, error, *terminal, now),
            C::ReportMembersLost {
                lost_members,
                hot_bytes,
            } => self.decide_members_lost(*lost_members, *hot_bytes, now),
            C::StartRepair {
                expected_metadata_generation,
            } => self.decide_start_repair(*expected_metadata_generation, ctx),
            C::CompleteRepair {
                operation_id,
                hot_bytes,
            } => self.decide_complete_repair(operation_id, *hot_bytes, now),
            C::Remove {
                expected_metadata_generation,
            } => self.decide_remove(*expected_metadata_generation, ctx),
            C::RecordDeletionBatch {
                operation_id,
                batch,
                members,
                bytes,
            } => self.decide_deletion_batch(operation_id, *batch, *members, *bytes, now),
            C::RecordManifestDeleted { operation_id } => {
                self.decide_manifest_deleted(operation_id, now)
            }
            C::CompleteDeletion {
                operation_id,
                remaining_members,
            } => self.decide_complete_deletion(operation_id, *remaining_members, now),
            C::BeginImport { .. }
            | C::CommitImport { .. }
            | C::UpdatePolicy { .. }
            | C::AcquireLease { .. }
            | C::RenewLease { .. }
            | C::ReleaseLease { .. }
            | C::ExpireLeases
            | C::Retire { .. } => unreachable!("dispatched by decide_validated"),
        }
    }

    fn decide_migrate(&self, target: ResidencyTarget, expected: u64, ctx: &Ctx) -> Decided {
        let rec = self.ready_unretired()?;
        if let Some(op) = self.active_operation() {
            // The same request again (its reply was lost): the existing operation.
            if op.kind == OperationKind::Migrating
                && op.trigger == OperationTrigger::Explicit
                && op.target == Some(target)
                && op.started_generation == expected + 1
            {
                return Ok(Vec::new());
            }
        }
        Self::check_generation(rec, expected)?;
        self.busy_if_operation(rec)?;
        if rec.policy.migration_mode == MigrationMode::Pinned && rec.initially_converged {
            return Err(WeightError::PolicyUnsatisfiable {
                reason: "migration mode PINNED fixes the residency after initial convergence"
                    .into(),
            });
        }
        Ok(vec![self.start_operation(
            ctx,
            OperationKind::Migrating,
            Some(target),
            OperationTrigger::Explicit,
            None,
            None,
            rec.metadata_generation + 1,
        )])
    }

    fn decide_auto_demote(&self, expected: u64, limits: &MigrationLimits, ctx: &Ctx) -> Decided {
        let rec = self.ready_unretired()?;
        Self::check_generation(rec, expected)?;
        if rec.policy.migration_mode != MigrationMode::Auto {
            return Err(WeightError::PolicyUnsatisfiable {
                reason: format!(
                    "automatic migration needs mode AUTO, not {:?}",
                    rec.policy.migration_mode
                ),
            });
        }
        if !rec.initially_converged {
            return Err(WeightError::busy("initial convergence has not finished"));
        }
        self.busy_if_operation(rec)?;
        self.busy_if_leased(ctx.now_ms, "automatic demotion")?;
        if !cooldown_passed(rec, ctx.now_ms, limits.cooldown_ms) {
            return Err(WeightError::busy("migration cooldown has not elapsed"));
        }
        // One step at a time: HOT -> MIXED -> COLD.
        let target = match rec.residency {
            Residency::Hot => ResidencyTarget::Mixed {
                hot_ratio: rec.policy.mixed_hot_ratio,
            },
            Residency::Mixed => ResidencyTarget::Cold,
            other => {
                return Err(WeightError::PolicyUnsatisfiable {
                    reason: format!("nothing to demote from {}", other.as_str()),
                })
            }
        };
        let mut events = self.expire_due(ctx.now_ms);
        events.push(self.start_operation(
            ctx,
            OperationKind::Migrating,
            Some(target),
            OperationTrigger::MemoryPressure,
            None,
            None,
            rec.metadata_generation + 1,
        ));
        Ok(events)
    }

    /// The totals of a migration, fixed by its first plan (a resumed driver re-plans only
    /// the rest).
    fn decide_plan_migration(
        &self,
        operation_id: &str,
        members_total: u64,
        bytes_total: u64,
        now: i64,
    ) -> Decided {
        let op = self.running_op(operation_id, OperationKind::Migrating)?;
        if op.progress.members_total.is_some() {
            return Ok(Vec::new());
        }
        Ok(vec![WeightRevisionEvent::OperationPlanned(
            OperationPlanned {
                operation_id: operation_id.to_string(),
                members_total,
                bytes_total,
                at_ms: now,
            },
        )])
    }

    #[allow(clippy::too_many_arguments)]
    fn decide_round_copied(
        &self,
        operation_id: &str,
        round: u64,
        direction: MoveDirection,
        (units, members, bytes): (u64, u64, u64),
        hot_bytes: u64,
        limits: &MigrationLimits,
        now: i64,
    ) -> Decided {
        let op = self.running_op(operation_id, OperationKind::Migrating)?;
        if round <= op.progress.rounds_completed
            || op.pending_round.as_ref().is_some_and(|p| p.round == round)
        {
            return Ok(Vec::new());
        }
        if let Some(p) = &op.pending_round {
            return Err(conflict(
                operation_id,
                format!(
                    "round {} awaits the release of its memory replicas",
                    p.round
                ),
            ));
        }
        let next = op.progress.rounds_completed + 1;
        if round != next {
            return Err(conflict(
                operation_id,
                format!("round {round} recorded, round {next} is next"),
            ));
        }
        if units > 1
            && (members > limits.max_members_per_round || bytes > limits.max_bytes_per_round)
        {
            return Err(WeightError::invalid(
                "round",
                format!(
                    "{units} units with {members} members and {bytes} bytes exceed the round limits \
                     ({} members, {} bytes); only a single unit may exceed them",
                    limits.max_members_per_round, limits.max_bytes_per_round
                ),
            ));
        }
        let rec = self.rec()?;
        let hot_bytes = match direction {
            MoveDirection::Promote => {
                self.check_hot_bytes(hot_bytes)?;
                hot_bytes
            }
            // Cold copies change nothing in memory; the release that follows does.
            MoveDirection::Demote => rec.hot_bytes,
        };
        Ok(vec![WeightRevisionEvent::RoundCopied(RoundCopied {
            operation_id: operation_id.to_string(),
            round,
            direction,
            units,
            members,
            bytes,
            hot_bytes,
            metadata_generation: self.generation_for_hot_bytes(hot_bytes),
            at_ms: now,
        })])
    }

    fn decide_round_released(
        &self,
        operation_id: &str,
        round: u64,
        hot_bytes: u64,
        now: i64,
    ) -> Decided {
        let op = self.running_op(operation_id, OperationKind::Migrating)?;
        let Some(pending) = op.pending_round.as_ref().filter(|p| p.round == round) else {
            if round <= op.progress.rounds_completed {
                return Ok(Vec::new());
            }
            return Err(conflict(
                operation_id,
                format!("round {round} has no validated cold replicas: memory stays"),
            ));
        };
        // An active lease protects every existing replica.
        self.busy_if_leased(now, "the release of memory replicas")?;
        self.check_hot_bytes(hot_bytes)?;
        let rec = self.rec()?;
        if hot_bytes > rec.hot_bytes {
            return Err(WeightError::invalid(
                "hot_bytes",
                format!(
                    "a release cannot raise HOT bytes from {} to {hot_bytes}",
                    rec.hot_bytes
                ),
            ));
        }
        let mut events = self.expire_due(now);
        events.push(WeightRevisionEvent::RoundReleased(RoundReleased {
            operation_id: operation_id.to_string(),
            round: pending.round,
            hot_bytes,
            metadata_generation: self.generation_for_hot_bytes(hot_bytes),
            at_ms: now,
        }));
        Ok(events)
    }

    fn decide_complete_migration(&self, operation_id: &str, hot_bytes: u64, now: i64) -> Decided {
        let op = self.running_op(operation_id, OperationKind::Migrating)?;
        if let Some(p) = &op.pending_round {
            return Err(conflict(
                operation_id,
                format!(
                    "round {} awaits the release of its memory replicas",
                    p.round
                ),
            ));
        }
        self.check_hot_bytes(hot_bytes)?;
        let total = self.logical_bytes();
        let reached = match op.target {
            Some(ResidencyTarget::Hot) => hot_bytes == total,
            Some(ResidencyTarget::Cold) => hot_bytes == 0,
            // Whole units only: the planner's observed ratio is the result.
            Some(ResidencyTarget::Mixed { .. }) | None => true,
        };
        if !reached {
            return Err(conflict(
                operation_id,
                format!(
                    "observed residency {} ({hot_bytes} of {total} bytes HOT) is not the target {:?}",
                    Residency::of_hot_bytes(hot_bytes, total).as_str(),
                    op.target
                ),
            ));
        }
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

    fn decide_failure(&self, operation_id: &str, error: &str, terminal: bool, now: i64) -> Decided {
        let op = self
            .operations
            .get(operation_id)
            .ok_or_else(|| WeightError::NotFound {
                what: "operation",
                id: operation_id.to_string(),
            })?;
        if !op.is_running() {
            return Err(conflict(
                operation_id,
                format!("has finished as {:?}", op.status),
            ));
        }
        let error = truncate_error(error);
        if !terminal {
            return Ok(vec![WeightRevisionEvent::OperationAttemptFailed(
                OperationAttemptFailed {
                    operation_id: operation_id.to_string(),
                    error,
                    at_ms: now,
                },
            )]);
        }
        if op.kind == OperationKind::Deleting {
            return Err(WeightError::invalid(
                "terminal",
                "a deletion never fails terminally: it resumes from its progress",
            ));
        }
        // The data stays readable: the revision stays READY (or DEGRADED), the error stays in
        // the operation record.
        Ok(vec![WeightRevisionEvent::OperationFinished(
            OperationFinished {
                operation_id: operation_id.to_string(),
                status: OperationStatus::Failed,
                error: Some(error),
                hot_bytes: None,
                metadata_generation: self.rec()?.metadata_generation + 1,
                at_ms: now,
            },
        )])
    }
}
