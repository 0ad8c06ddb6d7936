//! The sled backend, kept as an alternative to the file backend and measured beside it.
//!
//! Layout: the default tree of one sled database; key = seq as a big-endian u64 (so key order is
//! seq order), value = that record's whole frame exactly as [`crate::codec`] encodes it (length
//! word, CRC, msgpack body). An append inserts the batch atomically (`apply_batch`) and then
//! calls `flush()`.
//!
//! Durability caveat: in sled 0.34, `flush()` returns after `sync_file_range`, which is not a
//! device cache flush (no `fdatasync`), so acknowledged records can be lost on power failure
//! even though they survive a process crash. Use the file backend where exact fdatasync
//! semantics matter (docs/design.md, "Journal"). sled also uses 2-3x the space of the file backend.
//!
//! Recovery applies the record-keyed rules shared with the memory backend: a corrupt last value
//! is a torn tail, copied into the journal quarantine (next to the database directory) before
//! it is removed; a corrupt value (or a missing key) followed by valid ones is `Corrupt` in
//! every mode, naming the seq. Prefix truncation removes keys but always keeps the last record,
//! which carries the term and chain digest that appends continue from.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::backend::{BackendFactory, JournalBackend, ReadSource, RecordIter, Recovered};
use crate::codec::{EncodedBatch, FRAME_PREFIX_LEN};
use crate::error::{JournalError, Result};
use crate::keyed::{decode_keyed, recover_keyed};
use crate::recovery::RecoveryMode;

fn seq_key(seq: u64) -> [u8; 8] {
    seq.to_be_bytes()
}

fn key_seq(key: &[u8], path: &Path) -> Result<u64> {
    let bytes: [u8; 8] = key.try_into().map_err(|_| JournalError::Corrupt {
        seq: 0,
        location: path.to_path_buf(),
        reason: format!("sled key of {} bytes is not a seq", key.len()),
    })?;
    Ok(u64::from_be_bytes(bytes))
}

/// How long to keep retrying sled's file lock within this process (see [`open_db`]).
const LOCK_RETRY: Duration = Duration::from_secs(3);

/// Opens sled without its periodic background flusher (every append flushes explicitly).
///
/// sled takes an exclusive file lock and drops it only when its last internal handle goes,
/// which can be a moment after the last `Db` is dropped; a reopen in the same process (a
/// restart in tests) retries the lock briefly. A lock held by another process stays held, and
/// the error surfaces after the retry window.
fn open_db(path: &Path) -> Result<sled::Db> {
    let started = Instant::now();
    loop {
        match sled::Config::new().path(path).flush_every_ms(None).open() {
            Err(sled::Error::Io(e)) if is_lock_contention(&e) && started.elapsed() < LOCK_RETRY => {
                std::thread::sleep(Duration::from_millis(10));
            }
            other => return Ok(other?),
        }
    }
}

/// Whether sled failed to take its file lock. sled 0.34 wraps the `WouldBlock` from `flock` in
/// an `ErrorKind::Other` error whose only trace of the cause is its message, so both shapes count.
fn is_lock_contention(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::WouldBlock || e.to_string().contains("could not acquire lock")
}

/// The sled backend over one database directory.
#[derive(Debug)]
pub struct SledBackend {
    path: PathBuf,
    db: sled::Db,
}

impl SledBackend {
    /// Opens (creating if needed) the sled database at `path`. sled itself refuses a database
    /// that another process has open.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let db = open_db(&path)?;
        Ok(Self { path, db })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl SledBackend {
    /// Copies the values recovery is about to remove into the journal quarantine
    /// (`<parent of the database>/quarantine`, docs/journal-format.md "Quarantine"), durably,
    /// before a single key is removed. The copy is the removed values, whole frames as stored,
    /// in key order; the entry names the database directory as its segment, at offset 0.
    fn quarantine_dropped(
        &self,
        drop_keys: &[u64],
        report: &crate::recovery::TruncationReport,
    ) -> Result<Option<crate::quarantine::QuarantineEntry>> {
        if drop_keys.is_empty() {
            return Ok(None);
        }
        let mut bytes = Vec::new();
        for key in drop_keys {
            if let Some(v) = self.db.get(seq_key(*key))? {
                bytes.extend_from_slice(&v);
            }
        }
        let journal_dir = self.path.parent().unwrap_or(&self.path);
        let tail = crate::quarantine::DamagedTail {
            seq: report.last_good_seq + 1,
            segment: &self.path,
            offset: 0,
            bytes: &bytes,
            later: Vec::new(),
            // sled writes a value whole or not at all: what fails its check is damage.
            kind: crate::quarantine::DamageKind::Damaged,
            reason: report.reason.clone(),
        };
        crate::quarantine::quarantine_tail(journal_dir, &tail).map(Some)
    }
}

impl JournalBackend for SledBackend {
    fn name(&self) -> &'static str {
        "sled"
    }

    fn recover(&mut self, mode: RecoveryMode) -> Result<Recovered> {
        let path = self.path.clone();
        let entries = self.db.iter().map(|kv| {
            let (k, v) = kv?;
            Ok((key_seq(&k, &path)?, v))
        });
        let mut outcome = recover_keyed(entries, &self.path, mode)?;
        if let Some(report) = outcome.recovered.truncated.as_mut() {
            report.quarantine = self.quarantine_dropped(&outcome.drop_keys, report)?;
        }
        if !outcome.drop_keys.is_empty() {
            let mut batch = sled::Batch::default();
            for key in &outcome.drop_keys {
                batch.remove(&seq_key(*key));
            }
            self.db.apply_batch(batch)?;
            self.db.flush()?;
        }
        Ok(outcome.recovered)
    }

    fn append(&mut self, batch: &EncodedBatch) -> Result<()> {
        let mut b = sled::Batch::default();
        for (seq, range) in &batch.frames {
            b.insert(&seq_key(*seq), &batch.bytes[range.clone()]);
        }
        self.db.apply_batch(b)?;
        // Not a device flush in sled 0.34 (sync_file_range only): see the module docs.
        self.db.flush()?;
        Ok(())
    }

    fn truncate_prefix(&mut self, keep_from: u64) -> Result<()> {
        // The last record always stays: it carries the chain digest and term to continue from.
        let Some((last, _)) = self.db.last()? else {
            return Ok(());
        };
        let limit = keep_from.min(key_seq(&last, &self.path)?);
        let mut batch = sled::Batch::default();
        for kv in self.db.range(..seq_key(limit)) {
            let (k, _) = kv?;
            batch.remove(k);
        }
        self.db.apply_batch(batch)?;
        self.db.flush()?;
        Ok(())
    }

    fn read_source(&self) -> Box<dyn ReadSource> {
        Box::new(SledReader {
            path: self.path.clone(),
            db: self.db.clone(),
        })
    }
}

/// Reads records from a sled journal.
#[derive(Debug, Clone)]
pub struct SledReader {
    path: PathBuf,
    db: sled::Db,
}

impl ReadSource for SledReader {
    fn read_range(&self, from: u64, upto: u64) -> Result<RecordIter> {
        if let (Some((first, _)), Some((last, _))) = (self.db.first()?, self.db.last()?) {
            let (first, last) = (key_seq(&first, &self.path)?, key_seq(&last, &self.path)?);
            if from < first {
                return Err(JournalError::OutOfRange {
                    seq: from,
                    first,
                    last,
                });
            }
        }
        if from > upto {
            return Ok(Box::new(std::iter::empty()));
        }
        let path = self.path.clone();
        let mut expected = from;
        let iter = self.db.range(seq_key(from)..=seq_key(upto)).map(move |kv| {
            let (k, v) = kv?;
            let key = key_seq(&k, &path)?;
            if key != expected {
                return Err(JournalError::Corrupt {
                    seq: expected,
                    location: path.clone(),
                    reason: format!("seq {expected} is missing, seq {key} follows"),
                });
            }
            expected += 1;
            decode_keyed(key, &v, &path)
        });
        Ok(Box::new(iter))
    }

    fn boxed_clone(&self) -> Box<dyn ReadSource> {
        Box::new(self.clone())
    }
}

/// Opens [`SledBackend`]s on one database directory (a temporary one by default).
#[derive(Debug)]
pub struct SledFactory {
    path: PathBuf,
    _temp: Option<tempfile::TempDir>,
}

impl SledFactory {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            _temp: None,
        }
    }

    /// A factory over a fresh temporary directory, removed when the factory is dropped.
    pub fn in_tempdir() -> Result<Self> {
        let temp = tempfile::Builder::new()
            .prefix("crescent-journal-sled-")
            .tempdir()
            .map_err(|e| JournalError::io(std::env::temp_dir(), e))?;
        Ok(Self {
            path: temp.path().join("journal.sled"),
            _temp: Some(temp),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Rewrites one stored value (test damage helper); the database must not be open elsewhere.
    fn rewrite(
        &self,
        pick: impl Fn(&sled::Db) -> Option<(sled::IVec, sled::IVec)>,
        f: impl Fn(&mut Vec<u8>),
    ) {
        let db = open_db(&self.path).expect("open sled journal to damage it");
        if let Some((k, v)) = pick(&db) {
            let mut v = v.to_vec();
            f(&mut v);
            db.insert(k, v).expect("rewrite sled value");
            db.flush().expect("flush sled");
        }
    }
}

impl BackendFactory for SledFactory {
    fn name(&self) -> &'static str {
        "sled"
    }

    fn open(&self) -> Result<Box<dyn JournalBackend>> {
        Ok(Box::new(SledBackend::open(&self.path)?))
    }

    fn tear_tail(&self) {
        self.rewrite(
            |db| db.last().expect("read sled"),
            |v| {
                let keep = (v.len() / 2).max(FRAME_PREFIX_LEN + 1).min(v.len());
                v.truncate(keep);
                if let Some(b) = v.last_mut() {
                    *b ^= 0x5a;
                }
            },
        );
    }

    fn corrupt_record(&self, seq: u64) {
        self.rewrite(
            |db| {
                let v = db.get(seq_key(seq)).expect("read sled")?;
                Some((sled::IVec::from(&seq_key(seq)), v))
            },
            |v| {
                let i = FRAME_PREFIX_LEN + (v.len() - FRAME_PREFIX_LEN) / 2;
                v[i] ^= 0xff;
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reopen while the previous handle is still going away waits for the lock instead of
    /// failing (the CI flake this guards against: sled reports the lock as `ErrorKind::Other`).
    #[test]
    fn reopen_waits_for_a_lock_released_shortly() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let held = open_db(&path).unwrap();
        let release = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            drop(held);
        });
        let started = Instant::now();
        let reopened = open_db(&path).expect("reopen after the holder lets go");
        assert!(started.elapsed() >= Duration::from_millis(250));
        drop(reopened);
        release.join().unwrap();
    }

    #[test]
    fn lock_contention_is_recognised_in_both_shapes() {
        let wrapped = std::io::Error::other("could not acquire lock on \"x\": WouldBlock");
        assert!(is_lock_contention(&wrapped));
        assert!(is_lock_contention(&std::io::ErrorKind::WouldBlock.into()));
        assert!(!is_lock_contention(&std::io::ErrorKind::NotFound.into()));
    }
}
