//! The storage side of the journal: what each backend implements.
//!
//! The [`crate::Journal`] front-end owns sequencing, chaining, fencing and group commit; a
//! backend only has to store already-encoded frames durably, read them back in order, recover
//! the last intact record, and drop a prefix. All backends pass [`crate::conformance`].

use crate::codec::EncodedBatch;
use crate::error::Result;
use crate::record::{Digest, Record};
use crate::recovery::{RecoveryMode, TruncationReport};

/// An iterator over records in seq order; an `Err` ends the iteration.
pub type RecordIter = Box<dyn Iterator<Item = Result<Record>> + Send>;

/// What a backend found when it was opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovered {
    /// The first seq still held (after prefix truncation); `last_seq + 1` when empty.
    pub first_seq: u64,
    /// The last intact record's seq (0 when the journal has never held a record).
    pub last_seq: u64,
    /// The term of the last intact record (0 when none).
    pub last_term: u64,
    /// The highest term of any intact record (the fencing floor).
    pub max_term: u64,
    /// The chain digest after the last intact record (the digest before `first_seq` when the
    /// journal is empty after truncation; [`crate::GENESIS_DIGEST`] when never written).
    pub last_digest: Digest,
    /// Set when a damaged tail was truncated under [`RecoveryMode::TolerateTailCorruption`].
    pub truncated: Option<TruncationReport>,
    /// (seq, term, digest) of the record before `first_seq` when the backend knows it (the
    /// file backend's first segment header); `None` otherwise.
    pub base: Option<(u64, u64, Digest)>,
}

/// A durable store of journal frames. Used by exactly one writer thread.
pub trait JournalBackend: Send + 'static {
    /// A short name for logs and metrics (`file`, `sled`, `memory`).
    fn name(&self) -> &'static str;

    /// Scans what is stored, applies `mode` to a damaged tail and reports the recovered state.
    /// Called once, before any append. A bad frame followed by valid frames is
    /// [`crate::JournalError::Corrupt`] in every mode.
    fn recover(&mut self, mode: RecoveryMode) -> Result<Recovered>;

    /// Stores every frame of `batch` and makes all of them durable before returning (one device
    /// sync for the whole batch where the backend allows it).
    fn append(&mut self, batch: &EncodedBatch) -> Result<()>;

    /// Drops every record with seq < `keep_from`, where the backend can (whole files for the
    /// file backend). Records >= `keep_from` always stay.
    fn truncate_prefix(&mut self, keep_from: u64) -> Result<()>;

    /// A handle that reads durable records concurrently with the writer.
    fn read_source(&self) -> Box<dyn ReadSource>;
}

/// Reads records back; cheap to clone through [`ReadSource::boxed_clone`].
/// What [`ReadSource::visit_range`] calls for each record.
pub type RecordVisitor<'v> = dyn FnMut(crate::RecordRef<'_>) -> Result<()> + 'v;

pub trait ReadSource: Send + Sync + 'static {
    /// Records with `from <= seq <= upto`, in order. Fails with
    /// [`crate::JournalError::OutOfRange`] when `from` was truncated away.
    fn read_range(&self, from: u64, upto: u64) -> Result<RecordIter>;

    /// Hands records `from..=upto` in order to `visit` as borrowed views, stopping at the first
    /// error (a read error, or one `visit` returns). The replay path: backends that can decode in
    /// place (the file backend) override it to allocate nothing per record.
    fn visit_range(&self, from: u64, upto: u64, visit: &mut RecordVisitor<'_>) -> Result<()> {
        for record in self.read_range(from, upto)? {
            visit(record?.as_ref())?;
        }
        Ok(())
    }

    fn boxed_clone(&self) -> Box<dyn ReadSource>;
}

/// Visits records `from..=upto` of `source` with a visitor that has its own error type: the
/// visitor's first error stops the visit and is returned as is; read errors convert into `E`.
pub fn visit_with<E: From<crate::JournalError>>(
    source: &dyn ReadSource,
    from: u64,
    upto: u64,
    visit: impl FnMut(crate::RecordRef<'_>) -> std::result::Result<(), E>,
) -> std::result::Result<(), E> {
    visit_capturing(|v| source.visit_range(from, upto, v), visit)
}

/// Runs a visit (`run` hands its visitor to some `visit_range`) with a visitor that has its own
/// error type `E`: the visitor's first error stops the visit (as
/// [`crate::JournalError::VisitStopped`] inside) and comes back unchanged.
pub fn visit_capturing<E: From<crate::JournalError>>(
    run: impl FnOnce(&mut RecordVisitor<'_>) -> Result<()>,
    mut visit: impl FnMut(crate::RecordRef<'_>) -> std::result::Result<(), E>,
) -> std::result::Result<(), E> {
    let mut stopped = None;
    let read = run(&mut |record| {
        visit(record).map_err(|e| {
            stopped = Some(e);
            crate::JournalError::VisitStopped
        })
    });
    match (read, stopped) {
        (_, Some(e)) => Err(e),
        (Err(e), None) => Err(e.into()),
        (Ok(()), None) => Ok(()),
    }
}

/// Opens a backend at one fixed location, again and again: what the conformance suite and the
/// crash tests use to simulate restarts, plus hooks to damage what is stored.
pub trait BackendFactory: Send + Sync {
    fn name(&self) -> &'static str;

    /// Opens the backend at this factory's location (a fresh open sees what earlier opens made
    /// durable).
    fn open(&self) -> Result<Box<dyn JournalBackend>>;

    /// Simulates a torn write of the last stored record: its frame is cut short or partly
    /// garbage, as after a crash in the middle of a write. Call only while no journal is open.
    fn tear_tail(&self);

    /// Flips one byte inside the stored frame of record `seq`. Call only while no journal is
    /// open.
    fn corrupt_record(&self, seq: u64);

    /// Makes the next append of a backend opened by this factory fail, if the backend supports
    /// fault injection; returns whether it does (the conformance suite skips the fatal-path
    /// case otherwise).
    fn inject_append_failure(&self) -> bool {
        false
    }
}
