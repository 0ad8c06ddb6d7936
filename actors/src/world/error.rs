//! Why the world refused a record or a snapshot section.

use std::path::PathBuf;

use crescent_journal::error::ErrorClass;
use crescent_journal::{JournalError, StreamId};

use crate::aggregate::DecodeError;

/// Every variant is fatal to replay: continuing would build state the journal does not
/// describe.
#[derive(Debug, thiserror::Error)]
pub enum WorldError {
    #[error("seq {seq}: stream kind {kind:?} is not an aggregate this build knows")]
    UnknownStream { seq: u64, kind: String },

    #[error("seq {seq} ({stream}): {source}")]
    Decode {
        seq: u64,
        stream: StreamId,
        #[source]
        source: DecodeError,
    },

    #[error("records out of order: expected seq {expected}, got {found}")]
    OutOfOrder { expected: u64, found: u64 },

    #[error("aggregate kind {0} is registered twice")]
    DuplicateKind(&'static str),

    #[error("cannot encode section {section}: {reason}")]
    SectionEncode { section: String, reason: String },

    #[error("snapshot {} section {section}: {reason}", file.display())]
    SectionDecode {
        file: PathBuf,
        section: String,
        reason: String,
    },

    #[error("cannot render {kind} as JSON: {reason}")]
    Json { kind: String, reason: String },

    /// Reading the journal failed while replaying it.
    #[error("replay read: {0}")]
    Journal(#[from] JournalError),
}

impl WorldError {
    pub fn class(&self) -> ErrorClass {
        ErrorClass::Fatal
    }
}
