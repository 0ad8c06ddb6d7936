//! Prometheus metrics of the data plane. Labels are closed sets only: `op` (read, write, and
//! `mixed` for batches), `transport` (tcp, ffi), `outcome` (ok or an error kind from
//! [`crate::TransportError::outcome_label`]). Never a segment id, endpoint or key.

use std::time::Duration;

use prometheus::{
    exponential_buckets, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, Opts, Registry,
};

use crate::error::TransportError;
use crate::transport::{TransferOp, TransportKind};

/// The data plane's metric families. Create once per registry and share clones.
#[derive(Clone, Debug)]
pub struct TransportMetrics {
    bytes: IntCounterVec,
    ops: IntCounterVec,
    batches: IntCounterVec,
    errors: IntCounterVec,
    batch_seconds: HistogramVec,
    served_ops: IntCounterVec,
    served_bytes: IntCounterVec,
    protocol_violations: IntCounterVec,
    grant_refusals: IntCounterVec,
    connections: IntGauge,
}

impl TransportMetrics {
    /// Creates the families and registers them on `registry`.
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        let m = Self::unregistered();
        registry.register(Box::new(m.bytes.clone()))?;
        registry.register(Box::new(m.ops.clone()))?;
        registry.register(Box::new(m.batches.clone()))?;
        registry.register(Box::new(m.errors.clone()))?;
        registry.register(Box::new(m.batch_seconds.clone()))?;
        registry.register(Box::new(m.served_ops.clone()))?;
        registry.register(Box::new(m.served_bytes.clone()))?;
        registry.register(Box::new(m.protocol_violations.clone()))?;
        registry.register(Box::new(m.grant_refusals.clone()))?;
        registry.register(Box::new(m.connections.clone()))?;
        Ok(m)
    }

    /// Families that count but are exported nowhere (default when none is supplied).
    pub fn unregistered() -> Self {
        let counter = |name: &str, help: &str, labels: &[&str]| {
            IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric definition")
        };
        Self {
            bytes: counter(
                "crescent_transport_bytes_total",
                "Bytes moved by successful transfers, by the submitting side.",
                &["op", "transport"],
            ),
            ops: counter(
                "crescent_transport_ops_total",
                "Transfers (batch descriptors) completed, by outcome.",
                &["op", "transport", "outcome"],
            ),
            batches: counter(
                "crescent_transport_batches_total",
                "Batches completed; outcome is ok only if every descriptor succeeded.",
                &["op", "transport", "outcome"],
            ),
            errors: counter(
                "crescent_transport_errors_total",
                "Failed transfers by error kind.",
                &["op", "transport", "outcome"],
            ),
            batch_seconds: HistogramVec::new(
                HistogramOpts::new(
                    "crescent_transport_batch_seconds",
                    "Latency of a whole batch, submit to completion.",
                )
                .buckets(exponential_buckets(10e-6, 2.0, 20).expect("valid buckets")),
                &["op", "transport"],
            )
            .expect("valid metric definition"),
            served_ops: counter(
                "crescent_transport_served_ops_total",
                "Requests served by this process's transfer listener.",
                &["op", "outcome"],
            ),
            served_bytes: counter(
                "crescent_transport_served_bytes_total",
                "Bytes read from or written to served segments by peers.",
                &["op"],
            ),
            protocol_violations: counter(
                "crescent_transport_protocol_violations_total",
                "Connections closed because the peer broke the frame protocol.",
                &["reason"],
            ),
            grant_refusals: counter(
                "crescent_transport_grant_refusals_total",
                "Transfers this listener refused for their data-plane grant, by reason.",
                &["op", "reason"],
            ),
            connections: IntGauge::new(
                "crescent_transport_server_connections",
                "Open connections on this process's transfer listener.",
            )
            .expect("valid metric definition"),
        }
    }

    /// Records one finished batch.
    pub(crate) fn record_batch(
        &self,
        kind: TransportKind,
        ops: &[TransferOp],
        lengths: impl Iterator<Item = u64>,
        statuses: &[Result<(), TransportError>],
        elapsed: Duration,
    ) {
        let t = kind.label();
        let mut batch_op: Option<TransferOp> = None;
        let mut mixed = false;
        for ((op, len), status) in ops.iter().zip(lengths).zip(statuses) {
            match batch_op {
                None => batch_op = Some(*op),
                Some(b) if b != *op => mixed = true,
                _ => {}
            }
            let o = op.label();
            match status {
                Ok(()) => {
                    self.bytes.with_label_values(&[o, t]).inc_by(len);
                    self.ops.with_label_values(&[o, t, "ok"]).inc();
                }
                Err(e) => {
                    let outcome = e.outcome_label();
                    self.ops.with_label_values(&[o, t, outcome]).inc();
                    self.errors.with_label_values(&[o, t, outcome]).inc();
                }
            }
        }
        let batch_label = match (mixed, batch_op) {
            (true, _) => "mixed",
            (false, Some(op)) => op.label(),
            (false, None) => return,
        };
        let outcome = match statuses.iter().find_map(|s| s.as_ref().err()) {
            None => "ok",
            Some(e) => e.outcome_label(),
        };
        self.batches
            .with_label_values(&[batch_label, t, outcome])
            .inc();
        self.batch_seconds
            .with_label_values(&[batch_label, t])
            .observe(elapsed.as_secs_f64());
    }

    pub(crate) fn record_served(&self, op: TransferOp, outcome: &'static str, bytes: u64) {
        self.served_ops
            .with_label_values(&[op.label(), outcome])
            .inc();
        if outcome == "ok" {
            self.served_bytes
                .with_label_values(&[op.label()])
                .inc_by(bytes);
        }
    }

    /// A NOTIFY answered by this listener (`served_ops` with op `notify`).
    pub(crate) fn record_notify(&self, outcome: &'static str) {
        self.served_ops
            .with_label_values(&["notify", outcome])
            .inc();
    }

    pub(crate) fn record_protocol_violation(&self, reason: &'static str) {
        self.protocol_violations.with_label_values(&[reason]).inc();
    }

    pub(crate) fn record_grant_refusal(&self, op: TransferOp, reason: &'static str) {
        self.grant_refusals
            .with_label_values(&[op.label(), reason])
            .inc();
    }

    pub(crate) fn connection_opened(&self) {
        self.connections.inc();
    }

    pub(crate) fn connection_closed(&self) {
        self.connections.dec();
    }
}
