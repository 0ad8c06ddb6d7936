//! The crate's one error type. Every variant has a stable `code()` (a wire API [`ErrorCode`]:
//! INVALID_ARGUMENT, NOT_FOUND, UNAVAILABLE, ...) and a `class()` that tells callers whether
//! retrying can help.

use std::time::Duration;

use crescent_error_class::ErrorCode;

/// Whether an error is the caller's fault, transient, or means the component must stop: the
/// one classification of every Crescent crate.
pub use crescent_error_class::ErrorClass;

/// Errors of the data plane.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    /// A caller-supplied argument is invalid (empty segment id, zero-sized region, ...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// A transfer range falls outside a registered local buffer or a served segment.
    #[error("{what} range [{offset}, {offset}+{length}) is outside its {size}-byte bounds")]
    OutOfRange {
        /// "local buffer" or "segment <id>".
        what: String,
        offset: u64,
        length: u64,
        size: u64,
    },

    /// The named segment is not served by the endpoint (never mounted, or withdrawn).
    #[error("segment {segment:?} not found at {endpoint}")]
    SegmentNotFound { endpoint: String, segment: String },

    /// The listener requires data-plane grants and refused this transfer's (missing, forged,
    /// expired, or for another operation or range): docs/security.md "The data plane".
    #[error("{endpoint} refused a transfer on segment {segment:?}: permission denied (data-plane grant)")]
    PermissionDenied { endpoint: String, segment: String },

    /// The local handle does not name a registered buffer (never registered or unregistered).
    #[error("local buffer handle {0} is not registered")]
    UnknownHandle(u64),

    /// A batch holds more descriptors than the configured limit.
    #[error("batch of {len} descriptors exceeds the limit of {max}")]
    BatchTooLarge { len: usize, max: usize },

    /// The peer could not be reached or the connection failed mid-batch.
    #[error("endpoint {endpoint} unavailable: {reason}")]
    Unavailable { endpoint: String, reason: String },

    /// The batch (or a connect) did not complete within its deadline.
    #[error("{what} timed out after {after:?}")]
    Timeout { what: String, after: Duration },

    /// The peer broke the frame protocol (bad magic, version, length or op).
    #[error("protocol error from {endpoint}: {reason}")]
    Protocol { endpoint: String, reason: String },

    /// The peer speaks an incompatible protocol version.
    #[error("endpoint {endpoint} speaks protocol version {theirs}, this build speaks {ours}")]
    UnsupportedVersion {
        endpoint: String,
        theirs: u16,
        ours: u16,
    },

    /// The transfer-engine shared library or one of its symbols could not be loaded.
    #[error("cannot load transfer engine library {path}: {reason}")]
    LibraryLoad { path: String, reason: String },

    /// A call into the transfer-engine library failed.
    #[error("transfer engine call {call} failed: {reason}")]
    Engine { call: &'static str, reason: String },

    /// Local setup failed (cannot bind, cannot allocate, ...).
    #[error("{context}: {reason}")]
    Io { context: String, reason: String },
}

impl TransportError {
    /// Wraps an IO error with what was being done.
    pub fn io(context: impl Into<String>, err: &std::io::Error) -> Self {
        TransportError::Io {
            context: context.into(),
            reason: err.to_string(),
        }
    }

    /// An `Unavailable` for `endpoint`.
    pub fn unavailable(endpoint: &str, reason: impl Into<String>) -> Self {
        TransportError::Unavailable {
            endpoint: endpoint.to_owned(),
            reason: reason.into(),
        }
    }

    /// Whether the caller, the environment, or the component is at fault.
    pub fn class(&self) -> ErrorClass {
        match self {
            TransportError::InvalidArgument(_)
            | TransportError::OutOfRange { .. }
            | TransportError::SegmentNotFound { .. }
            | TransportError::PermissionDenied { .. }
            | TransportError::UnknownHandle(_)
            | TransportError::BatchTooLarge { .. } => ErrorClass::User,
            TransportError::Unavailable { .. }
            | TransportError::Timeout { .. }
            | TransportError::Protocol { .. }
            | TransportError::Engine { .. } => ErrorClass::Retryable,
            TransportError::UnsupportedVersion { .. }
            | TransportError::LibraryLoad { .. }
            | TransportError::Io { .. } => ErrorClass::Fatal,
        }
    }

    /// The stable wire code.
    pub fn code(&self) -> ErrorCode {
        match self {
            TransportError::InvalidArgument(_)
            | TransportError::OutOfRange { .. }
            | TransportError::BatchTooLarge { .. } => ErrorCode::InvalidArgument,
            TransportError::SegmentNotFound { .. } | TransportError::UnknownHandle(_) => {
                ErrorCode::NotFound
            }
            TransportError::PermissionDenied { .. } => ErrorCode::PermissionDenied,
            TransportError::Unavailable { .. }
            | TransportError::Timeout { .. }
            | TransportError::Protocol { .. }
            | TransportError::UnsupportedVersion { .. } => ErrorCode::Unavailable,
            TransportError::LibraryLoad { .. }
            | TransportError::Engine { .. }
            | TransportError::Io { .. } => ErrorCode::Internal,
        }
    }

    /// A bounded label for metrics (`outcome`).
    pub fn outcome_label(&self) -> &'static str {
        match self {
            TransportError::InvalidArgument(_) | TransportError::BatchTooLarge { .. } => {
                "invalid_argument"
            }
            TransportError::OutOfRange { .. } => "out_of_range",
            TransportError::SegmentNotFound { .. } | TransportError::UnknownHandle(_) => {
                "not_found"
            }
            TransportError::PermissionDenied { .. } => "permission_denied",
            TransportError::Timeout { .. } => "timeout",
            TransportError::Unavailable { .. }
            | TransportError::Protocol { .. }
            | TransportError::UnsupportedVersion { .. } => "unavailable",
            TransportError::LibraryLoad { .. }
            | TransportError::Engine { .. }
            | TransportError::Io { .. } => "internal",
        }
    }
}

/// Result alias of this crate.
pub type Result<T, E = TransportError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;
    use crescent_error_class::coverage::assert_wire_map;
    use crescent_error_class::every_variant;

    /// A transfer engine or local setup that fails is the node's failure, not the request's.
    #[test]
    fn every_error_but_local_failures_has_a_code_other_than_internal() {
        let all = every_variant!(TransportError {
            InvalidArgument => TransportError::InvalidArgument("x".into()),
            OutOfRange => TransportError::OutOfRange {
                what: "local buffer".into(),
                offset: 1,
                length: 2,
                size: 2,
            },
            SegmentNotFound => TransportError::SegmentNotFound {
                endpoint: "e".into(),
                segment: "s".into(),
            },
            PermissionDenied => TransportError::PermissionDenied {
                endpoint: "e".into(),
                segment: "s".into(),
            },
            UnknownHandle => TransportError::UnknownHandle(7),
            BatchTooLarge => TransportError::BatchTooLarge { len: 2, max: 1 },
            Unavailable => TransportError::unavailable("e", "r"),
            Timeout => TransportError::Timeout {
                what: "batch".into(),
                after: Duration::from_secs(1),
            },
            Protocol => TransportError::Protocol {
                endpoint: "e".into(),
                reason: "r".into(),
            },
            UnsupportedVersion => TransportError::UnsupportedVersion {
                endpoint: "e".into(),
                theirs: 9,
                ours: 1,
            },
            LibraryLoad => TransportError::LibraryLoad {
                path: "p".into(),
                reason: "r".into(),
            },
            Engine => TransportError::Engine {
                call: "c",
                reason: "r".into(),
            },
            Io => TransportError::io("bind", &std::io::Error::other("x")),
        });
        assert_wire_map(&all, TransportError::code, &["LibraryLoad", "Engine", "Io"]);
    }
}
