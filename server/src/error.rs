//! Why crescentd could not start or stopped, and why a journaled command did not run.

use crescent_actors::runtime::RuntimeError;
use crescent_actors::WireCoded;
use crescent_wire::ErrorCode;

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

/// A journaled command that did not run, with its wire code: the one mapping of the actor
/// runtime's failures to codes. Services carry it in their own errors; the API layer
/// (`api::error`) turns it into the wire error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct CommandFailed {
    pub code: ErrorCode,
    pub message: String,
}

impl<E> From<RuntimeError<E>> for CommandFailed
where
    E: std::error::Error + WireCoded,
{
    fn from(err: RuntimeError<E>) -> Self {
        use crescent_journal::JournalError;
        let code = match &err {
            RuntimeError::Domain(e) => e.wire_code(),
            RuntimeError::Journal(j) => match j {
                JournalError::Fenced { .. } => ErrorCode::Fenced,
                JournalError::RecordTooLarge { .. } => ErrorCode::InvalidArgument,
                JournalError::Closed => ErrorCode::Unavailable,
                _ => ErrorCode::DurabilityFailed,
            },
            _ => ErrorCode::Unavailable,
        };
        let message = match &err {
            RuntimeError::Domain(e) => e.to_string(),
            RuntimeError::Journal(j) => j.to_string(),
            other => other.to_string(),
        };
        CommandFailed { code, message }
    }
}
