//! The client's Prometheus metrics. Labels are closed sets: `op` (the operation names of
//! [`crate::CrescentClient`]) and `outcome` (`ok` or a stable error code). Never a key.

use std::time::Instant;

use crescent_transport::TransportMetrics;
use prometheus::{
    exponential_buckets, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts,
    Registry,
};

use crate::error::ClientError;
use crate::failover_metrics::FailoverMetrics;

#[derive(Clone, Debug)]
pub struct ClientMetrics {
    ops: IntCounterVec,
    op_seconds: HistogramVec,
    bytes: IntCounterVec,
    owned_replicas: IntGauge,
    heartbeats: IntCounterVec,
    reregistrations: IntCounter,
    pub(crate) transport: TransportMetrics,
    pub(crate) rebuild: RebuildMetrics,
    pub(crate) failover: FailoverMetrics,
    /// The owner's remote-restore staging region (crescent-owner's `owner_staging`).
    pub(crate) owner_staging: crate::owner_staging_metrics::OwnerStagingMetrics,
}

/// Metrics of the rebuild roles: the owner's replay and the writer's owner notices.
#[derive(Clone, Debug)]
pub struct RebuildMetrics {
    replay_batches: IntCounterVec,
    replay_entries: IntCounterVec,
    notices: IntCounterVec,
    notices_failed: IntCounterVec,
    replays: IntCounterVec,
    /// Owner heartbeats sent early because crescentd came back or the leader changed.
    pub(crate) owner_wakeups: IntCounterVec,
    /// Releases crescentd delivered to this owner, by what the table did with them.
    owner_releases: IntCounterVec,
    /// Replicas checked against their bytes before a replay, by verdict.
    owner_replay_checks: IntCounterVec,
}

impl RebuildMetrics {
    pub fn unregistered() -> Self {
        let counter = |name: &str, help: &str, labels: &[&str]| {
            IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric definition")
        };
        Self {
            replay_batches: counter(
                "crescent_client_rebuild_batches_total",
                "Owner replay batches by outcome (ok, retried, failed).",
                &["outcome"],
            ),
            replay_entries: counter(
                "crescent_client_rebuild_entries_total",
                "Owner replay entries by outcome (replayed, duplicate, stale, rejected).",
                &["outcome"],
            ),
            notices: counter(
                "crescent_client_owner_notices_total",
                "Owner notices settled, by the owner's answer (recorded, stale, rejected).",
                &["outcome"],
            ),
            notices_failed: counter(
                "crescent_client_owner_notices_failed_total",
                "Owner notice entries not delivered, so their puts failed DURABILITY_FAILED \
                 (unreachable: no answer after the retries; refused: the owner takes no notices).",
                &["reason"],
            ),
            replays: counter(
                "crescent_client_rebuild_replays_total",
                "Whole owner replays by outcome (completed, superseded, failed).",
                &["outcome"],
            ),
            owner_wakeups: counter(
                "crescent_client_owner_wakeups_total",
                "Owner heartbeats sent at once, by cause (reconnected, leader_changed).",
                &["reason"],
            ),
            owner_releases: counter(
                "crescent_client_owner_releases_total",
                "Releases crescentd delivered to this owner, by outcome (forgotten: the entry \
                 was dropped; unmatched: no entry of that allocation; unknown_version).",
                &["outcome"],
            ),
            owner_replay_checks: counter(
                "crescent_client_owner_replay_checks_total",
                "Replicas an owner checked against their checksum before replaying its table \
                 (intact; overwritten: dropped, the address holds other bytes; unverifiable: \
                 no checksum or being written, replayed unchecked).",
                &["outcome"],
            ),
        }
    }

    fn register(&self, registry: &Registry) -> prometheus::Result<()> {
        registry.register(Box::new(self.replay_batches.clone()))?;
        registry.register(Box::new(self.replay_entries.clone()))?;
        registry.register(Box::new(self.notices.clone()))?;
        registry.register(Box::new(self.notices_failed.clone()))?;
        registry.register(Box::new(self.owner_wakeups.clone()))?;
        registry.register(Box::new(self.owner_releases.clone()))?;
        registry.register(Box::new(self.owner_replay_checks.clone()))?;
        registry.register(Box::new(self.replays.clone()))
    }

    /// One replay batch finished: `ok`, `retried` or `failed`.
    pub fn replay_batch(&self, outcome: &'static str) {
        self.replay_batches.with_label_values(&[outcome]).inc();
    }

    pub fn replay_entry(&self, outcome: crescent_wire::rebuild::ReplayOutcome) {
        self.replay_entries
            .with_label_values(&[outcome.label()])
            .inc();
    }

    pub(crate) fn notice_settled(&self, outcome: crescent_wire::rebuild::NoticeOutcome) {
        let label = match outcome {
            crescent_wire::rebuild::NoticeOutcome::Recorded => "recorded",
            crescent_wire::rebuild::NoticeOutcome::Stale => "stale",
            crescent_wire::rebuild::NoticeOutcome::Rejected => "rejected",
        };
        self.notices.with_label_values(&[label]).inc();
    }

    /// A whole replay finished: `completed`, `superseded` or `failed`.
    pub fn replay_finished(&self, outcome: &'static str) {
        self.replays.with_label_values(&[outcome]).inc();
    }

    /// The replicas checked against their bytes before a replay, by verdict.
    pub fn owner_replay_checked(&self, intact: u64, overwritten: u64, unverifiable: u64) {
        for (label, n) in [
            ("intact", intact),
            ("overwritten", overwritten),
            ("unverifiable", unverifiable),
        ] {
            if n > 0 {
                self.owner_replay_checks
                    .with_label_values(&[label])
                    .inc_by(n);
            }
        }
    }

    pub fn owner_releases_applied(&self, report: &crate::ownership::ReleaseReport) {
        for (label, n) in [
            ("forgotten", report.forgotten),
            ("unmatched", report.unmatched),
            ("unknown_version", report.unknown_version),
        ] {
            if n > 0 {
                self.owner_releases
                    .with_label_values(&[label])
                    .inc_by(n as u64);
            }
        }
    }

    pub(crate) fn notices_failed(&self, reason: &'static str, n: u64) {
        self.notices_failed.with_label_values(&[reason]).inc_by(n);
    }

    /// A counter's value by family (`batches`, `entries`, `notices`, `failed`, `replays`,
    /// `wakeups`, `releases`).
    pub fn count(&self, family: &str, label: &str) -> u64 {
        let v = match family {
            "batches" => &self.replay_batches,
            "entries" => &self.replay_entries,
            "notices" => &self.notices,
            "failed" => &self.notices_failed,
            "replays" => &self.replays,
            "wakeups" => &self.owner_wakeups,
            "releases" => &self.owner_releases,
            _ => return 0,
        };
        v.get_metric_with_label_values(&[label])
            .map_or(0, |c| c.get())
    }
}

impl ClientMetrics {
    /// Families registered nowhere (the default).
    pub fn unregistered() -> Self {
        let counter = |name: &str, help: &str, labels: &[&str]| {
            IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric definition")
        };
        Self {
            ops: counter(
                "crescent_client_ops_total",
                "Client operations by outcome (ok or stable error code).",
                &["op", "outcome"],
            ),
            op_seconds: HistogramVec::new(
                HistogramOpts::new(
                    "crescent_client_op_seconds",
                    "Latency of client operations, call to return.",
                )
                .buckets(exponential_buckets(10e-6, 2.0, 20).expect("valid buckets")),
                &["op"],
            )
            .expect("valid metric definition"),
            bytes: counter(
                "crescent_client_bytes_total",
                "Value bytes moved by successful puts and gets.",
                &["op"],
            ),
            owned_replicas: IntGauge::new(
                "crescent_client_owned_replicas",
                "Committed replicas in this process's own segments (the ownership table).",
            )
            .expect("valid metric definition"),
            heartbeats: counter(
                "crescent_client_heartbeats_total",
                "Owner heartbeats by outcome.",
                &["outcome"],
            ),
            reregistrations: IntCounter::new(
                "crescent_client_owner_reregistrations_total",
                "Times the owner re-registered and re-mounted after crescentd forgot it.",
            )
            .expect("valid metric definition"),
            transport: TransportMetrics::unregistered(),
            rebuild: RebuildMetrics::unregistered(),
            failover: FailoverMetrics::unregistered(),
            owner_staging: crate::owner_staging_metrics::OwnerStagingMetrics::unregistered(),
        }
    }

    /// Creates the families (the client's and the data plane's) and registers them.
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        let mut m = Self::unregistered();
        m.transport = TransportMetrics::register(registry)?;
        registry.register(Box::new(m.ops.clone()))?;
        registry.register(Box::new(m.op_seconds.clone()))?;
        registry.register(Box::new(m.bytes.clone()))?;
        registry.register(Box::new(m.owned_replicas.clone()))?;
        registry.register(Box::new(m.heartbeats.clone()))?;
        registry.register(Box::new(m.reregistrations.clone()))?;
        m.rebuild.register(registry)?;
        m.failover.register(registry)?;
        m.owner_staging.register(registry)?;
        Ok(m)
    }

    /// Runs operation `op`: times it, counts its outcome, and on success adds the bytes that
    /// `bytes` says it moved. Every public object operation goes through here, so they all
    /// report alike.
    pub(crate) async fn metered<T>(
        &self,
        op: &'static str,
        operation: impl std::future::Future<Output = Result<T, ClientError>>,
        bytes: impl FnOnce(&T) -> u64,
    ) -> Result<T, ClientError> {
        let started = Instant::now();
        let result = operation.await;
        let moved = result.as_ref().map_or(0, bytes);
        self.record(op, started, &result, moved);
        result
    }

    /// Records one finished operation.
    pub(crate) fn record<T>(
        &self,
        op: &'static str,
        started: Instant,
        result: &Result<T, ClientError>,
        bytes: u64,
    ) {
        let outcome = match result {
            Ok(_) => "ok",
            Err(e) => e.code_str(),
        };
        self.ops.with_label_values(&[op, outcome]).inc();
        self.op_seconds
            .with_label_values(&[op])
            .observe(started.elapsed().as_secs_f64());
        if result.is_ok() && bytes > 0 {
            self.bytes.with_label_values(&[op]).inc_by(bytes);
        }
    }

    /// The rebuild roles' metrics.
    pub fn rebuild(&self) -> &RebuildMetrics {
        &self.rebuild
    }

    /// The data plane's transport metrics (an owner's transfer listener counts there too).
    pub fn transport(&self) -> &TransportMetrics {
        &self.transport
    }

    /// The gauge of the replicas in this process's own segments (its ownership table).
    pub fn owned_replicas(&self) -> &IntGauge {
        &self.owned_replicas
    }

    /// The remote-restore staging region of this process's owner cold devices.
    pub fn owner_staging(&self) -> &crate::owner_staging_metrics::OwnerStagingMetrics {
        &self.owner_staging
    }

    /// One owner heartbeat: `ok`, `not_found` or `error`.
    pub fn owner_heartbeat(&self, outcome: &'static str) {
        self.heartbeats.with_label_values(&[outcome]).inc();
    }

    /// The owner registered and mounted again after crescentd forgot it.
    pub fn owner_reregistered(&self) {
        self.reregistrations.inc();
    }

    /// The leader-following metrics (leader changes, retries, interruptions).
    pub fn failover(&self) -> &FailoverMetrics {
        &self.failover
    }

    /// Operations counted so far for `op` with `outcome` (`ok` or a code).
    pub fn ops_total(&self, op: &str, outcome: &str) -> u64 {
        self.ops.with_label_values(&[op, outcome]).get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crescent_wire::ErrorCode;

    #[test]
    fn outcomes_are_codes_and_bytes_count_only_successes() {
        let m = ClientMetrics::unregistered();
        let t = Instant::now();
        m.record("put", t, &Ok::<(), ClientError>(()), 10);
        m.record::<()>(
            "put",
            t,
            &Err(ClientError::item(ErrorCode::Conflict, "k".into())),
            10,
        );
        assert_eq!(m.ops_total("put", "ok"), 1);
        assert_eq!(m.ops_total("put", "CONFLICT"), 1);
        assert_eq!(m.bytes.with_label_values(&["put"]).get(), 10);
        let registry = Registry::new();
        ClientMetrics::register(&registry).unwrap();
        assert!(
            ClientMetrics::register(&registry).is_err(),
            "registered once"
        );
    }
}
