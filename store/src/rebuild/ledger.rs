//! The replay ledger: which replayed replica holds which range of a segment, the address half of
//! the replay fence. A replayed entry whose range overlaps a replica of a newer put is stale; one
//! that overlaps only older replicas takes the address (their bytes were overwritten).
//!
//! The ledger is a hint checked against the directory: removes, upserts, eviction and unmounts
//! do not update it, so a holder is trusted only after its entry is found still holding that
//! range under that put id (`ObjectDirectory::holder_is_live`). Holders never overlap each
//! other: inserting one drops whatever it overlaps (those were found dead or were evicted).
//!
//! One ledger per segment, each behind its own mutex ([`ReplayLedgers`]): the address fence
//! only ever compares ranges of one segment, so owners replaying different segments never wait
//! on each other. Lock order (see also `directory.rs`): the map's lock is taken alone and only
//! to find or create a segment's ledger; a segment ledger's lock is taken before shard locks and
//! the segment table, and a thread holds at most one segment ledger lock at a time. Dropping a
//! stale hint from another segment's ledger (a key replaced by a replay on another segment) is
//! deferred until the own segment's lock is released; that is safe because hints are verified
//! against the directory before they are trusted.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use crate::allocator::slot_len;
use crate::identity::ScopeId;

/// A replayed replica occupying `[offset, offset + slot_len(size))` of a segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Holder {
    pub scope: ScopeId,
    pub key: Box<[u8]>,
    pub put_id: u64,
    pub size: u64,
}

impl Holder {
    fn end(&self, offset: u64) -> u64 {
        offset.saturating_add(slot_len(self.size))
    }
}

/// Replayed ranges of one segment, by offset; holders are disjoint.
#[derive(Debug, Default)]
pub(crate) struct SegmentLedger {
    holders: BTreeMap<u64, Holder>,
}

impl SegmentLedger {
    /// Holders whose slot intersects `[offset, offset + len)`, by offset.
    pub(crate) fn overlapping(&self, offset: u64, len: u64) -> Vec<(u64, Holder)> {
        let end = offset.saturating_add(len);
        let mut out = Vec::new();
        // Holders are disjoint, so only the last one starting at or before `offset` can reach
        // into the range from the left.
        if let Some((&o, h)) = self.holders.range(..=offset).next_back() {
            if h.end(o) > offset {
                out.push((o, h.clone()));
            }
        }
        if let Some(start) = offset.checked_add(1) {
            out.extend(self.holders.range(start..end).map(|(&o, h)| (o, h.clone())));
        }
        out
    }

    /// Records a replayed replica, dropping every holder it overlaps.
    pub(crate) fn insert(&mut self, offset: u64, holder: Holder) {
        let doomed: Vec<u64> = self
            .overlapping(offset, slot_len(holder.size))
            .into_iter()
            .map(|(o, _)| o)
            .collect();
        for o in doomed {
            self.holders.remove(&o);
        }
        self.holders.insert(offset, holder);
    }

    /// Forgets the holder at `offset` if it is the replica of `put_id`.
    pub(crate) fn remove(&mut self, offset: u64, put_id: u64) {
        if self
            .holders
            .get(&offset)
            .is_some_and(|h| h.put_id == put_id)
        {
            self.holders.remove(&offset);
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.holders.len()
    }
}

/// The replay ledgers of every segment that was replayed into, by segment id (ids, not table
/// slots: a slot is reused after an unmount).
#[derive(Debug, Default)]
pub struct ReplayLedgers {
    by_segment: RwLock<HashMap<Box<str>, Arc<Mutex<SegmentLedger>>>>,
}

impl ReplayLedgers {
    /// The ledger of `segment`, created on first use. Callers create ledgers only for mounted
    /// segments, so the map holds at most the segments mounted during the rebuild.
    pub(crate) fn segment(&self, segment: &str) -> Arc<Mutex<SegmentLedger>> {
        if let Some(l) = self.read().get(segment) {
            return l.clone();
        }
        self.by_segment
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .entry(Box::from(segment))
            .or_default()
            .clone()
    }

    /// Forgets the holder at `offset` of `segment` if it is the replica of `put_id`. Takes that
    /// segment's lock: never call it while holding another segment ledger's lock.
    pub(crate) fn remove(&self, segment: &str, offset: u64, put_id: u64) {
        let Some(l) = self.read().get(segment).cloned() else {
            return;
        };
        lock(&l).remove(offset, put_id);
    }

    /// Drops every ledger (the rebuild is over).
    pub(crate) fn clear(&self) {
        self.by_segment
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// Replayed replicas tracked over all segments.
    pub fn len(&self) -> usize {
        let ledgers: Vec<_> = self.read().values().cloned().collect();
        ledgers.iter().map(|l| lock(l).len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<Box<str>, Arc<Mutex<SegmentLedger>>>> {
        self.by_segment.read().unwrap_or_else(|p| p.into_inner())
    }
}

/// Locks one segment's ledger. A panic under the lock leaves at worst stale hints, which are
/// verified before use, so a poisoned lock is taken over rather than propagated.
pub(crate) fn lock(l: &Mutex<SegmentLedger>) -> MutexGuard<'_, SegmentLedger> {
    l.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(put_id: u64, size: u64) -> Holder {
        Holder {
            scope: 0,
            key: Box::from(&b"k"[..]),
            put_id,
            size,
        }
    }

    #[test]
    fn overlap_finds_left_neighbour_and_inner_holders_only() {
        let mut l = SegmentLedger::default();
        l.insert(0, h(1, 100)); // [0, 128)
        l.insert(128, h(2, 64)); // [128, 192)
        l.insert(256, h(3, 64)); // [256, 320)
        let offs = |v: Vec<(u64, Holder)>| v.into_iter().map(|(o, _)| o).collect::<Vec<_>>();
        assert_eq!(offs(l.overlapping(64, 64)), vec![0]);
        assert_eq!(offs(l.overlapping(64, 128)), vec![0, 128]);
        assert_eq!(offs(l.overlapping(192, 64)), Vec::<u64>::new());
        assert_eq!(offs(l.overlapping(192, 65)), vec![256]);
        // A new holder over [64, 192) replaces the two it overlaps.
        l.insert(64, h(4, 128));
        assert_eq!(l.len(), 2);
        assert_eq!(offs(l.overlapping(0, 1 << 20)), vec![64, 256]);
        l.remove(64, 3);
        assert_eq!(l.len(), 2, "another put's holder stays");
        l.remove(64, 4);
        l.remove(256, 3);
        assert_eq!(l.len(), 0);
    }

    #[test]
    fn segments_have_separate_ledgers() {
        let all = ReplayLedgers::default();
        lock(&all.segment("s")).insert(0, h(1, 64));
        lock(&all.segment("t")).insert(0, h(2, 64));
        assert_eq!(all.len(), 2);
        assert!(lock(&all.segment("u")).overlapping(0, 1 << 20).is_empty());
        all.remove("s", 0, 2);
        assert_eq!(all.len(), 2, "put 2 is held in t, not s");
        all.remove("s", 0, 1);
        all.remove("missing", 0, 1);
        assert_eq!(all.len(), 1);
        assert!(!all.is_empty());
        all.clear();
        assert!(all.is_empty());
    }
}
