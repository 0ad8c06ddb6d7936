//! The rebuild gate: a pure state machine (time is passed in) deciding whether object
//! operations are served while owners replay their tables after a restart or promotion.
//!
//! - REBUILDING: expected owners (those with segments mounted in the journal) have not all
//!   completed; object operations are refused with UNAVAILABLE/REBUILDING. Journaled
//!   control-plane operations are always admitted (mounts, registrations, heartbeats, replay).
//! - SERVING: every expected owner completed.
//! - DEGRADED: served although the degraded timeout passed first (default 120 s), or an expected
//!   owner was lost (expired, unmounted) before completing. A late completion of every remaining
//!   owner still moves DEGRADED to SERVING, unless one was lost (its objects are gone).
//!
//! Each owner's completion is its own: one owner that never comes back holds nothing but the
//! timeout, and every other owner's completion is counted (and its objects served) regardless.

use std::collections::{BTreeMap, BTreeSet};

use crescent_wire::rebuild::{
    EntryOutcome, GateState, GateStatus, ReplayCounts, MAX_LISTED_OWNERS, REBUILD_WIRE_VERSION,
};

use crate::error::StoreError;

/// Default time after which the gate opens DEGRADED.
pub const DEFAULT_DEGRADED_TIMEOUT_MS: u64 = 120_000;

/// What an operation is, for admission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OperationClass {
    /// Object metadata operations (put, get, exist, remove, list, ...).
    Object,
    /// Journaled control-plane operations, heartbeats, replay and completion themselves.
    ControlPlane,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RebuildGate {
    term: u64,
    state: GateState,
    started_at_ms: i64,
    degraded_timeout_ms: u64,
    opened_at_ms: Option<i64>,
    expected: BTreeSet<String>,
    /// Completions (expected owners and others), with the counts each owner reported.
    completed: BTreeMap<String, ReplayCounts>,
    lost: BTreeSet<String>,
    entries: ReplayCounts,
}

impl RebuildGate {
    /// A gate with nothing to rebuild: SERVING.
    pub fn serving(term: u64, now_ms: i64) -> Self {
        Self::begin(
            term,
            std::iter::empty::<String>(),
            now_ms,
            DEFAULT_DEGRADED_TIMEOUT_MS,
        )
    }

    /// Starts the rebuild of `term`, waiting for `expected` owners (SERVING at once if none).
    pub fn begin<I, S>(term: u64, expected: I, now_ms: i64, degraded_timeout_ms: u64) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut gate = Self {
            term,
            state: GateState::Rebuilding,
            started_at_ms: now_ms,
            degraded_timeout_ms,
            opened_at_ms: None,
            expected: expected.into_iter().map(Into::into).collect(),
            completed: BTreeMap::new(),
            lost: BTreeSet::new(),
            entries: ReplayCounts::default(),
        };
        gate.settle(now_ms);
        gate
    }

    pub fn term(&self) -> u64 {
        self.term
    }

    pub fn state(&self) -> GateState {
        self.state
    }

    /// When the gate opens DEGRADED if still REBUILDING (ms since the Unix epoch).
    pub fn degraded_deadline_ms(&self) -> i64 {
        self.started_at_ms
            .saturating_add(self.degraded_timeout_ms.min(i64::MAX as u64) as i64)
    }

    /// Whether `owner_id` is expected and has not completed yet.
    pub fn is_waiting_for(&self, owner_id: &str) -> bool {
        self.expected.contains(owner_id)
            && !self.completed.contains_key(owner_id)
            && !self.lost.contains(owner_id)
    }

    fn check_term(&self, term: u64) -> Result<(), StoreError> {
        if term == self.term {
            Ok(())
        } else {
            Err(StoreError::StaleTerm {
                reason: format!("term {term}; the gate rebuilds term {}", self.term),
            })
        }
    }

    /// Counts a replayed batch's outcomes.
    pub fn record_replay(&mut self, outcomes: &[EntryOutcome]) {
        self.entries.merge(&ReplayCounts::of_outcomes(outcomes));
    }

    /// `owner_id` replayed every eligible entry of its table for `term`. Repeats are no-ops
    /// (the first report's counts stay); an owner that was not expected is recorded without
    /// effect on the gate. Returns the state after.
    pub fn complete(
        &mut self,
        owner_id: &str,
        term: u64,
        counts: ReplayCounts,
        now_ms: i64,
    ) -> Result<GateState, StoreError> {
        self.check_term(term)?;
        if owner_id.is_empty() {
            return Err(StoreError::invalid("owner_id", "must not be empty"));
        }
        self.completed.entry(owner_id.to_string()).or_insert(counts);
        self.settle(now_ms);
        Ok(self.state)
    }

    /// An expected owner went away before completing (expired, or unmounted its segments):
    /// the gate stops waiting for it and can at best open DEGRADED.
    pub fn owner_lost(&mut self, owner_id: &str, now_ms: i64) -> GateState {
        if self.is_waiting_for(owner_id) {
            self.lost.insert(owner_id.to_string());
            self.settle(now_ms);
        }
        self.state
    }

    /// Applies the degraded timeout; returns the state after.
    pub fn poll(&mut self, now_ms: i64) -> GateState {
        self.settle(now_ms);
        self.state
    }

    fn settle(&mut self, now_ms: i64) {
        let waiting = self
            .expected
            .iter()
            .any(|o| !self.completed.contains_key(o) && !self.lost.contains(o));
        let next = match (waiting, self.state) {
            (false, _) if self.lost.is_empty() => GateState::Serving,
            (false, _) => GateState::Degraded,
            (true, GateState::Rebuilding) if now_ms >= self.degraded_deadline_ms() => {
                GateState::Degraded
            }
            (true, s) => s,
        };
        if next != self.state {
            tracing::info!(term = self.term, from = %self.state, to = %next, "rebuild gate");
        }
        if next != GateState::Rebuilding && self.opened_at_ms.is_none() {
            self.opened_at_ms = Some(now_ms);
        }
        self.state = next;
    }

    /// Whether an operation of `class` is served now (object operations: not while
    /// REBUILDING, refused with UNAVAILABLE whose message starts with `REBUILDING`).
    pub fn admit(&self, class: OperationClass) -> Result<(), StoreError> {
        match (class, self.state) {
            (OperationClass::Object, GateState::Rebuilding) => Err(StoreError::Rebuilding {
                term: self.term,
                completed: self.owners_completed(),
                expected: self.expected.len() as u64,
            }),
            _ => Ok(()),
        }
    }

    fn owners_completed(&self) -> u64 {
        self.expected
            .iter()
            .filter(|o| self.completed.contains_key(*o))
            .count() as u64
    }

    /// The counts `owner_id` reported with its completion.
    pub fn reported(&self, owner_id: &str) -> Option<ReplayCounts> {
        self.completed.get(owner_id).copied()
    }

    /// State and progress, for `/healthz`, `/v1/rebuild/status` and `crescent status`.
    pub fn status(&self) -> GateStatus {
        GateStatus {
            version: REBUILD_WIRE_VERSION,
            state: self.state,
            term: self.term,
            owners_expected: self.expected.len() as u64,
            owners_completed: self.owners_completed(),
            owners_lost: self.lost.len() as u64,
            waiting_for: self
                .expected
                .iter()
                .filter(|o| self.is_waiting_for(o))
                .take(MAX_LISTED_OWNERS)
                .cloned()
                .collect(),
            entries: self.entries,
            started_at_ms: self.started_at_ms,
            opened_at_ms: self.opened_at_ms,
        }
    }
}

#[cfg(test)]
#[path = "gate_tests.rs"]
mod tests;
