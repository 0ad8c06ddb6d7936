//! The one error type of the cold tier, classified user / retryable / fatal.

use crescent_actors::ErrorClass;
use crescent_actors::{ErrorCode, WireCoded};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ColdError {
    /// A malformed command or config: empty or over-long ids, zero sizes, bad fractions.
    #[error("invalid {field}: {reason}")]
    InvalidArgument { field: &'static str, reason: String },

    #[error("{what} {id} not found")]
    NotFound { what: &'static str, id: String },

    /// The command contradicts what is recorded (same id, different facts).
    #[error("conflict on {what} {id}: {reason}")]
    Conflict {
        what: &'static str,
        id: String,
        reason: String,
    },

    /// The state machine does not allow `action` from `state` (including any action on a
    /// terminal record other than the idempotent repeat of the one that ended it).
    #[error("{what} {id} is {state}: cannot {action}")]
    InvalidTransition {
        what: &'static str,
        id: String,
        state: &'static str,
        action: &'static str,
    },

    /// Not enough free capacity for a reservation. Retry after reclaim frees space or pick
    /// another device.
    #[error("device {device_id} has {free} bytes free, {requested} requested")]
    InsufficientCapacity {
        device_id: String,
        requested: u64,
        free: u64,
    },

    /// The device may not take new work (unhealthy, unschedulable, not configured).
    #[error("device {device_id} is not eligible: {reason}")]
    DeviceNotEligible { device_id: String, reason: String },

    /// A route compare-and-set found a different route: reload and decide again.
    #[error("route of {key} changed: {reason}")]
    RouteConflict { key: String, reason: String },

    /// Removing this hot replica would remove the last readable copy.
    #[error("refusing to evict the hot replica of {key}: {reason}")]
    EvictionRefused { key: String, reason: String },

    /// The payload is larger than the path that would carry it allows (a remote restore from
    /// a storage owner without a staging region goes through crescentd's request body
    /// limit). Retrying fails the same way until the configuration changes.
    #[error("{what}: a payload of {length} bytes exceeds the limit of {limit} bytes")]
    TooLargeToCarry {
        what: String,
        length: u64,
        limit: u64,
    },

    /// A bounded queue or table is full; the caller should retry later.
    #[error("{queue} is saturated: {reason}")]
    Backpressure { queue: &'static str, reason: String },

    /// The payload read back does not match its checksum: never returned.
    #[error("checksum mismatch in {locator}: expected {expected:08x}, read {actual:08x}")]
    ChecksumMismatch {
        locator: String,
        expected: u32,
        actual: u32,
    },

    /// The payload has another length than recorded.
    #[error("length mismatch in {locator}: expected {expected} bytes, found {actual}")]
    LengthMismatch {
        locator: String,
        expected: u64,
        actual: u64,
    },

    /// A cold file's header is unreadable, of an unknown version, or of another operation.
    #[error("corrupt cold file {locator}: {reason}")]
    CorruptFile { locator: String, reason: String },

    /// A committed payload is gone from its device.
    #[error("cold payload {locator} is missing")]
    PayloadMissing { locator: String },

    /// An IO error of the device (the underlying error's kind and message: kept as text so the
    /// error stays comparable and cloneable).
    #[error("io error on {path}: {message} ({kind:?})")]
    Io {
        path: String,
        kind: std::io::ErrorKind,
        message: String,
    },
}

impl ColdError {
    pub(crate) fn io(path: &std::path::Path, err: std::io::Error) -> Self {
        ColdError::Io {
            path: path.display().to_string(),
            kind: err.kind(),
            message: err.to_string(),
        }
    }

    pub(crate) fn invalid(field: &'static str, reason: impl Into<String>) -> Self {
        ColdError::InvalidArgument {
            field,
            reason: reason.into(),
        }
    }

    /// The stable wire code (docs/design.md, "Wire API").
    pub fn code(&self) -> ErrorCode {
        match self {
            ColdError::InvalidArgument { .. } => ErrorCode::InvalidArgument,
            ColdError::NotFound { .. } => ErrorCode::NotFound,
            ColdError::Conflict { .. }
            | ColdError::InvalidTransition { .. }
            | ColdError::RouteConflict { .. }
            | ColdError::EvictionRefused { .. } => ErrorCode::Conflict,
            ColdError::InsufficientCapacity { .. } | ColdError::Backpressure { .. } => {
                ErrorCode::Busy
            }
            ColdError::TooLargeToCarry { .. } => ErrorCode::PolicyUnsatisfiable,
            ColdError::DeviceNotEligible { .. } | ColdError::Io { .. } => ErrorCode::Unavailable,
            ColdError::ChecksumMismatch { .. }
            | ColdError::LengthMismatch { .. }
            | ColdError::CorruptFile { .. }
            | ColdError::PayloadMissing { .. } => ErrorCode::Internal,
        }
    }

    /// User: the request is wrong and fails the same way again. Retryable: capacity, queues,
    /// device health and route races change; IO may recover. Fatal: the stored payload itself
    /// is damaged or gone; retrying cannot return correct bytes. Fatal here is fatal for that
    /// payload (the server fails the read with INTERNAL, counts it and marks the backing
    /// damaged), not for the process.
    pub fn class(&self) -> ErrorClass {
        match self {
            ColdError::InvalidArgument { .. }
            | ColdError::NotFound { .. }
            | ColdError::Conflict { .. }
            | ColdError::InvalidTransition { .. }
            | ColdError::EvictionRefused { .. }
            | ColdError::TooLargeToCarry { .. } => ErrorClass::User,
            ColdError::InsufficientCapacity { .. }
            | ColdError::DeviceNotEligible { .. }
            | ColdError::RouteConflict { .. }
            | ColdError::Backpressure { .. }
            | ColdError::Io { .. } => ErrorClass::Retryable,
            ColdError::ChecksumMismatch { .. }
            | ColdError::LengthMismatch { .. }
            | ColdError::CorruptFile { .. }
            | ColdError::PayloadMissing { .. } => ErrorClass::Fatal,
        }
    }
}

impl WireCoded for ColdError {
    fn wire_code(&self) -> ErrorCode {
        self.code()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_too_large_to_carry_is_a_user_error_naming_its_size() {
        let e = ColdError::TooLargeToCarry {
            what: "inline read of l from owner device d".into(),
            length: 41_943_040,
            limit: 16_711_680,
        };
        assert_eq!(e.code(), ErrorCode::PolicyUnsatisfiable);
        assert_eq!(e.class(), ErrorClass::User);
        assert!(e.to_string().contains("41943040 bytes"), "{e}");
        assert!(e.to_string().contains("16711680 bytes"), "{e}");
    }

    /// A damaged or missing payload is the node's failure, never the request's: INTERNAL.
    #[test]
    fn every_refusal_but_damaged_payloads_has_a_code_other_than_internal() {
        use crescent_error_class::coverage::assert_wire_coded;
        use crescent_error_class::every_variant;
        let all = every_variant!(ColdError {
            InvalidArgument => ColdError::invalid("f", "r"),
            NotFound => ColdError::NotFound { what: "device", id: "d".into() },
            Conflict => ColdError::Conflict { what: "device", id: "d".into(), reason: "r".into() },
            InvalidTransition => ColdError::InvalidTransition {
                what: "move",
                id: "m".into(),
                state: "DONE",
                action: "abort",
            },
            InsufficientCapacity => ColdError::InsufficientCapacity {
                device_id: "d".into(),
                requested: 2,
                free: 1,
            },
            DeviceNotEligible => ColdError::DeviceNotEligible { device_id: "d".into(), reason: "r".into() },
            RouteConflict => ColdError::RouteConflict { key: "k".into(), reason: "r".into() },
            EvictionRefused => ColdError::EvictionRefused { key: "k".into(), reason: "r".into() },
            TooLargeToCarry => ColdError::TooLargeToCarry { what: "w".into(), length: 2, limit: 1 },
            Backpressure => ColdError::Backpressure { queue: "q", reason: "r".into() },
            ChecksumMismatch => ColdError::ChecksumMismatch { locator: "l".into(), expected: 1, actual: 2 },
            LengthMismatch => ColdError::LengthMismatch { locator: "l".into(), expected: 1, actual: 2 },
            CorruptFile => ColdError::CorruptFile { locator: "l".into(), reason: "r".into() },
            PayloadMissing => ColdError::PayloadMissing { locator: "l".into() },
            Io => ColdError::io(
                std::path::Path::new("/d"),
                std::io::Error::other("x"),
            ),
        });
        assert_wire_coded(
            &all,
            &[
                "ChecksumMismatch",
                "LengthMismatch",
                "CorruptFile",
                "PayloadMissing",
            ],
        );
    }
}
