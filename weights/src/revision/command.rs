//! `WeightRevision` commands and their state-independent argument checks.
//!
//! Client mutations (commit, policy, migrate, remove, retire, repair, AUTO demotion) carry
//! `expected_metadata_generation` and fail with STALE_GENERATION when it is not current.
//! Workflow steps the server drives (rounds, batches, completion) are fenced by operation id
//! and round/batch number instead, so a stale driver after a failover cannot repeat or skip a
//! step. Lease commands do not change the metadata record and take no generation (a lease
//! grant may carry one to fence the reader's view).

use serde::{Deserialize, Serialize};

use crate::error::WeightError;
use crate::identity::{check_component, check_sha256, RevisionIdentity};
use crate::planner::{AffinityUnit, MoveDirection};
use crate::policy::{MigrationLimits, ResidencyTarget, WeightStoragePolicy};

use super::types::{GroupMember, PayloadSummary};

/// Longest error text kept in an operation record, in bytes (longer ones are truncated).
pub const MAX_ERROR_BYTES: usize = 1024;
/// Longest lease TTL: a crashed reader blocks deletion for at most this long.
pub const MAX_LEASE_TTL_MS: u64 = 3_600_000;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "snake_case")]
pub enum WeightRevisionCommand {
    /// `weight_put` step 1. Creates the IMPORTING revision and its group; the same identity and
    /// policy again is a no-op (the same group).
    BeginImport {
        identity: RevisionIdentity,
        /// Already resolved (put > client default > cluster default).
        policy: WeightStoragePolicy,
    },
    /// `weight_put` last step, after every payload and then the manifest were written:
    /// validates the whole group and publishes READY + HOT (plus the initial MIGRATING
    /// operation when preferred is not HOT) in one batch.
    CommitImport {
        expected_metadata_generation: u64,
        summary: PayloadSummary,
        /// Every object of the group as the store reports it.
        members: Vec<GroupMember>,
        /// The affinity summary the writer derived from the manifest: checked against the
        /// summary's count and digest and against the group, then kept outside metadata.
        affinity_units: Vec<AffinityUnit>,
    },
    /// `weight_update_policy`: only the policy. The same policy again is a no-op.
    UpdatePolicy {
        policy: WeightStoragePolicy,
        expected_metadata_generation: u64,
    },
    /// `weight_get` step 1. In AUTO mode, a revision colder than preferred gets a promotion
    /// operation persisted in the same batch, before the lease.
    AcquireLease {
        holder: String,
        ttl_ms: u64,
        expected_metadata_generation: Option<u64>,
        limits: MigrationLimits,
    },
    RenewLease {
        lease_id: String,
        ttl_ms: u64,
    },
    /// Success, error and cancellation paths; an unknown (already released or expired) lease
    /// is a no-op.
    ReleaseLease {
        lease_id: String,
    },
    /// Timer: expires every lease whose TTL has passed at `Ctx::now_ms`.
    ExpireLeases,
    /// `weight_migrate`: an explicit MIGRATING operation.
    Migrate {
        target: ResidencyTarget,
        expected_metadata_generation: u64,
    },
    /// AUTO reconciliation under memory pressure: one step colder (HOT -> MIXED -> COLD).
    AutoDemote {
        expected_metadata_generation: u64,
        limits: MigrationLimits,
    },
    /// The totals of a migration's plan (from the planner over the actual replicas).
    PlanMigration {
        operation_id: String,
        members_total: u64,
        bytes_total: u64,
    },
    /// The new replicas of a round are created and validated: memory replicas for a promotion
    /// (the round is then complete) or cold replicas for a demotion (memory is released next).
    RecordRoundCopied {
        operation_id: String,
        round: u64,
        direction: MoveDirection,
        units: u64,
        members: u64,
        bytes: u64,
        /// Observed HOT bytes after the round's promotion (unchanged by a demotion copy).
        hot_bytes: u64,
        limits: MigrationLimits,
    },
    /// The memory replicas of a copied demotion round are released. BUSY under a lease.
    RecordRoundReleased {
        operation_id: String,
        round: u64,
        hot_bytes: u64,
    },
    /// The observed replicas match the target: the migration ends.
    CompleteMigration {
        operation_id: String,
        hot_bytes: u64,
    },
    /// A failed attempt; `terminal` ends a migration or repair as FAILED (data stays readable
    /// and the revision stays READY). A deletion is never terminal: it resumes.
    RecordOperationFailure {
        operation_id: String,
        error: String,
        terminal: bool,
    },
    /// Reconciliation found required payloads without any readable replica (no memory
    /// replica and no cold copy). `hot_bytes`: the memory bytes the surviving payloads still
    /// hold, which corrects the residency (ABSENT when every payload is lost); `None` leaves
    /// the residency as it was (a report that could not observe the replicas).
    ReportMembersLost {
        lost_members: u64,
        hot_bytes: Option<u64>,
    },
    StartRepair {
        expected_metadata_generation: u64,
    },
    CompleteRepair {
        operation_id: String,
        hot_bytes: u64,
    },
    /// `weight_remove`: DELETING with a deletion operation. BUSY under a lease or operation.
    Remove {
        expected_metadata_generation: u64,
    },
    /// A batch of payloads is deleted (batches numbered from 1).
    RecordDeletionBatch {
        operation_id: String,
        batch: u64,
        members: u64,
        bytes: u64,
    },
    /// The manifest is deleted: only after every payload.
    RecordManifestDeleted {
        operation_id: String,
    },
    /// The group is verified empty: DELETED + ABSENT tombstone.
    CompleteDeletion {
        operation_id: String,
        remaining_members: u64,
    },
    /// `weight_upsert` fences this (base) revision: no new leases or renewals. With
    /// `require_idle` (DELETE_FIRST) an active lease or operation is BUSY.
    Retire {
        request_id: String,
        successor_generation: u64,
        expected_metadata_generation: u64,
        require_idle: bool,
    },
}

/// Ids follow the identity component rules (non-empty, at most 256 bytes, no control
/// characters).
fn check_id(field: &'static str, value: &str) -> Result<(), WeightError> {
    check_component(field, value)
}

fn check_ttl(ttl_ms: u64) -> Result<(), WeightError> {
    if ttl_ms == 0 || ttl_ms > MAX_LEASE_TTL_MS {
        return Err(WeightError::invalid(
            "ttl_ms",
            format!("{ttl_ms} is not within 1..={MAX_LEASE_TTL_MS}"),
        ));
    }
    Ok(())
}

fn check_positive(field: &'static str, value: u64) -> Result<(), WeightError> {
    if value == 0 {
        return Err(WeightError::invalid(field, "must be at least 1"));
    }
    Ok(())
}

impl PayloadSummary {
    pub fn validate(&self) -> Result<(), WeightError> {
        check_sha256("manifest_sha256", &self.manifest_sha256)?;
        check_sha256("payload_keys_sha256", &self.payload_keys_sha256)?;
        check_sha256("affinity_digest", &self.affinity_digest)?;
        check_positive("payload_count", self.payload_count)?;
        check_positive("affinity_count", self.affinity_count)?;
        if self.affinity_count > self.payload_count {
            return Err(WeightError::invalid(
                "affinity_count",
                format!(
                    "{} affinity units cannot cover {} payloads",
                    self.affinity_count, self.payload_count
                ),
            ));
        }
        Ok(())
    }
}

impl WeightRevisionCommand {
    /// Checks that do not depend on state.
    pub fn validate(&self) -> Result<(), WeightError> {
        use WeightRevisionCommand as C;
        match self {
            C::BeginImport { identity, policy } => {
                identity.validate()?;
                policy.validate()?;
            }
            C::CommitImport { summary, .. } => summary.validate()?,
            C::UpdatePolicy { policy, .. } => policy.validate()?,
            C::AcquireLease {
                holder,
                ttl_ms,
                limits,
                ..
            } => {
                check_id("holder", holder)?;
                check_ttl(*ttl_ms)?;
                limits.validate()?;
            }
            C::RenewLease { lease_id, ttl_ms } => {
                check_id("lease_id", lease_id)?;
                check_ttl(*ttl_ms)?;
            }
            C::ReleaseLease { lease_id } => check_id("lease_id", lease_id)?,
            C::ExpireLeases | C::StartRepair { .. } | C::Remove { .. } => {}
            C::Migrate { target, .. } => target.validate()?,
            C::AutoDemote { limits, .. } => limits.validate()?,
            C::PlanMigration { operation_id, .. }
            | C::CompleteMigration { operation_id, .. }
            | C::CompleteRepair { operation_id, .. }
            | C::RecordManifestDeleted { operation_id }
            | C::CompleteDeletion { operation_id, .. } => check_id("operation_id", operation_id)?,
            C::RecordRoundCopied {
                operation_id,
                round,
                units,
                members,
                limits,
                ..
            } => {
                check_id("operation_id", operation_id)?;
                check_positive("round", *round)?;
                check_positive("units", *units)?;
                check_positive("members", *members)?;
                limits.validate()?;
            }
            C::RecordRoundReleased {
                operation_id,
                round,
                ..
            } => {
                check_id("operation_id", operation_id)?;
                check_positive("round", *round)?;
            }
            C::RecordOperationFailure { operation_id, .. } => {
                check_id("operation_id", operation_id)?
            }
            C::ReportMembersLost { lost_members, .. } => {
                check_positive("lost_members", *lost_members)?
            }
            C::RecordDeletionBatch {
                operation_id,
                batch,
                members,
                ..
            } => {
                check_id("operation_id", operation_id)?;
                check_positive("batch", *batch)?;
                check_positive("members", *members)?;
            }
            C::Retire { request_id, .. } => check_id("request_id", request_id)?,
        }
        Ok(())
    }
}
