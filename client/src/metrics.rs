//! The client's Prometheus metrics. Labels are closed sets: `op` (the operation names of
//! [`crate::CrescentClient`]) and `outcome` (`ok` or a stable error code). Never a key.

use std::time::Instant;

use crescent_transport::TransportMetrics;
use prometheus::{
    exponential_buckets, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts,
    Registry,
};

use crate::error::ClientError;

#[derive(Clone, Debug)]
pub struct ClientMetrics {
    ops: IntCounterVec,
    op_seconds: HistogramVec,
    bytes: IntCounterVec,
    pub(crate) owned_replicas: IntGauge,
    pub(crate) heartbeats: IntCounterVec,
    pub(crate) reregistrations: IntCounter,
    pub(crate) transport: TransportMetrics,
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
        Ok(m)
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
