//! Appending records written elsewhere: a standby following its active. Each record keeps
//! its seq, term and digest and must continue this journal exactly; the follower either
//! queues the checked batch for the writer thread or, when that thread is idle, writes and
//! syncs it itself (`direct.rs`).

use std::sync::MutexGuard;

use super::{direct, AppendTicket, Journal, Shared, State};
use crate::error::{JournalError, Result};
use crate::record::RecordRef;

impl Journal {
    /// Appends records written elsewhere (a standby following its active): each keeps its seq,
    /// term and digest, and must continue this journal exactly: the next seq, a term no lower
    /// than the previous record's, and a digest that extends this
    /// journal's chain (recomputed here). The first record that does not is refused with
    /// `Gap`, `Fenced` or `Diverged`, and the whole submission changes nothing. Raises the
    /// fencing floor to the records' term.
    pub fn submit_replicated(&self, records: &[RecordRef<'_>]) -> Result<AppendTicket> {
        let (ticket, _st) = Self::queue_replicated(self.shared(), records, true)?;
        Ok(ticket)
    }

    /// [`Journal::submit_replicated`], and then, unless the writer thread is busy (writing,
    /// or with a truncation to do), the calling thread writes and syncs the queued batch
    /// itself, calls the durable hook from here, and returns with the records durable. This
    /// is how a standby's follower appends: handing the batch to an idle writer thread cost
    /// a thread wake-up (about 45 us, median) on the active's commit path in every sync round
    /// (docs/ha.md, "The sync commit path"). When the writer is busy, the records are queued
    /// for it as with `submit_replicated`, so batches that arrive during a sync still share
    /// the next one. Every check happens first either way: nothing that fails them is written.
    pub fn append_replicated(&self, records: &[RecordRef<'_>]) -> Result<AppendTicket> {
        let shared = self.shared();
        let (ticket, st) = Self::queue_replicated(shared, records, false)?;
        if !records.is_empty() {
            direct::write_queued(shared, st);
        }
        Ok(ticket)
    }

    /// Checks and queues replicated records; returns the ticket with the state still locked.
    /// Wakes a waiting writer thread only if `wake`.
    fn queue_replicated<'s>(
        shared: &'s Shared,
        records: &[RecordRef<'_>],
        wake: bool,
    ) -> Result<(AppendTicket, MutexGuard<'s, State>)> {
        let mut st = shared.lock();
        if let Some(reason) = &st.fatal {
            return Err(JournalError::Fatal(reason.clone()));
        }
        if st.closing {
            return Err(JournalError::Closed);
        }
        if records.is_empty() {
            let d = shared.durable.get();
            let ticket = AppendTicket {
                first_seq: d + 1,
                last_seq: d,
                durable: shared.durable.clone(),
            };
            return Ok((ticket, st));
        }
        let state = &mut *st;
        let (mut seq, mut term, mut digest) = (state.last_seq, state.last_term, state.last_digest);
        for r in records {
            if r.seq != seq + 1 {
                return Err(JournalError::Gap {
                    expected: seq + 1,
                    found: r.seq,
                });
            }
            // Terms never go back along a history. The fencing floor does not apply: a standby
            // that learned the leader's current term still catches up on records written
            // under older ones (the chain digest proves they extend this journal).
            if r.term < term {
                shared.metrics.fenced.inc();
                return Err(JournalError::Fenced {
                    term: r.term,
                    current: term,
                });
            }
            if r.expected_digest(&digest) != *r.digest {
                return Err(JournalError::Diverged {
                    seq: r.seq,
                    reason: format!(
                        "its chain digest does not extend this journal's digest {} at seq {seq}",
                        crate::record::short_hex(&digest)
                    ),
                });
            }
            (seq, term, digest) = (r.seq, r.term, *r.digest);
        }
        let batch = Self::open_batch(shared, state);
        let mark = batch.len();
        for r in records {
            let size = batch.push_ref(r);
            if size > shared.max_record_bytes {
                batch.truncate(mark);
                return Err(JournalError::RecordTooLarge {
                    size,
                    max: shared.max_record_bytes,
                });
            }
        }
        state.replicated_queued = true;
        let ticket = Self::commit_queued(shared, state, seq, term, digest, wake);
        Ok((ticket, st))
    }
}
