//! The one classification of errors shared by the journal, the aggregates and the runtime, and
//! the stable wire codes ([`ErrorCode`]) that every crate's error enum reports.
//!
//! Each crate keeps its own error enum; its `class()` answers with [`ErrorClass`] and, when the
//! error can reach a client, its `code()` (or [`WireCoded::wire_code`]) with an [`ErrorCode`],
//! so the layers above (the actor runtime, crescentd's HTTP mapping, the CLI's exit statuses)
//! treat every crate's errors alike. It lives in a crate of its own, below the journal, so the
//! pure aggregates report both without linking the journal or the wire API
//! (docs/architecture.md "Crates").

pub mod code;
pub mod coverage;

pub use code::ErrorCode;

/// How a caller should treat an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// The request was wrong; retrying it unchanged fails again.
    User,
    /// Transient; the same request may succeed later.
    Retryable,
    /// The process must stop.
    Fatal,
}

/// A domain error's stable wire code. The server maps codes to its wire error in one place
/// ([`ErrorCode::http_status`]); domain crates never know about HTTP.
pub trait WireCoded {
    fn wire_code(&self) -> ErrorCode;
}
