//! The tool's one error type and how each error maps to an exit code.
//!
//! Exit codes (stable, scripts rely on them): `0` ok, `1` a fault was found or the data is
//! invalid, `2` bad usage or a data dir this binary cannot read at all.

use std::path::PathBuf;

use crescent_actors::WorldError;
use crescent_journal::error::ErrorClass;
use crescent_journal::JournalError;
use crescent_snapshot::SnapshotError;

/// Exit code: success.
pub const EXIT_OK: u8 = 0;
/// Exit code: a fault was found, or the data is invalid.
pub const EXIT_FAULT: u8 = 1;
/// Exit code: bad usage, or a data dir that cannot be read.
pub const EXIT_USAGE: u8 = 2;

pub type Result<T, E = ToolError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// The arguments ask for something impossible (a seq beyond the end, ...).
    #[error("{0}")]
    Usage(String),

    /// The path is not a readable crescent data dir (missing, not a dir, no marker, IO error).
    #[error("{}: {reason}", path.display())]
    Unreadable { path: PathBuf, reason: String },

    /// Written by a newer format than this binary understands: refuse rather than misread.
    #[error("data dir {} has format version {found}; this crescent-replay supports up to {supported} (use a newer crescent-replay)", path.display())]
    NewerFormat {
        path: PathBuf,
        found: u32,
        supported: u32,
    },

    /// A data dir whose journal backend cannot be read safely offline.
    #[error("data dir {} uses the {backend:?} journal backend: unsupported for {backend} data dirs ({why})", path.display())]
    UnsupportedBackend {
        path: PathBuf,
        backend: String,
        why: &'static str,
    },

    /// The marker file exists but is not a valid marker.
    #[error("data dir {} has an invalid marker: {reason}", path.display())]
    BadMarker { path: PathBuf, reason: String },

    /// The data is damaged or inconsistent in a way that stops the command.
    #[error("{0}")]
    Invalid(String),

    #[error(transparent)]
    Journal(#[from] JournalError),

    #[error(transparent)]
    Snapshot(#[from] SnapshotError),

    #[error(transparent)]
    World(#[from] WorldError),

    /// Writing the output failed (other than a closed pipe, which ends output quietly).
    #[error("cannot write output: {0}")]
    Output(#[from] std::io::Error),
}

impl ToolError {
    pub fn unreadable(path: impl Into<PathBuf>, reason: impl std::fmt::Display) -> Self {
        ToolError::Unreadable {
            path: path.into(),
            reason: reason.to_string(),
        }
    }

    /// User / retryable / fatal, as every crate classifies its errors.
    pub fn class(&self) -> ErrorClass {
        match self {
            ToolError::Usage(_)
            | ToolError::Unreadable { .. }
            | ToolError::NewerFormat { .. }
            | ToolError::UnsupportedBackend { .. } => ErrorClass::User,
            ToolError::Output(_) => ErrorClass::Retryable,
            ToolError::Journal(e) => e.class(),
            ToolError::Snapshot(e) => e.class(),
            ToolError::BadMarker { .. } | ToolError::Invalid(_) | ToolError::World(_) => {
                ErrorClass::Fatal
            }
        }
    }

    /// The process exit code for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            ToolError::Usage(_)
            | ToolError::Unreadable { .. }
            | ToolError::NewerFormat { .. }
            | ToolError::UnsupportedBackend { .. }
            | ToolError::Output(_) => EXIT_USAGE,
            ToolError::Journal(JournalError::Io { .. }) => EXIT_USAGE,
            ToolError::Snapshot(SnapshotError::Io { .. }) => EXIT_USAGE,
            ToolError::Journal(JournalError::UnsupportedVersion { .. })
            | ToolError::Snapshot(SnapshotError::UnsupportedFormat { .. })
            | ToolError::Snapshot(SnapshotError::UnsupportedSchema { .. }) => EXIT_USAGE,
            ToolError::BadMarker { .. }
            | ToolError::Invalid(_)
            | ToolError::Journal(_)
            | ToolError::Snapshot(_)
            | ToolError::World(_) => EXIT_FAULT,
        }
    }
}
