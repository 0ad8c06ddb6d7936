//! The residency migration driver: moves a revision's whole affinity units between memory and
//! the cold tier in bounded rounds, recording every step before the next one starts.
//!
//! Each pass re-plans from the *actual* replicas (never from persisted progress alone, seed
//! 000 invariant 10): the planner's HOT set for the target (`plan_target`), the moves from the
//! observed replicas to it (`migration_moves`, promotions first) and the next bounded round
//! (`next_round`, at least one whole unit). A promotion round creates and verifies memory
//! replicas, then records `RecordRoundCopied`. A demotion round creates and validates cold
//! copies, records `RecordRoundCopied` (the round is then pending), records
//! `RecordRoundReleased` (the gate an active lease closes) and only then drops the memory
//! replicas. A crash anywhere leaves either nothing recorded (the round is redone: every cold
//! step is idempotent) or a pending round whose release is redone on resume.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crescent_weights::planner::{
    migration_moves, next_round, plan_target, MoveDirection, UnitMove,
};
use crescent_weights::revision::{Operation, OperationKind};
use crescent_weights::{AffinityUnit, ResidencyTarget, RevisionIdentity, WeightRevisionCommand};
use crescent_wire::ErrorCode;
use tracing::Instrument;

use super::error::WeightServiceError;
use super::workflows::object_id;
use super::{ColdResidency, WeightService};

/// Attempts of a migration whose cold steps keep failing before it ends FAILED (the data
/// stays readable; an explicit migrate starts a new operation).
pub const MAX_MIGRATION_ATTEMPTS: u64 = 5;
/// Pause before the next attempt, times the attempt number.
const ATTEMPT_PAUSE: Duration = Duration::from_millis(300);
/// Pause while an active lease blocks the release of memory replicas.
const LEASE_PAUSE: Duration = Duration::from_millis(200);

/// What the directory holds for one payload object.
#[derive(Debug, Clone, Copy, Default)]
struct MemberState {
    exists: bool,
    memory: bool,
    length: u64,
}

/// The observed replicas of a revision's payloads.
struct Observed {
    members: HashMap<String, MemberState>,
    /// Per unit, for `migration_moves`: a unit the plan keeps HOT counts as hot only when all
    /// its members are (else it is promoted); a unit the plan makes cold counts as hot when
    /// any member is (else nothing would release that memory).
    hot: Vec<bool>,
    /// Logical payload bytes with a memory replica.
    hot_bytes: u64,
    /// Payload keys with no complete version at all (neither memory nor cold).
    lost: Vec<String>,
}

fn round_keys(units: &[AffinityUnit], moves: &[UnitMove]) -> Vec<String> {
    moves
        .iter()
        .flat_map(|m| units[m.unit].member_keys.iter().cloned())
        .collect()
}

fn domain(e: crescent_weights::WeightError) -> WeightServiceError {
    WeightServiceError::Domain(e)
}

impl WeightService {
    fn observe(&self, units: &[AffinityUnit], planned_hot: &[bool]) -> Observed {
        let mut members = HashMap::new();
        let mut lost = Vec::new();
        let mut hot_bytes = 0u64;
        for key in units.iter().flat_map(|u| u.member_keys.iter()) {
            let route = self.directory.route(&object_id(key)).ok().flatten();
            let state = route.map_or(MemberState::default(), |r| MemberState {
                exists: true,
                memory: !r.replicas.is_empty(),
                length: r.length,
            });
            if !state.exists {
                lost.push(key.clone());
            }
            if state.memory {
                hot_bytes += state.length;
            }
            members.insert(key.clone(), state);
        }
        let hot = units
            .iter()
            .zip(planned_hot)
            .map(|(u, planned)| {
                let mut memory = u.member_keys.iter().map(|k| members[k].memory);
                if *planned {
                    memory.all(|m| m)
                } else {
                    memory.any(|m| m)
                }
            })
            .collect();
        Observed {
            members,
            hot,
            hot_bytes,
            lost,
        }
    }

    /// Memory bytes of `keys` (what releasing them takes away).
    fn memory_bytes(observed: &Observed, keys: &[String]) -> u64 {
        keys.iter()
            .filter_map(|k| observed.members.get(k))
            .filter(|m| m.memory)
            .map(|m| m.length)
            .sum()
    }

    /// Records a failed attempt; the last allowed one ends the operation FAILED (the revision
    /// stays READY). Returns whether the driver should stop.
    async fn migration_attempt_failed(
        &self,
        identity: &RevisionIdentity,
        operation_id: &str,
        attempts: u64,
        error: String,
    ) -> Result<bool, WeightServiceError> {
        let terminal = attempts + 1 >= MAX_MIGRATION_ATTEMPTS;
        tracing::warn!(revision = %identity, operation = operation_id, attempt = attempts + 1,
            terminal, %error, "migration step failed");
        self.revision(
            identity,
            WeightRevisionCommand::RecordOperationFailure {
                operation_id: operation_id.into(),
                error,
                terminal,
            },
        )
        .await?;
        if !terminal {
            tokio::time::sleep(ATTEMPT_PAUSE * (attempts as u32 + 1)).await;
        }
        Ok(terminal)
    }

    /// Drives the running migration `operation_id` to its end (or to FAILED).
    pub(super) async fn run_migration(
        self: &Arc<Self>,
        identity: &RevisionIdentity,
        operation_id: &str,
    ) -> Result<(), WeightServiceError> {
        let units = self.read_units(identity).await?;
        while self
            .migration_pass(identity, operation_id, units.as_deref())
            .await?
        {}
        Ok(())
    }

    /// One pass of the driver: re-plans from the observed replicas and takes the next step.
    /// `Ok(true)`: run another pass.
    async fn migration_pass(
        self: &Arc<Self>,
        identity: &RevisionIdentity,
        operation_id: &str,
        units: Option<&[AffinityUnit]>,
    ) -> Result<bool, WeightServiceError> {
        let state = self.read_revision(identity).await?;
        let (Some(rec), Some(op)) = (
            state.record(),
            state
                .operation(operation_id)
                .filter(|o| o.is_running() && o.kind == OperationKind::Migrating),
        ) else {
            return Ok(false);
        };
        let attempts = op.attempts;
        let target = op.target.unwrap_or(ResidencyTarget::Hot);
        let Some(units) = units else {
            let error = "this revision has no recorded affinity units (committed by an older \
                         crescentd): it can only stay HOT"
                .to_string();
            return self
                .finish_without_units(identity, operation_id, target, &rec.group_id, error)
                .await
                .map(|()| false);
        };
        let cold = self.cold_tier();
        let plan = plan_target(units, target).map_err(domain)?;
        let observed = self.observe(units, &plan.hot);
        if !observed.lost.is_empty() {
            let error = format!(
                "{} payload objects have no replica (first: {:?}); the migration waits for \
                 them (an owner's replay) and gives up after {MAX_MIGRATION_ATTEMPTS} attempts",
                observed.lost.len(),
                observed.lost[0]
            );
            let terminal = self
                .migration_attempt_failed(identity, operation_id, attempts, error)
                .await?;
            return Ok(!terminal);
        }
        let moves = migration_moves(units, &observed.hot, &plan).map_err(domain)?;
        if op.progress.members_total.is_none() {
            self.revision(
                identity,
                WeightRevisionCommand::PlanMigration {
                    operation_id: operation_id.into(),
                    members_total: moves.iter().map(|m| m.members).sum(),
                    bytes_total: moves.iter().map(|m| m.bytes).sum(),
                },
            )
            .await?;
            return Ok(true);
        }
        let need_cold = op.pending_round.is_some() || !moves.is_empty();
        if cold.is_none() && need_cold {
            let error = "this crescentd has no cold tier: the revision cannot move between \
                         memory and cold copies"
                .to_string();
            self.migration_attempt_failed(identity, operation_id, MAX_MIGRATION_ATTEMPTS, error)
                .await?;
            return Ok(false);
        }
        let step = MigrationStep {
            op,
            manifest_key: &rec.manifest_key,
            units,
            moves: &moves,
            observed: &observed,
        };
        self.migration_step(identity, operation_id, step, cold)
            .await
    }

    /// The step of a pass: release the pending round, complete, or copy the next round.
    /// `Ok(true)`: run another pass.
    async fn migration_step(
        &self,
        identity: &RevisionIdentity,
        operation_id: &str,
        step: MigrationStep<'_>,
        cold: Option<Arc<dyn ColdResidency>>,
    ) -> Result<bool, WeightServiceError> {
        let MigrationStep {
            op,
            manifest_key,
            units,
            moves,
            observed,
        } = step;
        let done = if let Some(pending) = &op.pending_round {
            let cold = cold.expect("checked by the pass");
            self.release_round(
                identity,
                operation_id,
                pending.round,
                units,
                moves,
                observed,
                &cold,
            )
            .await
        } else if moves.is_empty() {
            self.revision(
                identity,
                WeightRevisionCommand::CompleteMigration {
                    operation_id: operation_id.into(),
                    hot_bytes: observed.hot_bytes,
                },
            )
            .await?;
            return Ok(false);
        } else {
            let cold = cold.expect("checked by the pass");
            let round = op.progress.rounds_completed + 1;
            let range = next_round(moves, 0, &self.config.migration_limits());
            self.copy_round(
                identity,
                operation_id,
                round,
                units,
                &moves[range],
                manifest_key,
                &cold,
            )
            .await
        };
        match done {
            Ok(()) => Ok(true),
            Err(RoundError::Busy) => {
                tokio::time::sleep(LEASE_PAUSE).await;
                Ok(true)
            }
            Err(RoundError::Http(e)) => Err(e),
            Err(RoundError::Cold(error)) => {
                let terminal = self
                    .migration_attempt_failed(identity, operation_id, op.attempts, error)
                    .await?;
                Ok(!terminal)
            }
        }
    }

    /// A round's copies: memory replicas (promotion) or validated cold copies (demotion; the
    /// manifest gets one too, so the revision survives a restart of a node whose memory is
    /// volatile). Then `RecordRoundCopied`.
    #[allow(clippy::too_many_arguments)]
    async fn copy_round(
        &self,
        identity: &RevisionIdentity,
        operation_id: &str,
        round: u64,
        units: &[AffinityUnit],
        moves: &[UnitMove],
        manifest_key: &str,
        cold: &Arc<dyn ColdResidency>,
    ) -> Result<(), RoundError> {
        let direction = moves[0].direction;
        let keys = round_keys(units, moves);
        let span = tracing::info_span!(
            "weights.migration_round",
            round,
            ?direction,
            units = moves.len(),
            members = keys.len()
        );
        let copied = async {
            match direction {
                MoveDirection::Promote => cold.copy_to_memory(keys).await,
                MoveDirection::Demote => {
                    cold.copy_to_cold(vec![manifest_key.to_string()]).await?;
                    cold.copy_to_cold(keys).await
                }
            }
        };
        copied.instrument(span).await.map_err(RoundError::Cold)?;
        // After a promotion, HOT bytes are what the directory now holds.
        let hot_bytes = {
            let plan_all = vec![true; units.len()];
            self.observe(units, &plan_all).hot_bytes
        };
        self.revision(
            identity,
            WeightRevisionCommand::RecordRoundCopied {
                operation_id: operation_id.into(),
                round,
                direction,
                units: moves.len() as u64,
                members: moves.iter().map(|m| m.members).sum(),
                bytes: moves.iter().map(|m| m.bytes).sum(),
                hot_bytes,
                limits: self.config.migration_limits(),
            },
        )
        .await?;
        Ok(())
    }

    /// The pending demotion round: its cold copies are validated (checked again, idempotent),
    /// its release is recorded (refused while a lease is active), then memory is dropped.
    #[allow(clippy::too_many_arguments)]
    async fn release_round(
        &self,
        identity: &RevisionIdentity,
        operation_id: &str,
        round: u64,
        units: &[AffinityUnit],
        moves: &[UnitMove],
        observed: &Observed,
        cold: &Arc<dyn ColdResidency>,
    ) -> Result<(), RoundError> {
        // Re-planned from the actual replicas: the first demotion round (its copies may have
        // been made by the pending round or, after a restart, be needed again).
        let demotions: Vec<UnitMove> = moves
            .iter()
            .filter(|m| m.direction == MoveDirection::Demote)
            .copied()
            .collect();
        let range = next_round(&demotions, 0, &self.config.migration_limits());
        let released = &demotions[range];
        let keys = round_keys(units, released);
        if !keys.is_empty() {
            cold.copy_to_cold(keys.clone())
                .await
                .map_err(RoundError::Cold)?;
        }
        let hot_bytes = observed
            .hot_bytes
            .saturating_sub(Self::memory_bytes(observed, &keys));
        match self
            .revision(
                identity,
                WeightRevisionCommand::RecordRoundReleased {
                    operation_id: operation_id.into(),
                    round,
                    hot_bytes,
                },
            )
            .await
        {
            Ok(_) => {}
            Err(e) if e.code() == ErrorCode::Busy => return Err(RoundError::Busy),
            Err(e) => return Err(RoundError::Http(e)),
        }
        if !keys.is_empty() {
            let span = tracing::info_span!("weights.release_memory", round, members = keys.len());
            cold.release_memory(keys)
                .instrument(span)
                .await
                .map_err(RoundError::Cold)?;
        }
        Ok(())
    }

    /// A revision without recorded units: only a HOT target it already is can finish.
    async fn finish_without_units(
        &self,
        identity: &RevisionIdentity,
        operation_id: &str,
        target: ResidencyTarget,
        group_id: &str,
        error: String,
    ) -> Result<(), WeightServiceError> {
        let state = self.read_revision(identity).await?;
        let rec = state
            .record()
            .ok_or_else(|| super::workflows::not_found(identity))?;
        let logical = rec.summary.as_ref().map_or(0, |s| s.logical_bytes);
        let hot_bytes = self.observed_hot_bytes(group_id, &rec.manifest_key);
        if target == ResidencyTarget::Hot && hot_bytes == logical {
            if state
                .operation(operation_id)
                .is_some_and(|o| o.progress.members_total.is_none())
            {
                self.revision(
                    identity,
                    WeightRevisionCommand::PlanMigration {
                        operation_id: operation_id.into(),
                        members_total: 0,
                        bytes_total: 0,
                    },
                )
                .await?;
            }
            self.revision(
                identity,
                WeightRevisionCommand::CompleteMigration {
                    operation_id: operation_id.into(),
                    hot_bytes,
                },
            )
            .await?;
            return Ok(());
        }
        self.revision(
            identity,
            WeightRevisionCommand::RecordOperationFailure {
                operation_id: operation_id.into(),
                error,
                terminal: true,
            },
        )
        .await?;
        Ok(())
    }
}

/// What a pass planned, for its step.
struct MigrationStep<'a> {
    op: &'a Operation,
    manifest_key: &'a str,
    units: &'a [AffinityUnit],
    moves: &'a [UnitMove],
    observed: &'a Observed,
}

/// Why a round did not finish.
enum RoundError {
    /// An active lease blocks the release: wait and retry (not an attempt failure).
    Busy,
    /// A cold-tier step failed: an attempt failure.
    Cold(String),
    /// A journaled command failed.
    Http(WeightServiceError),
}

impl From<WeightServiceError> for RoundError {
    fn from(e: WeightServiceError) -> Self {
        RoundError::Http(e)
    }
}
