//! Prometheus metrics of the snapshotter (no per-id labels).

use prometheus::{Histogram, HistogramOpts, IntCounter, IntGauge, Registry};

/// Cheap to clone; clones share the same series.
#[derive(Debug, Clone)]
pub struct SnapshotMetrics {
    pub written: IntCounter,
    pub failures: IntCounter,
    pub bytes_written: IntCounter,
    pub last_bytes: IntGauge,
    pub last_seq: IntGauge,
    pub applied_seq: IntGauge,
    pub write_seconds: Histogram,
}

impl Default for SnapshotMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl SnapshotMetrics {
    /// Unregistered series (see [`SnapshotMetrics::register`]).
    pub fn new() -> Self {
        let counter = |n: &str, h: &str| IntCounter::new(n, h).expect("valid metric name");
        let gauge = |n: &str, h: &str| IntGauge::new(n, h).expect("valid metric name");
        Self {
            written: counter("crescent_snapshots_written_total", "Snapshots written"),
            failures: counter(
                "crescent_snapshot_failures_total",
                "Snapshot writes, retention runs or journal truncations that failed",
            ),
            bytes_written: counter(
                "crescent_snapshot_written_bytes_total",
                "Bytes of snapshot files written",
            ),
            last_bytes: gauge(
                "crescent_snapshot_last_bytes",
                "Size of the last snapshot written",
            ),
            last_seq: gauge(
                "crescent_snapshot_last_seq",
                "Journal seq of the last snapshot written",
            ),
            applied_seq: gauge(
                "crescent_snapshotter_applied_seq",
                "Last journal seq the snapshotter's shadow state has applied",
            ),
            write_seconds: Histogram::with_opts(
                HistogramOpts::new(
                    "crescent_snapshot_write_seconds",
                    "Time to encode and durably write one snapshot",
                )
                .buckets(vec![0.001, 0.005, 0.02, 0.1, 0.5, 2.0, 10.0, 60.0]),
            )
            .expect("valid histogram"),
        }
    }

    /// Registers every series in `registry`.
    pub fn register(&self, registry: &Registry) -> prometheus::Result<()> {
        registry.register(Box::new(self.written.clone()))?;
        registry.register(Box::new(self.failures.clone()))?;
        registry.register(Box::new(self.bytes_written.clone()))?;
        registry.register(Box::new(self.last_bytes.clone()))?;
        registry.register(Box::new(self.last_seq.clone()))?;
        registry.register(Box::new(self.applied_seq.clone()))?;
        registry.register(Box::new(self.write_seconds.clone()))?;
        Ok(())
    }
}
