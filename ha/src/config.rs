//! Elector configuration and the key layout of one cluster (the same in etcd and Redis).

use std::time::Duration;

use crate::coordination::CoordinationEndpoint;
use crate::error::HaError;

/// Default lease TTL.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(3);
/// The shortest lease etcd grants (etcd 3.4 raises anything shorter to its own minimum, which
/// would silently break the local deadline arithmetic, so shorter values are refused).
pub const MIN_LEASE_TTL: Duration = Duration::from_secs(2);
/// Longer leases make failover needlessly slow; anything beyond this is surely a unit mistake.
pub const MAX_LEASE_TTL: Duration = Duration::from_secs(300);
/// Longest cluster or node name: both end up in etcd keys and metrics-free log fields.
pub const MAX_NAME_LEN: usize = 128;

/// What one candidate needs to take part in the election of a cluster.
#[derive(Debug, Clone)]
pub struct ElectorConfig {
    /// Where the coordination records live: etcd client URLs (e.g. `http://127.0.0.1:2379`)
    /// or one Redis server.
    pub coordination: CoordinationEndpoint,
    /// Cluster name: the `<cluster>` in `/crescent/<cluster>/...`.
    pub cluster: String,
    /// This node's stable name. It must be unique in the cluster and bound to the node's data
    /// directory: the campaign rule trusts "I was the last leader" by name.
    pub node_name: String,
    /// The address clients and the standby use to reach this node (`HOST:PORT`).
    pub advertise: String,
    /// etcd lease TTL, whole seconds, at least [`MIN_LEASE_TTL`].
    pub lease_ttl: Duration,
    /// Pause between campaign attempts after an etcd error, and the pace of reconnects.
    pub retry_interval: Duration,
    /// Longest a non-leader waits on its etcd watch before re-reading the keys anyway (guards
    /// against a watch that died silently).
    pub recheck_interval: Duration,
    /// Bound on each etcd request made outside the leader's renewal loop (whose requests are
    /// bounded by the local lease deadline instead).
    pub request_timeout: Duration,
    /// A local reason not to campaign, consulted before every campaign (none: never held).
    pub campaign_hold: Option<CampaignHold>,
    /// The highest term this node knows from its own storage (crescentd: its journal's term),
    /// consulted before every campaign. A backend that can lose its term counter (Redis
    /// without persistence) starts the next term above it (docs/ha.md, "Redis").
    pub term_floor: Option<TermFloor>,
}

/// A local lower bound for the next term: see [`ElectorConfig::term_floor`].
#[derive(Clone)]
pub struct TermFloor(pub std::sync::Arc<dyn Fn() -> u64 + Send + Sync>);

impl std::fmt::Debug for TermFloor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TermFloor(..)")
    }
}

/// A local check run before every campaign: `Some(reason)` keeps the node from campaigning
/// (it stays a candidate, follows any leader, and checks again at the next re-read of the
/// keys). crescentd holds while its journal lacks a record it quarantined (docs/ha.md,
/// "A quarantined journal tail").
#[derive(Clone)]
pub struct CampaignHold(pub std::sync::Arc<dyn Fn() -> Option<String> + Send + Sync>);

impl std::fmt::Debug for CampaignHold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CampaignHold(..)")
    }
}

impl ElectorConfig {
    /// A configuration on etcd `endpoints` with the default TTL and intervals.
    pub fn new(
        endpoints: Vec<String>,
        cluster: impl Into<String>,
        node_name: impl Into<String>,
        advertise: impl Into<String>,
    ) -> Self {
        Self::with_coordination(
            CoordinationEndpoint::Etcd(endpoints),
            cluster,
            node_name,
            advertise,
        )
    }

    /// A configuration on any backend with the default TTL and intervals.
    pub fn with_coordination(
        coordination: CoordinationEndpoint,
        cluster: impl Into<String>,
        node_name: impl Into<String>,
        advertise: impl Into<String>,
    ) -> Self {
        ElectorConfig {
            coordination,
            cluster: cluster.into(),
            node_name: node_name.into(),
            advertise: advertise.into(),
            lease_ttl: DEFAULT_LEASE_TTL,
            retry_interval: Duration::from_millis(250),
            recheck_interval: Duration::from_secs(2),
            request_timeout: Duration::from_secs(2),
            campaign_hold: None,
            term_floor: None,
        }
    }

    pub fn with_term_floor(mut self, floor: impl Fn() -> u64 + Send + Sync + 'static) -> Self {
        self.term_floor = Some(TermFloor(std::sync::Arc::new(floor)));
        self
    }

    pub fn with_campaign_hold(
        mut self,
        hold: impl Fn() -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        self.campaign_hold = Some(CampaignHold(std::sync::Arc::new(hold)));
        self
    }

    pub fn with_lease_ttl(mut self, ttl: Duration) -> Self {
        self.lease_ttl = ttl;
        self
    }

    /// Checks every field; the elector refuses to start on any error.
    pub fn validate(&self) -> Result<(), HaError> {
        match &self.coordination {
            CoordinationEndpoint::Etcd(endpoints) => validate_endpoints(endpoints)?,
            CoordinationEndpoint::Redis(url) => validate_redis_url(url)?,
        }
        validate_name("cluster name", &self.cluster)?;
        validate_name("node name", &self.node_name)?;
        if self.advertise.trim().is_empty() {
            return Err(HaError::InvalidConfig(
                "the advertise address is empty".into(),
            ));
        }
        validate_lease_ttl(self.lease_ttl)?;
        for (what, d) in [
            ("retry interval", self.retry_interval),
            ("recheck interval", self.recheck_interval),
            ("request timeout", self.request_timeout),
        ] {
            if d.is_zero() {
                return Err(HaError::InvalidConfig(format!("the {what} is zero")));
            }
        }
        Ok(())
    }

    /// How often the leader renews its lease: six times per TTL, so that between one
    /// acknowledged renewal and the local deadline (TTL - margin = 2/3 TTL) there is room for
    /// the next attempt and at least one retry. A keep-alive is cheap for etcd (the lease
    /// leader answers it without a raft round).
    pub fn renew_interval(&self) -> Duration {
        self.lease_ttl / 6
    }

    /// How much earlier than etcd's own expiry the leader gives up. A third of the TTL covers
    /// scheduling delays between checking the deadline and acting on it, and clock-rate
    /// differences, with a wide margin.
    pub fn deadline_margin(&self) -> Duration {
        self.lease_ttl / 3
    }
}

/// Refuses TTLs below [`MIN_LEASE_TTL`], above [`MAX_LEASE_TTL`] or not in whole seconds.
pub fn validate_lease_ttl(ttl: Duration) -> Result<(), HaError> {
    if ttl < MIN_LEASE_TTL {
        return Err(HaError::InvalidConfig(format!(
            "lease TTL {ttl:?} is below the minimum of {MIN_LEASE_TTL:?}"
        )));
    }
    if ttl > MAX_LEASE_TTL {
        return Err(HaError::InvalidConfig(format!(
            "lease TTL {ttl:?} is above the maximum of {MAX_LEASE_TTL:?}"
        )));
    }
    if ttl.subsec_nanos() != 0 {
        return Err(HaError::InvalidConfig(format!(
            "lease TTL {ttl:?} is not a whole number of seconds (etcd leases are in seconds)"
        )));
    }
    Ok(())
}

pub(crate) fn validate_endpoints(endpoints: &[String]) -> Result<(), HaError> {
    if endpoints.is_empty() {
        return Err(HaError::InvalidConfig("no etcd endpoint given".into()));
    }
    if let Some(bad) = endpoints.iter().find(|e| e.trim().is_empty()) {
        return Err(HaError::InvalidConfig(format!(
            "empty etcd endpoint in {endpoints:?} ({bad:?})"
        )));
    }
    Ok(())
}

/// A Redis URL: `redis://` then HOST:PORT (optionally `user:password@` before it, `/DB` after
/// it); the client parses the rest. TLS (`rediss://`) is not built in.
pub(crate) fn validate_redis_url(url: &str) -> Result<(), HaError> {
    match url.strip_prefix("redis://") {
        Some(rest) if !rest.trim().is_empty() => Ok(()),
        _ => Err(HaError::InvalidConfig(format!(
            "redis endpoint {url:?} is not redis://HOST:PORT"
        ))),
    }
}

/// Names become etcd key components: keep them to a conservative character set so that no
/// name can contain `/` and reach into another cluster's keys.
pub(crate) fn validate_name(what: &str, name: &str) -> Result<(), HaError> {
    if name.is_empty() {
        return Err(HaError::InvalidConfig(format!("the {what} is empty")));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(HaError::InvalidConfig(format!(
            "the {what} {name:?} is longer than {MAX_NAME_LEN} bytes"
        )));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        return Err(HaError::InvalidConfig(format!(
            "the {what} {name:?} contains {c:?}; use letters, digits, '-', '_' and '.'"
        )));
    }
    Ok(())
}

/// The etcd keys of one cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterKeys {
    /// `/crescent/<cluster>/`: every key of the cluster starts with it.
    pub prefix: String,
    /// `/crescent/<cluster>/leader`: bound to the leader's lease; its create_revision is the term.
    pub leader: String,
    /// `/crescent/<cluster>/replication`: the in-sync marker (not lease-bound: it must outlive
    /// the leader that wrote it).
    pub replication: String,
    /// `/crescent/<cluster>/term`: the Redis backend's term counter (etcd needs none: its
    /// revisions are the terms).
    pub term_counter: String,
}

impl ClusterKeys {
    pub fn new(cluster: &str) -> Result<Self, HaError> {
        validate_name("cluster name", cluster)?;
        let prefix = format!("/crescent/{cluster}/");
        Ok(ClusterKeys {
            leader: format!("{prefix}leader"),
            replication: format!("{prefix}replication"),
            term_counter: format!("{prefix}term"),
            prefix,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> ElectorConfig {
        ElectorConfig::new(
            vec!["http://127.0.0.1:2379".into()],
            "c1",
            "a",
            "127.0.0.1:1",
        )
    }

    #[test]
    fn defaults_validate() {
        config().validate().unwrap();
        assert_eq!(config().lease_ttl, Duration::from_secs(3));
    }

    #[test]
    fn ttl_bounds_are_enforced() {
        for bad in [
            Duration::from_secs(1),
            Duration::from_millis(1999),
            Duration::from_millis(2500),
            Duration::from_secs(301),
        ] {
            let err = config().with_lease_ttl(bad).validate().unwrap_err();
            assert!(matches!(err, HaError::InvalidConfig(_)), "{bad:?}: {err}");
            assert_eq!(err.class(), crate::ErrorClass::User);
        }
        config()
            .with_lease_ttl(Duration::from_secs(2))
            .validate()
            .unwrap();
    }

    #[test]
    fn names_cannot_escape_the_cluster_prefix() {
        for bad in ["", "a/b", "..//x", "a b", &"x".repeat(129)] {
            assert!(ClusterKeys::new(bad).is_err(), "{bad:?}");
        }
        let keys = ClusterKeys::new("prod-1").unwrap();
        assert_eq!(keys.leader, "/crescent/prod-1/leader");
        assert_eq!(keys.replication, "/crescent/prod-1/replication");
        let mut c = config();
        c.node_name = "n/1".into();
        assert!(c.validate().is_err());
        let mut c = config();
        c.coordination = CoordinationEndpoint::Etcd(Vec::new());
        assert!(c.validate().is_err());
        for bad in ["", "127.0.0.1:6379", "redis://", "http://x:1"] {
            c.coordination = CoordinationEndpoint::Redis(bad.into());
            assert!(c.validate().is_err(), "{bad:?}");
        }
        c.coordination = CoordinationEndpoint::Redis("redis://127.0.0.1:6379".into());
        c.validate().unwrap();
    }
}
