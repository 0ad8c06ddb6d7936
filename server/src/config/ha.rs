//! The `[ha]` section: running as one node of an HA pair behind etcd or Redis (docs/ha.md).

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::{invalid, ConfigError};

/// How the active's commit relates to its standby.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplicationMode {
    /// Commit waits for the standby's durable ack while it is in sync (the default): an
    /// acknowledged command survives the loss of either node.
    Sync,
    /// Commit follows local durability; the standby trails (and may not take over).
    Async,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HaSettings {
    /// etcd endpoints; empty (and no `redis`): standalone.
    pub etcd: Vec<String>,
    /// One Redis server (`redis://HOST:PORT`) as the coordination backend instead of etcd
    /// (docs/ha.md, "Redis").
    pub redis: Option<String>,
    /// The pair's name (keys live under /crescent/<cluster>/).
    pub cluster: String,
    /// The HTTP address other nodes and clients reach this node at (HOST:PORT).
    pub advertise: String,
    /// etcd lease TTL in seconds (at least 2).
    pub lease_ttl_secs: u64,
    /// The replication listener (the standby connects here); port 0 picks one. Unset: the
    /// advertised host on a port the OS picks (never every interface by default).
    pub replication_listen: Option<SocketAddr>,
    pub mode: ReplicationMode,
    /// In sync mode, how long commit may wait for a silent standby before the active marks it
    /// out of sync in etcd and commits alone.
    pub sync_timeout_ms: u64,
    /// Mount the embedded memory segment in HA mode too (default false: objects live on
    /// `crescent owner` processes, whose tables survive a failover).
    pub embedded_segment: bool,
    /// When the term ends (or a rewind is due), re-execute crescentd in place so it rejoins as
    /// a standby without a supervisor (default true); false: exit 75/76 for the supervisor.
    pub restart_in_place: bool,
    /// Most snapshot bytes per message when this node, as the active, sends its snapshot to a
    /// reseeding standby (docs/ha.md, "Reseeding"): what each side holds in memory at once.
    pub reseed_chunk_bytes: u64,
}

/// Bounds of `ha.reseed_chunk_bytes`.
const RESEED_CHUNK_MIN: u64 = 4 << 10;
const RESEED_CHUNK_MAX: u64 = crescent_journal::replication::MAX_SNAPSHOT_CHUNK as u64;

impl Default for HaSettings {
    fn default() -> Self {
        Self {
            etcd: Vec::new(),
            redis: None,
            cluster: "crescent".into(),
            advertise: String::new(),
            lease_ttl_secs: 3,
            replication_listen: None,
            mode: ReplicationMode::Sync,
            sync_timeout_ms: 1000,
            embedded_segment: false,
            restart_in_place: true,
            reseed_chunk_bytes: 1 << 20,
        }
    }
}

impl HaSettings {
    pub fn enabled(&self) -> bool {
        !self.etcd.is_empty() || self.redis.is_some()
    }

    /// Where the election runs: Redis when `redis` is set, else the etcd endpoints.
    pub fn coordination(&self) -> crescent_ha::CoordinationEndpoint {
        match &self.redis {
            Some(url) => crescent_ha::CoordinationEndpoint::Redis(url.clone()),
            None => crescent_ha::CoordinationEndpoint::Etcd(self.etcd.clone()),
        }
    }

    pub fn lease_ttl(&self) -> Duration {
        Duration::from_secs(self.lease_ttl_secs)
    }

    pub fn sync_timeout(&self) -> Duration {
        Duration::from_millis(self.sync_timeout_ms)
    }

    /// The host part of `advertise` (brackets of an IPv6 literal removed).
    pub fn advertise_host(&self) -> &str {
        let host = self
            .advertise
            .rsplit_once(':')
            .map(|(h, _)| h)
            .unwrap_or_default();
        host.strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host)
    }

    /// Where the replication listener binds: `replication_listen`, or else the advertised
    /// host (resolved) on a port the OS picks.
    pub fn replication_bind(&self) -> Result<SocketAddr, ConfigError> {
        if let Some(addr) = self.replication_listen {
            return Ok(addr);
        }
        let host = self.advertise_host();
        let unresolved = |why: String| {
            invalid(
                "ha.replication_listen",
                format!(
                    "unset, so it binds the advertised host {host:?}, which {why}; set it to \
                     an IP:PORT of this machine"
                ),
            )
        };
        (host, 0)
            .to_socket_addrs()
            .map_err(|e| unresolved(format!("does not resolve ({e})")))?
            .next()
            .ok_or_else(|| unresolved("resolves to no address".into()))
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        if !self.enabled() {
            return Ok(());
        }
        if !(RESEED_CHUNK_MIN..=RESEED_CHUNK_MAX).contains(&self.reseed_chunk_bytes) {
            return Err(invalid(
                "ha.reseed_chunk_bytes",
                format!(
                    "{} is outside {RESEED_CHUNK_MIN}..={RESEED_CHUNK_MAX}",
                    self.reseed_chunk_bytes
                ),
            ));
        }
        if self.etcd.iter().any(|e| e.trim().is_empty()) {
            return Err(invalid("ha.etcd", "empty endpoint"));
        }
        if let Some(url) = &self.redis {
            if !self.etcd.is_empty() {
                return Err(invalid(
                    "ha.redis",
                    "set either ha.etcd or ha.redis, not both",
                ));
            }
            if url
                .strip_prefix("redis://")
                .is_none_or(|rest| rest.trim().is_empty())
            {
                return Err(invalid(
                    "ha.redis",
                    format!("{url:?} is not redis://HOST:PORT"),
                ));
            }
        }
        crescent_ha::validate_lease_ttl(self.lease_ttl())
            .map_err(|e| invalid("ha.lease_ttl_secs", e.to_string()))?;
        if self.cluster.is_empty()
            || !self
                .cluster
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        {
            return Err(invalid(
                "ha.cluster",
                format!("{:?} must be [A-Za-z0-9._-]+", self.cluster),
            ));
        }
        if self.advertise.parse::<SocketAddr>().is_err()
            && !self
                .advertise
                .rsplit_once(':')
                .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p != 0))
        {
            return Err(invalid(
                "ha.advertise",
                format!(
                    "{:?} is not HOST:PORT (required with ha.etcd or ha.redis)",
                    self.advertise
                ),
            ));
        }
        if !(100..=60_000).contains(&self.sync_timeout_ms) {
            return Err(invalid(
                "ha.sync_timeout_ms",
                format!("{} is outside 100..=60000", self.sync_timeout_ms),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ha() -> HaSettings {
        HaSettings {
            etcd: vec!["http://127.0.0.1:2379".into()],
            advertise: "127.0.0.1:7480".into(),
            ..HaSettings::default()
        }
    }

    #[test]
    fn standalone_needs_nothing_and_ha_validates() {
        assert!(HaSettings::default().validate().is_ok());
        assert!(ha().validate().is_ok());
        let bad = [
            HaSettings {
                advertise: String::new(),
                ..ha()
            },
            HaSettings {
                advertise: "host:0".into(),
                ..ha()
            },
            HaSettings {
                lease_ttl_secs: 1,
                ..ha()
            },
            HaSettings {
                cluster: "a/b".into(),
                ..ha()
            },
            HaSettings {
                sync_timeout_ms: 5,
                ..ha()
            },
            HaSettings {
                etcd: vec![" ".into()],
                ..ha()
            },
            HaSettings {
                redis: Some("redis://127.0.0.1:6379".into()),
                ..ha()
            },
            HaSettings {
                etcd: Vec::new(),
                redis: Some("127.0.0.1:6379".into()),
                ..ha()
            },
            HaSettings {
                etcd: Vec::new(),
                redis: Some("redis://".into()),
                ..ha()
            },
        ];
        for b in bad {
            assert!(b.validate().is_err(), "{b:?}");
        }
        assert!(HaSettings {
            advertise: "node-a.example:7480".into(),
            ..ha()
        }
        .validate()
        .is_ok());
        let on_redis = HaSettings {
            etcd: Vec::new(),
            redis: Some("redis://127.0.0.1:6379".into()),
            ..ha()
        };
        assert!(on_redis.enabled());
        assert!(on_redis.validate().is_ok());
        assert_eq!(
            on_redis.coordination(),
            crescent_ha::CoordinationEndpoint::Redis("redis://127.0.0.1:6379".into())
        );
    }

    #[test]
    fn the_replication_listener_binds_the_advertised_host_by_default() {
        assert_eq!(
            ha().replication_bind().unwrap(),
            "127.0.0.1:0".parse::<SocketAddr>().unwrap()
        );
        let v6 = HaSettings {
            advertise: "[::1]:7480".into(),
            ..ha()
        };
        assert_eq!(v6.advertise_host(), "::1");
        assert_eq!(
            v6.replication_bind().unwrap(),
            "[::1]:0".parse::<SocketAddr>().unwrap()
        );
        let explicit = HaSettings {
            replication_listen: Some("0.0.0.0:7500".parse().unwrap()),
            ..ha()
        };
        assert_eq!(
            explicit.replication_bind().unwrap(),
            "0.0.0.0:7500".parse::<SocketAddr>().unwrap()
        );
        let unresolvable = HaSettings {
            advertise: "no-such-host.invalid:7480".into(),
            ..ha()
        };
        let err = unresolvable.replication_bind().unwrap_err().to_string();
        assert!(err.contains("ha.replication_listen"), "{err}");
    }
}
