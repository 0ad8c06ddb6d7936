//! The client's one error type.

use crescent_wire::{ApiError, ErrorCode};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// crescentd answered with a wire error (stable code).
    #[error("{0}")]
    Api(ApiError),
    /// crescentd could not be reached or the connection broke.
    #[error("cannot reach crescentd at {server}: {source}")]
    Connect {
        server: String,
        #[source]
        source: reqwest::Error,
    },
    /// The answer could not be decoded.
    #[error("unexpected answer from crescentd: {0}")]
    Protocol(String),
    /// The caller passed something unusable.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

impl ClientError {
    /// The wire code, when the server sent one.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ClientError::Api(e) => Some(e.code),
            _ => None,
        }
    }

    /// Whether retrying the same request may succeed.
    pub fn retryable(&self) -> bool {
        match self {
            ClientError::Api(e) => e.retryable,
            ClientError::Connect { .. } => true,
            ClientError::Protocol(_) | ClientError::InvalidArgument(_) => false,
        }
    }

    /// A stable code string for scripts (`--json` output and exit codes).
    pub fn code_str(&self) -> &'static str {
        match self {
            ClientError::Api(e) => e.code.as_str(),
            ClientError::Connect { .. } => "UNAVAILABLE",
            ClientError::Protocol(_) => "INTERNAL",
            ClientError::InvalidArgument(_) => "INVALID_ARGUMENT",
        }
    }
}
