//! The TCP transport (the default data plane). See [`protocol`] for the frame layout.

mod client;
mod connection;
mod pool;
pub mod protocol;
mod segment_table;
mod server;

pub use client::TcpTransport;
pub use segment_table::NotifyHandler;

use serde::{Deserialize, Serialize};

/// Settings of the TCP transport.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TcpConfig {
    /// Address of this process's transfer listener (`host:port`, port 0 picks one); `None`
    /// makes a client-only transport that cannot serve segments.
    pub listen: Option<String>,
    /// Endpoint peers should use, if not the bound address (e.g. behind 0.0.0.0).
    pub advertise: Option<String>,
    /// Connections kept per remote endpoint (the most used at once).
    pub connections_per_endpoint: usize,
    pub connect_timeout_ms: u64,
    /// Deadline of a whole batch; unfinished transfers then fail with a timeout.
    pub batch_timeout_ms: u64,
    /// How long the listener waits for the rest of a frame, or for a peer to take an answer.
    pub io_timeout_ms: u64,
    /// Longest single transfer; the listener treats a longer frame as a protocol violation.
    pub max_transfer_len: u64,
    /// Most descriptors in one batch.
    pub max_batch: usize,
    /// Copy directly when the endpoint is a listener of this process.
    pub same_process_fast_path: bool,
    /// Most connections the listener serves at once; one more is answered HELLO_BUSY and
    /// closed.
    pub max_connections: usize,
    /// The listener closes a connection idle (between requests) this long; 0 never (pooled
    /// client connections wait there between transfers).
    pub idle_timeout_ms: u64,
}

impl Default for TcpConfig {
    fn default() -> Self {
        Self {
            listen: None,
            advertise: None,
            connections_per_endpoint: 4,
            connect_timeout_ms: 3_000,
            batch_timeout_ms: 30_000,
            io_timeout_ms: 30_000,
            max_transfer_len: 256 << 20,
            max_batch: 4096,
            same_process_fast_path: true,
            max_connections: 256,
            idle_timeout_ms: 0,
        }
    }
}
