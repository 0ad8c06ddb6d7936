//! Metrics of leader following (docs/ha.md, "Clients"). Every label is a closed set: the
//! source of a leader change, the reason of a retry, and the operation names of the client
//! (compile-time constants). Never an address, a key or an owner id.

use prometheus::{IntCounterVec, IntGauge, Opts, Registry};

/// Where the client learned of the leader it switched to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaderSource {
    /// The etcd leader key (`LeaderWatch`).
    Etcd,
    /// A standby's NOT_LEADER answer naming the active.
    NotLeader,
    /// The next address of the static `--server` list, after a connection failure.
    Static,
}

impl LeaderSource {
    pub fn label(self) -> &'static str {
        match self {
            LeaderSource::Etcd => "etcd",
            LeaderSource::NotLeader => "not_leader",
            LeaderSource::Static => "static",
        }
    }
}

/// Why an operation was sent again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryReason {
    /// The server answered NOT_LEADER.
    NotLeader,
    /// No connection could be made, or it broke.
    Connect,
    /// The server answered UNAVAILABLE (shutting down, ...).
    Unavailable,
    /// The server refused before running anything (`not_run`: the rebuild gate, REBUILDING).
    NotRun,
    /// The server answered FENCED (a deposed active).
    Fenced,
    /// No leader known yet.
    NoLeader,
    /// The leader changed while an idempotent request was waiting for its answer.
    LeaderChanged,
}

impl RetryReason {
    pub fn label(self) -> &'static str {
        match self {
            RetryReason::NotLeader => "not_leader",
            RetryReason::Connect => "connect",
            RetryReason::Unavailable => "unavailable",
            RetryReason::NotRun => "not_run",
            RetryReason::Fenced => "fenced",
            RetryReason::NoLeader => "no_leader",
            RetryReason::LeaderChanged => "leader_changed",
        }
    }
}

#[derive(Clone, Debug)]
pub struct FailoverMetrics {
    leader_changes: IntCounterVec,
    retries: IntCounterVec,
    interrupted: IntCounterVec,
    exhausted: IntCounterVec,
    leader_term: IntGauge,
}

impl FailoverMetrics {
    pub fn unregistered() -> Self {
        let counter = |name: &str, help: &str, labels: &[&str]| {
            IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric definition")
        };
        Self {
            leader_changes: counter(
                "crescent_client_leader_changes_total",
                "Times the client switched to another crescentd, by source (etcd, not_leader, static).",
                &["source"],
            ),
            retries: counter(
                "crescent_client_failover_retries_total",
                "Requests sent again after a failover-like failure, by reason.",
                &["reason"],
            ),
            interrupted: counter(
                "crescent_client_failover_interrupted_total",
                "Non-idempotent operations surfaced as FAILOVER_INTERRUPTED, by operation.",
                &["op"],
            ),
            exhausted: counter(
                "crescent_client_failover_exhausted_total",
                "Operations that gave up at the failover deadline, by operation.",
                &["op"],
            ),
            leader_term: IntGauge::new(
                "crescent_client_leader_term",
                "The newest leader term seen in etcd (0 without etcd).",
            )
            .expect("valid metric definition"),
        }
    }

    pub(crate) fn register(&self, registry: &Registry) -> prometheus::Result<()> {
        registry.register(Box::new(self.leader_changes.clone()))?;
        registry.register(Box::new(self.retries.clone()))?;
        registry.register(Box::new(self.interrupted.clone()))?;
        registry.register(Box::new(self.exhausted.clone()))?;
        registry.register(Box::new(self.leader_term.clone()))
    }

    pub(crate) fn leader_changed(&self, source: LeaderSource) {
        self.leader_changes
            .with_label_values(&[source.label()])
            .inc();
    }

    pub(crate) fn retried(&self, reason: RetryReason) {
        self.retries.with_label_values(&[reason.label()]).inc();
    }

    pub(crate) fn interrupted(&self, op: &'static str) {
        self.interrupted.with_label_values(&[op]).inc();
    }

    pub(crate) fn exhausted(&self, op: &'static str) {
        self.exhausted.with_label_values(&[op]).inc();
    }

    /// The term of a leader record etcd published (only a client following etcd sees one).
    #[cfg(feature = "etcd")]
    pub(crate) fn observe_term(&self, term: u64) {
        self.leader_term
            .set(i64::try_from(term).unwrap_or(i64::MAX));
    }

    /// Leader changes counted so far from `source`.
    pub fn leader_changes(&self, source: LeaderSource) -> u64 {
        self.leader_changes
            .with_label_values(&[source.label()])
            .get()
    }

    /// Retries counted so far for `reason`.
    pub fn retries(&self, reason: RetryReason) -> u64 {
        self.retries.with_label_values(&[reason.label()]).get()
    }

    /// FAILOVER_INTERRUPTED answers counted so far for `op`.
    pub fn interruptions(&self, op: &str) -> u64 {
        self.interrupted.with_label_values(&[op]).get()
    }
}
