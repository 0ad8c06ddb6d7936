//! The memory backend, for tests: frames kept as bytes in a [`MemoryStore`] that outlives any
//! one backend, so a "reopen" through [`MemoryFactory`] sees everything appended before, and
//! tests can tear the tail, flip bytes, or make appends fail to exercise the fatal path.
//!
//! Each value is one whole frame (see [`crate::codec`]) keyed by its seq; recovery applies the
//! record-keyed rules of the sled backend.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::backend::{BackendFactory, JournalBackend, ReadSource, RecordIter, Recovered};
use crate::codec::{EncodedBatch, FRAME_PREFIX_LEN};
use crate::error::{JournalError, Result};
use crate::keyed::{decode_keyed, recover_keyed};
use crate::recovery::RecoveryMode;

const LOCATION: &str = "memory";

#[derive(Debug, Default)]
struct StoreInner {
    frames: BTreeMap<u64, Vec<u8>>,
    /// Appends still to fail before appends work again.
    fail_next: u32,
    /// Every append fails while set.
    fail_all: bool,
}

/// The shared storage behind memory backends; clones share it.
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    inner: Arc<Mutex<StoreInner>>,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, StoreInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes the next append fail (as a failed write or sync would), then work again.
    pub fn fail_next_append(&self) {
        self.lock().fail_next += 1;
    }

    /// Makes every append fail while `fail` is set.
    pub fn fail_appends(&self, fail: bool) {
        self.lock().fail_all = fail;
    }

    /// Number of stored frames.
    pub fn len(&self) -> usize {
        self.lock().frames.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lock().frames.is_empty()
    }

    /// The stored frame of `seq`, if any.
    pub fn frame(&self, seq: u64) -> Option<Vec<u8>> {
        self.lock().frames.get(&seq).cloned()
    }

    /// Cuts the last frame short and overwrites the rest of it with garbage, as a torn write.
    pub fn tear_tail(&self) {
        let mut inner = self.lock();
        if let Some(mut last) = inner.frames.last_entry() {
            let frame = last.get_mut();
            let keep = (frame.len() / 2).max(FRAME_PREFIX_LEN + 1).min(frame.len());
            frame.truncate(keep);
            if let Some(b) = frame.last_mut() {
                *b ^= 0x5a;
            }
        }
    }

    /// Flips one byte in the middle of the body of record `seq`.
    pub fn corrupt_record(&self, seq: u64) {
        let mut inner = self.lock();
        let frame = inner
            .frames
            .get_mut(&seq)
            .unwrap_or_else(|| panic!("memory store holds no record {seq}"));
        let i = FRAME_PREFIX_LEN + (frame.len() - FRAME_PREFIX_LEN) / 2;
        frame[i] ^= 0xff;
    }
}

/// A journal backend over a [`MemoryStore`]. Nothing survives the process.
#[derive(Debug)]
pub struct MemoryBackend {
    store: MemoryStore,
}

impl MemoryBackend {
    pub fn new(store: MemoryStore) -> Self {
        Self { store }
    }

    pub fn store(&self) -> &MemoryStore {
        &self.store
    }
}

impl JournalBackend for MemoryBackend {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn recover(&mut self, mode: RecoveryMode) -> Result<Recovered> {
        let mut inner = self.store.lock();
        let location = Path::new(LOCATION);
        let outcome = recover_keyed(
            inner.frames.iter().map(|(k, v)| Ok((*k, v.as_slice()))),
            location,
            mode,
        )?;
        for key in &outcome.drop_keys {
            inner.frames.remove(key);
        }
        Ok(outcome.recovered)
    }

    fn append(&mut self, batch: &EncodedBatch) -> Result<()> {
        let mut inner = self.store.lock();
        if inner.fail_all || inner.fail_next > 0 {
            inner.fail_next = inner.fail_next.saturating_sub(1);
            return Err(JournalError::io(
                LOCATION,
                std::io::Error::other("injected append failure"),
            ));
        }
        for (seq, range) in &batch.frames {
            inner
                .frames
                .insert(*seq, batch.bytes[range.clone()].to_vec());
        }
        Ok(())
    }

    fn truncate_prefix(&mut self, keep_from: u64) -> Result<()> {
        let mut inner = self.store.lock();
        // The last record always stays: it carries the chain digest and term to continue from.
        let limit = match inner.frames.last_key_value() {
            Some((last, _)) => keep_from.min(*last),
            None => return Ok(()),
        };
        inner.frames.retain(|k, _| *k >= limit);
        Ok(())
    }

    fn read_source(&self) -> Box<dyn ReadSource> {
        Box::new(MemoryReader {
            store: self.store.clone(),
        })
    }
}

/// Reads a [`MemoryStore`].
#[derive(Debug, Clone)]
pub struct MemoryReader {
    store: MemoryStore,
}

impl MemoryReader {
    pub fn new(store: MemoryStore) -> Self {
        Self { store }
    }
}

impl ReadSource for MemoryReader {
    fn read_range(&self, from: u64, upto: u64) -> Result<RecordIter> {
        let frames: Vec<(u64, Vec<u8>)> = {
            let inner = self.store.lock();
            if let (Some((first, _)), Some((last, _))) = (
                inner.frames.first_key_value(),
                inner.frames.last_key_value(),
            ) {
                if from < *first {
                    return Err(JournalError::OutOfRange {
                        seq: from,
                        first: *first,
                        last: *last,
                    });
                }
            }
            if from > upto {
                return Ok(Box::new(std::iter::empty()));
            }
            inner
                .frames
                .range(from..=upto)
                .map(|(k, v)| (*k, v.clone()))
                .collect()
        };
        Ok(Box::new(frames.into_iter().map(|(key, value)| {
            decode_keyed(key, &value, Path::new(LOCATION))
        })))
    }

    fn boxed_clone(&self) -> Box<dyn ReadSource> {
        Box::new(self.clone())
    }
}

/// Opens [`MemoryBackend`]s over one shared [`MemoryStore`].
#[derive(Debug, Clone, Default)]
pub struct MemoryFactory {
    store: MemoryStore,
}

impl MemoryFactory {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn with_store(store: MemoryStore) -> Self {
        Self { store }
    }

    pub fn store(&self) -> &MemoryStore {
        &self.store
    }
}

impl BackendFactory for MemoryFactory {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn open(&self) -> Result<Box<dyn JournalBackend>> {
        Ok(Box::new(MemoryBackend::new(self.store.clone())))
    }

    fn tear_tail(&self) {
        self.store.tear_tail();
    }

    fn corrupt_record(&self, seq: u64) {
        self.store.corrupt_record(seq);
    }

    fn inject_append_failure(&self) -> bool {
        self.store.fail_next_append();
        true
    }
}
