//! The one error type of crescent-ha, classified for callers.

use std::time::Duration;

/// How a caller should treat an error: the one classification of every Crescent crate.
pub use crescent_error_class::ErrorClass;

#[derive(Debug, thiserror::Error)]
pub enum HaError {
    /// A configuration value is out of range or malformed.
    #[error("invalid HA configuration: {0}")]
    InvalidConfig(String),

    /// An argument of a call is malformed (empty standby name, ...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// The operation needs this node to be the leader, and it is not (or its local lease
    /// deadline has passed).
    #[error("this node is not the leader")]
    NotLeader,

    /// The coordination backend refused a write guarded by `term`: the leader record no longer
    /// carries that term, so a newer leader may exist. Nothing was written.
    #[error("fenced: term {term} is no longer the leader's term")]
    Fenced { term: u64 },

    /// A replication-marker write would move the sequence backwards within one term.
    #[error("replication marker seq {seq} is below {current}, already written in term {term}")]
    MarkerSeqRegression { term: u64, seq: u64, current: u64 },

    /// No leader was seen within the time allowed.
    #[error("no leader within {0:?}")]
    NoLeader(Duration),

    /// A request to the coordination backend did not answer in time.
    #[error("{op} timed out after {after:?}")]
    Timeout { op: &'static str, after: Duration },

    /// An etcd request failed.
    #[error("etcd {op} failed: {source}")]
    Etcd {
        op: &'static str,
        #[source]
        source: etcd_client::Error,
    },

    /// A Redis request failed.
    #[error("redis {op} failed: {source}")]
    Redis {
        op: &'static str,
        #[source]
        source: redis::RedisError,
    },

    /// Redis answered a script with something no Crescent script returns.
    #[error("redis {op} answered {answer}")]
    UnexpectedAnswer { op: &'static str, answer: String },

    /// A record in the backend carries a format version this build cannot read.
    #[error("{record} at {key} has format version {found}; this build reads version {supported}")]
    UnsupportedVersion {
        record: &'static str,
        key: String,
        found: u32,
        supported: u32,
    },

    /// The background election task panicked.
    #[error("the election task failed: {0}")]
    TaskFailed(String),

    /// A record in the backend is not what any Crescent version writes.
    #[error("malformed {record} at {key}: {reason}")]
    Malformed {
        record: &'static str,
        key: String,
        reason: String,
    },

    /// The mesh membership record refused an update or cannot be read (its own codes).
    #[error(transparent)]
    Mesh(#[from] crescent_mesh::MeshError),
}

impl HaError {
    pub(crate) fn etcd(op: &'static str) -> impl FnOnce(etcd_client::Error) -> HaError {
        move |source| HaError::Etcd { op, source }
    }

    pub(crate) fn redis(op: &'static str) -> impl FnOnce(redis::RedisError) -> HaError {
        move |source| HaError::Redis { op, source }
    }

    /// The stable code of this error (logs, status output; a fixed set).
    pub fn code(&self) -> &'static str {
        match self {
            HaError::InvalidConfig(_) => "INVALID_CONFIG",
            HaError::InvalidArgument(_) => "INVALID_ARGUMENT",
            HaError::NotLeader => "NOT_LEADER",
            HaError::Fenced { .. } => "FENCED",
            HaError::MarkerSeqRegression { .. } => "MARKER_SEQ_REGRESSION",
            HaError::NoLeader(_) => "NO_LEADER",
            HaError::Timeout { .. } => "TIMEOUT",
            HaError::Etcd { .. } | HaError::Redis { .. } => "UNAVAILABLE",
            HaError::UnexpectedAnswer { .. } | HaError::Malformed { .. } => "MALFORMED",
            HaError::UnsupportedVersion { .. } => "UNSUPPORTED_VERSION",
            HaError::TaskFailed(_) => "INTERNAL",
            HaError::Mesh(e) => e.code(),
        }
    }

    pub fn class(&self) -> ErrorClass {
        match self {
            HaError::InvalidConfig(_)
            | HaError::InvalidArgument(_)
            | HaError::Fenced { .. }
            | HaError::MarkerSeqRegression { .. } => ErrorClass::User,
            HaError::NotLeader | HaError::NoLeader(_) | HaError::Timeout { .. } => {
                ErrorClass::Retryable
            }
            HaError::Etcd { source, .. } => etcd_error_class(source),
            HaError::Redis { source, .. } => redis_error_class(source),
            HaError::UnsupportedVersion { .. }
            | HaError::UnexpectedAnswer { .. }
            | HaError::Malformed { .. }
            | HaError::TaskFailed(_) => ErrorClass::Fatal,
            HaError::Mesh(e) => e.class(),
        }
    }
}

/// Configuration-like refusals from etcd are fatal; everything else (unavailable, no leader,
/// transport, stream closed) can pass.
fn etcd_error_class(err: &etcd_client::Error) -> ErrorClass {
    use etcd_client::Error as E;
    match err {
        E::InvalidArgs(_) | E::InvalidUri(_) | E::InvalidMetadataValue(_) => ErrorClass::Fatal,
        E::GRpcStatus(status) => match status.code() as i32 {
            tonic_code::PERMISSION_DENIED | tonic_code::UNAUTHENTICATED => ErrorClass::Fatal,
            tonic_code::INVALID_ARGUMENT | tonic_code::FAILED_PRECONDITION => ErrorClass::User,
            _ => ErrorClass::Retryable,
        },
        _ => ErrorClass::Retryable,
    }
}

/// Refused credentials or a malformed URL are fatal; a script error is ours (fatal: retrying
/// runs the same script); everything else (connection refused or dropped, LOADING while a
/// restarted server reads its data, timeouts) can pass.
fn redis_error_class(err: &redis::RedisError) -> ErrorClass {
    use redis::ErrorKind as K;
    match err.kind() {
        K::AuthenticationFailed | K::InvalidClientConfig => ErrorClass::Fatal,
        K::Server(redis::ServerErrorKind::NoPerm) => ErrorClass::Fatal,
        K::Server(redis::ServerErrorKind::ResponseError) if err.to_string().contains("script") => {
            ErrorClass::Fatal
        }
        _ => ErrorClass::Retryable,
    }
}

/// gRPC status codes by number: etcd-client re-exports no `tonic::Code`, and these numbers are
/// fixed by the gRPC specification.
mod tonic_code {
    pub const INVALID_ARGUMENT: i32 = 3;
    pub const PERMISSION_DENIED: i32 = 7;
    pub const FAILED_PRECONDITION: i32 = 9;
    pub const UNAUTHENTICATED: i32 = 16;
}
