//! Prometheus metrics of managed weights (docs/weights.md, "Metrics"), updated by the actor
//! shells after events are committed: decide and apply stay pure.
//!
//! Labels are bounded vocabularies (availability, residency, operation kind, trigger, outcome,
//! upsert mode and phase, store operation); identities and ids never become labels.

use prometheus::{
    Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};

use crate::lineage::{ClaimPhase, LineageClaim, LineageClaimEvent, UpsertMode};
use crate::planner::MoveDirection;
use crate::revision::{
    OperationKind, OperationStatus, OperationTrigger, WeightRevision, WeightRevisionEvent,
};

/// A generic store lifecycle operation that skipped a managed-group member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuardedOperation {
    Evict,
    QuotaEvict,
    Remove,
    PrefixRemove,
    Cleanup,
}

impl GuardedOperation {
    pub fn as_str(self) -> &'static str {
        match self {
            GuardedOperation::Evict => "evict",
            GuardedOperation::QuotaEvict => "quota_evict",
            GuardedOperation::Remove => "remove",
            GuardedOperation::PrefixRemove => "prefix_remove",
            GuardedOperation::Cleanup => "cleanup",
        }
    }
}

/// Why crescentd's loss check changed a published revision's availability.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AvailabilityReason {
    /// The check after a restart or promotion found payloads lost.
    Recovery,
    /// A storage owner stopped heartbeating and its replicas were dropped.
    OwnerLost,
    /// Every payload of a DEGRADED revision is readable again: repaired.
    Repaired,
}

impl AvailabilityReason {
    pub fn as_str(self) -> &'static str {
        match self {
            AvailabilityReason::Recovery => "recovery",
            AvailabilityReason::OwnerLost => "owner_lost",
            AvailabilityReason::Repaired => "repaired",
        }
    }
}

fn kind_label(kind: OperationKind) -> &'static str {
    match kind {
        OperationKind::Migrating => "migrating",
        OperationKind::Repairing => "repairing",
        OperationKind::Deleting => "deleting",
    }
}

fn trigger_label(trigger: OperationTrigger) -> &'static str {
    match trigger {
        OperationTrigger::Initial => "initial",
        OperationTrigger::Explicit => "explicit",
        OperationTrigger::MemoryPressure => "memory_pressure",
        OperationTrigger::Access => "access",
        OperationTrigger::Repair => "repair",
        OperationTrigger::Removal => "removal",
    }
}

fn phase_label(phase: ClaimPhase) -> &'static str {
    match phase {
        ClaimPhase::Claimed => "claimed",
        ClaimPhase::TargetReady => "target_ready",
        ClaimPhase::BaseRetired => "base_retired",
        ClaimPhase::BaseDrained => "base_drained",
        ClaimPhase::BaseDeleted => "base_deleted",
        ClaimPhase::Committed => "committed",
        ClaimPhase::Failed => "failed",
    }
}

fn mode_label(mode: UpsertMode) -> &'static str {
    match mode {
        UpsertMode::PutFirst => "put_first",
        UpsertMode::DeleteFirst => "delete_first",
    }
}

/// Migration durations from 100 ms to about 3 h.
const DURATION_BUCKETS: &[f64] = &[
    0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 10800.0,
];

/// The weight metric families. Cheap to clone (the families are shared).
#[derive(Clone, Debug)]
pub struct WeightMetrics {
    revisions: IntGaugeVec,
    operations_active: IntGaugeVec,
    operations: IntCounterVec,
    operation_attempt_failures: IntCounterVec,
    migration_bytes: IntCounterVec,
    migration_remaining_bytes: IntGauge,
    migration_seconds: Histogram,
    leases_active: IntGauge,
    leases_expired: IntCounter,
    claims: IntCounterVec,
    claim_resumptions: IntCounterVec,
    guard_skips: IntCounterVec,
    availability_transitions: IntCounterVec,
}

fn gauge_vec(name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    IntGaugeVec::new(Opts::new(name, help), labels).expect("static metric definition is valid")
}

fn counter_vec(name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    IntCounterVec::new(Opts::new(name, help), labels).expect("static metric definition is valid")
}

impl WeightMetrics {
    /// The families, registered nowhere (tests, or a caller that does not export metrics).
    pub fn unregistered() -> Self {
        Self {
            revisions: gauge_vec(
                "crescent_weight_revisions",
                "Weight revisions by availability and observed residency",
                &["availability", "residency"],
            ),
            operations_active: gauge_vec(
                "crescent_weight_operations_active",
                "Running weight operations by kind",
                &["kind"],
            ),
            operations: counter_vec(
                "crescent_weight_operations_total",
                "Weight operations started and finished, by kind, trigger and outcome",
                &["kind", "trigger", "outcome"],
            ),
            operation_attempt_failures: counter_vec(
                "crescent_weight_operation_attempt_failures_total",
                "Failed attempts of running weight operations (retried by reconciliation)",
                &["kind"],
            ),
            migration_bytes: counter_vec(
                "crescent_weight_migration_bytes_total",
                "Logical payload bytes moved by migration rounds, by direction",
                &["direction"],
            ),
            migration_remaining_bytes: IntGauge::new(
                "crescent_weight_migration_remaining_bytes",
                "Planned but not yet moved logical bytes of running migrations",
            )
            .expect("static metric definition is valid"),
            migration_seconds: Histogram::with_opts(
                HistogramOpts::new(
                    "crescent_weight_migration_duration_seconds",
                    "Duration of finished migrations",
                )
                .buckets(DURATION_BUCKETS.to_vec()),
            )
            .expect("static metric definition is valid"),
            leases_active: IntGauge::new(
                "crescent_weight_leases_active",
                "Revision leases held (granted and not yet released or expired)",
            )
            .expect("static metric definition is valid"),
            leases_expired: IntCounter::new(
                "crescent_weight_leases_expired_total",
                "Revision leases ended by TTL expiry",
            )
            .expect("static metric definition is valid"),
            claims: counter_vec(
                "crescent_weight_claims_total",
                "Replacement claim transitions by upsert mode and phase reached",
                &["mode", "phase"],
            ),
            claim_resumptions: counter_vec(
                "crescent_weight_claim_resumptions_total",
                "Replacement claims resumed after a restart or failover, by mode and phase",
                &["mode", "phase"],
            ),
            guard_skips: counter_vec(
                "crescent_weight_managed_group_skips_total",
                "Generic store lifecycle operations that skipped a managed-group member",
                &["operation"],
            ),
            availability_transitions: counter_vec(
                "crescent_weight_availability_transitions_total",
                "Published revisions moved to an availability by the loss check, by reason",
                &["availability", "reason"],
            ),
        }
    }

    /// The families, registered with `registry` (the one `/metrics` serves).
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let m = Self::unregistered();
        registry.register(Box::new(m.revisions.clone()))?;
        registry.register(Box::new(m.operations_active.clone()))?;
        registry.register(Box::new(m.operations.clone()))?;
        registry.register(Box::new(m.operation_attempt_failures.clone()))?;
        registry.register(Box::new(m.migration_bytes.clone()))?;
        registry.register(Box::new(m.migration_remaining_bytes.clone()))?;
        registry.register(Box::new(m.migration_seconds.clone()))?;
        registry.register(Box::new(m.leases_active.clone()))?;
        registry.register(Box::new(m.leases_expired.clone()))?;
        registry.register(Box::new(m.claims.clone()))?;
        registry.register(Box::new(m.claim_resumptions.clone()))?;
        registry.register(Box::new(m.guard_skips.clone()))?;
        registry.register(Box::new(m.availability_transitions.clone()))?;
        Ok(m)
    }

    /// Gauge contribution of one revision state: (availability, residency), running operation
    /// kind, leases held, remaining migration bytes.
    fn gauges(&self, state: &WeightRevision, sign: i64) {
        if let Some(rec) = state.record() {
            self.revisions
                .with_label_values(&[rec.availability.as_str(), rec.residency.as_str()])
                .add(sign);
        }
        if let Some(op) = state.active_operation() {
            self.operations_active
                .with_label_values(&[kind_label(op.kind)])
                .add(sign);
            if op.kind == OperationKind::Migrating {
                let remaining = op
                    .progress
                    .bytes_total
                    .map_or(0, |t| t.saturating_sub(op.progress.bytes_done));
                self.migration_remaining_bytes
                    .add(sign * i64::try_from(remaining).unwrap_or(i64::MAX));
            }
        }
        self.leases_active.add(sign * state.leases().len() as i64);
    }

    /// After a revision moved from `before` to `after` by `events` (also at recovery: from
    /// the default state to the recovered one, with no events).
    pub fn observe_revision(
        &self,
        before: &WeightRevision,
        after: &WeightRevision,
        events: &[WeightRevisionEvent],
    ) {
        self.gauges(before, -1);
        self.gauges(after, 1);
        for event in events {
            match event {
                WeightRevisionEvent::OperationStarted(e) => {
                    self.operations
                        .with_label_values(&[
                            kind_label(e.kind),
                            trigger_label(e.trigger),
                            "started",
                        ])
                        .inc();
                }
                WeightRevisionEvent::OperationAttemptFailed(e) => {
                    if let Some(op) = after.operation(&e.operation_id) {
                        self.operation_attempt_failures
                            .with_label_values(&[kind_label(op.kind)])
                            .inc();
                    }
                }
                WeightRevisionEvent::OperationFinished(e) => {
                    if let Some(op) = after.operation(&e.operation_id) {
                        let outcome = match e.status {
                            OperationStatus::Succeeded => "succeeded",
                            OperationStatus::Failed => "failed",
                            OperationStatus::Running => "running",
                        };
                        self.operations
                            .with_label_values(&[
                                kind_label(op.kind),
                                trigger_label(op.trigger),
                                outcome,
                            ])
                            .inc();
                        if op.kind == OperationKind::Migrating {
                            let ms = e.at_ms.saturating_sub(op.started_at_ms).max(0);
                            self.migration_seconds.observe(ms as f64 / 1000.0);
                        }
                    }
                }
                WeightRevisionEvent::RevisionDeleted(e) => {
                    if let Some(op) = after.operation(&e.operation_id) {
                        self.operations
                            .with_label_values(&[
                                kind_label(op.kind),
                                trigger_label(op.trigger),
                                "succeeded",
                            ])
                            .inc();
                    }
                }
                WeightRevisionEvent::RoundCopied(e) if e.direction == MoveDirection::Promote => {
                    self.migration_bytes
                        .with_label_values(&["promote"])
                        .inc_by(e.bytes);
                }
                WeightRevisionEvent::RoundReleased(e) => {
                    let bytes = before
                        .operation(&e.operation_id)
                        .and_then(|o| o.pending_round.as_ref())
                        .map_or(0, |p| p.bytes);
                    self.migration_bytes
                        .with_label_values(&["demote"])
                        .inc_by(bytes);
                }
                WeightRevisionEvent::LeaseExpired(_) => self.leases_expired.inc(),
                _ => {}
            }
        }
    }

    /// After `events` were committed on a lineage whose state before them was `before`.
    pub fn observe_lineage(&self, before: &LineageClaim, events: &[LineageClaimEvent]) {
        let mut mode = before.active_claim().map(|c| c.mode);
        for event in events {
            let phase = match event {
                LineageClaimEvent::ClaimStarted(e) => {
                    mode = Some(e.mode);
                    ClaimPhase::Claimed
                }
                LineageClaimEvent::ClaimAdvanced(e) => e.phase,
                LineageClaimEvent::ClaimFailed(_) => ClaimPhase::Failed,
            };
            if let Some(mode) = mode {
                self.claims
                    .with_label_values(&[mode_label(mode), phase_label(phase)])
                    .inc();
            }
        }
    }

    /// A loss check moved a revision to `to` (DEGRADED or READY) for `reason`.
    pub fn availability_changed(&self, to: crate::Availability, reason: AvailabilityReason) {
        self.availability_transitions
            .with_label_values(&[to.as_str(), reason.as_str()])
            .inc();
    }

    /// The server resumed a persisted claim after a restart or failover.
    pub fn claim_resumed(&self, mode: UpsertMode, phase: ClaimPhase) {
        self.claim_resumptions
            .with_label_values(&[mode_label(mode), phase_label(phase)])
            .inc();
    }

    /// A generic store operation skipped `members` managed-group members.
    pub fn managed_group_skipped(&self, operation: GuardedOperation, members: u64) {
        self.guard_skips
            .with_label_values(&[operation.as_str()])
            .inc_by(members);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lineage::{ClaimAdvanced, ClaimStarted};
    use crate::RevisionIdentity;
    use crescent_actors::Aggregate;

    #[test]
    fn availability_transitions_are_counted_by_availability_and_reason() {
        let m = WeightMetrics::unregistered();
        let degraded = crate::Availability::Degraded;
        m.availability_changed(degraded, AvailabilityReason::OwnerLost);
        m.availability_changed(degraded, AvailabilityReason::OwnerLost);
        m.availability_changed(crate::Availability::Ready, AvailabilityReason::Repaired);
        let count = |a: &str, r: &str| m.availability_transitions.with_label_values(&[a, r]).get();
        assert_eq!(count("DEGRADED", "owner_lost"), 2);
        assert_eq!(count("READY", "repaired"), 1);
        assert_eq!(count("DEGRADED", "recovery"), 0);
    }

    #[test]
    fn registers_once_and_counts_claim_transitions_by_mode_and_phase() {
        let registry = Registry::new();
        let m = WeightMetrics::register(&registry).unwrap();
        assert!(
            WeightMetrics::register(&registry).is_err(),
            "names are unique"
        );
        let started = LineageClaimEvent::ClaimStarted(ClaimStarted {
            request_id: "r".into(),
            base: RevisionIdentity::new("n", "r", "v", 1),
            target: RevisionIdentity::new("n", "r", "v", 2),
            mode: UpsertMode::DeleteFirst,
            expected_base_metadata_generation: 1,
            policy: None,
            attempt: 1,
            at_ms: 0,
        });
        let mut lineage = LineageClaim::default();
        m.observe_lineage(&lineage, std::slice::from_ref(&started));
        lineage.apply(&started);
        let advanced = LineageClaimEvent::ClaimAdvanced(ClaimAdvanced {
            request_id: "r".into(),
            phase: ClaimPhase::BaseRetired,
            at_ms: 1,
        });
        m.observe_lineage(&lineage, &[advanced]);
        let count = |phase| m.claims.with_label_values(&["delete_first", phase]).get();
        assert_eq!((count("claimed"), count("base_retired")), (1, 1));
        m.claim_resumed(UpsertMode::PutFirst, ClaimPhase::BaseDrained);
        m.managed_group_skipped(GuardedOperation::PrefixRemove, 3);
        assert_eq!(m.guard_skips.with_label_values(&["prefix_remove"]).get(), 3);
        let names: Vec<String> = registry
            .gather()
            .iter()
            .map(|f| f.name().to_string())
            .collect();
        assert!(names.contains(&"crescent_weight_managed_group_skips_total".to_string()));
    }
}
