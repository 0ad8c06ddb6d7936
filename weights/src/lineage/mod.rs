//! The `LineageClaim` aggregate: one per lineage `(tenant_id, namespace, resource_id,
//! revision)`. It holds the single non-terminal replacement claim of `weight_upsert`, persisted
//! phase by phase, and the committed generation watermark. The watermark orders and fences
//! generations; it is not the serving head (which the serving control plane owns).

mod command;
mod event;
#[cfg(test)]
mod tests;

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crescent_actors::{Aggregate, Ctx};

use crate::error::WeightError;
use crate::identity::{derive_request_id, LineageId, RevisionIdentity};
use crate::policy::WeightStoragePolicy;

pub use command::{ClaimPhase, LineageClaimCommand, UpsertMode, UpsertStep};
pub use event::{ClaimAdvanced, ClaimFailed, ClaimStarted, LineageClaimEvent};

/// Stream kind in the journal and section name in snapshots.
pub const STREAM_KIND: &str = "lineage_claim";
/// Finished claims kept for idempotent retries (the oldest are forgotten first; a retry of a
/// forgotten request fails closed on the watermark).
pub const MAX_FINISHED_CLAIMS: usize = 32;

/// A replacement claim.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Claim {
    pub request_id: String,
    pub base: RevisionIdentity,
    pub target: RevisionIdentity,
    pub mode: UpsertMode,
    pub expected_base_metadata_generation: u64,
    pub policy: Option<WeightStoragePolicy>,
    pub phase: ClaimPhase,
    pub attempt: u64,
    pub failure: Option<String>,
    pub started_at_ms: i64,
    pub updated_at_ms: i64,
}

impl Claim {
    fn same_request(&self, other: &ClaimStarted) -> bool {
        self.base == other.base
            && self.target == other.target
            && self.mode == other.mode
            && self.expected_base_metadata_generation == other.expected_base_metadata_generation
            && self.policy == other.policy
    }

    /// What the server does next to move this claim on.
    pub fn next_step(&self) -> UpsertStep {
        UpsertStep::after(self.mode, self.phase)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LineageClaim {
    lineage: Option<LineageId>,
    /// Highest committed generation: no claim may target it or anything below.
    watermark: Option<u64>,
    active: Option<Claim>,
    finished: VecDeque<Claim>,
}

impl LineageClaim {
    pub fn lineage(&self) -> Option<&LineageId> {
        self.lineage.as_ref()
    }

    pub fn watermark(&self) -> Option<u64> {
        self.watermark
    }

    /// The single non-terminal claim, if any.
    pub fn active_claim(&self) -> Option<&Claim> {
        self.active.as_ref()
    }

    /// Every claim still known: the active one, then the finished ones newest first.
    pub fn claims(&self) -> impl Iterator<Item = &Claim> {
        self.active.iter().chain(self.finished.iter().rev())
    }

    /// A claim by request id, active or recently finished.
    pub fn claim(&self, request_id: &str) -> Option<&Claim> {
        self.active
            .iter()
            .chain(self.finished.iter().rev())
            .find(|c| c.request_id == request_id)
    }

    /// Whether an import of `generation` into this lineage may begin: above the watermark,
    /// and, while a claim is active, only the claim's own target in a phase that allows it
    /// (PUT_FIRST: CLAIMED; DELETE_FIRST: BASE_DELETED, never before the base is deleted).
    pub fn admit_import(
        &self,
        generation: u64,
        request_id: Option<&str>,
    ) -> Result<(), WeightError> {
        if let Some(w) = self.watermark.filter(|w| generation <= *w) {
            return Err(WeightError::StaleGeneration {
                what: "lineage watermark",
                expected: generation,
                current: w,
            });
        }
        let Some(claim) = &self.active else {
            return Ok(());
        };
        if claim.target.weight_generation != generation || request_id != Some(&claim.request_id) {
            return Err(WeightError::busy(format!(
                "the lineage's replacement claim {:?} (generation {}) is in phase {:?}",
                claim.request_id, claim.target.weight_generation, claim.phase
            )));
        }
        let import_phase = match claim.mode {
            UpsertMode::PutFirst => ClaimPhase::Claimed,
            UpsertMode::DeleteFirst => ClaimPhase::BaseDeleted,
        };
        if claim.phase != import_phase {
            return Err(WeightError::Conflict {
                what: "claim",
                id: claim.request_id.clone(),
                reason: format!(
                    "{} imports the target only in phase {import_phase:?}, the claim is {:?}",
                    claim.mode.as_str(),
                    claim.phase
                ),
            });
        }
        Ok(())
    }

    fn decide_begin(
        &self,
        request_id: Option<&str>,
        started: ClaimStarted,
    ) -> Result<Vec<LineageClaimEvent>, WeightError> {
        let lineage = started.base.lineage();
        if let Some(own) = self.lineage.as_ref().filter(|l| **l != lineage) {
            return Err(WeightError::Conflict {
                what: "lineage",
                id: lineage.to_string(),
                reason: format!("this aggregate holds lineage {own}"),
            });
        }
        let rid = started.request_id.clone();
        let reused = || WeightError::Conflict {
            what: "claim",
            id: rid.clone(),
            reason: format!(
                "request id {} reused with different arguments",
                if request_id.is_some() {
                    "explicitly"
                } else {
                    "derived"
                }
            ),
        };
        if let Some(active) = &self.active {
            if active.request_id == rid {
                // Resume: the same request returns the existing claim in its current phase.
                return if active.same_request(&started) {
                    Ok(Vec::new())
                } else {
                    Err(reused())
                };
            }
            return Err(WeightError::busy(format!(
                "the lineage's replacement claim {:?} (generation {}) is in phase {:?}",
                active.request_id, active.target.weight_generation, active.phase
            )));
        }
        let mut attempt = 1;
        if let Some(done) = self.finished.iter().rev().find(|c| c.request_id == rid) {
            if !done.same_request(&started) {
                return Err(reused());
            }
            if done.phase == ClaimPhase::Committed {
                return Ok(Vec::new());
            }
            // A failed request retried with the same arguments starts over.
            attempt = done.attempt + 1;
        }
        if let Some(w) = self
            .watermark
            .filter(|w| started.target.weight_generation <= *w)
        {
            return Err(WeightError::StaleGeneration {
                what: "lineage watermark",
                expected: started.target.weight_generation,
                current: w,
            });
        }
        Ok(vec![LineageClaimEvent::ClaimStarted(ClaimStarted {
            attempt,
            ..started
        })])
    }

    fn active_for(&self, request_id: &str) -> Result<&Claim, WeightError> {
        match &self.active {
            Some(c) if c.request_id == request_id => Ok(c),
            Some(c) => Err(WeightError::Conflict {
                what: "claim",
                id: request_id.to_string(),
                reason: format!("the active claim is {:?}", c.request_id),
            }),
            None => Err(WeightError::NotFound {
                what: "active claim",
                id: request_id.to_string(),
            }),
        }
    }

    fn decide_advance(
        &self,
        request_id: &str,
        phase: ClaimPhase,
        now: i64,
    ) -> Result<Vec<LineageClaimEvent>, WeightError> {
        if self
            .active
            .as_ref()
            .is_none_or(|c| c.request_id != request_id)
        {
            // A resumed driver repeating the final step of a finished claim.
            if phase == ClaimPhase::Committed
                && self
                    .claim(request_id)
                    .is_some_and(|c| c.phase == ClaimPhase::Committed)
            {
                return Ok(Vec::new());
            }
        }
        let claim = self.active_for(request_id)?;
        if claim.phase == phase {
            return Ok(Vec::new());
        }
        let next = claim.mode.next_phase(claim.phase);
        if next != Some(phase) {
            return Err(WeightError::Conflict {
                what: "claim",
                id: request_id.to_string(),
                reason: format!(
                    "{} goes from {:?} to {next:?}, not to {phase:?}",
                    claim.mode.as_str(),
                    claim.phase
                ),
            });
        }
        Ok(vec![LineageClaimEvent::ClaimAdvanced(ClaimAdvanced {
            request_id: request_id.to_string(),
            phase,
            at_ms: now,
        })])
    }

    fn decide_fail(
        &self,
        request_id: &str,
        reason: &str,
        now: i64,
    ) -> Result<Vec<LineageClaimEvent>, WeightError> {
        let claim = self.active_for(request_id)?;
        // PUT_FIRST may fail until the target is READY (the base is untouched); DELETE_FIRST
        // only before the base is fenced: after that the base is going and only resuming
        // helps.
        if claim.phase != ClaimPhase::Claimed {
            return Err(WeightError::Conflict {
                what: "claim",
                id: request_id.to_string(),
                reason: format!(
                    "{} in phase {:?} cannot fail any more; resume it",
                    claim.mode.as_str(),
                    claim.phase
                ),
            });
        }
        let mut reason = reason.to_string();
        if reason.len() > crate::revision::MAX_ERROR_BYTES {
            let mut end = crate::revision::MAX_ERROR_BYTES;
            while !reason.is_char_boundary(end) {
                end -= 1;
            }
            reason.truncate(end);
        }
        Ok(vec![LineageClaimEvent::ClaimFailed(ClaimFailed {
            request_id: request_id.to_string(),
            reason,
            at_ms: now,
        })])
    }

    fn finish_active(&mut self) {
        if let Some(done) = self.active.take() {
            self.finished.push_back(done);
            while self.finished.len() > MAX_FINISHED_CLAIMS {
                self.finished.pop_front();
            }
        }
    }
}

impl Aggregate for LineageClaim {
    const KIND: &'static str = STREAM_KIND;
    const SNAPSHOT_SCHEMA: u32 = 1;

    type Command = LineageClaimCommand;
    type Event = LineageClaimEvent;
    type Error = WeightError;

    fn decide(
        &self,
        cmd: &LineageClaimCommand,
        ctx: &Ctx,
    ) -> Result<Vec<LineageClaimEvent>, WeightError> {
        cmd.validate()?;
        match cmd {
            LineageClaimCommand::BeginClaim {
                request_id,
                base,
                target,
                mode,
                expected_base_metadata_generation,
                policy,
            } => {
                let rid = request_id.clone().unwrap_or_else(|| {
                    derive_request_id(base, target, *mode, *expected_base_metadata_generation)
                });
                self.decide_begin(
                    request_id.as_deref(),
                    ClaimStarted {
                        request_id: rid,
                        base: base.clone(),
                        target: target.clone(),
                        mode: *mode,
                        expected_base_metadata_generation: *expected_base_metadata_generation,
                        policy: *policy,
                        attempt: 1,
                        at_ms: ctx.now_ms,
                    },
                )
            }
            LineageClaimCommand::AdvanceClaim { request_id, phase } => {
                self.decide_advance(request_id, *phase, ctx.now_ms)
            }
            LineageClaimCommand::FailClaim { request_id, reason } => {
                self.decide_fail(request_id, reason, ctx.now_ms)
            }
        }
    }

    fn apply(&mut self, event: &LineageClaimEvent) {
        match event {
            LineageClaimEvent::ClaimStarted(e) => {
                self.lineage.get_or_insert_with(|| e.base.lineage());
                self.active = Some(Claim {
                    request_id: e.request_id.clone(),
                    base: e.base.clone(),
                    target: e.target.clone(),
                    mode: e.mode,
                    expected_base_metadata_generation: e.expected_base_metadata_generation,
                    policy: e.policy,
                    phase: ClaimPhase::Claimed,
                    attempt: e.attempt,
                    failure: None,
                    started_at_ms: e.at_ms,
                    updated_at_ms: e.at_ms,
                });
            }
            LineageClaimEvent::ClaimAdvanced(e) => {
                let Some(claim) = self.active.as_mut() else {
                    return;
                };
                claim.phase = e.phase;
                claim.updated_at_ms = e.at_ms;
                if e.phase == ClaimPhase::Committed {
                    let target = claim.target.weight_generation;
                    self.watermark = Some(self.watermark.map_or(target, |w| w.max(target)));
                    self.finish_active();
                }
            }
            LineageClaimEvent::ClaimFailed(e) => {
                if let Some(claim) = self.active.as_mut() {
                    claim.phase = ClaimPhase::Failed;
                    claim.failure = Some(e.reason.clone());
                    claim.updated_at_ms = e.at_ms;
                }
                self.finish_active();
            }
        }
    }
}
