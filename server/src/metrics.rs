//! crescentd's Prometheus registry and its HTTP metrics. Labels are bounded: a route pattern
//! (never a raw path), a method and an error code, never keys or ids.

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts, Registry,
    TextEncoder,
};

#[derive(Clone)]
pub struct ServerMetrics {
    pub registry: Registry,
    pub http_requests: IntCounterVec,
    pub http_latency: HistogramVec,
    pub up: IntGauge,
    pub term: IntGauge,
    pub last_seq: IntGauge,
    pub commit_seq: IntGauge,
    pub replication_lag_records: IntGauge,
    pub replication_lag_bytes: IntGauge,
    pub owners_expired: IntCounter,
    /// RPC fast-path requests by op and outcome (`OK` or the wire error code).
    pub rpc_requests: IntCounterVec,
    pub rpc_latency: HistogramVec,
    /// Open RPC connections.
    pub rpc_connections: IntGauge,
    /// RPC connections accepted, by socket (`tcp`, `local`: docs/api.md "Local socket").
    pub rpc_accepted: IntCounterVec,
    /// RPC connections closed for a protocol violation, by reason (`handshake`, `frame`).
    pub rpc_protocol_errors: IntCounterVec,
    /// Failed accepts by listener (`rpc`, `http`, `transfer`): EMFILE and the like.
    pub accept_failures: IntCounterVec,
    /// Connections a listener closed on one of its `[net]` bounds, by listener and reason
    /// (`over_limit`, `handshake`, `frame`, `idle`, `body`).
    pub connections_closed: IntCounterVec,
    /// Spare descriptors held for the journal and snapshotter now (below `net.fd_reserve`
    /// while the process is out of descriptors).
    pub fd_reserve_available: IntGauge,
    /// Times a file open found the process out of descriptors and used the reserve.
    pub fd_exhaustions: IntCounter,
    /// Failed TLS handshakes by listener (`rpc`, `replication`) and reason (a fixed set:
    /// `crescent_tls::failure_reason`).
    pub tls_handshake_failures: IntCounterVec,
    /// `process_*` and `crescent_build_info`, refreshed at scrape time.
    pub process: crate::process_metrics::ProcessMetrics,
}

impl ServerMetrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        let http_requests = IntCounterVec::new(
            Opts::new(
                "crescent_http_requests_total",
                "HTTP requests by route, method and code",
            ),
            &["route", "method", "code"],
        )
        .expect("valid metric");
        let http_latency = HistogramVec::new(
            HistogramOpts::new(
                "crescent_http_request_seconds",
                "HTTP request latency by route",
            )
            .buckets(prometheus::exponential_buckets(0.0001, 2.0, 18).expect("buckets")),
            &["route"],
        )
        .expect("valid metric");
        let up =
            IntGauge::new("crescent_up", "1 while crescentd is serving").expect("valid metric");
        let term = IntGauge::new("crescent_term", "The term this node writes under")
            .expect("valid metric");
        let last_seq = IntGauge::new("crescent_journal_last_seq", "Highest seq assigned")
            .expect("valid metric");
        let commit_seq = IntGauge::new(
            "crescent_commit_seq",
            "Commit watermark: the highest seq acknowledged to clients (in sync replication, \
             durable on both nodes)",
        )
        .expect("valid metric");
        let replication_lag_records = IntGauge::new(
            "crescent_replication_lag_records",
            "On an HA active: records durable here that the standby has not acknowledged",
        )
        .expect("valid metric");
        let replication_lag_bytes = IntGauge::new(
            "crescent_replication_lag_bytes",
            "On an HA active: frame bytes of those records (in flight exactly, unsent ones at \
             the average frame size)",
        )
        .expect("valid metric");
        let owners_expired = IntCounter::new(
            "crescent_owners_expired_total",
            "Storage owners removed because they stopped heartbeating",
        )
        .expect("valid metric");
        let rpc_requests = IntCounterVec::new(
            Opts::new(
                "crescent_rpc_requests_total",
                "RPC fast-path requests by op and code",
            ),
            &["op", "code"],
        )
        .expect("valid metric");
        let rpc_latency = HistogramVec::new(
            HistogramOpts::new(
                "crescent_rpc_request_seconds",
                "RPC fast-path request handling time by op",
            )
            .buckets(prometheus::exponential_buckets(0.000_001, 2.0, 22).expect("buckets")),
            &["op"],
        )
        .expect("valid metric");
        let rpc_connections = IntGauge::new("crescent_rpc_connections", "Open RPC connections")
            .expect("valid metric");
        let rpc_accepted = IntCounterVec::new(
            Opts::new(
                "crescent_rpc_connections_accepted_total",
                "RPC connections accepted, by socket (tcp, local)",
            ),
            &["socket"],
        )
        .expect("valid metric");
        let rpc_protocol_errors = IntCounterVec::new(
            Opts::new(
                "crescent_rpc_protocol_errors_total",
                "RPC connections closed for a protocol violation, by reason",
            ),
            &["reason"],
        )
        .expect("valid metric");
        let accept_failures = IntCounterVec::new(
            Opts::new(
                "crescent_accept_failures_total",
                "Failed accepts (out of descriptors and the like) by listener",
            ),
            &["listener"],
        )
        .expect("valid metric");
        let connections_closed = IntCounterVec::new(
            Opts::new(
                "crescent_net_connections_closed_total",
                "Connections closed on a [net] bound, by listener and reason",
            ),
            &["listener", "reason"],
        )
        .expect("valid metric");
        let fd_reserve_available = IntGauge::new(
            "crescent_fd_reserve_available",
            "Spare descriptors held for the journal and snapshotter",
        )
        .expect("valid metric");
        let fd_exhaustions = IntCounter::new(
            "crescent_fd_exhaustions_total",
            "File opens that found the process out of descriptors and used the reserve",
        )
        .expect("valid metric");
        let tls_handshake_failures = IntCounterVec::new(
            Opts::new(
                "crescent_tls_handshake_failures_total",
                "Failed TLS handshakes by listener and reason",
            ),
            &["listener", "reason"],
        )
        .expect("valid metric");
        for c in [
            Box::new(accept_failures.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(tls_handshake_failures.clone()),
            Box::new(connections_closed.clone()),
            Box::new(fd_reserve_available.clone()),
            Box::new(fd_exhaustions.clone()),
            Box::new(http_requests.clone()),
            Box::new(http_latency.clone()),
            Box::new(up.clone()),
            Box::new(term.clone()),
            Box::new(last_seq.clone()),
            Box::new(commit_seq.clone()),
            Box::new(replication_lag_records.clone()),
            Box::new(replication_lag_bytes.clone()),
            Box::new(owners_expired.clone()),
            Box::new(rpc_requests.clone()),
            Box::new(rpc_latency.clone()),
            Box::new(rpc_connections.clone()),
            Box::new(rpc_accepted.clone()),
            Box::new(rpc_protocol_errors.clone()),
        ] {
            registry.register(c).expect("metric registered once");
        }
        let process =
            crate::process_metrics::ProcessMetrics::register(&registry).expect("valid metric");
        Self {
            process,
            registry,
            http_requests,
            http_latency,
            up,
            term,
            last_seq,
            commit_seq,
            replication_lag_records,
            replication_lag_bytes,
            owners_expired,
            rpc_requests,
            rpc_latency,
            rpc_connections,
            rpc_accepted,
            rpc_protocol_errors,
            accept_failures,
            connections_closed,
            fd_reserve_available,
            fd_exhaustions,
            tls_handshake_failures,
        }
    }

    /// The Prometheus text exposition of everything registered.
    pub fn render(&self) -> String {
        self.refresh_fd_reserve();
        let mut buf = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut buf)
            .expect("text encoding cannot fail");
        String::from_utf8(buf).expect("prometheus text is utf-8")
    }
}

impl ServerMetrics {
    /// Copies the process-wide descriptor reserve's state (`crescent_journal::fd_reserve`).
    pub fn refresh_fd_reserve(&self) {
        let stats = crescent_journal::fd_reserve::stats();
        self.fd_reserve_available.set(stats.available as i64);
        let seen = self.fd_exhaustions.get();
        if stats.exhaustions > seen {
            self.fd_exhaustions.inc_by(stats.exhaustions - seen);
        }
    }
}

impl Default for ServerMetrics {
    fn default() -> Self {
        Self::new()
    }
}
