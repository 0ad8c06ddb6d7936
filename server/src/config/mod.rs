//! crescentd configuration: defaults < TOML file < environment < command-line flags.
//!
//! Every option is documented in docs/configuration.md with its default. Unknown keys and
//! out-of-range values fail closed at startup with the offending key named.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crescent_journal::RecoveryMode;
use serde::{Deserialize, Serialize};

pub mod auth;
pub mod cold;
mod ha;
pub mod mesh;
pub mod net;
pub mod sched;
mod store;
pub mod tls;
pub mod transport;

pub use self::ha::{HaSettings, ReplicationMode};
pub use self::store::StoreSettings;

/// Which journal backend stores the OpLog.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum JournalBackendKind {
    /// Segmented append-only files with exact fdatasync semantics (default).
    File,
    /// sled 0.34 (kept as an alternative; its flush is not a device flush).
    Sled,
}

impl JournalBackendKind {
    pub fn as_str(self) -> &'static str {
        match self {
            JournalBackendKind::File => "file",
            JournalBackendKind::Sled => "sled",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Where the journal, snapshots and the data-dir marker live.
    pub data_dir: PathBuf,
    /// HTTP listen address of the control plane.
    pub listen: SocketAddr,
    pub journal: JournalConfig,
    pub snapshot: SnapshotConfig,
    pub http: HttpConfig,
    pub log: LogConfig,
    pub store: StoreSettings,
    pub ha: HaSettings,
    /// `[mesh]`: this cluster as one of a mesh (docs/scale-out.md).
    pub mesh: crate::config::mesh::MeshSettings,
    /// `[weights]`: managed weight revision defaults (validated at startup, fail closed).
    pub weights: crescent_weights::WeightConfig,
    /// The cold tier (`[cold]`).
    pub cold: crate::config::cold::ColdSettings,
    /// Listener bounds (`[net]`).
    pub net: crate::config::net::NetConfig,
    /// Credentials (`[auth]`, docs/security.md).
    pub auth: crate::config::auth::AuthSettings,
    /// TLS on HTTP, RPC and replication (`[tls]`, docs/security.md "TLS").
    pub tls: crate::config::tls::TlsSettings,
    /// Per-tenant fair scheduling of store requests (`[scheduling]`, docs/tenants.md "Soft
    /// isolation").
    pub scheduling: crate::config::sched::SchedulingSettings,
    /// How crescentd reaches owners' segments (`[transport]`: a transfer engine beside TCP).
    pub transport: crate::config::transport::TransportSettings,
    /// `[[tenants]]`: quota policies created if absent at startup (docs/tenants.md, "Policy
    /// bootstrap").
    pub tenants: Vec<TenantPolicyConfig>,
    /// `[tenant_default]`: the limits of every tenant without a policy (docs/tenants.md,
    /// "Default limits"); unlimited when left out.
    pub tenant_default: TenantDefaultConfig,
}

/// `[tenant_default]`: limits for tenants without a stored policy (left out: unlimited).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TenantDefaultConfig {
    pub max_bytes: Option<u64>,
    pub max_objects: Option<u64>,
}

/// One `[[tenants]]` entry: a tenant's hard limits (left out: unlimited) and its fairness
/// weight (docs/tenants.md, "Soft isolation").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantPolicyConfig {
    pub name: String,
    #[serde(default)]
    pub max_bytes: Option<u64>,
    #[serde(default)]
    pub max_objects: Option<u64>,
    /// Its share of the scheduler's turns relative to other tenants (1 ..= 1000).
    #[serde(default = "default_weight")]
    pub weight: u32,
}

fn default_weight() -> u32 {
    1
}

/// Largest `[[tenants]]` `weight`: a turn's budget times it must stay far from overflow.
pub const MAX_TENANT_WEIGHT: u32 = 1000;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct JournalConfig {
    pub backend: JournalBackendKind,
    pub recovery_mode: RecoveryMode,
    /// Size of one journal segment file (file backend), preallocated.
    pub segment_bytes: u64,
    /// Largest single record accepted.
    pub max_record_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SnapshotConfig {
    /// Write a snapshot after this many new events.
    pub every_events: u64,
    /// Write a snapshot after this many seconds if there are new events.
    pub every_secs: u64,
    /// Snapshots kept; the journal is truncated behind the oldest one.
    pub retain: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// Largest request body accepted.
    pub max_body_bytes: usize,
    /// HTTP worker threads (0 = one per core).
    pub workers: usize,
    /// Seconds to let in-flight requests finish on SIGTERM.
    pub shutdown_timeout_secs: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// A tracing filter directive (`info`, `crescent=debug,actix_web=warn`, ...).
    pub level: String,
    pub format: LogFormat,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from("./crescent-data"),
            listen: "127.0.0.1:7480".parse().expect("valid default address"),
            journal: JournalConfig::default(),
            snapshot: SnapshotConfig::default(),
            http: HttpConfig::default(),
            log: LogConfig::default(),
            store: StoreSettings::default(),
            ha: HaSettings::default(),
            mesh: crate::config::mesh::MeshSettings::default(),
            weights: crescent_weights::WeightConfig::default(),
            cold: crate::config::cold::ColdSettings::default(),
            net: crate::config::net::NetConfig::default(),
            auth: crate::config::auth::AuthSettings::default(),
            tls: crate::config::tls::TlsSettings::default(),
            scheduling: crate::config::sched::SchedulingSettings::default(),
            transport: crate::config::transport::TransportSettings::default(),
            tenants: Vec::new(),
            tenant_default: TenantDefaultConfig::default(),
        }
    }
}

impl Default for JournalConfig {
    fn default() -> Self {
        Self {
            backend: JournalBackendKind::File,
            recovery_mode: RecoveryMode::TolerateTailCorruption,
            segment_bytes: 64 << 20,
            max_record_bytes: 64 << 20,
        }
    }
}

impl Default for SnapshotConfig {
    fn default() -> Self {
        Self {
            every_events: 100_000,
            every_secs: 300,
            retain: 3,
        }
    }
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            max_body_bytes: 16 << 20,
            workers: 0,
            shutdown_timeout_secs: 10,
        }
    }
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            level: "info".into(),
            format: LogFormat::Text,
        }
    }
}

/// Longest snapshot period: a week (a larger one would overflow the timer's deadline).
const MAX_SNAPSHOT_EVERY_SECS: u64 = 7 * 86_400;

/// Why a configuration was refused. Always names the key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid config file {}: {message}", path.display())]
    Parse { path: PathBuf, message: String },
    #[error("invalid value for {key}: {message}")]
    Invalid { key: &'static str, message: String },
}

pub(crate) fn invalid(key: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key,
        message: message.into(),
    }
}

impl Config {
    /// Parses a TOML document (unknown keys are refused).
    pub fn from_toml(path: &Path, text: &str) -> Result<Self, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string(),
        })
    }

    /// Reads and parses a TOML file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_toml(path, &text)
    }

    /// Checks every range; called after all sources are merged.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.data_dir.as_os_str().is_empty() {
            return Err(invalid("data_dir", "must not be empty"));
        }
        if let Err(e) = self.weights.validate() {
            return Err(invalid("weights", e.to_string()));
        }
        self.validate_tenants()?;
        self.journal.validate()?;
        let s = &self.snapshot;
        if s.every_events == 0 {
            return Err(invalid("snapshot.every_events", "must be at least 1"));
        }
        if !(1..=MAX_SNAPSHOT_EVERY_SECS).contains(&s.every_secs) {
            return Err(invalid(
                "snapshot.every_secs",
                format!("{} is outside 1..={MAX_SNAPSHOT_EVERY_SECS}", s.every_secs),
            ));
        }
        if !(1..=100).contains(&s.retain) {
            return Err(invalid(
                "snapshot.retain",
                format!("{} is outside 1..=100", s.retain),
            ));
        }
        let h = &self.http;
        if !(1024..=1 << 30).contains(&h.max_body_bytes) {
            return Err(invalid(
                "http.max_body_bytes",
                format!("{} is outside 1 KiB..=1 GiB", h.max_body_bytes),
            ));
        }
        if h.workers > 256 {
            return Err(invalid("http.workers", "must be at most 256"));
        }
        if h.shutdown_timeout_secs > 3600 {
            return Err(invalid(
                "http.shutdown_timeout_secs",
                "must be at most 3600",
            ));
        }
        if tracing_subscriber::EnvFilter::try_new(&self.log.level).is_err() {
            return Err(invalid(
                "log.level",
                format!("{:?} is not a valid filter directive", self.log.level),
            ));
        }
        self.store.validate()?;
        self.scheduling.validate()?;
        self.cold.validate()?;
        self.net.validate()?;
        self.transport.validate()?;
        self.ha.validate()?;
        self.mesh.validate(&self.ha)?;
        let listeners: Vec<SocketAddr> = std::iter::once(self.listen)
            .chain(self.store.rpc_listen_addr(self.listen))
            .collect();
        self.auth.validate(&listeners)?;
        self.tls.validate(self.ha.enabled())
    }

    /// The snapshotter's settings from `[snapshot]` (the same on an active, a standalone node
    /// and a standby).
    pub fn snapshotter(&self) -> crescent_snapshot::SnapshotterConfig {
        crescent_snapshot::SnapshotterConfig {
            every_events: self.snapshot.every_events,
            every: Duration::from_secs(self.snapshot.every_secs),
            retain: self.snapshot.retain,
            ..crescent_snapshot::SnapshotterConfig::default()
        }
    }

    /// The configuration as TOML (for `crescentd --print-config`).
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("config serializes")
    }
}

#[cfg(test)]
mod tests;

impl JournalConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        // The sled backend is a build option (docs/configuration.md "[journal]"): a binary
        // built without it refuses the setting at startup instead of failing at first open.
        if self.backend == JournalBackendKind::Sled && !cfg!(feature = "sled") {
            return Err(invalid(
                "journal.backend",
                "\"sled\" needs a crescentd built with feature `sled` \
                 (cargo build -p crescent-server --features sled)",
            ));
        }
        if !(64 << 10..=1 << 34).contains(&self.segment_bytes) {
            return Err(invalid(
                "journal.segment_bytes",
                format!("{} is outside 64 KiB..=16 GiB", self.segment_bytes),
            ));
        }
        if !(4096..=1 << 30).contains(&self.max_record_bytes) {
            return Err(invalid(
                "journal.max_record_bytes",
                format!("{} is outside 4 KiB..=1 GiB", self.max_record_bytes),
            ));
        }
        Ok(())
    }
}

impl Config {
    /// `[[tenants]]`: valid names, each once, limits within the aggregate's range.
    fn validate_tenants(&self) -> Result<(), ConfigError> {
        let mut seen = std::collections::BTreeSet::new();
        for t in &self.tenants {
            crescent_store::identity::validate_scope_name("tenant", &t.name)
                .map_err(|e| invalid("tenants.name", e.to_string()))?;
            if !seen.insert(t.name.as_str()) {
                return Err(invalid(
                    "tenants.name",
                    format!("{:?} is listed twice", t.name),
                ));
            }
            if !(1..=MAX_TENANT_WEIGHT).contains(&t.weight) {
                return Err(invalid(
                    "tenants.weight",
                    format!(
                        "{:?}: {} is outside 1..={MAX_TENANT_WEIGHT}",
                        t.name, t.weight
                    ),
                ));
            }
            for (key, v) in [
                ("tenants.max_bytes", t.max_bytes),
                ("tenants.max_objects", t.max_objects),
            ] {
                if v.is_some_and(|v| v > i64::MAX as u64) {
                    return Err(invalid(key, format!("{:?}: at most 2^63 - 1", t.name)));
                }
            }
        }
        let d = &self.tenant_default;
        for (key, v) in [
            ("tenant_default.max_bytes", d.max_bytes),
            ("tenant_default.max_objects", d.max_objects),
        ] {
            if v.is_some_and(|v| v > i64::MAX as u64) {
                return Err(invalid(key, "at most 2^63 - 1"));
            }
        }
        Ok(())
    }
}
