//! The transfer-engine C-ABI binding (Mooncake's `transfer_engine_c.h` shape). See [`abi`] for
//! the exact header version and how Crescent maps segments onto it.

pub mod abi;
mod binding;

pub use binding::FfiTransport;

/// The library of the transfer engine, for a client, owner or crescentd given none in its
/// configuration (docs/configuration.md, "Transfer engine").
pub const LIBRARY_ENV: &str = "CRESCENT_TRANSFER_ENGINE_LIB";
/// Its `metadata_conn_string` (default `P2PHANDSHAKE`; the bundled engine reaches other
/// processes with `file:///dir`).
pub const METADATA_ENV: &str = "CRESCENT_TRANSFER_ENGINE_METADATA";
/// The host the engine serves on and advertises (default 127.0.0.1).
pub const HOST_ENV: &str = "CRESCENT_TRANSFER_ENGINE_HOST";

use serde::{Deserialize, Serialize};

/// Settings of the transfer-engine transport.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FfiConfig {
    /// Path of the shared library to dlopen.
    pub library: String,
    /// `createTransferEngine` arguments.
    pub metadata_conn_string: String,
    pub local_server_name: String,
    pub ip_or_host_name: String,
    pub rpc_port: u64,
    /// Protocol passed to `installTransport` (e.g. "tcp", "rdma").
    pub protocol: String,
    /// `location` used when registering plain local buffers (e.g. "cpu:0").
    pub local_location: String,
    pub batch_timeout_ms: u64,
    pub max_batch: usize,
    pub max_transfer_len: u64,
}

impl Default for FfiConfig {
    fn default() -> Self {
        Self {
            library: String::new(),
            metadata_conn_string: "P2PHANDSHAKE".into(),
            local_server_name: "crescent".into(),
            ip_or_host_name: "127.0.0.1".into(),
            rpc_port: 0,
            protocol: "tcp".into(),
            local_location: "cpu:0".into(),
            batch_timeout_ms: 30_000,
            max_batch: 4096,
            max_transfer_len: 256 << 20,
        }
    }
}

impl FfiConfig {
    /// The engine the environment names ([`LIBRARY_ENV`], [`METADATA_ENV`], [`HOST_ENV`]);
    /// `None` when [`LIBRARY_ENV`] is unset or empty. The server name is unique per process.
    pub fn from_env() -> Option<FfiConfig> {
        let library = std::env::var(LIBRARY_ENV).ok().filter(|l| !l.is_empty())?;
        let defaults = FfiConfig::default();
        let var = |name: &str, default: String| {
            std::env::var(name)
                .ok()
                .filter(|v| !v.is_empty())
                .unwrap_or(default)
        };
        Some(FfiConfig {
            library,
            metadata_conn_string: var(METADATA_ENV, defaults.metadata_conn_string.clone()),
            ip_or_host_name: var(HOST_ENV, defaults.ip_or_host_name.clone()),
            local_server_name: format!("crescent-{}", std::process::id()),
            ..defaults
        })
    }
}
