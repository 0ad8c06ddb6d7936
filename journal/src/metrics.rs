//! Prometheus metrics of the journal. The only label is the backend name (`file`, `sled`,
//! `memory`), so cardinality stays bounded whatever is appended.

use prometheus::{
    exponential_buckets, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec,
    IntGauge, IntGaugeVec, Opts, Registry,
};

/// The journal's metric families. Create once per registry and pass clones to every
/// [`crate::Journal::open`] through [`crate::JournalOptions::metrics`] (registering the same
/// names twice on one registry fails).
#[derive(Clone, Debug)]
pub struct JournalMetrics {
    appends: IntCounterVec,
    batches: IntCounterVec,
    direct_batches: IntCounterVec,
    batch_records: HistogramVec,
    sync_seconds: HistogramVec,
    fenced: IntCounterVec,
    bytes: IntCounterVec,
    durable_seq: IntGaugeVec,
    quarantined: IntGaugeVec,
}

impl JournalMetrics {
    /// Creates the metric families and registers them on `registry`.
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        let m = Self::unregistered();
        registry.register(Box::new(m.appends.clone()))?;
        registry.register(Box::new(m.batches.clone()))?;
        registry.register(Box::new(m.direct_batches.clone()))?;
        registry.register(Box::new(m.batch_records.clone()))?;
        registry.register(Box::new(m.sync_seconds.clone()))?;
        registry.register(Box::new(m.fenced.clone()))?;
        registry.register(Box::new(m.bytes.clone()))?;
        registry.register(Box::new(m.durable_seq.clone()))?;
        registry.register(Box::new(m.quarantined.clone()))?;
        Ok(m)
    }

    /// Registers on the process-wide [`prometheus::default_registry`].
    pub fn register_default() -> prometheus::Result<Self> {
        Self::register(prometheus::default_registry())
    }

    /// Metric families that are counted but exported nowhere (the default when the caller
    /// supplies none; handy in tests).
    pub fn unregistered() -> Self {
        const L: &[&str] = &["backend"];
        let counter = |name: &str, help: &str| {
            IntCounterVec::new(Opts::new(name, help), L).expect("valid metric definition")
        };
        let histogram = |name: &str, help: &str, buckets: Vec<f64>| {
            HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets), L)
                .expect("valid metric definition")
        };
        Self {
            appends: counter(
                "crescent_journal_appends_total",
                "Records appended (submitted and accepted).",
            ),
            batches: counter(
                "crescent_journal_batches_total",
                "Group-commit batches made durable.",
            ),
            direct_batches: counter(
                "crescent_journal_direct_batches_total",
                "Batches written and synced by the thread that submitted them (a standby's \
                 follower, when the writer thread was idle) instead of the writer thread.",
            ),
            batch_records: histogram(
                "crescent_journal_batch_records",
                "Records per group-commit batch.",
                exponential_buckets(1.0, 2.0, 14).expect("valid buckets"),
            ),
            sync_seconds: histogram(
                "crescent_journal_sync_seconds",
                "Time for the backend to write and sync one batch.",
                exponential_buckets(25e-6, 2.0, 16).expect("valid buckets"),
            ),
            fenced: counter(
                "crescent_journal_fenced_appends_total",
                "Appends refused because their term was below the journal's.",
            ),
            bytes: counter(
                "crescent_journal_bytes_total",
                "Encoded frame bytes made durable.",
            ),
            durable_seq: IntGaugeVec::new(
                Opts::new(
                    "crescent_journal_durable_seq",
                    "Highest durable sequence number.",
                ),
                L,
            )
            .expect("valid metric definition"),
            quarantined: IntGaugeVec::new(
                Opts::new(
                    "crescent_journal_quarantined_frames",
                    "Damaged journal tails held in the quarantine directory until an operator \
                     clears them, by kind (damaged: a complete frame that failed its check and \
                     whose record the journal does not hold again; incomplete: a write that did \
                     not finish; recovered: a damaged record received again from an active).",
                ),
                &["kind"],
            )
            .expect("valid metric definition"),
        }
    }

    /// Sets the quarantine gauge from a listing of the quarantine directory.
    pub fn set_quarantined(&self, entries: &[crate::quarantine::QuarantineEntry]) {
        use crate::quarantine::DamageKind;
        // `recovered`: damaged records the journal holds again (received from an active).
        let count = |f: &dyn Fn(&crate::quarantine::QuarantineEntry) -> bool| {
            entries.iter().filter(|e| f(e)).count() as i64
        };
        let rows = [
            ("damaged", count(&|e| e.is_unrecovered_damage())),
            ("incomplete", count(&|e| e.kind == DamageKind::Incomplete)),
            (
                "recovered",
                count(&|e| e.kind == DamageKind::Damaged && e.recovered.is_some()),
            ),
        ];
        for (kind, n) in rows {
            self.quarantined.with_label_values(&[kind]).set(n);
        }
    }

    pub(crate) fn for_backend(&self, backend: &str) -> BackendMetrics {
        let l = &[backend];
        BackendMetrics {
            appends: self.appends.with_label_values(l),
            batches: self.batches.with_label_values(l),
            direct_batches: self.direct_batches.with_label_values(l),
            batch_records: self.batch_records.with_label_values(l),
            sync_seconds: self.sync_seconds.with_label_values(l),
            fenced: self.fenced.with_label_values(l),
            bytes: self.bytes.with_label_values(l),
            durable_seq: self.durable_seq.with_label_values(l),
        }
    }
}

/// The children of [`JournalMetrics`] for one backend label, resolved once.
#[derive(Clone, Debug)]
pub(crate) struct BackendMetrics {
    pub appends: IntCounter,
    pub batches: IntCounter,
    pub direct_batches: IntCounter,
    pub batch_records: Histogram,
    pub sync_seconds: Histogram,
    pub fenced: IntCounter,
    pub bytes: IntCounter,
    pub durable_seq: IntGauge,
}
