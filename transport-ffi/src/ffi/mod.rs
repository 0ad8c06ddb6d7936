//! The transfer-engine C-ABI binding (Mooncake's `transfer_engine_c.h` shape). See [`abi`] for
//! the exact header version and how Crescent maps segments onto it.

pub mod abi;
mod binding;

pub use binding::FfiTransport;

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
