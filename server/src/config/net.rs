//! `[net]`: the bounds every listener of crescentd keeps against a hostile or broken network
//! (docs/configuration.md, "Network bounds"). The defaults keep a 2-core, 24 GiB node alive
//! under floods of idle, slow or lying connections: at most `*_max_connections` at once, each
//! holding at most one frame or body (`http.max_body_bytes`) that grows only as bytes arrive.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::{invalid, ConfigError};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NetConfig {
    /// Most open HTTP connections (the whole listener); more wait in the kernel's backlog.
    pub http_max_connections: usize,
    /// Longest wait for a request's head (line and headers) after the connection opens or
    /// the previous request ends (408 and close beyond it).
    pub http_head_timeout_ms: u64,
    /// Longest wait for a whole request body once its head arrived (408 and close beyond it).
    pub http_body_timeout_ms: u64,
    /// An idle keep-alive connection is closed after this long.
    pub http_keep_alive_secs: u64,
    /// Most open RPC connections; the next one is answered with handshake status 2 (busy).
    pub rpc_max_connections: usize,
    /// Longest wait for the 8-byte RPC handshake after accept.
    pub rpc_handshake_timeout_ms: u64,
    /// Longest wait from a frame's first byte to its last.
    pub rpc_frame_timeout_ms: u64,
    /// A handshaken RPC connection idle (between frames) this long is closed; 0 never. Long
    /// by default: owners keep one idle connection as their server watch (docs/rebuild.md).
    pub rpc_idle_timeout_secs: u64,
    /// Most open connections on the embedded segment's transfer listener.
    pub transfer_max_connections: usize,
    /// Most open connections on the HA replication listener (handshaking ones and the
    /// standby's session); one more is closed at once. Small: one standby follows at a time.
    pub replication_max_connections: usize,
    /// Longest wait for a whole replication Hello after accept (closed beyond it, without
    /// displacing the standby that is following).
    pub replication_handshake_timeout_ms: u64,
    /// Spare descriptors held back for the journal and the snapshotter, released to let them
    /// open a file when the process runs out (a flood of connections must not stop them).
    pub fd_reserve: usize,
}

impl Default for NetConfig {
    fn default() -> Self {
        Self {
            http_max_connections: 512,
            http_head_timeout_ms: 5_000,
            http_body_timeout_ms: 15_000,
            http_keep_alive_secs: 75,
            rpc_max_connections: 512,
            rpc_handshake_timeout_ms: 5_000,
            rpc_frame_timeout_ms: 15_000,
            rpc_idle_timeout_secs: 3_600,
            transfer_max_connections: 256,
            replication_max_connections: 8,
            replication_handshake_timeout_ms: 5_000,
            fd_reserve: 8,
        }
    }
}

impl NetConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        let counts = [
            ("net.http_max_connections", self.http_max_connections),
            ("net.rpc_max_connections", self.rpc_max_connections),
            (
                "net.transfer_max_connections",
                self.transfer_max_connections,
            ),
        ];
        for (key, n) in counts {
            if !(1..=65_536).contains(&n) {
                return Err(invalid(key, format!("{n} is outside 1..=65536")));
            }
        }
        let timeouts = [
            ("net.http_head_timeout_ms", self.http_head_timeout_ms),
            ("net.http_body_timeout_ms", self.http_body_timeout_ms),
            (
                "net.rpc_handshake_timeout_ms",
                self.rpc_handshake_timeout_ms,
            ),
            ("net.rpc_frame_timeout_ms", self.rpc_frame_timeout_ms),
            (
                "net.replication_handshake_timeout_ms",
                self.replication_handshake_timeout_ms,
            ),
        ];
        for (key, ms) in timeouts {
            if !(100..=600_000).contains(&ms) {
                return Err(invalid(key, format!("{ms} is outside 100..=600000 ms")));
            }
        }
        // The session and its replacement (a standby reconnecting) need two.
        if !(2..=1024).contains(&self.replication_max_connections) {
            return Err(invalid(
                "net.replication_max_connections",
                format!("{} is outside 2..=1024", self.replication_max_connections),
            ));
        }
        if !(1..=86_400).contains(&self.http_keep_alive_secs) {
            return Err(invalid(
                "net.http_keep_alive_secs",
                format!("{} is outside 1..=86400", self.http_keep_alive_secs),
            ));
        }
        if self.rpc_idle_timeout_secs > 86_400 * 7 {
            return Err(invalid(
                "net.rpc_idle_timeout_secs",
                format!("{} is above 604800 (7 days)", self.rpc_idle_timeout_secs),
            ));
        }
        if self.fd_reserve > 64 {
            return Err(invalid(
                "net.fd_reserve",
                format!("{} is above 64", self.fd_reserve),
            ));
        }
        Ok(())
    }

    pub fn http_head_timeout(&self) -> Duration {
        Duration::from_millis(self.http_head_timeout_ms)
    }

    pub fn http_body_timeout(&self) -> Duration {
        Duration::from_millis(self.http_body_timeout_ms)
    }

    pub fn replication_handshake_timeout(&self) -> Duration {
        Duration::from_millis(self.replication_handshake_timeout_ms)
    }

    /// The RPC listener's bounds.
    pub fn rpc_limits(&self, max_body: usize) -> RpcLimits {
        RpcLimits {
            max_body,
            max_connections: self.rpc_max_connections,
            handshake_timeout: Duration::from_millis(self.rpc_handshake_timeout_ms),
            frame_timeout: Duration::from_millis(self.rpc_frame_timeout_ms),
            idle_timeout: (self.rpc_idle_timeout_secs > 0)
                .then(|| Duration::from_secs(self.rpc_idle_timeout_secs)),
        }
    }
}

/// What one RPC listener allows (from [`NetConfig`] and `http.max_body_bytes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RpcLimits {
    /// Largest frame body.
    pub max_body: usize,
    pub max_connections: usize,
    pub handshake_timeout: Duration,
    pub frame_timeout: Duration,
    /// `None`: idle connections stay open.
    pub idle_timeout: Option<Duration>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use std::path::Path;

    #[test]
    fn defaults_validate_and_bad_values_name_their_key() {
        NetConfig::default().validate().unwrap();
        for (toml, key) in [
            (
                "[net]\nrpc_max_connections = 0\n",
                "net.rpc_max_connections",
            ),
            (
                "[net]\nhttp_body_timeout_ms = 5\n",
                "net.http_body_timeout_ms",
            ),
            (
                "[net]\nhttp_keep_alive_secs = 0\n",
                "net.http_keep_alive_secs",
            ),
            ("[net]\nfd_reserve = 1000\n", "net.fd_reserve"),
            (
                "[net]\nreplication_max_connections = 1\n",
                "net.replication_max_connections",
            ),
            (
                "[net]\nreplication_max_connections = 5000\n",
                "net.replication_max_connections",
            ),
            (
                "[net]\nreplication_handshake_timeout_ms = 50\n",
                "net.replication_handshake_timeout_ms",
            ),
        ] {
            let c = Config::from_toml(Path::new("x.toml"), toml).unwrap();
            let err = c.validate().unwrap_err().to_string();
            assert!(err.contains(key), "{toml}: {err}");
        }
        let c =
            Config::from_toml(Path::new("x.toml"), "[net]\nrpc_idle_timeout_secs = 0\n").unwrap();
        c.validate().unwrap();
        assert_eq!(c.net.rpc_limits(1024).idle_timeout, None);
    }
}
