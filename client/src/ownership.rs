//! The ownership table: the committed replicas that live in this process's own segments.
//!
//! A storage owner holds the bytes; crescentd's object directory is in memory and, after a
//! restart or failover, is rebuilt from what the owners replay (docs/rebuild.md). This table is
//! that replay: (object identity, put id, segment, offset, length, checksum) of every committed
//! replica in one of our segments. It is fed by the puts this process commits into its own
//! segments and by the notices other writers send for replicas they committed here; it is
//! trimmed by this process's removes, by newer puts of the same key, by newer puts that reused
//! an address, and emptied segment by segment when a segment is unmounted (so a later replay
//! never reports a region we no longer serve, and a late notice for it is refused).
//!
//! Fences, the same as crescentd's: per (object, segment) the larger put id wins; per address,
//! a replica overlapping one of a newer put is stale, and one of an older put is dropped when a
//! newer one arrives (its bytes were overwritten).

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex, MutexGuard};

use crescent_wire::rebuild::{NoticeOutcome, ReplayEntry};
use crescent_wire::store::{DataType, ObjectId, ReleasedReplica, RELEASE_WIRE_VERSION};
use foldhash::fast::RandomState;
use hashbrown::HashTable;
use prometheus::IntGauge;

/// One committed replica in one of our segments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedReplica {
    pub id: ObjectId,
    /// The put that wrote it (a version fence: larger is newer).
    pub put_id: u64,
    pub segment_id: Arc<str>,
    pub offset: u64,
    pub length: u64,
    pub checksum: Option<u32>,
    pub data_type: DataType,
}

impl OwnedReplica {
    /// The replay form.
    pub fn to_entry(&self) -> ReplayEntry {
        ReplayEntry {
            id: self.id.clone(),
            put_id: self.put_id,
            segment_id: self.segment_id.to_string(),
            offset: self.offset,
            length: self.length,
            checksum: self.checksum,
            data_type: self.data_type,
            grant: None,
        }
    }

    pub fn from_entry(e: &ReplayEntry) -> Self {
        Self {
            id: e.id.clone(),
            put_id: e.put_id,
            segment_id: Arc::from(e.segment_id.as_str()),
            offset: e.offset,
            length: e.length,
            checksum: e.checksum,
            data_type: e.data_type,
        }
    }

    /// End of the address range the replica holds: an empty value still holds its slot's
    /// first byte, so it fences and is fenced by other replicas at its address like any other
    /// (docs/api.md "Empty values").
    fn end(&self) -> u64 {
        self.offset.saturating_add(self.length.max(1))
    }
}

/// Where a replica sits in [`Inner::slab`].
type Index = u32;

/// One allocation crescentd released: (segment, offset, put id).
type Allocation = (Arc<str>, u64, u64);

/// How many released allocations are remembered, so a writer's notice for one that arrives
/// after its release (the notice was retried, the release was quick) is refused instead of
/// recording a replica crescentd no longer holds.
const REMEMBERED_RELEASES: usize = 65_536;

/// What [`OwnershipTable::forget_released`] did with one delivery.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReleaseReport {
    /// Entries of exactly those allocations, dropped.
    pub forgotten: usize,
    /// Releases with no such entry (already forgotten, a newer object at the address, or a
    /// segment we no longer serve): nothing dropped.
    pub unmatched: usize,
    /// Releases of a layout version this owner does not know: skipped.
    pub unknown_version: usize,
}

/// The replicas and their indexes. Every replica is held once, in the slab; the indexes hold
/// slab positions, so recording a replica copies its object id once and a table that grows
/// moves small entries and never hashes an id again (each keeps the hash it was filed under).
/// Hashing is foldhash with a per-table random seed: keys come from other writers' notices.
#[derive(Debug, Default)]
struct Inner {
    slab: Vec<Option<OwnedReplica>>,
    free: Vec<Index>,
    /// (object, segment) -> its replica: one object has at most one replica per segment.
    by_slot: HashTable<(u64, Index)>,
    hasher: RandomState,
    /// Per segment, offset -> the replica that starts there (replicas are disjoint).
    by_address: HashMap<Arc<str>, BTreeMap<u64, Index>, RandomState>,
    /// The segments this process serves, with their sizes.
    segments: HashMap<Arc<str>, u64, RandomState>,
    /// Recently released allocations (bounded, oldest forgotten first).
    released: HashSet<Allocation, RandomState>,
    released_order: VecDeque<Allocation>,
}

impl Inner {
    fn len(&self) -> usize {
        self.slab.len() - self.free.len()
    }

    fn replica(&self, at: Index) -> &OwnedReplica {
        self.slab[at as usize]
            .as_ref()
            .expect("an indexed position holds a replica")
    }

    fn slot_hash(&self, id: &ObjectId, segment: &str) -> u64 {
        self.hasher.hash_one((id, segment))
    }

    /// The replica of `id` in `segment`, found under its hash `h`.
    fn find(&self, h: u64, id: &ObjectId, segment: &str) -> Option<Index> {
        let slab = &self.slab;
        self.by_slot
            .find(h, |&(eh, at)| {
                eh == h
                    && slab[at as usize]
                        .as_ref()
                        .is_some_and(|r| r.id == *id && *r.segment_id == *segment)
            })
            .map(|&(_, at)| at)
    }

    fn insert(&mut self, h: u64, replica: OwnedReplica) {
        let (segment, offset) = (replica.segment_id.clone(), replica.offset);
        let at = match self.free.pop() {
            Some(at) => {
                self.slab[at as usize] = Some(replica);
                at
            }
            None => {
                self.slab.push(Some(replica));
                (self.slab.len() - 1) as Index
            }
        };
        self.by_slot.insert_unique(h, (h, at), |&(eh, _)| eh);
        self.by_address
            .entry(segment)
            .or_default()
            .insert(offset, at);
    }

    fn remove_at(&mut self, at: Index) -> OwnedReplica {
        let r = self.slab[at as usize]
            .take()
            .expect("an indexed position holds a replica");
        self.free.push(at);
        let h = self.slot_hash(&r.id, &r.segment_id);
        if let Ok(e) = self.by_slot.find_entry(h, |&(_, i)| i == at) {
            e.remove();
        }
        if let Some(map) = self.by_address.get_mut(&r.segment_id) {
            if map.get(&r.offset) == Some(&at) {
                map.remove(&r.offset);
            }
        }
        r
    }

    /// Replicas overlapping `[offset, end)` of `segment`.
    fn overlapping(&self, segment: &str, offset: u64, end: u64) -> Vec<Index> {
        let Some(map) = self.by_address.get(segment) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        if let Some((_, &at)) = map.range(..=offset).next_back() {
            if self.replica(at).end() > offset {
                out.push(at);
            }
        }
        if let Some(start) = offset.checked_add(1) {
            out.extend(map.range(start..end.max(start)).map(|(_, &at)| at));
        }
        out
    }

    fn record(&mut self, replica: OwnedReplica) -> NoticeOutcome {
        let Some(&size) = self.segments.get(&replica.segment_id) else {
            return NoticeOutcome::Rejected;
        };
        if replica.end() > size || replica.put_id == 0 {
            return NoticeOutcome::Rejected;
        }
        let allocation = (replica.segment_id.clone(), replica.offset, replica.put_id);
        if self.released.contains(&allocation) {
            // crescentd already gave this allocation back: recording it would resurrect it.
            return NoticeOutcome::Stale;
        }
        let h = self.slot_hash(&replica.id, &replica.segment_id);
        let held = self.find(h, &replica.id, &replica.segment_id);
        if let Some(at) = held {
            let existing = self.replica(at);
            if existing.put_id > replica.put_id {
                return NoticeOutcome::Stale;
            }
            if *existing == replica {
                return NoticeOutcome::Recorded;
            }
        }
        let overlapping = self.overlapping(&replica.segment_id, replica.offset, replica.end());
        let mut older = Vec::new();
        for at in overlapping {
            if Some(at) == held {
                continue;
            }
            if self.replica(at).put_id >= replica.put_id {
                return NoticeOutcome::Stale;
            }
            older.push(at);
        }
        for at in older {
            self.remove_at(at);
        }
        if let Some(at) = held {
            self.remove_at(at);
        }
        self.insert(h, replica);
        NoticeOutcome::Recorded
    }

    /// Drops the entry of exactly `r`'s allocation (same put id at that address), if held,
    /// and remembers the allocation as released.
    fn forget_released(&mut self, r: &ReleasedReplica) -> bool {
        let Some((segment, _)) = self.segments.get_key_value(r.segment_id.as_str()) else {
            // Not (or no longer) ours: unmounting already forgot everything in it.
            return false;
        };
        let segment = segment.clone();
        let allocation = (segment.clone(), r.offset, r.put_id);
        if self.released.insert(allocation.clone()) {
            self.released_order.push_back(allocation);
            if self.released_order.len() > REMEMBERED_RELEASES {
                if let Some(old) = self.released_order.pop_front() {
                    self.released.remove(&old);
                }
            }
        }
        let at = self
            .by_address
            .get(&segment)
            .and_then(|m| m.get(&r.offset))
            .copied();
        let Some(at) = at else {
            return false;
        };
        let same = {
            let e = self.replica(at);
            e.put_id == r.put_id && e.offset == r.offset
        };
        if same {
            self.remove_at(at);
        }
        same
    }

    /// The position of exactly `replica`, if held.
    fn position_of(&self, replica: &OwnedReplica) -> Option<Index> {
        let h = self.slot_hash(&replica.id, &replica.segment_id);
        self.find(h, &replica.id, &replica.segment_id)
    }

    /// Drops every replica of `id`: one lookup per served segment, no scan.
    fn forget_object(&mut self, id: &ObjectId) -> usize {
        let segments: Vec<Arc<str>> = self.segments.keys().cloned().collect();
        let mut n = 0;
        for segment in segments {
            let h = self.slot_hash(id, &segment);
            if let Some(at) = self.find(h, id, &segment) {
                self.remove_at(at);
                n += 1;
            }
        }
        n
    }

    fn retain(&mut self, mut keep: impl FnMut(&OwnedReplica) -> bool) -> usize {
        let doomed: Vec<Index> = self
            .slab
            .iter()
            .enumerate()
            .filter(|(_, r)| r.as_ref().is_some_and(|r| !keep(r)))
            .map(|(at, _)| at as Index)
            .collect();
        for &at in &doomed {
            self.remove_at(at);
        }
        doomed.len()
    }
}

#[derive(Debug)]
pub struct OwnershipTable {
    inner: Mutex<Inner>,
    gauge: IntGauge,
}

impl OwnershipTable {
    pub fn new(gauge: IntGauge) -> Self {
        Self {
            inner: Mutex::default(),
            gauge,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn publish(&self, inner: &Inner) {
        self.gauge.set(inner.len() as i64);
    }

    /// Starts accepting replicas in `segment_id` (`size` bytes), which this process serves.
    pub fn serve_segment(&self, segment_id: &str, size: u64) {
        self.lock().segments.insert(Arc::from(segment_id), size);
    }

    /// Whether `segment_id` is one of ours.
    pub fn serves(&self, segment_id: &str) -> bool {
        self.lock().segments.contains_key(segment_id)
    }

    /// Records a committed replica (module docs for the fences).
    pub fn record(&self, replica: OwnedReplica) -> NoticeOutcome {
        let mut inner = self.lock();
        let outcome = inner.record(replica);
        self.publish(&inner);
        outcome
    }

    /// Records many committed replicas under one lock (a batch put's own replicas); the
    /// outcome of each is as [`Self::record`]'s.
    pub fn record_all(&self, replicas: Vec<OwnedReplica>) -> Vec<NoticeOutcome> {
        let mut inner = self.lock();
        let outcomes = replicas.into_iter().map(|r| inner.record(r)).collect();
        self.publish(&inner);
        outcomes
    }

    /// Records the replicas another writer committed in our segments; one outcome per entry.
    pub fn accept_notice(&self, entries: &[ReplayEntry]) -> Vec<NoticeOutcome> {
        self.accept_notice_checked(entries, |_| true)
    }

    /// [`OwnershipTable::accept_notice`], recording only the entries `admit` accepts (the
    /// others are `Rejected`): an owner that requires data-plane grants admits an entry only
    /// with the write grant of its range and put (docs/security.md, "The data plane").
    pub fn accept_notice_checked(
        &self,
        entries: &[ReplayEntry],
        admit: impl Fn(&ReplayEntry) -> bool,
    ) -> Vec<NoticeOutcome> {
        let mut inner = self.lock();
        let outcomes = entries
            .iter()
            .map(|e| match admit(e) {
                true => inner.record(OwnedReplica::from_entry(e)),
                false => NoticeOutcome::Rejected,
            })
            .collect();
        self.publish(&inner);
        outcomes
    }

    /// Drops `replica` if the table still holds exactly it (crescentd judged it stale during a
    /// replay; a newer record made since stays).
    pub fn forget_if_unchanged(&self, replica: &OwnedReplica) -> bool {
        let mut inner = self.lock();
        let at = inner
            .position_of(replica)
            .filter(|&at| inner.replica(at) == replica);
        if let Some(at) = at {
            inner.remove_at(at);
            self.publish(&inner);
        }
        at.is_some()
    }

    /// Forgets the replicas crescentd released in our segments (delivered on heartbeats). An
    /// entry goes only if it is the same allocation, the same put id at the same address: a
    /// newer object written there since is kept. Idempotent: a release delivered twice finds
    /// nothing the second time.
    pub fn forget_released(&self, released: &[ReleasedReplica]) -> ReleaseReport {
        let mut inner = self.lock();
        let mut report = ReleaseReport::default();
        for r in released {
            if r.version != RELEASE_WIRE_VERSION {
                report.unknown_version += 1;
            } else if inner.forget_released(r) {
                report.forgotten += 1;
            } else {
                report.unmatched += 1;
            }
        }
        self.publish(&inner);
        report
    }

    /// Forgets every replica of `id` (the object was removed). Returns how many.
    pub fn forget(&self, id: &ObjectId) -> usize {
        let mut inner = self.lock();
        let n = inner.forget_object(id);
        self.publish(&inner);
        n
    }

    /// Forgets the replicas of objects under `prefix` in a tenant/domain scope.
    pub fn forget_prefix(&self, tenant: &str, domain: Option<&str>, prefix: &str) -> usize {
        let mut inner = self.lock();
        let n = inner.retain(|r| {
            !(r.id.tenant() == tenant
                && r.id.domain.as_deref() == domain
                && r.id.key.starts_with(prefix))
        });
        self.publish(&inner);
        n
    }

    /// Forgets everything in a segment and stops accepting replicas in it (it is being
    /// unmounted, or crescentd dropped it). Returns how many.
    pub fn forget_segment(&self, segment_id: &str) -> usize {
        let mut inner = self.lock();
        let n = inner.retain(|r| &*r.segment_id != segment_id);
        inner.segments.remove(segment_id);
        inner.by_address.remove(segment_id);
        inner.released_order.retain(|a| &*a.0 != segment_id);
        inner.released.retain(|a| &*a.0 != segment_id);
        self.publish(&inner);
        n
    }

    /// Every recorded replica, ordered by segment then offset (the replay order). The lock is
    /// held only to copy: a replay sends outside it, so notices and puts are never held up.
    pub fn snapshot(&self) -> Vec<OwnedReplica> {
        let mut all: Vec<OwnedReplica> = self.lock().slab.iter().flatten().cloned().collect();
        all.sort_by(|a, b| (&a.segment_id, a.offset).cmp(&(&b.segment_id, b.offset)));
        all
    }

    /// The replica of `id` in `segment_id`, if recorded.
    pub fn lookup(&self, id: &ObjectId, segment_id: &str) -> Option<OwnedReplica> {
        let inner = self.lock();
        let h = inner.slot_hash(id, segment_id);
        inner
            .find(h, id, segment_id)
            .map(|at| inner.replica(at).clone())
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
#[path = "ownership_tests.rs"]
mod tests;
