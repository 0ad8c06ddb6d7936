//! The snapshot crate's one error type, classified like every other crate's errors.

use std::path::PathBuf;

pub use crescent_journal::error::ErrorClass;
use crescent_journal::JournalError;

pub type Result<T, E = SnapshotError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("snapshot io error on {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// Bytes that fail a checksum or do not parse: bit rot, a foreign file, a bad write.
    #[error("snapshot {} is corrupt in section {section}: {reason}", file.display())]
    Corrupt {
        file: PathBuf,
        section: String,
        reason: String,
    },

    /// The file ends before its trailer: a write that never completed (or a copy cut short).
    #[error("snapshot {} is truncated: {reason}", file.display())]
    Truncated { file: PathBuf, reason: String },

    /// Written by a newer binary; reading it could silently drop state, so we refuse.
    #[error("snapshot {} has file format version {found}, this binary supports up to {supported}", file.display())]
    UnsupportedFormat {
        file: PathBuf,
        found: u32,
        supported: u32,
    },

    /// A section written with a newer schema than this binary understands.
    #[error("snapshot {} section {section} has schema version {found}, this binary supports up to {supported}", file.display())]
    UnsupportedSchema {
        file: PathBuf,
        section: String,
        found: u32,
        supported: u32,
    },

    /// A section marked required that this binary does not know: its state cannot be dropped.
    #[error("snapshot {} has required section {section} that this binary does not know", file.display())]
    UnknownRequiredSection { file: PathBuf, section: String },

    /// A section this binary needs is absent.
    #[error("snapshot {} lacks required section {section}", file.display())]
    MissingRequiredSection { file: PathBuf, section: String },

    /// The replay state refused a record or a section (undecodable event, unknown stream, bad
    /// section body). Replaying further would build state the journal does not describe.
    #[error("replay state error {context}: {source}")]
    State {
        context: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },

    /// The journal no longer holds the records between the snapshot and its tail.
    #[error("journal gap: restore needs records from seq {needed_from} (after {}), but the journal's first seq is {journal_first}", snapshot_desc(.snapshot))]
    JournalGap {
        snapshot: Option<PathBuf>,
        needed_from: u64,
        journal_first: u64,
    },

    /// The snapshot is ahead of the journal: they belong to different histories.
    #[error("snapshot {} is at seq {snapshot_seq} but the journal ends at seq {journal_last}", file.display())]
    JournalBehindSnapshot {
        file: PathBuf,
        snapshot_seq: u64,
        journal_last: u64,
    },

    /// The journal's records do not continue the chain or the seq order the state is at.
    #[error("journal does not continue from seq {after} ({}): {reason}", snapshot_desc(.snapshot))]
    Discontinuity {
        snapshot: Option<PathBuf>,
        after: u64,
        reason: String,
    },

    #[error("section name {0:?} is invalid: {1}")]
    InvalidSection(String, &'static str),

    #[error(transparent)]
    Journal(#[from] JournalError),

    /// The snapshotter thread is gone (stopped, or stopped by an earlier fault).
    #[error("snapshotter stopped: {0}")]
    Stopped(String),
}

fn snapshot_desc(p: &Option<PathBuf>) -> String {
    match p {
        Some(p) => format!("snapshot {}", p.display()),
        None => "no snapshot, the empty state".to_string(),
    }
}

impl SnapshotError {
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        SnapshotError::Io {
            path: path.into(),
            source,
        }
    }

    pub fn state(
        context: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        SnapshotError::State {
            context: context.into(),
            source: Box::new(source),
        }
    }

    /// Damage a reader may skip past (an older valid snapshot can replace the damaged one):
    /// checksum failures and truncation. Version and schema problems are never skippable:
    /// using an older snapshot instead would be a silent downgrade.
    pub fn is_damage(&self) -> bool {
        matches!(
            self,
            SnapshotError::Corrupt { .. } | SnapshotError::Truncated { .. }
        )
    }

    pub fn class(&self) -> ErrorClass {
        match self {
            SnapshotError::InvalidSection(..) => ErrorClass::User,
            SnapshotError::Stopped(_) => ErrorClass::Retryable,
            SnapshotError::Journal(e) => e.class(),
            SnapshotError::Io { .. }
            | SnapshotError::Corrupt { .. }
            | SnapshotError::Truncated { .. }
            | SnapshotError::UnsupportedFormat { .. }
            | SnapshotError::UnsupportedSchema { .. }
            | SnapshotError::UnknownRequiredSection { .. }
            | SnapshotError::MissingRequiredSection { .. }
            | SnapshotError::State { .. }
            | SnapshotError::JournalGap { .. }
            | SnapshotError::JournalBehindSnapshot { .. }
            | SnapshotError::Discontinuity { .. } => ErrorClass::Fatal,
        }
    }
}
