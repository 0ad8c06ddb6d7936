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
        let r = &registry;
        let process = crate::process_metrics::ProcessMetrics::register(r).expect("valid metric");
        let net = NetMetrics::register(r);
        Self {
            process,
            http_requests: counter_vec(
                r,
                "crescent_http_requests_total",
                "HTTP requests by route, method and code",
                &["route", "method", "code"],
            ),
            http_latency: histogram_vec(
                r,
                HistogramOpts::new(
                    "crescent_http_request_seconds",
                    "HTTP request latency by route",
                )
                .buckets(prometheus::exponential_buckets(0.0001, 2.0, 18).expect("buckets")),
                &["route"],
            ),
            up: gauge(r, "crescent_up", "1 while crescentd is serving"),
            term: gauge(r, "crescent_term", "The term this node writes under"),
            last_seq: gauge(r, "crescent_journal_last_seq", "Highest seq assigned"),
            commit_seq: gauge(
                r,
                "crescent_commit_seq",
                "Commit watermark: the highest seq acknowledged to clients (in sync \
                 replication, durable on both nodes)",
            ),
            replication_lag_records: gauge(
                r,
                "crescent_replication_lag_records",
                "On an HA active: records durable here that the standby has not acknowledged",
            ),
            replication_lag_bytes: gauge(
                r,
                "crescent_replication_lag_bytes",
                "On an HA active: frame bytes of those records (in flight exactly, unsent ones \
                 at the average frame size)",
            ),
            owners_expired: counter(
                r,
                "crescent_owners_expired_total",
                "Storage owners removed because they stopped heartbeating",
            ),
            rpc_requests: net.rpc_requests,
            rpc_latency: net.rpc_latency,
            rpc_connections: net.rpc_connections,
            rpc_accepted: net.rpc_accepted,
            rpc_protocol_errors: net.rpc_protocol_errors,
            accept_failures: net.accept_failures,
            connections_closed: net.connections_closed,
            fd_reserve_available: net.fd_reserve_available,
            fd_exhaustions: net.fd_exhaustions,
            tls_handshake_failures: net.tls_handshake_failures,
            registry,
        }
    }
}

/// The RPC fast path's and the listeners' metrics (a part of [`ServerMetrics`]).
struct NetMetrics {
    rpc_requests: IntCounterVec,
    rpc_latency: HistogramVec,
    rpc_connections: IntGauge,
    rpc_accepted: IntCounterVec,
    rpc_protocol_errors: IntCounterVec,
    accept_failures: IntCounterVec,
    connections_closed: IntCounterVec,
    fd_reserve_available: IntGauge,
    fd_exhaustions: IntCounter,
    tls_handshake_failures: IntCounterVec,
}

impl NetMetrics {
    fn register(r: &Registry) -> Self {
        Self {
            rpc_requests: counter_vec(
                r,
                "crescent_rpc_requests_total",
                "RPC fast-path requests by op and code",
                &["op", "code"],
            ),
            rpc_latency: histogram_vec(
                r,
                HistogramOpts::new(
                    "crescent_rpc_request_seconds",
                    "RPC fast-path request handling time by op",
                )
                .buckets(prometheus::exponential_buckets(0.000_001, 2.0, 22).expect("buckets")),
                &["op"],
            ),
            rpc_connections: gauge(r, "crescent_rpc_connections", "Open RPC connections"),
            rpc_accepted: counter_vec(
                r,
                "crescent_rpc_connections_accepted_total",
                "RPC connections accepted, by socket (tcp, local)",
                &["socket"],
            ),
            rpc_protocol_errors: counter_vec(
                r,
                "crescent_rpc_protocol_errors_total",
                "RPC connections closed for a protocol violation, by reason",
                &["reason"],
            ),
            accept_failures: counter_vec(
                r,
                "crescent_accept_failures_total",
                "Failed accepts (out of descriptors and the like) by listener",
                &["listener"],
            ),
            connections_closed: counter_vec(
                r,
                "crescent_net_connections_closed_total",
                "Connections closed on a [net] bound, by listener and reason",
                &["listener", "reason"],
            ),
            fd_reserve_available: gauge(
                r,
                "crescent_fd_reserve_available",
                "Spare descriptors held for the journal and snapshotter",
            ),
            fd_exhaustions: counter(
                r,
                "crescent_fd_exhaustions_total",
                "File opens that found the process out of descriptors and used the reserve",
            ),
            tls_handshake_failures: counter_vec(
                r,
                "crescent_tls_handshake_failures_total",
                "Failed TLS handshakes by listener and reason",
                &["listener", "reason"],
            ),
        }
    }
}

fn counter(r: &Registry, name: &str, help: &str) -> IntCounter {
    let c = IntCounter::new(name, help).expect("valid metric");
    r.register(Box::new(c.clone()))
        .expect("metric registered once");
    c
}

fn gauge(r: &Registry, name: &str, help: &str) -> IntGauge {
    let g = IntGauge::new(name, help).expect("valid metric");
    r.register(Box::new(g.clone()))
        .expect("metric registered once");
    g
}

fn counter_vec(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let c = IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric");
    r.register(Box::new(c.clone()))
        .expect("metric registered once");
    c
}

fn histogram_vec(r: &Registry, opts: HistogramOpts, labels: &[&str]) -> HistogramVec {
    let h = HistogramVec::new(opts, labels).expect("valid metric");
    r.register(Box::new(h.clone()))
        .expect("metric registered once");
    h
}

impl ServerMetrics {
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
