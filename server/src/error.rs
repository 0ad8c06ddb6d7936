//! Why crescentd could not start or stopped.

use crate::config::ConfigError;
use crate::datadir::DataDirError;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    DataDir(#[from] DataDirError),
    #[error("journal: {0}")]
    Journal(#[from] crescent_journal::JournalError),
    #[error("snapshot: {0}")]
    Snapshot(#[from] crescent_snapshot::SnapshotError),
    #[error("recovery: {0}")]
    Recovery(String),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("http server: {0}")]
    Http(std::io::Error),
}

impl ServerError {
    /// Process exit code: 2 for configuration mistakes, 1 for everything else.
    pub fn exit_code(&self) -> i32 {
        match self {
            ServerError::Config(_) => 2,
            _ => 1,
        }
    }
}
