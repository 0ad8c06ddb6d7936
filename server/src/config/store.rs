//! The `[store]` section: the object directory, the embedded segment and owner liveness.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use crescent_store::StoreConfig;
use crescent_wire::store::Placement;
use serde::{Deserialize, Serialize};

use crate::config::{invalid, ConfigError};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreSettings {
    /// Size of the segment a standalone crescentd mounts for itself; 0 disables it. The memory
    /// is reserved lazily by the OS, so an unused segment costs nothing.
    pub embedded_segment_bytes: u64,
    /// Address of the embedded segment's TCP transfer listener (port 0 picks one).
    pub transfer_listen: String,
    /// Endpoint advertised to clients for the embedded segment, if not the bound address
    /// (needed when `transfer_listen` is a wildcard such as 0.0.0.0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transfer_advertise: Option<String>,
    /// Owners silent for this long lose their segments and replicas.
    pub client_ttl_secs: u64,
    /// Read lease granted by `get`.
    pub lease_ttl_ms: u64,
    /// Longest a chain of lease renewals protects an object.
    pub max_lease_ms: u64,
    /// A put not ended within this time may be pre-empted by a new put of the same key.
    pub discard_timeout_secs: u64,
    /// The space of a pre-empted or abandoned put is reclaimed this long after its start.
    pub release_timeout_secs: u64,
    /// Eviction starts above this fraction of total capacity.
    pub high_watermark: f64,
    /// One eviction frees this fraction of total capacity.
    pub evict_ratio: f64,
    /// Largest value a put may announce.
    pub max_object_bytes: u64,
    /// Most value bytes one tenant's puts in progress may hold together (0: no bound;
    /// docs/tenants.md, "Soft isolation").
    pub max_inflight_bytes_per_tenant: u64,
    /// Placement used when a put asks for the wire default (`random`).
    pub default_placement: Placement,
    /// Period of housekeeping: lease expiry, stale puts, eviction, owner expiry.
    pub housekeeping_interval_ms: u64,
    /// The binary RPC fast path's listener (docs/api.md, "RPC fast path"): `auto` (default)
    /// binds the HTTP listen address's IP on a port the OS picks; `off` disables it; or an
    /// explicit `IP:PORT`. Clients find the bound address in `GET /v1/rpc` and `/healthz`.
    pub rpc_listen: String,
    /// The RPC fast path's local socket (docs/api.md, "Local socket"): a Unix stream socket
    /// serving the same protocol to clients on this host, which reach it instead of TCP when
    /// `GET /v1/rpc` names it. `auto` (default): `rpc.sock` in the data dir, or none with
    /// `[tls]` (whose clients expect every RPC connection verified); `off`; or an absolute
    /// path (also with `[tls]`).
    pub rpc_local_socket: String,
    /// After answering, an RPC connection polls for the client's next request this long (µs)
    /// before sleeping: much lower latency for a busy client at the price of a core spinning
    /// that long per answer (and other connections on that thread waiting). 0 disables it.
    pub rpc_busy_poll_us: u64,
    /// Serve (and advertise in `GET /v1/rpc` `features`) the compact batch ops of the RPC fast
    /// path (`compact_batch_v1`, docs/api.md). Off makes this server look like one that
    /// predates them (clients use the classic batch ops); for compatibility tests and rollback.
    pub rpc_compact_batch: bool,
    /// Serve (and advertise) the compact batch put_end (`compact_put_end_v1`); needs
    /// `rpc_compact_batch`. Off makes this server look like one that has ops 17 and 18 but
    /// predates op 19 (clients end their puts with the classic batch put_end).
    pub rpc_compact_put_end: bool,
    /// After a restart or failover, object operations wait for the owners' replays at most
    /// this long before the node serves DEGRADED.
    pub rebuild_degraded_timeout_secs: u64,
}

impl Default for StoreSettings {
    fn default() -> Self {
        let store = StoreConfig::default();
        Self {
            embedded_segment_bytes: 1 << 30,
            transfer_listen: "127.0.0.1:0".into(),
            transfer_advertise: None,
            client_ttl_secs: 10,
            lease_ttl_ms: store.lease_ttl_ms,
            max_lease_ms: store.max_lease_ms,
            discard_timeout_secs: store.discard_timeout_ms / 1000,
            release_timeout_secs: store.release_timeout_ms / 1000,
            high_watermark: store.high_watermark,
            evict_ratio: store.evict_ratio,
            max_object_bytes: store.max_object_bytes,
            max_inflight_bytes_per_tenant: store.max_inflight_bytes_per_tenant,
            default_placement: Placement::Random,
            housekeeping_interval_ms: 1000,
            rpc_listen: RPC_LISTEN_AUTO.into(),
            rpc_local_socket: RPC_LISTEN_AUTO.into(),
            rpc_busy_poll_us: 50,
            rpc_compact_batch: true,
            rpc_compact_put_end: true,
            rebuild_degraded_timeout_secs: 120,
        }
    }
}

/// `store.rpc_listen`: bind the HTTP address's IP, OS-chosen port.
pub const RPC_LISTEN_AUTO: &str = "auto";
/// `store.rpc_listen`: no RPC listener (HTTP only).
pub const RPC_LISTEN_OFF: &str = "off";

/// Longest Unix socket path (`sun_path` holds 108 bytes with its terminating NUL).
const MAX_SOCKET_PATH: usize = 107;

/// Largest embedded segment: 1 TiB.
const MAX_EMBEDDED_BYTES: u64 = 1 << 40;

impl StoreSettings {
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_segment_and_transfer()?;
        self.validate_times()?;
        self.validate_limits()?;
        self.validate_rpc()
    }

    /// The embedded segment's size and the transfer listener's addresses.
    fn validate_segment_and_transfer(&self) -> Result<(), ConfigError> {
        let e = self.embedded_segment_bytes;
        if e != 0 && !(1 << 20..=MAX_EMBEDDED_BYTES).contains(&e) {
            return Err(invalid(
                "store.embedded_segment_bytes",
                format!("{e} is neither 0 (disabled) nor within 1 MiB..=1 TiB"),
            ));
        }
        if e > usize::MAX as u64 {
            return Err(invalid(
                "store.embedded_segment_bytes",
                "larger than this platform's address space",
            ));
        }
        if self.transfer_listen.parse::<SocketAddr>().is_err() {
            return Err(invalid(
                "store.transfer_listen",
                format!("{:?} is not an IP:PORT address", self.transfer_listen),
            ));
        }
        if let Some(a) = &self.transfer_advertise {
            let ok = a
                .rsplit_once(':')
                .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
            if !ok {
                return Err(invalid(
                    "store.transfer_advertise",
                    format!("{a:?} is not HOST:PORT"),
                ));
            }
        }
        Ok(())
    }

    /// Client TTL, leases, and the discard and release timeouts.
    fn validate_times(&self) -> Result<(), ConfigError> {
        if !(1..=3600).contains(&self.client_ttl_secs) {
            return Err(invalid("store.client_ttl_secs", "must be within 1..=3600"));
        }
        if !(100..=3_600_000).contains(&self.lease_ttl_ms) {
            return Err(invalid(
                "store.lease_ttl_ms",
                "must be within 100..=3600000",
            ));
        }
        if self.max_lease_ms < self.lease_ttl_ms || self.max_lease_ms > 86_400_000 {
            return Err(invalid(
                "store.max_lease_ms",
                "must be at least store.lease_ttl_ms and at most 86400000",
            ));
        }
        if !(1..=86_400).contains(&self.discard_timeout_secs) {
            return Err(invalid(
                "store.discard_timeout_secs",
                "must be within 1..=86400",
            ));
        }
        if self.release_timeout_secs < self.discard_timeout_secs
            || self.release_timeout_secs > 86_400
        {
            return Err(invalid(
                "store.release_timeout_secs",
                "must be at least store.discard_timeout_secs and at most 86400",
            ));
        }
        Ok(())
    }

    /// Watermarks, object size, housekeeping, RPC busy polling and the rebuild timeout.
    fn validate_limits(&self) -> Result<(), ConfigError> {
        if !(self.high_watermark > 0.0 && self.high_watermark <= 1.0) {
            return Err(invalid("store.high_watermark", "must be in (0, 1]"));
        }
        if !(self.evict_ratio > 0.0 && self.evict_ratio <= 1.0) {
            return Err(invalid("store.evict_ratio", "must be in (0, 1]"));
        }
        if self.max_object_bytes == 0 || self.max_object_bytes > 1 << 40 {
            return Err(invalid(
                "store.max_object_bytes",
                "must be within 1..=1 TiB",
            ));
        }
        if !(10..=60_000).contains(&self.housekeeping_interval_ms) {
            return Err(invalid(
                "store.housekeeping_interval_ms",
                "must be within 10..=60000",
            ));
        }
        if self.rpc_busy_poll_us > 10_000 {
            return Err(invalid("store.rpc_busy_poll_us", "must be at most 10000"));
        }
        // Multiplied into milliseconds (docs/configuration.md): bounded so it cannot wrap.
        if !(1..=86_400).contains(&self.rebuild_degraded_timeout_secs) {
            return Err(invalid(
                "store.rebuild_degraded_timeout_secs",
                format!(
                    "{} is outside 1..=86400",
                    self.rebuild_degraded_timeout_secs
                ),
            ));
        }
        Ok(())
    }

    /// The RPC listeners: the local socket and the TCP address.
    fn validate_rpc(&self) -> Result<(), ConfigError> {
        let l = self.rpc_local_socket.as_str();
        if l != RPC_LISTEN_AUTO && l != RPC_LISTEN_OFF && !Path::new(l).is_absolute() {
            return Err(invalid(
                "store.rpc_local_socket",
                format!("{l:?} is neither \"auto\", \"off\" nor an absolute path"),
            ));
        }
        if l.len() > MAX_SOCKET_PATH {
            return Err(invalid(
                "store.rpc_local_socket",
                format!("{l:?} is longer than a Unix socket path may be ({MAX_SOCKET_PATH} bytes)"),
            ));
        }
        let r = self.rpc_listen.as_str();
        if r != RPC_LISTEN_AUTO && r != RPC_LISTEN_OFF && r.parse::<SocketAddr>().is_err() {
            return Err(invalid(
                "store.rpc_listen",
                format!("{r:?} is neither \"auto\", \"off\" nor an IP:PORT address"),
            ));
        }
        Ok(())
    }

    /// Where the RPC listener binds, given the HTTP listen address; `None` when it is off.
    pub fn rpc_listen_addr(&self, http_listen: SocketAddr) -> Option<SocketAddr> {
        match self.rpc_listen.as_str() {
            RPC_LISTEN_OFF => None,
            RPC_LISTEN_AUTO => Some(SocketAddr::new(http_listen.ip(), 0)),
            explicit => explicit.parse().ok(),
        }
    }

    /// Where the RPC local socket is created, given the data dir and whether `[tls]` is on;
    /// `None` when it is off, or when `auto` would make a path too long for a Unix socket
    /// (the TCP listener still serves every client then).
    pub fn rpc_local_path(&self, data_dir: &Path, tls: bool) -> Option<PathBuf> {
        let path = match self.rpc_local_socket.as_str() {
            RPC_LISTEN_OFF => return None,
            RPC_LISTEN_AUTO if tls => return None,
            RPC_LISTEN_AUTO => data_dir.join("rpc.sock"),
            explicit => PathBuf::from(explicit),
        };
        (path.as_os_str().len() <= MAX_SOCKET_PATH).then_some(path)
    }

    /// The object directory's tunables.
    pub fn store_config(&self) -> StoreConfig {
        StoreConfig {
            lease_ttl_ms: self.lease_ttl_ms,
            max_lease_ms: self.max_lease_ms,
            discard_timeout_ms: self.discard_timeout_secs * 1000,
            release_timeout_ms: self.release_timeout_secs * 1000,
            high_watermark: self.high_watermark,
            evict_ratio: self.evict_ratio,
            max_object_bytes: self.max_object_bytes,
            max_inflight_bytes_per_tenant: self.max_inflight_bytes_per_tenant,
            ..StoreConfig::default()
        }
    }

    /// `rebuild_degraded_timeout_secs` in milliseconds (validated to 1..=86400 s).
    pub fn rebuild_degraded_timeout_ms(&self) -> u64 {
        self.rebuild_degraded_timeout_secs.saturating_mul(1000)
    }

    pub fn client_ttl_ms(&self) -> i64 {
        self.client_ttl_secs as i64 * 1000
    }

    /// How often owners are told to heartbeat: four times per TTL, so one or two lost
    /// heartbeats never expire a live owner.
    pub fn heartbeat_interval_ms(&self) -> u64 {
        (self.client_ttl_secs * 1000 / 4).clamp(50, 5000)
    }
}
