//! The write token, and writing a queued batch on the submitting thread.
//!
//! One backend, several possible writers: the writer thread, and a standby's follower that
//! writes the batch it just received itself when the writer thread is idle
//! ([`crate::Journal::append_replicated`]). Whoever writes holds the token
//! (`State::writing`, set under the state lock): it takes batches off the front of the queue
//! and writes them before giving the token back, so the backend sees them in queue order, and
//! at most one thread ever touches it. The writer thread waits while another thread holds the
//! token, and is woken on release if work came in meanwhile.

use std::sync::MutexGuard;

use super::{writer, Shared, State};
use crate::backend::JournalBackend;

/// The write token, held until dropped. On release it wakes the writer thread if that waits
/// for the token with work queued; a holder that panics poisons the journal (its batch was
/// never acknowledged), so no waiter hangs.
pub(super) struct WriteToken<'a> {
    shared: &'a Shared,
}

impl<'a> WriteToken<'a> {
    /// Takes the token; the caller has checked under `st` that nobody holds it.
    pub(super) fn take(shared: &'a Shared, st: &mut State) -> Self {
        debug_assert!(!st.writing, "the write token is taken once");
        st.writing = true;
        Self { shared }
    }

    /// Runs `f` on the backend (present until the writer thread exits, which waits for the
    /// token first).
    pub(super) fn with_backend<R>(&self, f: impl FnOnce(&mut dyn JournalBackend) -> R) -> R {
        let mut backend = self
            .shared
            .backend
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let backend = backend
            .as_mut()
            .expect("the backend is closed only after the last write token");
        f(backend.as_mut())
    }
}

impl Drop for WriteToken<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            writer::poison(self.shared, "a journal write panicked".into());
        }
        let mut st = self.shared.lock();
        st.writing = false;
        let work = !st.queue.is_empty() || !st.truncations.is_empty() || st.closing;
        if st.writer_idle && work {
            st.writer_idle = false;
            self.shared.work.notify_one();
        }
    }
}

/// Writes the batch at the front of the queue on this thread if nobody holds the write token
/// and the writer thread has nothing else to do first (a truncation, closing); otherwise
/// leaves it to the writer thread, waking it if it waits. Consumes the lock: it is released
/// before the write.
pub(super) fn write_queued(shared: &Shared, mut st: MutexGuard<'_, State>) {
    let free = !st.writing && st.truncations.is_empty() && !st.closing && st.fatal.is_none();
    if !free {
        super::Journal::wake_writer(shared, &mut st);
        return;
    }
    let Some(batch) = writer::pop_batch(&mut st) else {
        return;
    };
    let token = WriteToken::take(shared, &mut st);
    // Anything queued behind this batch (past one batch's bytes, or submitted meanwhile)
    // is the writer thread's: releasing the token wakes it.
    drop(st);
    shared.metrics.direct_batches.inc();
    token.with_backend(|backend| writer::append(shared, backend, batch));
    drop(token);
}
