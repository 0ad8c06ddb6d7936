//! [`ClientOptions`]: where a client finds crescentd (a static server list, the leader record
//! in etcd or Redis, or both) and how long it follows a failover.

use std::time::Duration;

use crate::error::ClientError;
use crate::failover::FailoverConfig;
use crate::http::base_url;

/// How a [`crate::CrescentClient`] finds the leader.
///
/// - `servers`: addresses (`HOST:PORT` or `http://` URLs) tried in order; after a connection
///   failure the next one is tried, and a standby's NOT_LEADER answer names the active.
/// - `etcd_endpoints` + `cluster`: follow `/crescent/<cluster>/leader` (the HA pair's leader
///   key). `servers` is then optional: it is the fallback while etcd is unreachable.
/// - `redis` + `cluster`: the same through a pair coordinated by Redis (`crescentd --redis`,
///   docs/ha.md "Redis"), polled rather than watched.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientOptions {
    pub servers: Vec<String>,
    pub etcd_endpoints: Vec<String>,
    /// `redis://HOST:PORT[/DB]` of the pair's Redis (exclusive with `etcd_endpoints`).
    pub redis: Option<String>,
    pub cluster: Option<String>,
    /// A mesh of clusters in `etcd_endpoints` or `redis` ([`crate::MeshClient`],
    /// docs/scale-out.md): requests go to each object's authority cluster. Exclusive with
    /// `cluster` and `servers`.
    pub mesh: Option<String>,
    pub failover: FailoverConfig,
    /// Never read a cold-only object's backing file directly, even on its device's host:
    /// every restore goes through the server (see `crate::cold_restore`).
    pub no_local_cold_restore: bool,
    /// The credential sent with every request (`Authorization: Bearer` on HTTP, in the
    /// handshake of every RPC connection), when crescentd has `[auth]` on (docs/security.md).
    pub token: Option<BearerToken>,
    /// A PEM file of the CA that signed crescentd's certificate (`[tls]`, docs/security.md
    /// "TLS"). Set: servers are verified against it alone, a bare `HOST:PORT` is reached with
    /// `https://`, and the RPC fast path with TLS.
    pub ca_file: Option<std::path::PathBuf>,
    /// Most items of one batch request of a tenant (0: the wire limit, `MAX_BATCH`); a longer
    /// batch is sent as several (docs/tenants.md, "Soft isolation").
    pub max_batch_items_per_tenant: usize,
    /// Most value bytes of one batch put request (0: no bound); one larger value goes alone.
    pub max_batch_bytes: u64,
    /// Most value bytes one tenant's batch puts on this client (all its handles) have in
    /// flight together (0: no bound); more wait until earlier ones complete or fail.
    pub max_inflight_bytes_per_tenant: u64,
    /// The transfer engine to load beside TCP, for segments mounted with transport
    /// `transfer_engine` (docs/transport.md, "Transfer-engine segments"). `None`: the one the
    /// environment names (`CRESCENT_TRANSFER_ENGINE_LIB`, `FfiConfig::from_env`), if any.
    pub transfer_engine: Option<crescent_transport::ffi::FfiConfig>,
}

/// A bearer token. Its `Debug` never shows it, so options can be logged.
#[derive(Clone, PartialEq, Eq)]
pub struct BearerToken(String);

impl BearerToken {
    /// A token as `crescent token issue` prints it (surrounding whitespace dropped).
    pub fn new(token: impl Into<String>) -> Self {
        Self(token.into().trim().to_string())
    }

    /// The `Authorization` header value.
    pub fn header_value(&self) -> String {
        format!("{}{}", crescent_wire::auth::AUTHORIZATION_SCHEME, self.0)
    }

    /// The tenant a `client` token binds its holder to, as the token states it (not
    /// verified here: crescentd checks every request). Object ids without a tenant take it,
    /// so what this client records (owner notices, replays) names the tenant crescentd
    /// stores the object under.
    pub fn tenant(&self) -> Option<String> {
        crescent_auth::read_unverified(&self.0)
            .filter(|c| c.role == crescent_auth::Role::Client)
            .and_then(|c| c.tenant)
    }

    /// The token itself (the RPC handshake carries it without the scheme).
    pub(crate) fn secret(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BearerToken(<redacted>)")
    }
}

/// Splits a comma-separated list (`A,B`), dropping empty items and surrounding spaces.
pub fn split_list(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

impl ClientOptions {
    /// A static list: `servers` is `HOST:PORT[,HOST:PORT...]`.
    pub fn servers(servers: &str) -> Self {
        Self {
            servers: split_list(servers),
            ..Self::default()
        }
    }

    /// Follow the leader of `cluster` through etcd (`endpoints` is `URL[,URL...]`).
    pub fn etcd(endpoints: &str, cluster: &str) -> Self {
        Self {
            etcd_endpoints: split_list(endpoints),
            cluster: Some(cluster.to_string()),
            ..Self::default()
        }
    }

    /// Follow the leader of `cluster` through Redis (`url` is `redis://HOST:PORT[/DB]`).
    pub fn redis(url: &str, cluster: &str) -> Self {
        Self {
            redis: Some(url.to_string()),
            cluster: Some(cluster.to_string()),
            ..Self::default()
        }
    }

    /// Route through mesh `mesh`, whose membership is in etcd (`endpoints`, `URL[,URL...]`).
    pub fn etcd_mesh(endpoints: &str, mesh: &str) -> Self {
        Self {
            etcd_endpoints: split_list(endpoints),
            mesh: Some(mesh.to_string()),
            ..Self::default()
        }
    }

    /// Route through mesh `mesh`, whose membership is in Redis (`url`).
    pub fn redis_mesh(url: &str, mesh: &str) -> Self {
        Self {
            redis: Some(url.to_string()),
            mesh: Some(mesh.to_string()),
            ..Self::default()
        }
    }

    /// The same options with overall failover deadline `timeout`.
    pub fn with_failover_timeout(mut self, timeout: Duration) -> Self {
        self.failover.timeout = timeout;
        self
    }

    /// The same options sending `token` with every request.
    pub fn with_token(mut self, token: BearerToken) -> Self {
        self.token = Some(token);
        self
    }

    /// The same options verifying crescentd with the CA of `ca_file` (TLS).
    pub fn with_ca_file(mut self, ca_file: impl Into<std::path::PathBuf>) -> Self {
        self.ca_file = Some(ca_file.into());
        self
    }

    /// Whether the leader is followed through etcd.
    pub fn uses_etcd(&self) -> bool {
        !self.etcd_endpoints.is_empty()
    }

    /// Whether the leader is followed through a coordination backend (etcd or Redis).
    pub fn follows_leader(&self) -> bool {
        self.uses_etcd() || self.redis.is_some()
    }

    /// Checks the combination before anything is contacted.
    pub fn validate(&self) -> Result<(), ClientError> {
        if self.max_batch_items_per_tenant > crescent_wire::store::MAX_BATCH {
            return Err(ClientError::InvalidArgument(format!(
                "max_batch_items_per_tenant: {} is above the wire limit {}",
                self.max_batch_items_per_tenant,
                crescent_wire::store::MAX_BATCH
            )));
        }
        for s in &self.servers {
            base_url(s)?;
        }
        if self.uses_etcd() && self.redis.is_some() {
            return Err(ClientError::InvalidArgument(
                "give etcd endpoints (--etcd) or a Redis (--redis), not both".into(),
            ));
        }
        if self.mesh.is_some() {
            return self.validate_mesh();
        }
        match (self.follows_leader(), &self.cluster) {
            (true, None) => {
                return Err(ClientError::InvalidArgument(
                    "etcd endpoints or a Redis need a cluster name (--cluster)".into(),
                ))
            }
            (false, Some(_)) => {
                return Err(ClientError::InvalidArgument(
                    "a cluster name needs etcd endpoints (--etcd) or a Redis (--redis)".into(),
                ))
            }
            (false, None) if self.servers.is_empty() => {
                return Err(ClientError::InvalidArgument(
                    "no crescentd address: give a server (--server), or etcd or Redis and a \
                     cluster (--etcd or --redis, --cluster)"
                        .into(),
                ))
            }
            _ => {}
        }
        self.validate_failover()
    }

    /// A mesh: a backend, no cluster and no servers (each cluster's leader comes from the
    /// membership record).
    fn validate_mesh(&self) -> Result<(), ClientError> {
        if !self.follows_leader() {
            return Err(ClientError::InvalidArgument(
                "a mesh (--mesh) needs etcd endpoints (--etcd) or a Redis (--redis)".into(),
            ));
        }
        if self.cluster.is_some() || !self.servers.is_empty() {
            return Err(ClientError::InvalidArgument(
                "a mesh (--mesh) finds its clusters in the membership record: give no \
                 --cluster or --server with it"
                    .into(),
            ));
        }
        self.validate_failover()
    }

    fn validate_failover(&self) -> Result<(), ClientError> {
        let f = &self.failover;
        if f.timeout.is_zero() || f.initial_backoff.is_zero() || f.max_backoff < f.initial_backoff {
            return Err(ClientError::InvalidArgument(format!(
                "failover timing must be positive with max_backoff >= initial_backoff: {f:?}"
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_are_split_and_trimmed() {
        assert_eq!(split_list(" a:1, b:2 ,,"), vec!["a:1", "b:2"]);
        assert!(split_list("").is_empty());
        assert_eq!(ClientOptions::servers("a:1,b:2").servers.len(), 2);
    }

    #[test]
    fn a_token_is_never_printed() {
        let o = ClientOptions::servers("a:1").with_token(BearerToken::new(" s3cr3t\n"));
        assert!(!format!("{o:?}").contains("s3cr3t"));
        assert_eq!(o.token.unwrap().header_value(), "Bearer s3cr3t");
    }

    #[test]
    fn combinations_are_checked() {
        assert!(ClientOptions::servers("127.0.0.1:1").validate().is_ok());
        assert!(ClientOptions::etcd("http://127.0.0.1:2379", "c")
            .validate()
            .is_ok());
        let e = ClientOptions::default().validate().unwrap_err();
        assert_eq!(e.code_str(), "INVALID_ARGUMENT");
        let no_cluster = ClientOptions {
            etcd_endpoints: vec!["http://127.0.0.1:2379".into()],
            ..ClientOptions::default()
        };
        assert!(no_cluster.validate().is_err());
        let no_etcd = ClientOptions {
            cluster: Some("c".into()),
            ..ClientOptions::servers("a:1")
        };
        assert!(no_etcd.validate().is_err());
        let redis = ClientOptions::redis("redis://127.0.0.1:6379", "c");
        assert!(redis.validate().is_ok() && redis.follows_leader() && !redis.uses_etcd());
        let both = ClientOptions {
            etcd_endpoints: vec!["http://127.0.0.1:2379".into()],
            ..redis
        };
        assert!(both.validate().is_err(), "etcd or Redis, not both");
        let mesh = ClientOptions::etcd_mesh("http://127.0.0.1:2379", "m");
        assert!(mesh.validate().is_ok());
        assert!(ClientOptions::redis_mesh("redis://127.0.0.1:6379", "m")
            .validate()
            .is_ok());
        let no_backend = ClientOptions {
            mesh: Some("m".into()),
            ..ClientOptions::default()
        };
        assert!(no_backend.validate().is_err(), "a mesh needs a backend");
        for with in [
            ClientOptions {
                cluster: Some("c".into()),
                ..mesh.clone()
            },
            ClientOptions {
                servers: vec!["a:1".into()],
                ..mesh.clone()
            },
        ] {
            assert!(
                with.validate().is_err(),
                "a mesh names no cluster or server"
            );
        }
        let zero = ClientOptions::servers("a:1").with_failover_timeout(Duration::ZERO);
        assert!(zero.validate().is_err());
        assert!(ClientOptions::servers(" , ").validate().is_err());
    }
}
