//! The journal's one error type, split into user, retryable and fatal errors.

use std::path::PathBuf;

pub type Result<T, E = JournalError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// An append carried a term lower than the highest the journal has seen.
    #[error("fenced: append with term {term} but the journal is at term {current}")]
    Fenced { term: u64, current: u64 },

    /// A record is larger than the configured maximum.
    #[error("record of {size} bytes exceeds the maximum of {max} bytes")]
    RecordTooLarge { size: usize, max: usize },

    /// Acknowledged data is damaged: a bad frame followed by valid frames (never a torn tail).
    #[error("journal corrupt at seq {seq} in {}: {reason}", location.display())]
    Corrupt {
        seq: u64,
        location: PathBuf,
        reason: String,
    },

    /// A torn or corrupt tail was found and the recovery mode forbids truncating it.
    #[error("journal tail is damaged after seq {last_good_seq} ({dropped_bytes} bytes) and recovery mode is absolute-consistency: {reason}")]
    TailCorruption {
        last_good_seq: u64,
        dropped_bytes: u64,
        reason: String,
    },

    /// The on-disk format is newer than this binary understands.
    #[error("{} has format version {found}, this binary supports up to {supported}", location.display())]
    UnsupportedVersion {
        location: PathBuf,
        found: u32,
        supported: u32,
    },

    /// The journal was asked for records that were truncated away, or beyond its end.
    #[error("seq {seq} is out of range (journal holds {first}..={last})")]
    OutOfRange { seq: u64, first: u64, last: u64 },

    /// The journal lost the ability to make writes durable. The process must stop and recover
    /// from disk; nothing after the failure may be acknowledged.
    #[error("journal write failed (fatal): {0}")]
    Fatal(String),

    /// The journal was shut down.
    #[error("journal is closed")]
    Closed,

    #[error("journal io error on {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// Another live process holds the journal directory open for writing.
    #[error("journal directory {} is locked by another process", path.display())]
    Locked { path: PathBuf },

    #[cfg(feature = "sled")]
    #[error("sled error: {0}")]
    Sled(#[from] sled::Error),

    /// A replicated record does not continue this journal's seq order.
    #[error("replicated record has seq {found}, expected {expected}")]
    Gap { expected: u64, found: u64 },

    /// A replicated record does not extend this journal's chain: the two journals hold
    /// different histories from `seq` on (or earlier).
    #[error("journal diverged at seq {seq}: {reason}")]
    Diverged { seq: u64, reason: String },

    /// A record visitor stopped the visit (see [`crate::backend::visit_with`], which hands the
    /// visitor's own error back instead of this).
    #[error("the record visitor stopped the visit")]
    VisitStopped,
}

/// How a caller should treat an error (shared with the aggregates' errors).
pub use crescent_error_class::ErrorClass;

impl JournalError {
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        JournalError::Io {
            path: path.into(),
            source,
        }
    }

    pub fn class(&self) -> ErrorClass {
        match self {
            JournalError::Fenced { .. }
            | JournalError::RecordTooLarge { .. }
            | JournalError::OutOfRange { .. }
            | JournalError::VisitStopped
            | JournalError::Gap { .. }
            | JournalError::Diverged { .. } => ErrorClass::User,
            JournalError::Closed | JournalError::Locked { .. } => ErrorClass::Retryable,
            JournalError::Corrupt { .. }
            | JournalError::TailCorruption { .. }
            | JournalError::UnsupportedVersion { .. }
            | JournalError::Fatal(_)
            | JournalError::Io { .. } => ErrorClass::Fatal,
            #[cfg(feature = "sled")]
            JournalError::Sled(_) => ErrorClass::Fatal,
        }
    }
}
