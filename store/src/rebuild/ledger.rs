//! The replay ledger: which replayed replica holds which range of a segment, the address half of
//! the replay fence. A replayed entry whose range overlaps a replica of a newer put is stale; one
//! that overlaps only older replicas takes the address (their bytes were overwritten).
//!
//! The ledger is a hint checked against the directory: removes, upserts, eviction and unmounts
//! do not update it, so a holder is trusted only after its entry is found still holding that
//! range under that put id (`ObjectDirectory::holder_is_live`). Holders never overlap each
//! other: inserting one drops whatever it overlaps (those were found dead or were evicted).

use std::collections::{BTreeMap, HashMap};

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

/// Replayed ranges by segment id (ids, not table slots: a slot is reused after an unmount).
#[derive(Debug, Default)]
pub struct ReplayLedger {
    by_segment: HashMap<Box<str>, BTreeMap<u64, Holder>>,
    len: usize,
}

impl ReplayLedger {
    /// Holders whose slot intersects `[offset, offset + len)`, by offset.
    pub(crate) fn overlapping(&self, segment: &str, offset: u64, len: u64) -> Vec<(u64, Holder)> {
        let Some(map) = self.by_segment.get(segment) else {
            return Vec::new();
        };
        let end = offset.saturating_add(len);
        let mut out = Vec::new();
        // Holders are disjoint, so only the last one starting at or before `offset` can reach
        // into the range from the left.
        if let Some((&o, h)) = map.range(..=offset).next_back() {
            if h.end(o) > offset {
                out.push((o, h.clone()));
            }
        }
        if let Some(start) = offset.checked_add(1) {
            out.extend(map.range(start..end).map(|(&o, h)| (o, h.clone())));
        }
        out
    }

    /// Records a replayed replica, dropping every holder it overlaps.
    pub(crate) fn insert(&mut self, segment: &str, offset: u64, holder: Holder) {
        let doomed: Vec<u64> = self
            .overlapping(segment, offset, slot_len(holder.size))
            .into_iter()
            .map(|(o, _)| o)
            .collect();
        let map = self.by_segment.entry(Box::from(segment)).or_default();
        for o in doomed {
            map.remove(&o);
            self.len -= 1;
        }
        map.insert(offset, holder);
        self.len += 1;
    }

    /// Forgets the holder at `offset` if it is the replica of `put_id`.
    pub(crate) fn remove(&mut self, segment: &str, offset: u64, put_id: u64) {
        let Some(map) = self.by_segment.get_mut(segment) else {
            return;
        };
        if map.get(&offset).is_some_and(|h| h.put_id == put_id) {
            map.remove(&offset);
            self.len -= 1;
            if map.is_empty() {
                self.by_segment.remove(segment);
            }
        }
    }

    pub(crate) fn clear(&mut self) {
        self.by_segment.clear();
        self.len = 0;
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
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
        let mut l = ReplayLedger::default();
        l.insert("s", 0, h(1, 100)); // [0, 128)
        l.insert("s", 128, h(2, 64)); // [128, 192)
        l.insert("s", 256, h(3, 64)); // [256, 320)
        let offs = |v: Vec<(u64, Holder)>| v.into_iter().map(|(o, _)| o).collect::<Vec<_>>();
        assert_eq!(offs(l.overlapping("s", 64, 64)), vec![0]);
        assert_eq!(offs(l.overlapping("s", 64, 128)), vec![0, 128]);
        assert_eq!(offs(l.overlapping("s", 192, 64)), Vec::<u64>::new());
        assert_eq!(offs(l.overlapping("s", 192, 65)), vec![256]);
        assert!(l.overlapping("other", 0, 1 << 20).is_empty());
        // A new holder over [64, 192) replaces the two it overlaps.
        l.insert("s", 64, h(4, 128));
        assert_eq!(l.len(), 2);
        assert_eq!(offs(l.overlapping("s", 0, 1 << 20)), vec![64, 256]);
        l.remove("s", 64, 3);
        assert_eq!(l.len(), 2, "another put's holder stays");
        l.remove("s", 64, 4);
        l.remove("s", 256, 3);
        assert!(l.is_empty());
    }
}
