//! Why the segment registry refuses a command.

use crescent_error_class::{ErrorClass, ErrorCode};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SegmentRegistryError {
    /// A malformed command: empty or over-long ids, control characters, size 0, overflow.
    #[error("invalid {field}: {reason}")]
    InvalidArgument { field: &'static str, reason: String },

    #[error("{what} {id:?} not found")]
    NotFound { what: &'static str, id: String },

    /// The command contradicts what is registered (same id, different parameters).
    #[error("conflict on {what} {id:?}: {reason}")]
    Conflict {
        what: &'static str,
        id: String,
        reason: String,
    },

    /// An owner re-registered with an older incarnation than the one registered: a message
    /// from a process that has since restarted.
    #[error(
        "owner {owner_id:?} is at incarnation {current}, refusing stale incarnation {offered}"
    )]
    StaleIncarnation {
        owner_id: String,
        current: u64,
        offered: u64,
    },
}

impl SegmentRegistryError {
    /// The stable wire code (docs/design.md, "Wire API"); the server maps codes to statuses in one
    /// place.
    pub fn code(&self) -> ErrorCode {
        match self {
            SegmentRegistryError::InvalidArgument { .. } => ErrorCode::InvalidArgument,
            SegmentRegistryError::NotFound { .. } => ErrorCode::NotFound,
            SegmentRegistryError::Conflict { .. } => ErrorCode::Conflict,
            SegmentRegistryError::StaleIncarnation { .. } => ErrorCode::StaleGeneration,
        }
    }

    /// Every refusal is the caller's: retrying the same command fails the same way.
    pub fn class(&self) -> ErrorClass {
        ErrorClass::User
    }
}

impl crate::aggregate::WireCoded for SegmentRegistryError {
    fn wire_code(&self) -> ErrorCode {
        self.code()
    }
}
