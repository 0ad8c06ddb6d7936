//! The group-commit writer thread: the only code that touches the backend after open.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::direct::WriteToken;
use super::{Shared, State, TruncateRequest};
use crate::backend::JournalBackend;
use crate::codec::EncodedBatch;
use crate::error::JournalError;
use crate::replication::round_timing::{self, Stage};

/// How many emptied batches to keep for reuse.
const SPARE_BATCHES: usize = 2;

/// Bounds of how long the writer waits to gather a batch as large as the previous one.
const MIN_GATHER: Duration = Duration::from_micros(50);
const MAX_GATHER: Duration = Duration::from_millis(2);

/// What the writer learned from the previous batches, to size the next one.
#[derive(Debug, Clone, Copy, Default)]
struct LastBatch {
    /// The records a batch is gathered towards: the largest recent batch, less one per batch
    /// since. Following the last batch alone, a round of appenders once split in two (some
    /// woke too late for the window) stayed split for good: each part became the next
    /// target. Decaying by one, it heals at the next round that arrives within the window,
    /// and a real drop in appenders costs a few shortened windows.
    records: u64,
    sync: Duration,
}

impl LastBatch {
    /// After a batch of `records` that took `sync`.
    fn next(self, records: u64, sync: Duration) -> Self {
        Self {
            records: records.max(self.records.saturating_sub(1)),
            sync,
        }
    }

    /// (records to wait for, how long at most) before taking a smaller batch.
    fn gather(&self) -> Option<(u64, Duration)> {
        (self.records > 1).then(|| (self.records, (self.sync / 2).clamp(MIN_GATHER, MAX_GATHER)))
    }
}

/// What the writer does next; backend work comes with the write token.
enum Work<'a> {
    Append(EncodedBatch, WriteToken<'a>),
    Truncate(TruncateRequest, WriteToken<'a>),
    Exit,
}

/// Poisons the journal if the writer thread unwinds, so no waiter hangs forever.
struct PanicGuard<'a>(&'a Shared);

impl Drop for PanicGuard<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            poison(self.0, "journal writer thread panicked".into());
        }
    }
}

/// Marks the journal failed: nothing queued or later is ever acknowledged.
pub(super) fn poison(shared: &Shared, reason: String) {
    let mut st = shared.lock();
    if st.fatal.is_none() {
        st.fatal = Some(reason.clone());
    }
    st.queue.clear();
    st.queued_records = 0;
    st.first_queued_at = None;
    st.replicated_queued = false;
    for (_, reply) in st.truncations.drain(..) {
        let _ = reply.send(Err(JournalError::Fatal(reason.clone())));
    }
    drop(st);
    shared.durable.fail(reason);
}

pub(super) fn run(shared: Arc<Shared>) {
    let _span = tracing::info_span!("journal_writer", backend = shared.backend_name).entered();
    let _guard = PanicGuard(&shared);
    let mut last = LastBatch::default();
    loop {
        let gather = if shared.adaptive_gather {
            last.gather()
        } else {
            None
        };
        match next_work(&shared, gather) {
            Work::Append(batch, token) => {
                let records = batch.len() as u64;
                let started = Instant::now();
                token.with_backend(|backend| append(&shared, backend, batch));
                last = last.next(records, started.elapsed());
            }
            Work::Truncate((keep_from, reply), token) => {
                let fatal = shared.lock().fatal.clone();
                let result = match fatal {
                    Some(reason) => Err(JournalError::Fatal(reason)),
                    None => token.with_backend(|backend| backend.truncate_prefix(keep_from)),
                };
                drop(token);
                match &result {
                    Ok(()) => {
                        shared.first_seq.fetch_max(keep_from, Ordering::AcqRel);
                        tracing::info!(keep_from, "journal prefix truncated");
                    }
                    Err(e) => {
                        tracing::error!(keep_from, error = %e, "journal prefix truncation failed")
                    }
                }
                let _ = reply.send(result);
            }
            Work::Exit => break,
        }
    }
    // The backend (files, locks, sled handles) closes here, on the writer thread, once no
    // other thread holds the write token (`next_work` exits only then).
    drop(
        shared
            .backend
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take(),
    );
}

/// Waits for the next thing to do. With `gather` = (n, max wait), a batch smaller than n is
/// held back until n records are queued or the wait runs out (see
/// [`crate::JournalOptions::adaptive_gather`]). The wait runs from the later of now (the
/// writer is free) and the moment the first of those records was queued: an active in sync
/// mode finishes its own sync well before its appenders are acknowledged (the standby's ack
/// comes later), so a window counted from the end of the sync alone was mostly over before
/// the next round's first record arrived, and split the round into two batches (two
/// replication round trips); counted from the first record alone, records queued during the
/// sync would leave no window at all for the appenders the sync is about to acknowledge.
fn next_work(shared: &Shared, gather: Option<(u64, Duration)>) -> Work<'_> {
    let free_since = Instant::now();
    let mut st = shared.lock();
    loop {
        if st.writing {
            // A follower writes its own batch (direct.rs); its release wakes this thread.
            st.writer_idle = true;
            st = shared.work.wait(st).unwrap_or_else(|p| p.into_inner());
            st.writer_idle = false;
            continue;
        }
        if let (Some((target, wait)), Some(first_queued)) = (gather, st.first_queued_at) {
            let until = first_queued.max(free_since) + wait;
            let now = Instant::now();
            if holds_back(st.queued_records, target, st.replicated_queued)
                && now < until
                && !st.closing
                && st.truncations.is_empty()
            {
                st.gather_target = target;
                st = shared
                    .work
                    .wait_timeout(st, until - now)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
                st.gather_target = 0;
                continue;
            }
        }
        if let Some(batch) = pop_batch(&mut st) {
            return Work::Append(batch, WriteToken::take(shared, &mut st));
        }
        if let Some(req) = st.truncations.pop_front() {
            return Work::Truncate(req, WriteToken::take(shared, &mut st));
        }
        if st.closing {
            return Work::Exit;
        }
        st.writer_idle = true;
        st = shared.work.wait(st).unwrap_or_else(|p| p.into_inner());
        st.writer_idle = false;
    }
}

/// Takes the first non-empty batch off the queue (for the write token's holder).
pub(super) fn pop_batch(st: &mut State) -> Option<EncodedBatch> {
    while let Some(batch) = st.queue.pop_front() {
        st.queued_records -= batch.len() as u64;
        if st.queue.is_empty() {
            st.replicated_queued = false;
            st.first_queued_at = None;
        }
        if !batch.is_empty() {
            return Some(batch);
        }
        recycle(&mut st.spare, batch);
    }
    None
}

/// Whether the writer, gathering towards `target` records, keeps waiting with `queued`
/// records queued. Records a standby received from its active are never held back: the active
/// already gathered them into this batch, and its commit (hence the next batch) waits for this
/// journal's sync, so waiting for more only adds latency.
fn holds_back(queued: u64, target: u64, replicated_queued: bool) -> bool {
    queued > 0 && queued < target && !replicated_queued
}

fn recycle(spare: &mut Vec<EncodedBatch>, mut batch: EncodedBatch) {
    if spare.len() < SPARE_BATCHES && batch.bytes.capacity() <= 64 << 20 {
        batch.clear();
        spare.push(batch);
    }
}

pub(super) fn append(shared: &Shared, backend: &mut dyn JournalBackend, batch: EncodedBatch) {
    let last_seq = batch.last_seq().expect("non-empty batch");
    let _span = tracing::debug_span!("journal_batch", records = batch.len(), last_seq).entered();
    let tap = shared.tap.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let replicating = tap.is_some();
    if replicating {
        round_timing::mark(Stage::Tapped, last_seq);
    }
    // A standby's journal (only looked up when timing rounds).
    let following = cfg!(feature = "round-timing")
        && shared
            .durable_hook
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some();
    if following {
        round_timing::mark(Stage::StandbyWriting, last_seq);
    }
    if let Some(tap) = tap {
        tap(
            batch.first_seq().unwrap_or(last_seq),
            last_seq,
            &batch.bytes,
        );
    }
    let started = Instant::now();
    let result = backend.append(&batch);
    let elapsed = started.elapsed();
    match result {
        Ok(()) => {
            let m = &shared.metrics;
            m.sync_seconds.observe(elapsed.as_secs_f64());
            m.batches.inc();
            m.batch_records.observe(batch.len() as f64);
            m.bytes.inc_by(batch.bytes.len() as u64);
            m.durable_seq.set(last_seq as i64);
            shared.durable.advance(last_seq);
            if replicating {
                round_timing::mark(Stage::ActiveDurable, last_seq);
            }
            if following {
                round_timing::mark(Stage::StandbyDurable, last_seq);
            }
            // Told once the watermark says so too: whoever the hook tells (a standby's active)
            // may rely on this journal's durable seq being there already.
            let hook = shared
                .durable_hook
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            if let Some(hook) = hook {
                hook(last_seq);
            }
            let mut st = shared.lock();
            recycle(&mut st.spare, batch);
        }
        Err(e) => {
            let reason = format!(
                "append of seqs {}..={last_seq} to the {} backend failed: {e}",
                batch.first_seq().unwrap_or(last_seq),
                shared.backend_name
            );
            tracing::error!(error = %e, last_seq, "{reason}; the journal is poisoned");
            poison(shared, reason);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gather_target_is_the_largest_recent_batch_decaying_by_one() {
        let ms = Duration::from_millis(1);
        let mut last = LastBatch::default();
        assert_eq!(last.gather(), None, "nothing learned yet");
        last = last.next(16, ms);
        assert_eq!(last.gather(), Some((16, ms / 2)));
        last = last.next(10, ms);
        assert_eq!(
            last.gather(),
            Some((15, ms / 2)),
            "a split round does not stick"
        );
        last = last.next(16, 4 * ms);
        assert_eq!(last.gather(), Some((16, MAX_GATHER)));
        for _ in 0..20 {
            last = last.next(1, Duration::from_micros(10));
        }
        assert_eq!(last.gather(), None, "one appender again: no waiting");
        last = last.next(3, Duration::from_micros(10));
        assert_eq!(last.gather(), Some((3, MIN_GATHER)));
    }

    #[test]
    fn local_records_are_held_back_until_the_target_and_replicated_ones_never() {
        assert!(!holds_back(0, 8, false), "nothing queued: nothing to hold");
        assert!(holds_back(3, 8, false));
        assert!(!holds_back(8, 8, false));
        assert!(
            !holds_back(3, 8, true),
            "a standby's records go straight to disk"
        );
        assert!(!holds_back(1, 2, true));
    }
}
