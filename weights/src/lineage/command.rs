//! `LineageClaim` commands, upsert modes and phases.

use serde::{Deserialize, Serialize};

use crate::error::WeightError;
use crate::identity::{check_component, RevisionIdentity};
use crate::policy::WeightStoragePolicy;

/// How `weight_upsert` replaces the base.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum UpsertMode {
    /// Import the target first; the base stays readable until the target is READY.
    #[default]
    PutFirst,
    /// Delete the base first (lower peak storage, an unavailable window, no rollback).
    DeleteFirst,
}

impl UpsertMode {
    pub fn as_str(self) -> &'static str {
        match self {
            UpsertMode::PutFirst => "PUT_FIRST",
            UpsertMode::DeleteFirst => "DELETE_FIRST",
        }
    }

    /// The phases in the order the seed fixes for this mode.
    pub fn phases(self) -> &'static [ClaimPhase] {
        use ClaimPhase as P;
        match self {
            UpsertMode::PutFirst => &[
                P::Claimed,
                P::TargetReady,
                P::BaseRetired,
                P::BaseDrained,
                P::BaseDeleted,
                P::Committed,
            ],
            UpsertMode::DeleteFirst => &[
                P::Claimed,
                P::BaseRetired,
                P::BaseDeleted,
                P::TargetReady,
                P::Committed,
            ],
        }
    }

    /// The phase after `phase`, `None` at the end (or for FAILED).
    pub fn next_phase(self, phase: ClaimPhase) -> Option<ClaimPhase> {
        let phases = self.phases();
        let at = phases.iter().position(|p| *p == phase)?;
        phases.get(at + 1).copied()
    }
}

/// The persisted phase of a replacement claim: the last step that is durably done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ClaimPhase {
    /// The claim is durable. PUT_FIRST: the target may be imported.
    Claimed,
    /// The target revision is READY.
    TargetReady,
    /// The base is fenced (no new leases or renewals). DELETE_FIRST: it was idle.
    BaseRetired,
    /// PUT_FIRST: every existing base lease has ended.
    BaseDrained,
    /// The base is DELETED. DELETE_FIRST: the target may be imported from now on.
    BaseDeleted,
    /// The lineage watermark is the target generation (terminal).
    Committed,
    /// Terminated before any destructive step; the base is intact (terminal).
    Failed,
}

impl ClaimPhase {
    pub fn is_terminal(self) -> bool {
        matches!(self, ClaimPhase::Committed | ClaimPhase::Failed)
    }
}

/// What the server does next for a claim in a phase (it then advances to the next phase).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UpsertStep {
    /// Begin/commit the target import (`weight_put` of the target under this request id).
    ImportTarget,
    /// `Retire` the base; `require_idle` for DELETE_FIRST.
    RetireBase { require_idle: bool },
    /// Wait until the base has no active lease (release or TTL expiry).
    DrainBaseLeases,
    /// Run the base's deletion workflow to DELETED.
    DeleteBase,
    /// Advance to COMMITTED: the watermark becomes the target generation.
    CommitWatermark,
    /// Terminal.
    Done,
}

impl UpsertStep {
    /// The step that leads from `phase` to the next phase of `mode`.
    pub fn after(mode: UpsertMode, phase: ClaimPhase) -> UpsertStep {
        let Some(next) = mode.next_phase(phase) else {
            return UpsertStep::Done;
        };
        match next {
            ClaimPhase::TargetReady => UpsertStep::ImportTarget,
            ClaimPhase::BaseRetired => UpsertStep::RetireBase {
                require_idle: mode == UpsertMode::DeleteFirst,
            },
            ClaimPhase::BaseDrained => UpsertStep::DrainBaseLeases,
            ClaimPhase::BaseDeleted => UpsertStep::DeleteBase,
            ClaimPhase::Committed => UpsertStep::CommitWatermark,
            ClaimPhase::Claimed | ClaimPhase::Failed => UpsertStep::Done,
        }
    }
}

// One claim start per upsert: the size of the rare large variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "snake_case")]
pub enum LineageClaimCommand {
    /// `weight_upsert` begins (or resumes) the lineage's replacement claim.
    BeginClaim {
        /// `None`: derived deterministically ([`crate::derive_request_id`]).
        request_id: Option<String>,
        base: RevisionIdentity,
        target: RevisionIdentity,
        mode: UpsertMode,
        /// The base's metadata generation the caller saw (fences the base's retirement).
        expected_base_metadata_generation: u64,
        /// The target's policy (`None`: resolved from client and cluster defaults).
        policy: Option<WeightStoragePolicy>,
    },
    /// Records that the step to `phase` is durably done. The current phase again is a no-op.
    AdvanceClaim {
        request_id: String,
        phase: ClaimPhase,
    },
    /// Terminates the claim before any destructive step (target import failed, or the base
    /// was busy for DELETE_FIRST). Refused once the base is retired.
    FailClaim { request_id: String, reason: String },
}

impl LineageClaimCommand {
    pub fn validate(&self) -> Result<(), WeightError> {
        match self {
            LineageClaimCommand::BeginClaim {
                request_id,
                base,
                target,
                policy,
                ..
            } => {
                if let Some(id) = request_id {
                    check_component("request_id", id)?;
                }
                base.validate()?;
                target.validate()?;
                if base.lineage() != target.lineage() {
                    return Err(WeightError::invalid(
                        "target",
                        format!("{target} is not in the lineage of {base}"),
                    ));
                }
                if target.weight_generation <= base.weight_generation {
                    return Err(WeightError::invalid(
                        "target",
                        format!(
                            "generation {} is not above the base generation {}",
                            target.weight_generation, base.weight_generation
                        ),
                    ));
                }
                if let Some(p) = policy {
                    p.validate()?;
                }
            }
            LineageClaimCommand::AdvanceClaim { request_id, phase } => {
                check_component("request_id", request_id)?;
                if *phase == ClaimPhase::Failed {
                    return Err(WeightError::invalid(
                        "phase",
                        "use FailClaim to fail a claim",
                    ));
                }
            }
            LineageClaimCommand::FailClaim { request_id, .. } => {
                check_component("request_id", request_id)?
            }
        }
        Ok(())
    }
}
