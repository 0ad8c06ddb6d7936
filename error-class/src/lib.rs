//! The one classification of errors shared by the journal, the aggregates and the runtime.
//!
//! Each crate keeps its own error enum; its `class()` answers with this type so the layers above
//! (the actor runtime, crescentd's HTTP mapping) treat every crate's errors alike. It lives in a
//! crate of its own, below the journal, so the pure aggregates report it without linking the
//! journal (docs/architecture.md "Crates").

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
