//! crescentd's command line. Flags (and their `CRESCENT_*` environment variables) override the
//! config file, which overrides the defaults.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;
use crescent_journal::RecoveryMode;

use crate::config::{Config, ConfigError, JournalBackendKind, LogFormat};

#[derive(Debug, Parser)]
#[command(
    name = "crescentd",
    version,
    about = "Crescent control plane. With no arguments: standalone, data dir ./crescent-data, listening on 127.0.0.1:7480."
)]
pub struct Args {
    /// TOML config file (see docs/configuration.md).
    #[arg(long, env = "CRESCENT_CONFIG")]
    pub config: Option<PathBuf>,
    /// Data directory (journal, snapshots).
    #[arg(long, env = "CRESCENT_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// HTTP listen address.
    #[arg(long, env = "CRESCENT_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// Journal backend.
    #[arg(long, env = "CRESCENT_JOURNAL_BACKEND", value_enum)]
    pub journal_backend: Option<JournalBackendKind>,
    /// What to do with a damaged journal tail: tolerate_tail_corruption or absolute_consistency.
    #[arg(long, env = "CRESCENT_RECOVERY_MODE")]
    pub recovery_mode: Option<RecoveryMode>,
    /// Snapshot after this many events.
    #[arg(long, env = "CRESCENT_SNAPSHOT_EVERY_EVENTS")]
    pub snapshot_every_events: Option<u64>,
    /// Snapshot after this many seconds (when there are new events).
    #[arg(long, env = "CRESCENT_SNAPSHOT_EVERY_SECS")]
    pub snapshot_every_secs: Option<u64>,
    /// Log filter (tracing directive); without it, RUST_LOG, then the config file's log.level.
    #[arg(long, env = "CRESCENT_LOG")]
    pub log: Option<String>,
    /// Log format.
    #[arg(long, env = "CRESCENT_LOG_FORMAT", value_enum)]
    pub log_format: Option<LogFormat>,
    /// RPC fast-path listener: `auto`, `off` or IP:PORT (store.rpc_listen).
    #[arg(long, env = "CRESCENT_RPC_LISTEN")]
    pub rpc_listen: Option<String>,
    /// RPC local socket for clients on this host: `auto`, `off` or an absolute path
    /// (store.rpc_local_socket).
    #[arg(long, env = "CRESCENT_RPC_LOCAL_SOCKET")]
    pub rpc_local_socket: Option<String>,
    /// etcd endpoints (comma-separated): run as one node of an HA pair (ha.etcd).
    #[arg(long, env = "CRESCENT_ETCD", value_delimiter = ',')]
    pub etcd: Option<Vec<String>>,
    /// One Redis server, redis://HOST:PORT: run as one node of an HA pair coordinated through
    /// it instead of etcd (ha.redis).
    #[arg(long, env = "CRESCENT_REDIS", conflicts_with = "etcd")]
    pub redis: Option<String>,
    /// The HA pair's name (ha.cluster).
    #[arg(long, env = "CRESCENT_CLUSTER")]
    pub cluster: Option<String>,
    /// Join the mesh of this name as cluster --cluster (mesh.name; needs --etcd or --redis).
    #[arg(long, env = "CRESCENT_MESH")]
    pub mesh: Option<String>,
    /// This cluster's relative share of the mesh's objects (mesh.weight, default 1).
    #[arg(long, env = "CRESCENT_MESH_WEIGHT")]
    pub mesh_weight: Option<f64>,
    /// HOST:PORT other nodes and clients reach this node's HTTP API at (ha.advertise).
    #[arg(long, env = "CRESCENT_ADVERTISE")]
    pub advertise: Option<String>,
    /// Run without authentication on a non-loopback address (auth.insecure; only without
    /// [auth] secret_file).
    #[arg(long, env = "CRESCENT_INSECURE")]
    pub insecure: bool,
    /// The token signing key file (auth.secret_file).
    #[arg(long, env = "CRESCENT_AUTH_SECRET_FILE")]
    pub auth_secret_file: Option<PathBuf>,
    /// Print the merged configuration as TOML and exit.
    #[arg(long)]
    pub print_config: bool,
    /// Before starting, restore the data dir from this backup (`crescent admin backup`). The
    /// data dir must be new or empty, and the backup must verify; otherwise crescentd exits
    /// with a stable code and changes nothing (docs/operations.md, "Backup and restore").
    #[arg(long, value_name = "BACKUP_DIR")]
    pub restore_from: Option<PathBuf>,
    /// With --restore-from: restore, then exit instead of starting.
    #[arg(long, requires = "restore_from")]
    pub restore_only: bool,
}

impl Args {
    /// Defaults, then the file, then these flags/env; validated.
    pub fn resolve(&self) -> Result<Config, ConfigError> {
        let mut c = match &self.config {
            Some(path) => Config::load(path)?,
            None => Config::default(),
        };
        if let Some(v) = &self.data_dir {
            c.data_dir = v.clone();
        }
        if let Some(v) = self.listen {
            c.listen = v;
        }
        if let Some(v) = self.journal_backend {
            c.journal.backend = v;
        }
        if let Some(v) = self.recovery_mode {
            c.journal.recovery_mode = v;
        }
        if let Some(v) = self.snapshot_every_events {
            c.snapshot.every_events = v;
        }
        if let Some(v) = self.snapshot_every_secs {
            c.snapshot.every_secs = v;
        }
        if let Some(v) = &self.log {
            c.log.level = v.clone();
        }
        if let Some(v) = self.log_format {
            c.log.format = v;
        }
        if let Some(v) = &self.rpc_listen {
            c.store.rpc_listen = v.clone();
        }
        if let Some(v) = &self.rpc_local_socket {
            c.store.rpc_local_socket = v.clone();
        }
        if let Some(v) = &self.etcd {
            c.ha.etcd = v.clone();
        }
        if let Some(v) = &self.redis {
            c.ha.redis = Some(v.clone());
        }
        if let Some(v) = &self.cluster {
            c.ha.cluster = v.clone();
        }
        if let Some(v) = &self.mesh {
            c.mesh.name = Some(v.clone());
        }
        if let Some(v) = self.mesh_weight {
            c.mesh.weight = v;
        }
        if let Some(v) = &self.advertise {
            c.ha.advertise = v.clone();
        }
        if self.insecure {
            c.auth.insecure = true;
        }
        if let Some(v) = &self.auth_secret_file {
            c.auth.secret_file = Some(v.clone());
        }
        c.validate()?;
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_arguments_is_the_embedded_default() {
        let a = Args::try_parse_from(["crescentd"]).unwrap();
        let c = a.resolve().unwrap();
        assert_eq!(c, Config::default());
    }

    #[test]
    fn flags_override_file() {
        let t = tempfile::tempdir().unwrap();
        let f = t.path().join("c.toml");
        std::fs::write(&f, "listen = \"127.0.0.1:1111\"\ndata_dir = \"/a\"\n").unwrap();
        let a = Args::try_parse_from([
            "crescentd",
            "--config",
            f.to_str().unwrap(),
            "--listen",
            "127.0.0.1:2222",
        ])
        .unwrap();
        let c = a.resolve().unwrap();
        assert_eq!(c.listen.to_string(), "127.0.0.1:2222");
        assert_eq!(c.data_dir, PathBuf::from("/a"));
    }

    #[test]
    fn invalid_flag_values_are_refused() {
        assert!(Args::try_parse_from(["crescentd", "--listen", "nope"]).is_err());
        assert!(Args::try_parse_from(["crescentd", "--recovery-mode", "yolo"]).is_err());
        let a = Args::try_parse_from(["crescentd", "--snapshot-every-events", "0"]).unwrap();
        assert!(a.resolve().is_err());
    }

    #[test]
    fn restore_only_needs_a_backup_to_restore_from() {
        assert!(Args::try_parse_from(["crescentd", "--restore-only"]).is_err());
        let a =
            Args::try_parse_from(["crescentd", "--restore-from", "b", "--restore-only"]).unwrap();
        assert_eq!(a.restore_from, Some(PathBuf::from("b")));
        assert!(a.restore_only);
    }
}
