//! Choosing the data plane from configuration.
//!
//! ```toml
//! [transport]
//! kind = "tcp"                 # the default
//! listen = "0.0.0.0:0"
//!
//! # or
//! [transport]
//! kind = "ffi"
//! library = "/opt/te/libtransfer_engine.so"
//! local_server_name = "node-a"
//! ```

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::ffi::{FfiConfig, FfiTransport};
use crate::metrics::TransportMetrics;
use crate::tcp::{TcpConfig, TcpTransport};
use crate::transport::Transport;

/// Which transport to run, with its settings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum TransportConfig {
    Tcp(TcpConfig),
    Ffi(FfiConfig),
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig::Tcp(TcpConfig::default())
    }
}

/// Starts the configured transport.
pub async fn build_transport(
    config: &TransportConfig,
    metrics: TransportMetrics,
) -> Result<Arc<dyn Transport>> {
    Ok(match config {
        TransportConfig::Tcp(tcp) => Arc::new(TcpTransport::start(tcp.clone(), metrics).await?),
        TransportConfig::Ffi(ffi) => Arc::new(FfiTransport::load(ffi.clone(), metrics)?),
    })
}
