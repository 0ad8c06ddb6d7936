//! What a command or read sent through the actor runtime can fail with.

use crescent_journal::JournalError;

pub use crescent_journal::error::ErrorClass;

/// The runtime's error: the aggregate's own refusal, a journal failure, or a dead actor.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError<E> {
    /// `decide` refused the command; nothing was journaled.
    #[error(transparent)]
    Domain(E),

    /// The journal refused the append (e.g. `Fenced`: nothing was journaled, state unchanged) or
    /// could not confirm it (fatal: the process is stopping, the outcome is unknown until
    /// recovery).
    #[error(transparent)]
    Journal(JournalError),

    /// The actor for this instance has stopped (after a journal failure, or at shutdown), so the
    /// message was not handled or its reply was lost.
    #[error("aggregate {kind}/{id} is not running")]
    Stopped { kind: &'static str, id: String },
}

impl<E> RuntimeError<E> {
    /// How a caller should treat the error.
    ///
    /// A domain refusal is the caller's to fix (user). A stopped actor means this process is
    /// going down or shutting down: the request may succeed against the restarted or promoted
    /// server (retryable). Journal errors keep the journal's own classification.
    pub fn class(&self) -> ErrorClass {
        match self {
            RuntimeError::Domain(_) => ErrorClass::User,
            RuntimeError::Journal(e) => e.class(),
            RuntimeError::Stopped { .. } => ErrorClass::Retryable,
        }
    }

    /// True when the journal fenced the append (a newer term took over).
    pub fn is_fenced(&self) -> bool {
        matches!(self, RuntimeError::Journal(JournalError::Fenced { .. }))
    }

    /// The domain error, if this is one.
    pub fn domain(&self) -> Option<&E> {
        match self {
            RuntimeError::Domain(e) => Some(e),
            _ => None,
        }
    }

    /// Maps the domain error type, keeping every other variant.
    pub fn map_domain<F, E2>(self, f: F) -> RuntimeError<E2>
    where
        F: FnOnce(E) -> E2,
    {
        match self {
            RuntimeError::Domain(e) => RuntimeError::Domain(f(e)),
            RuntimeError::Journal(e) => RuntimeError::Journal(e),
            RuntimeError::Stopped { kind, id } => RuntimeError::Stopped { kind, id },
        }
    }
}
