//! Fault injection for the crash tests of the weight workflows:
//! `CRESCENT_WEIGHTS_KILL_AT=before_<command>[:N]` or `after_<command>[:N]` makes crescentd
//! SIGKILL itself just before the N-th (default first) such command is executed, or just after
//! it is durable. Command names are the snake_case command variants (`record_round_copied`,
//! `record_deletion_batch`, `begin_claim`, ...); an `AdvanceClaim` is named by its phase
//! (`advance_claim_base_retired`). Unset in production; the pattern of the cold tier's
//! `CRESCENT_COLD_KILL_AT`.

use std::sync::atomic::{AtomicU64, Ordering};

use crescent_weights::{ClaimPhase, LineageClaimCommand, WeightRevisionCommand};

pub const KILL_AT_ENV: &str = "CRESCENT_WEIGHTS_KILL_AT";

#[derive(Debug)]
pub struct KillPoint {
    before: bool,
    command: String,
    nth: u64,
    seen: AtomicU64,
}

impl KillPoint {
    pub fn from_env() -> Option<Self> {
        let v = std::env::var(KILL_AT_ENV).ok()?;
        let parsed = Self::parse(&v);
        match &parsed {
            Some(p) => tracing::warn!(before = p.before, command = %p.command, nth = p.nth,
                "weights fault injection armed"),
            None => tracing::warn!(value = %v,
                "{KILL_AT_ENV} ignored: not before_X[:N] or after_X[:N]"),
        }
        parsed
    }

    fn parse(v: &str) -> Option<Self> {
        let (point, nth) = match v.rsplit_once(':') {
            Some((p, n)) => (p, n.parse::<u64>().ok().filter(|n| *n > 0)?),
            None => (v, 1),
        };
        let (before, command) = if let Some(c) = point.strip_prefix("before_") {
            (true, c)
        } else {
            (false, point.strip_prefix("after_")?)
        };
        if command.is_empty() {
            return None;
        }
        Some(Self {
            before,
            command: command.to_string(),
            nth,
            seen: AtomicU64::new(0),
        })
    }

    /// Whether this point names `command` at this stage for the N-th time (counted here).
    fn hit(&self, before: bool, command: &str) -> bool {
        self.before == before
            && self.command == command
            && self.seen.fetch_add(1, Ordering::SeqCst) + 1 == self.nth
    }

    pub fn fire(&self, before: bool, command: &str) {
        if self.hit(before, command) {
            tracing::error!(command, before, "weights fault injection: SIGKILL");
            // SAFETY: raise(2) has no memory-safety preconditions.
            #[allow(unsafe_code)]
            unsafe {
                libc::raise(libc::SIGKILL);
            }
        }
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stage_command_and_occurrence() {
        let p = KillPoint::parse("after_record_round_copied:2").unwrap();
        assert!(!p.before);
        assert_eq!(p.command, "record_round_copied");
        assert!(!p.hit(false, "record_round_copied"));
        assert!(!p.hit(true, "record_round_copied"), "the other stage");
        assert!(!p.hit(false, "remove"), "another command");
        assert!(p.hit(false, "record_round_copied"), "the second one");
        assert!(!p.hit(false, "record_round_copied"), "only once");
        let p = KillPoint::parse("before_remove").unwrap();
        assert!(p.before && p.nth == 1 && p.hit(true, "remove"));
        for bad in ["remove", "after_", "after_x:0", "after_x:y", "during_x"] {
            assert!(KillPoint::parse(bad).is_none(), "{bad}");
        }
    }
}
