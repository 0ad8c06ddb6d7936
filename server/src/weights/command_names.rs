//! The names of the weight commands, for their crash points (`weights.before_<command>`,
//! `weights.after_<command>`; docs/testing.md): the snake_case command variants
//! (`record_round_copied`, `record_deletion_batch`, `begin_claim`, ...); an `AdvanceClaim` is
//! named by its phase (`advance_claim_base_retired`).

use crescent_weights::{ClaimPhase, LineageClaimCommand, WeightRevisionCommand};

pub fn revision_command_name(cmd: &WeightRevisionCommand) -> &'static str {
    use WeightRevisionCommand as C;
    match cmd {
        C::BeginImport { .. } => "begin_import",
        C::CommitImport { .. } => "commit_import",
        C::UpdatePolicy { .. } => "update_policy",
        C::AcquireLease { .. } => "acquire_lease",
        C::RenewLease { .. } => "renew_lease",
        C::ReleaseLease { .. } => "release_lease",
        C::ExpireLeases => "expire_leases",
        C::Migrate { .. } => "migrate",
        C::AutoDemote { .. } => "auto_demote",
        C::PlanMigration { .. } => "plan_migration",
        C::RecordRoundCopied { .. } => "record_round_copied",
        C::RecordRoundReleased { .. } => "record_round_released",
        C::CompleteMigration { .. } => "complete_migration",
        C::RecordOperationFailure { .. } => "record_operation_failure",
        C::ReportMembersLost { .. } => "report_members_lost",
        C::StartRepair { .. } => "start_repair",
        C::CompleteRepair { .. } => "complete_repair",
        C::Remove { .. } => "remove",
        C::RecordDeletionBatch { .. } => "record_deletion_batch",
        C::RecordManifestDeleted { .. } => "record_manifest_deleted",
        C::CompleteDeletion { .. } => "complete_deletion",
        C::Retire { .. } => "retire",
    }
}

pub fn lineage_command_name(cmd: &LineageClaimCommand) -> &'static str {
    match cmd {
        LineageClaimCommand::BeginClaim { .. } => "begin_claim",
        LineageClaimCommand::FailClaim { .. } => "fail_claim",
        LineageClaimCommand::AdvanceClaim { phase, .. } => match phase {
            ClaimPhase::Claimed => "advance_claim_claimed",
            ClaimPhase::TargetReady => "advance_claim_target_ready",
            ClaimPhase::BaseRetired => "advance_claim_base_retired",
            ClaimPhase::BaseDrained => "advance_claim_base_drained",
            ClaimPhase::BaseDeleted => "advance_claim_base_deleted",
            ClaimPhase::Committed => "advance_claim_committed",
            ClaimPhase::Failed => "advance_claim_failed",
        },
    }
}
