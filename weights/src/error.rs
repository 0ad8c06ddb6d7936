//! Why a weight command, query or configuration is refused: the crate's one error enum.

use crescent_actors::{ErrorCode, WireCoded};
use crescent_journal::error::ErrorClass;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WeightError {
    /// A malformed command or value: bad identity component, digest, ratio, TTL, limits.
    #[error("invalid {field}: {reason}")]
    InvalidArgument { field: &'static str, reason: String },

    #[error("{what} {id:?} not found")]
    NotFound { what: &'static str, id: String },

    /// The revision exists but is not in a state that allows the command (importing, degraded,
    /// deleting); the same request may succeed once the state changes.
    #[error("revision {id:?} is {availability}: {reason}")]
    NotReady {
        id: String,
        availability: &'static str,
        reason: String,
    },

    /// The command contradicts persisted immutable state (a different manifest for a published
    /// revision, a request id reused with different arguments, a retired revision).
    #[error("conflict on {what} {id:?}: {reason}")]
    Conflict {
        what: &'static str,
        id: String,
        reason: String,
    },

    /// The store's copy of the group does not match what the commit declares; READY is not
    /// published.
    #[error("group {group_id:?} does not validate: {reason}")]
    GroupMismatch { group_id: String, reason: String },

    /// Some group member is still being written; commit again once every put has ended.
    #[error("group {group_id:?} is incomplete: {reason}")]
    GroupIncomplete { group_id: String, reason: String },

    /// The caller's metadata generation (or lineage generation) is older than the persisted one.
    #[error("stale {what}: expected {expected}, current {current}")]
    StaleGeneration {
        what: &'static str,
        expected: u64,
        current: u64,
    },

    /// An active lease, operation or competing claim blocks the command for now.
    #[error("busy: {reason}")]
    Busy { reason: String },

    #[error("lease {lease_id:?} has expired")]
    LeaseExpired { lease_id: String },

    /// The policy forbids the change (PINNED residency, an AUTO-only step on a MANUAL
    /// revision).
    #[error("policy unsatisfiable: {reason}")]
    PolicyUnsatisfiable { reason: String },

    /// Invalid weight configuration: crescentd refuses to start (fail closed).
    #[error("invalid weight configuration {key}: {reason}")]
    Config { key: &'static str, reason: String },

    /// A capability gate of the configuration is closed (the HA log may not replay these
    /// events on every standby yet).
    #[error("weight mutations are disabled until {flag} is confirmed")]
    CapabilityDisabled { flag: &'static str },
}

impl WeightError {
    pub(crate) fn invalid(field: &'static str, reason: impl Into<String>) -> Self {
        WeightError::InvalidArgument {
            field,
            reason: reason.into(),
        }
    }

    pub(crate) fn busy(reason: impl Into<String>) -> Self {
        WeightError::Busy {
            reason: reason.into(),
        }
    }

    /// The stable wire code; the server maps codes to statuses.
    pub fn code(&self) -> ErrorCode {
        match self {
            WeightError::InvalidArgument { .. } | WeightError::Config { .. } => {
                ErrorCode::InvalidArgument
            }
            WeightError::NotFound { .. } => ErrorCode::NotFound,
            WeightError::NotReady { .. } | WeightError::GroupIncomplete { .. } => {
                ErrorCode::NotReady
            }
            WeightError::Conflict { .. } | WeightError::GroupMismatch { .. } => ErrorCode::Conflict,
            WeightError::StaleGeneration { .. } => ErrorCode::StaleGeneration,
            WeightError::Busy { .. } => ErrorCode::Busy,
            WeightError::LeaseExpired { .. } => ErrorCode::LeaseExpired,
            WeightError::PolicyUnsatisfiable { .. } => ErrorCode::PolicyUnsatisfiable,
            WeightError::CapabilityDisabled { .. } => ErrorCode::Unavailable,
        }
    }

    /// User errors fail the same way on retry; retryable ones may pass once state moves on;
    /// a configuration error stops the process.
    pub fn class(&self) -> ErrorClass {
        match self {
            WeightError::NotReady { .. }
            | WeightError::GroupIncomplete { .. }
            | WeightError::Busy { .. }
            | WeightError::CapabilityDisabled { .. } => ErrorClass::Retryable,
            WeightError::Config { .. } => ErrorClass::Fatal,
            _ => ErrorClass::User,
        }
    }
}

impl WireCoded for WeightError {
    fn wire_code(&self) -> ErrorCode {
        self.code()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crescent_error_class::coverage::assert_wire_coded;
    use crescent_error_class::every_variant;

    #[test]
    fn every_refusal_has_a_code_other_than_internal() {
        let all = every_variant!(WeightError {
            InvalidArgument => WeightError::invalid("f", "r"),
            NotFound => WeightError::NotFound { what: "revision", id: "r".into() },
            NotReady => WeightError::NotReady {
                id: "r".into(),
                availability: "IMPORTING",
                reason: "r".into(),
            },
            Conflict => WeightError::Conflict { what: "revision", id: "r".into(), reason: "r".into() },
            GroupMismatch => WeightError::GroupMismatch { group_id: "g".into(), reason: "r".into() },
            GroupIncomplete => WeightError::GroupIncomplete { group_id: "g".into(), reason: "r".into() },
            StaleGeneration => WeightError::StaleGeneration { what: "metadata", expected: 1, current: 2 },
            Busy => WeightError::busy("r"),
            LeaseExpired => WeightError::LeaseExpired { lease_id: "l".into() },
            PolicyUnsatisfiable => WeightError::PolicyUnsatisfiable { reason: "r".into() },
            Config => WeightError::Config { key: "k", reason: "r".into() },
            CapabilityDisabled => WeightError::CapabilityDisabled { flag: "f" },
        });
        assert_wire_coded(&all, &[]);
    }
}
