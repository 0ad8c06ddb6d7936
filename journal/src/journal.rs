//! The journal front-end: sequencing, chaining, term fencing and group commit over a backend.
//!
//! [`Journal::submit`] runs on the caller's thread under one mutex: it checks the term against
//! the fencing floor, assigns contiguous seqs, extends the SHA-256 chain and encodes the frames
//! straight into the pending [`EncodedBatch`] at the tail of a queue. One writer thread (see
//! `writer.rs`) takes whole batches off the front of that queue (group commit: everything that
//! arrived while the previous batch was syncing goes into the next one, up to
//! `max_batch_bytes`), hands each to [`JournalBackend::append`] (one durable sync) and then
//! advances the durable [`Watermark`] that tickets wait on. A standby's follower may write its
//! own replicated batch instead when the writer is idle ([`Journal::append_replicated`]); one
//! write token (`direct.rs`) keeps the backend to one thread at a time, in queue order. With
//! [`JournalOptions::adaptive_gather`] the writer holds a smaller batch back briefly until as
//! many records are queued as the previous batch had (measured: bigger batches under many
//! appenders, no added latency for one appender).
//!
//! A failed append is fatal: the journal is poisoned, the watermark fails (every waiter gets
//! [`JournalError::Fatal`]), queued batches are discarded unacknowledged, and every later
//! submit fails with `Fatal`. The process must restart and recover from what is on disk.
//!
//! Reads go through the backend's [`crate::ReadSource`] and never see past the durable
//! watermark. Prefix truncation is executed by the writer thread between batches, so it never
//! races an append.

mod direct;
mod replicated;
mod writer;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use crate::backend::{visit_with, JournalBackend, ReadSource, RecordIter};
use crate::codec::{EncodedBatch, MAX_FRAME_BODY};
use crate::error::{JournalError, Result};
use crate::metrics::{BackendMetrics, JournalMetrics};
use crate::record::RecordRef;
use crate::record::{chain_digest, Digest, NewRecord};
use crate::recovery::{RecoveryMode, TruncationReport};
use crate::watermark::Watermark;

/// Options for [`Journal::open`].
#[derive(Debug, Clone)]
pub struct JournalOptions {
    pub recovery_mode: RecoveryMode,
    /// Largest encoded record accepted (default 64 MiB).
    pub max_record_bytes: usize,
    /// Most bytes gathered into one group-commit batch before it is written (default 16 MiB).
    /// A single submission is never split, so one batch can exceed this by one submission.
    pub max_batch_bytes: usize,
    /// Where to count; `None` counts into an unregistered [`JournalMetrics`].
    pub metrics: Option<JournalMetrics>,
    /// Let the writer wait (at most half the last sync time, 50 us to 2 ms, counted from the
    /// later of the writer being free and the first record being queued) until as many
    /// records are queued as the largest recent batch held (less one per batch since) before
    /// taking the next batch, so the appenders it just acknowledged share one sync instead of
    /// trickling into several (default true). A single appender never waits: its batches hold
    /// one record. Replicated records are never held back.
    pub adaptive_gather: bool,
}

impl Default for JournalOptions {
    fn default() -> Self {
        Self {
            recovery_mode: RecoveryMode::default(),
            max_record_bytes: 64 << 20,
            max_batch_bytes: 16 << 20,
            metrics: None,
            adaptive_gather: true,
        }
    }
}

/// Sequence numbers given to one submission; await [`AppendTicket::durable`] for durability.
#[derive(Debug, Clone)]
pub struct AppendTicket {
    pub first_seq: u64,
    pub last_seq: u64,
    pub(crate) durable: Watermark,
}

/// A durable append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendAck {
    pub first_seq: u64,
    pub last_seq: u64,
}

impl AppendTicket {
    /// Resolves once every record of the submission is durable.
    pub async fn durable(self) -> Result<AppendAck> {
        self.durable.wait_for(self.last_seq).await?;
        Ok(AppendAck {
            first_seq: self.first_seq,
            last_seq: self.last_seq,
        })
    }

    /// Blocking form of [`AppendTicket::durable`].
    pub fn wait_blocking(self) -> Result<AppendAck> {
        self.durable.wait_for_blocking(self.last_seq)?;
        Ok(AppendAck {
            first_seq: self.first_seq,
            last_seq: self.last_seq,
        })
    }
}

/// The OpLog. Cheap to clone; all clones share one writer. Dropping the last clone flushes what
/// was submitted and stops the writer thread, like [`Journal::shutdown`].
#[derive(Clone)]
pub struct Journal {
    handle: Arc<Handle>,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("last_seq", &self.last_seq)
            .field("floor_term", &self.floor_term)
            .field("guarded", &self.guard.is_some())
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.handle.shared.lock();
        f.debug_struct("Journal")
            .field("backend", &self.handle.shared.backend_name)
            .field("first_seq", &self.first_seq())
            .field("last_seq", &st.last_seq)
            .field("durable", &self.handle.shared.durable.get())
            .field("term", &st.floor_term)
            .finish()
    }
}

/// Owned by the clones of one [`Journal`]; stops the writer when the last clone goes.
struct Handle {
    shared: Arc<Shared>,
    writer: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

impl Handle {
    fn stop(&self) -> Result<()> {
        {
            let mut st = self.shared.lock();
            st.closing = true;
        }
        self.shared.work.notify_all();
        let writer = self.writer.lock().expect("writer handle mutex").take();
        if let Some(writer) = writer {
            if writer.join().is_err() {
                tracing::error!("journal writer thread panicked");
            }
        }
        self.shared.durable.close();
        match self.shared.lock().fatal.clone() {
            Some(reason) => Err(JournalError::Fatal(reason)),
            None => Ok(()),
        }
    }
}

/// State shared by the front-end and the writer thread.
pub(crate) struct Shared {
    state: Mutex<State>,
    /// Signalled when work arrives for an idle writer, or on close.
    work: Condvar,
    durable: Watermark,
    /// First seq readers may ask for (moved by prefix truncation).
    first_seq: AtomicU64,
    /// (seq, term, digest) of the record just before the last prefix truncation's
    /// `keep_from`, kept so a peer positioned exactly there can still be checked
    /// ([`Journal::base`]).
    base: Mutex<Option<(u64, u64, Digest)>>,
    reader: Box<dyn ReadSource>,
    max_record_bytes: usize,
    max_batch_bytes: usize,
    adaptive_gather: bool,
    backend_name: &'static str,
    truncation: Option<TruncationReport>,
    metrics: BackendMetrics,
    journal_metrics: JournalMetrics,
    /// Sees every batch as it goes to the backend, before its sync (replication).
    tap: Mutex<Option<ReplicationTap>>,
    /// Told each new durable seq by the writer (see [`Journal::set_durable_hook`]).
    durable_hook: Mutex<Option<DurableHook>>,
    /// The backend, used only by the holder of the write token (`State::writing`): the
    /// writer thread, or a standby's follower writing its own batch (`direct.rs`). The writer
    /// thread takes it out and closes it when it exits.
    backend: Mutex<Option<Box<dyn JournalBackend>>>,
}

/// Called by the writer with (first seq, last seq, frame bytes) of each batch just before it
/// is written and synced (see [`Journal::set_replication_tap`]).
pub type ReplicationTap = Arc<dyn Fn(u64, u64, &[u8]) + Send + Sync>;

/// Called by the writer with each new durable seq (see [`Journal::set_durable_hook`]).
pub type DurableHook = Arc<dyn Fn(u64) + Send + Sync>;

/// A prefix-truncation request for the writer thread, with where to send the result.
type TruncateRequest = (u64, mpsc::Sender<Result<()>>);

pub(crate) struct State {
    last_seq: u64,
    last_term: u64,
    /// The fencing floor: the highest term seen.
    floor_term: u64,
    last_digest: Digest,
    /// Batches waiting for the writer, oldest first; submissions go into the last one.
    queue: VecDeque<EncodedBatch>,
    /// Emptied batches kept for reuse (their buffers stay allocated).
    spare: Vec<EncodedBatch>,
    truncations: VecDeque<TruncateRequest>,
    writer_idle: bool,
    /// Records in `queue`.
    queued_records: u64,
    /// While the writer gathers a batch: wake it once this many records are queued (0: not
    /// gathering).
    gather_target: u64,
    /// Whether `queue` holds records from [`Journal::submit_replicated`]. The writer never
    /// holds those back to gather more: they arrive in the batches the active already
    /// gathered, and the active's commit waits for this journal's sync (docs/ha.md).
    replicated_queued: bool,
    /// When the oldest record in `queue` was queued (`None`: nothing queued). The writer's
    /// gather window runs from here, not from when the writer last looked: under sync
    /// replication the next round's appenders only arrive once the standby acknowledged, well
    /// after the writer finished its own sync (docs/ha.md, "The sync commit path").
    first_queued_at: Option<std::time::Instant>,
    /// The write token: someone is writing to the backend (a batch or a truncation). Batches
    /// are taken off `queue` only by the thread that sets it, and written before it is
    /// cleared, so they reach the backend in queue order whichever thread writes them.
    writing: bool,
    closing: bool,
    fatal: Option<String>,
    /// Consulted (with the submission's term) before every local append.
    guard: Option<AppendGuard>,
}

/// Whether a local append under `term` may happen now (see [`Journal::set_append_guard`]).
pub type AppendGuard = Arc<dyn Fn(u64) -> bool + Send + Sync>;

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock can only come from a bug in this module; the state is
        // still consistent (every mutation is committed last), so keep going.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Journal {
    /// Opens a journal over `backend`, recovering it under `opts.recovery_mode`, and starts the
    /// group-commit writer thread.
    pub fn open(mut backend: Box<dyn JournalBackend>, opts: JournalOptions) -> Result<Journal> {
        let backend_name = backend.name();
        let _span = tracing::info_span!("journal_open", backend = backend_name).entered();
        let recovered = backend.recover(opts.recovery_mode)?;
        if let Some(t) = &recovered.truncated {
            crate::recovery::log_truncation(backend_name, t);
        }
        tracing::info!(
            backend = backend_name,
            first_seq = recovered.first_seq,
            last_seq = recovered.last_seq,
            term = recovered.max_term,
            "journal recovered"
        );
        let journal_metrics = opts
            .metrics
            .clone()
            .unwrap_or_else(JournalMetrics::unregistered);
        let metrics = journal_metrics.for_backend(backend_name);
        metrics.durable_seq.set(recovered.last_seq as i64);
        let durable = Watermark::new(recovered.last_seq);
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                last_seq: recovered.last_seq,
                last_term: recovered.last_term,
                floor_term: recovered.max_term,
                last_digest: recovered.last_digest,
                queue: VecDeque::new(),
                spare: Vec::new(),
                truncations: VecDeque::new(),
                writer_idle: false,
                queued_records: 0,
                gather_target: 0,
                replicated_queued: false,
                first_queued_at: None,
                writing: false,
                closing: false,
                fatal: None,
                guard: None,
            }),
            work: Condvar::new(),
            durable,
            first_seq: AtomicU64::new(recovered.first_seq),
            base: Mutex::new(recovered.base),
            reader: backend.read_source(),
            max_record_bytes: opts.max_record_bytes.min(MAX_FRAME_BODY),
            max_batch_bytes: opts.max_batch_bytes.max(1),
            adaptive_gather: opts.adaptive_gather,
            backend_name,
            truncation: recovered.truncated.clone(),
            metrics,
            journal_metrics,
            tap: Mutex::new(None),
            durable_hook: Mutex::new(None),
            backend: Mutex::new(Some(backend)),
        });
        let writer = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name(format!("journal-writer-{backend_name}"))
                .spawn(move || writer::run(shared))
                .map_err(|e| JournalError::Fatal(format!("cannot start journal writer: {e}")))?
        };
        Ok(Journal {
            handle: Arc::new(Handle {
                shared,
                writer: Mutex::new(Some(writer)),
            }),
        })
    }

    fn shared(&self) -> &Shared {
        &self.handle.shared
    }

    /// Assigns seqs to `records` (in order, contiguous), extends the chain and queues them for
    /// the next group commit. Returns at once; the ticket resolves when they are durable.
    /// Fails with `Fenced` if `term` is below the highest term seen, `RecordTooLarge`, `Fatal`
    /// after a write failure, `Closed` after shutdown. An empty `records` is an error-free no-op
    /// whose ticket is already durable. A failed submission changes nothing.
    pub fn submit(&self, term: u64, records: Vec<NewRecord>) -> Result<AppendTicket> {
        let shared = self.shared();
        if records.is_empty() {
            let d = shared.durable.get();
            return Ok(AppendTicket {
                first_seq: d + 1,
                last_seq: d,
                durable: shared.durable.clone(),
            });
        }
        // Cheap size check before hashing or encoding anything: the payload and strings alone.
        for r in &records {
            let floor = r.event.payload.len() + r.stream.kind.len() + r.stream.id.len();
            if floor > shared.max_record_bytes {
                return Err(JournalError::RecordTooLarge {
                    size: floor,
                    max: shared.max_record_bytes,
                });
            }
        }
        let mut st = shared.lock();
        if let Some(reason) = &st.fatal {
            return Err(JournalError::Fatal(reason.clone()));
        }
        if st.closing {
            return Err(JournalError::Closed);
        }
        if term < st.floor_term || st.guard.as_ref().is_some_and(|g| !g(term)) {
            shared.metrics.fenced.inc();
            return Err(JournalError::Fenced {
                term,
                current: st.floor_term.max(term + 1),
            });
        }
        let st = &mut *st;
        let mut seq = st.last_seq;
        let mut digest = st.last_digest;
        let batch = Self::open_batch(shared, st);
        let mark = batch.len();
        for r in &records {
            seq += 1;
            digest = chain_digest(&digest, seq, term, r.timestamp_ms, &r.stream, &r.event);
            let size = batch.push_parts(seq, term, r.timestamp_ms, &r.stream, &r.event, &digest);
            if size > shared.max_record_bytes {
                batch.truncate(mark);
                return Err(JournalError::RecordTooLarge {
                    size,
                    max: shared.max_record_bytes,
                });
            }
        }
        drop(records);
        Ok(Self::commit_queued(shared, st, seq, term, digest, true))
    }

    /// The batch submissions go into (a fresh one when the last is full).
    fn open_batch<'s>(shared: &Shared, st: &'s mut State) -> &'s mut EncodedBatch {
        let need_new = match st.queue.back() {
            None => true,
            Some(b) => b.bytes.len() >= shared.max_batch_bytes,
        };
        if need_new {
            let batch = st.spare.pop().unwrap_or_default();
            st.queue.push_back(batch);
        }
        st.queue.back_mut().expect("a batch was just ensured")
    }

    /// Moves the head to the records just queued (through `seq`) and, if `wake`, wakes the
    /// writer if it waits for them.
    fn commit_queued(
        shared: &Shared,
        st: &mut State,
        seq: u64,
        term: u64,
        digest: Digest,
        wake: bool,
    ) -> AppendTicket {
        let first_seq = st.last_seq + 1;
        let count = seq - st.last_seq;
        st.last_seq = seq;
        st.last_term = term;
        st.floor_term = st.floor_term.max(term);
        st.last_digest = digest;
        shared.metrics.appends.inc_by(count);
        if st.queued_records == 0 {
            st.first_queued_at = Some(std::time::Instant::now());
        }
        st.queued_records += count;
        if wake {
            Self::wake_writer(shared, st);
        }
        AppendTicket {
            first_seq,
            last_seq: seq,
            durable: shared.durable.clone(),
        }
    }

    /// Wakes the writer thread if it waits for what is queued now (idle, or gathering and the
    /// batch is complete).
    fn wake_writer(shared: &Shared, st: &mut State) {
        let wake = st.writer_idle
            || (st.gather_target > 0
                && (st.replicated_queued || st.queued_records >= st.gather_target));
        if wake {
            st.writer_idle = false;
            st.gather_target = 0;
            shared.work.notify_one();
        }
    }

    /// `submit` then wait for durability.
    pub async fn append(&self, term: u64, records: Vec<NewRecord>) -> Result<AppendAck> {
        self.submit(term, records)?.durable().await
    }

    /// Blocking form of [`Journal::append`].
    pub fn append_blocking(&self, term: u64, records: Vec<NewRecord>) -> Result<AppendAck> {
        self.submit(term, records)?.wait_blocking()
    }

    /// The durable watermark: the highest seq that is durable.
    pub fn durable(&self) -> Watermark {
        self.shared().durable.clone()
    }

    /// The highest seq assigned so far (durable or not).
    pub fn last_seq(&self) -> u64 {
        self.shared().lock().last_seq
    }

    /// The first seq still held (prefix truncation moves it).
    pub fn first_seq(&self) -> u64 {
        self.shared().first_seq.load(Ordering::Acquire)
    }

    /// (seq, term, chain digest) of record `seq`, when `seq` is the record just before the
    /// journal's first one and this process truncated the journal there (a snapshot at `seq`
    /// kept last): what a standby reseeded from that snapshot is checked against (docs/ha.md,
    /// "Reseeding"). `None` otherwise, e.g. after a reopen until the next truncation.
    pub fn base(&self) -> Option<(u64, u64, Digest)> {
        let base = *self.shared().base.lock().unwrap_or_else(|p| p.into_inner());
        base.filter(|(seq, _, _)| seq + 1 == self.first_seq())
    }

    /// The highest term seen (appends below it are fenced).
    pub fn term(&self) -> u64 {
        self.shared().lock().floor_term
    }

    /// Raises the fencing floor without appending (a newer leader was observed). The floor is
    /// not persisted: after a restart it is the highest term in the journal.
    pub fn fence(&self, term: u64) {
        let mut st = self.shared().lock();
        st.floor_term = st.floor_term.max(term);
    }

    /// Installs a check that every local append ([`Journal::submit`], not replicated ones) must
    /// pass, under the submission lock: an HA active passes "is `term` still my lease-backed
    /// term right now", so nothing is appended once the lease deadline has passed, even by a
    /// request that raced the step-down. A refused append fails with `Fenced`.
    pub fn set_append_guard(&self, guard: Option<AppendGuard>) {
        self.shared().lock().guard = guard;
    }

    /// Installs (or removes) a tap that sees each batch of frames as the writer hands it to the
    /// backend, before the sync: an HA active streams them to its standby from there, so both
    /// sides sync in parallel. What the tap sees may not be durable here yet (commit still
    /// waits for local durability too); a record the tap missed is read back from disk.
    pub fn set_replication_tap(&self, tap: Option<ReplicationTap>) {
        *self.shared().tap.lock().unwrap_or_else(|p| p.into_inner()) = tap;
    }

    /// Installs (or removes) a hook the writer thread calls with the new durable seq as soon
    /// as each batch is synced (right after the durable watermark advances): a standby
    /// acknowledges from there, saving the wake-up of another thread on the active's commit
    /// path. It runs between batches, so it must be quick and never wait long (it holds up the
    /// next sync).
    pub fn set_durable_hook(&self, hook: Option<DurableHook>) {
        *self
            .shared()
            .durable_hook
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = hook;
    }

    /// (last assigned seq, its term, its chain digest).
    pub fn head(&self) -> (u64, u64, Digest) {
        let st = self.shared().lock();
        (st.last_seq, st.last_term, st.last_digest)
    }

    /// What recovery truncated at open, if anything.
    pub fn truncation(&self) -> Option<TruncationReport> {
        self.shared().truncation.clone()
    }

    /// The backend's short name (`file`, `sled`, `memory`).
    pub fn backend_name(&self) -> &'static str {
        self.shared().backend_name
    }

    /// The metric families this journal counts into.
    pub fn metrics(&self) -> &JournalMetrics {
        &self.shared().journal_metrics
    }

    /// Set once a write failed: the reason, after which nothing more is acknowledged.
    pub fn fault(&self) -> Option<String> {
        self.shared().lock().fatal.clone()
    }

    /// Durable records from `seq` to the durable watermark at the time of the call.
    pub fn read_from(&self, seq: u64) -> Result<RecordIter> {
        self.read_range(seq, u64::MAX)
    }

    /// Durable records in `from..=upto` (upto is capped at the durable watermark). Fails with
    /// `OutOfRange` when `from` is below [`Journal::first_seq`]; a `from` past the durable
    /// watermark yields nothing.
    pub fn read_range(&self, from: u64, upto: u64) -> Result<RecordIter> {
        let shared = self.shared();
        let durable = shared.durable.get();
        let first = self.first_seq();
        if from < first {
            return Err(JournalError::OutOfRange {
                seq: from,
                first,
                last: durable,
            });
        }
        let upto = upto.min(durable);
        if from > upto {
            return Ok(Box::new(std::iter::empty()));
        }
        shared.reader.read_range(from, upto)
    }

    /// Like [`Journal::read_range`], handing each record to `visit` as a borrowed view (no
    /// allocation per record on the file backend): the replay path. The visitor's first error
    /// stops the visit and is returned as is.
    pub fn visit_range<E: From<JournalError>>(
        &self,
        from: u64,
        upto: u64,
        visit: impl FnMut(RecordRef<'_>) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        let shared = self.shared();
        let durable = shared.durable.get();
        let first = self.first_seq();
        if from < first {
            return Err(JournalError::OutOfRange {
                seq: from,
                first,
                last: durable,
            }
            .into());
        }
        let upto = upto.min(durable);
        if from > upto {
            return Ok(());
        }
        visit_with(shared.reader.as_ref(), from, upto, visit)
    }

    /// A clone of the backend's read handle, for readers that run apart from the journal
    /// (e.g. a snapshotter thread). Unlike [`Journal::read_range`] it is not capped at the
    /// durable watermark: cap `upto` at [`Journal::durable`] yourself.
    pub fn read_source(&self) -> Box<dyn ReadSource> {
        self.shared().reader.boxed_clone()
    }

    /// Drops records before `keep_from` (behind the oldest retained snapshot). `keep_from` may
    /// be at most the durable watermark + 1. Afterwards reads below `keep_from` fail with
    /// `OutOfRange`; the backend may physically keep some older records (the file backend drops
    /// whole segments only), which a reopen then reports as its first seq.
    pub fn truncate_prefix(&self, keep_from: u64) -> Result<()> {
        let shared = self.shared();
        let durable = shared.durable.get();
        if keep_from > durable + 1 {
            return Err(JournalError::OutOfRange {
                seq: keep_from,
                first: self.first_seq(),
                last: durable,
            });
        }
        if keep_from <= self.first_seq() {
            return Ok(());
        }
        // The record before `keep_from` is still readable here; [`Journal::base`] answers for
        // it only once the first seq is `keep_from`.
        let mut base = None;
        self.visit_range(keep_from - 1, keep_from - 1, |r| {
            base = Some((r.seq, r.term, *r.digest));
            Ok::<_, JournalError>(())
        })?;
        *shared.base.lock().unwrap_or_else(|p| p.into_inner()) = base;
        let (tx, rx) = mpsc::channel();
        {
            let mut st = shared.lock();
            if let Some(reason) = &st.fatal {
                return Err(JournalError::Fatal(reason.clone()));
            }
            if st.closing {
                return Err(JournalError::Closed);
            }
            st.truncations.push_back((keep_from, tx));
            st.writer_idle = false;
        }
        shared.work.notify_one();
        rx.recv().unwrap_or(Err(JournalError::Closed))
    }

    /// Flushes everything submitted, stops the writer and closes the backend. Later submits get
    /// `Closed`. Returns `Fatal` if a write had failed.
    pub fn shutdown(&self) -> Result<()> {
        self.handle.stop()
    }
}
