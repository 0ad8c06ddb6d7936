//! Why a quota root refuses a command.

use crescent_error_class::{ErrorClass, ErrorCode};

use super::state::QuotaLimits;

/// Which limit a reservation would exceed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuotaLimit {
    MaxBytes,
    MaxObjects,
}

impl QuotaLimit {
    pub fn as_str(self) -> &'static str {
        match self {
            QuotaLimit::MaxBytes => "max_bytes",
            QuotaLimit::MaxObjects => "max_objects",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuotaError {
    /// A malformed command: empty or over-long ids and keys, sizes over the signed range,
    /// duplicate items in a batch, a page size out of range.
    #[error("invalid {field}: {reason}")]
    InvalidArgument { field: &'static str, reason: String },

    #[error("accounting operation {op_id:?} not found")]
    NotFound { op_id: String },

    /// Admission failed: `used + pending + requested` would exceed `max`.
    #[error(
        "quota {} exceeded for {key:?}: used {used} + pending {pending} + requested {requested} > {max}",
        limit.as_str()
    )]
    QuotaExceeded {
        limit: QuotaLimit,
        key: String,
        max: u64,
        used: u64,
        pending: u64,
        requested: u64,
    },

    /// The object alone is larger than the tenant's byte limit: no eviction can admit it.
    #[error("object {key:?} of {size} bytes is larger than the quota max_bytes {max_bytes}")]
    ObjectTooLarge {
        key: String,
        size: u64,
        max_bytes: u64,
    },

    /// Another operation on the same key is not yet finalized or aborted.
    #[error("object {key:?} has accounting operation {holder:?} in progress")]
    ObjectBusy { key: String, holder: String },

    /// The operation id is recorded with other facts (key, change or route version).
    #[error("accounting operation {op_id:?} conflicts: {reason}")]
    OperationConflict { op_id: String, reason: String },

    /// The state machine does not allow `action` from `state`.
    #[error("accounting operation {op_id:?} is {state}: cannot {action}")]
    InvalidTransition {
        op_id: String,
        state: &'static str,
        action: &'static str,
    },

    /// Bootstrap found a stored policy with other hard limits: startup must fail for this
    /// tenant until the policy is changed through the admin command.
    #[error(
        "stored quota policy v{policy_version} ({stored:?}, fingerprint {stored_fingerprint}) differs from the configured {offered:?} (fingerprint {offered_fingerprint})"
    )]
    PolicyMismatch {
        policy_version: u64,
        stored: QuotaLimits,
        stored_fingerprint: String,
        offered: QuotaLimits,
        offered_fingerprint: String,
    },
}

impl QuotaError {
    /// The stable wire code (docs/api.md, "Errors"); the server maps codes to statuses in one
    /// place.
    pub fn code(&self) -> ErrorCode {
        match self {
            QuotaError::InvalidArgument { .. } => ErrorCode::InvalidArgument,
            QuotaError::NotFound { .. } => ErrorCode::NotFound,
            QuotaError::QuotaExceeded { .. } | QuotaError::ObjectTooLarge { .. } => {
                ErrorCode::QuotaExceeded
            }
            QuotaError::ObjectBusy { .. } => ErrorCode::Busy,
            QuotaError::OperationConflict { .. }
            | QuotaError::InvalidTransition { .. }
            | QuotaError::PolicyMismatch { .. } => ErrorCode::Conflict,
        }
    }

    /// A busy key frees once its operation ends; every other refusal repeats.
    pub fn class(&self) -> ErrorClass {
        match self {
            QuotaError::ObjectBusy { .. } => ErrorClass::Retryable,
            _ => ErrorClass::User,
        }
    }
}

impl crate::aggregate::WireCoded for QuotaError {
    fn wire_code(&self) -> ErrorCode {
        self.code()
    }
}
