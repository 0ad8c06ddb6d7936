//! The client's one error type, with the stable code every failure reports (the wire API's
//! codes, plus a few that only a client can produce) and the CLI's exit status for it.

use std::error::Error as _;

use crescent_transport::TransportError;
use crescent_wire::{ApiError, ErrorCode};

use crate::script_code::ScriptCode;

/// Whether an error is the caller's fault, transient, or a broken setup: the one
/// classification of every Crescent crate.
pub use crescent_error_class::ErrorClass;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// crescentd answered with a wire error (stable code).
    #[error("{0}")]
    Api(ApiError),
    /// crescentd could not be reached or the connection broke.
    #[error("cannot reach crescentd at {server}: {}", connect_cause(source))]
    Connect {
        server: String,
        #[source]
        source: reqwest::Error,
    },
    /// The TLS handshake failed: the server's certificate is not trusted (no or another CA
    /// file), names another host, or the server does not speak TLS. Code `UNAVAILABLE`, but
    /// not retried: another attempt would fail the same way (docs/security.md, "TLS").
    #[error("TLS with crescentd at {server} failed: {detail}")]
    Tls { server: String, detail: String },
    /// The RPC fast-path connection could not be made or broke mid-request.
    #[error("RPC connection to crescentd at {server} failed: {source}")]
    Rpc {
        server: String,
        #[source]
        source: std::io::Error,
    },
    /// The answer could not be decoded.
    #[error("unexpected answer from crescentd: {0}")]
    Protocol(String),
    /// The caller passed something unusable.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// Moving the bytes failed (the put was revoked; a get found no readable replica).
    #[error("transfer failed ({what}): {source}")]
    Transfer {
        what: String,
        #[source]
        source: TransportError,
    },
    /// The bytes read do not match the checksum stored with the object.
    #[error("checksum mismatch for key {key:?}: stored {expected:#010x}, read {actual:#010x}")]
    ChecksumMismatch {
        key: String,
        expected: u32,
        actual: u32,
    },
    /// A local file or stream could not be read or written (CLI).
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// A non-idempotent operation met a leader change (or a lost connection) after crescentd
    /// may have run it, so it was not repeated: it may or may not have taken effect. Stable
    /// code `FAILOVER_INTERRUPTED` (docs/ha.md, "Clients").
    #[error(
        "{op} was interrupted by a leader change or a lost connection ({detail}); it is not \
         idempotent, so it was not retried and may or may not have taken effect"
    )]
    Interrupted { op: &'static str, detail: String },
    /// No serving crescentd was found within the failover deadline (no leader in etcd, every
    /// listed server unreachable). Stable code `NO_LEADER`.
    #[error("no serving crescentd found within {waited:?}: {detail}")]
    NoLeader {
        waited: std::time::Duration,
        detail: String,
    },
    /// Leader discovery through etcd could not start (bad endpoint or cluster name, etcd
    /// unreachable).
    #[cfg(feature = "etcd")]
    #[error("leader discovery through etcd: {0}")]
    Discovery(#[source] crescent_ha::HaError),
    /// A mesh membership change was refused by the update rule (docs/scale-out.md,
    /// "Membership record"): the mesh's own code, e.g. `LAST_SERVING_CLUSTER`,
    /// `UNKNOWN_CLUSTER`, `ILLEGAL_TRANSITION`.
    #[cfg(feature = "etcd")]
    #[error("mesh membership change refused: {0}")]
    MeshRefused(#[source] crescent_mesh::MeshError),
    /// `crescent admin backup` refused or failed; its code and class are the backup's own
    /// (docs/operations.md, "Backup and restore"). The backup itself is the CLI's (it needs
    /// the journal crates, which a client library does not), so its error comes boxed.
    #[error("backup: {source}")]
    Backup {
        code: ScriptCode,
        class: ErrorClass,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// What went wrong under a failed HTTP request, in words a user acts on: "connection
/// refused" rather than reqwest's "error sending request for url".
fn connect_cause(e: &reqwest::Error) -> String {
    let mut innermost: &dyn std::error::Error = e;
    let mut next = e.source();
    while let Some(inner) = next {
        if let Some(io) = inner.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::ConnectionRefused {
                return "connection refused".into();
            }
        }
        innermost = inner;
        next = inner.source();
    }
    if e.is_timeout() {
        return "timed out".into();
    }
    innermost.to_string()
}

/// The words for a failed TLS handshake under `e`, if that is what failed.
pub(crate) fn tls_failure(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    crescent_tls::find_tls_error(e).map(tls_words)
}

/// Whether `e` is an answer that is not HTTP at all (hyper could not parse it).
pub(crate) fn unparsable_answer(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(e);
    while let Some(err) = next {
        if err
            .downcast_ref::<hyper::Error>()
            .is_some_and(hyper::Error::is_parse)
        {
            return true;
        }
        next = err.source();
    }
    false
}

/// What to do about a TLS error, in a user's words.
pub(crate) fn tls_words(e: &rustls::Error) -> String {
    use rustls::{CertificateError as C, Error as E};
    let hint = match e {
        E::InvalidCertificate(C::UnknownIssuer | C::BadSignature) => {
            "the server's certificate is not signed by a trusted CA: give the CA that signed it \
             with --ca-file (CRESCENT_CA_FILE)"
        }
        E::InvalidCertificate(C::NotValidForName | C::NotValidForNameContext { .. }) => {
            "the server's certificate does not name the host in the server address: use a name \
             or IP address the certificate carries"
        }
        E::InvalidMessage(_) | E::InappropriateMessage { .. } => {
            "the server does not speak TLS there: use http:// and no --ca-file, or check the port"
        }
        _ => "the TLS handshake failed",
    };
    format!("{hint} ({e})")
}

impl ClientError {
    /// The wire code, when the server sent one.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ClientError::Api(e) => Some(e.code),
            _ => None,
        }
    }

    /// An error from a batch item.
    pub fn item(code: ErrorCode, message: String) -> Self {
        ClientError::Api(ApiError::new(code, message))
    }

    pub(crate) fn transfer(what: impl Into<String>, source: TransportError) -> Self {
        ClientError::Transfer {
            what: what.into(),
            source,
        }
    }

    /// Whether retrying the same request may succeed.
    pub fn retryable(&self) -> bool {
        self.class() == ErrorClass::Retryable
    }

    pub fn class(&self) -> ErrorClass {
        match self {
            ClientError::Api(e) if e.retryable => ErrorClass::Retryable,
            ClientError::Api(e) if e.code == ErrorCode::Internal => ErrorClass::Fatal,
            ClientError::Api(_) => ErrorClass::User,
            ClientError::Connect { .. } | ClientError::Rpc { .. } => ErrorClass::Retryable,
            ClientError::Tls { .. } => ErrorClass::Fatal,
            ClientError::Transfer { source, .. } => source.class(),
            // Another replica (or a re-read) may be intact.
            ClientError::ChecksumMismatch { .. } => ErrorClass::Retryable,
            ClientError::InvalidArgument(_) => ErrorClass::User,
            ClientError::Protocol(_) | ClientError::Io { .. } => ErrorClass::Fatal,
            // Retrying the whole operation is the caller's decision: it knows whether a
            // second run is harmless.
            ClientError::Interrupted { .. } | ClientError::NoLeader { .. } => ErrorClass::Retryable,
            #[cfg(feature = "etcd")]
            ClientError::Discovery(e) => e.class(),
            #[cfg(feature = "etcd")]
            ClientError::MeshRefused(e) => e.class(),
            ClientError::Backup { class, .. } => *class,
        }
    }

    /// The code for scripts (`--json` output and exit codes): the wire code as the server
    /// sent it, or one of the client's own.
    pub fn script_code(&self) -> ScriptCode {
        match self {
            ClientError::Api(e) => ScriptCode::Wire(e.code),
            ClientError::Connect { .. } | ClientError::Rpc { .. } | ClientError::Tls { .. } => {
                ScriptCode::Wire(ErrorCode::Unavailable)
            }
            ClientError::Protocol(_) => ScriptCode::Wire(ErrorCode::Internal),
            ClientError::InvalidArgument(_) => ScriptCode::Wire(ErrorCode::InvalidArgument),
            ClientError::Transfer { source, .. } => ScriptCode::Wire(source.code()),
            ClientError::ChecksumMismatch { .. } => ScriptCode::ChecksumMismatch,
            ClientError::Io { .. } => ScriptCode::IoError,
            ClientError::Interrupted { .. } => ScriptCode::FailoverInterrupted,
            ClientError::NoLeader { .. } => ScriptCode::NoLeader,
            #[cfg(feature = "etcd")]
            ClientError::Discovery(e) => ScriptCode::Wire(match e.class() {
                ErrorClass::User => ErrorCode::InvalidArgument,
                ErrorClass::Retryable => ErrorCode::Unavailable,
                ErrorClass::Fatal => ErrorCode::Internal,
            }),
            #[cfg(feature = "etcd")]
            ClientError::MeshRefused(e) => ScriptCode::Mesh(e.code()),
            ClientError::Backup { code, .. } => *code,
        }
    }

    /// [`ClientError::script_code`] as a string (`NOT_FOUND`, `CHECKSUM_MISMATCH`, ...).
    pub fn code_str(&self) -> &'static str {
        self.script_code().as_str()
    }

    /// The `crescent` CLI's exit status for this error ([`ScriptCode::exit_code`], the one
    /// map).
    pub fn exit_code(&self) -> u8 {
        self.script_code().exit_code()
    }
}

impl From<TransportError> for ClientError {
    fn from(e: TransportError) -> Self {
        ClientError::transfer("data plane", e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_wire_code_has_a_distinct_nonzero_non_one_exit_status_class() {
        for code in ErrorCode::ALL {
            let e = ClientError::item(code, "x".into());
            assert_eq!(e.code_str(), code.as_str());
            let exit = e.exit_code();
            assert!(exit >= 2, "{code}: {exit}");
        }
        assert_eq!(
            ClientError::item(ErrorCode::NotFound, "k".into()).exit_code(),
            4
        );
        assert_eq!(ClientError::InvalidArgument("x".into()).exit_code(), 2);
        for refused in [ErrorCode::Unauthenticated, ErrorCode::PermissionDenied] {
            assert_eq!(ClientError::item(refused, "k".into()).exit_code(), 10);
        }
        assert_eq!(
            ClientError::item(ErrorCode::Conflict, "k".into()).exit_code(),
            5
        );
    }

    #[test]
    fn client_side_codes_and_classes() {
        let c = ClientError::ChecksumMismatch {
            key: "k".into(),
            expected: 1,
            actual: 2,
        };
        assert_eq!(c.code_str(), "CHECKSUM_MISMATCH");
        assert_eq!(c.exit_code(), 6);
        assert!(c.retryable());
        let io = ClientError::Io {
            context: "reading f".into(),
            source: std::io::Error::other("boom"),
        };
        assert_eq!((io.code_str(), io.exit_code()), ("IO_ERROR", 7));
        let t = ClientError::transfer("put", TransportError::unavailable("127.0.0.1:1", "refused"));
        assert_eq!(t.code_str(), "UNAVAILABLE");
        assert!(t.retryable());
        assert_eq!(t.exit_code(), 3);
        let oob = ClientError::transfer(
            "get_into",
            TransportError::OutOfRange {
                what: "local buffer".into(),
                offset: 0,
                length: 10,
                size: 5,
            },
        );
        assert_eq!(oob.code_str(), "INVALID_ARGUMENT");
        assert_eq!(oob.class(), ErrorClass::User);
        let cut = ClientError::Interrupted {
            op: "remove",
            detail: "x".into(),
        };
        assert_eq!(
            (cut.code_str(), cut.exit_code()),
            ("FAILOVER_INTERRUPTED", 3)
        );
        assert!(cut.retryable());
        assert!(cut.to_string().contains("not retried"), "{cut}");
        let none = ClientError::NoLeader {
            waited: std::time::Duration::from_secs(1),
            detail: "x".into(),
        };
        assert_eq!((none.code_str(), none.exit_code()), ("NO_LEADER", 3));
        #[cfg(feature = "etcd")]
        {
            let bad = ClientError::Discovery(crescent_ha::HaError::InvalidConfig("x".into()));
            assert_eq!(
                (bad.code_str(), bad.class()),
                ("INVALID_ARGUMENT", ErrorClass::User)
            );
        }
        assert!(!ClientError::item(ErrorCode::InvalidArgument, "x".into()).retryable());
        assert!(ClientError::item(ErrorCode::Unavailable, "x".into()).retryable());
    }
}
