//! One lock's worth of the directory: per scope, a sorted index from key to a slot of a dense
//! slab of entries.
//!
//! Memory trade-off: the index is a `BTreeMap<Box<[u8]>, u32>` per scope, which holds the key
//! once (no copy in the entry) and gives listing and prefix removal in key order for
//! O(log n + page). Lookups cost O(log n) key comparisons instead of a hash probe; the entries
//! themselves sit in a slab (`Vec`) so the B-tree nodes stay small (20 bytes per key) and are
//! not sized by the entry.

use std::cmp::Reverse;
use std::collections::{btree_map, BTreeMap, BinaryHeap, HashMap};

use rand::rngs::StdRng;

use crate::cold::ColdSlot;
use crate::entry::{Entry, Replica};
use crate::identity::ScopeId;
use crate::segments::SegmentIdx;
use crate::time::Ticks;

/// Space whose release waits for a time: old replicas still under a read lease, and the slots
/// of pre-empted puts whose writer may still be writing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DeferredFree {
    pub at: Ticks,
    pub segment: SegmentIdx,
    pub offset: u64,
    pub size: u64,
    /// The put that wrote these slots (its owner is told once they are freed).
    pub put_id: u64,
    /// Deferred because of a read lease (an unmount must wait for it).
    pub leased: bool,
}

/// (deadline, slot, put id of the version that was leased).
pub(crate) type LeaseRecord = Reverse<(Ticks, u32, u64)>;

/// What [`Shard::insert_if_absent`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Claim {
    /// The key is indexed already, at this slot; nothing was built.
    Present(u32),
    /// The new entry is at this slot.
    Inserted(u32),
    /// The builder declined; nothing was inserted.
    Declined,
}

#[derive(Debug)]
pub(crate) struct Shard {
    pub scopes: HashMap<ScopeId, BTreeMap<Box<[u8]>, u32>>,
    pub slab: Vec<Option<Entry>>,
    free_slots: Vec<u32>,
    /// The puts in progress: put id -> the slot of its entry. Keyed by put id so that a
    /// put_end finds its entry without searching the key index.
    pub pending: HashMap<u64, u32>,
    pub leases: BinaryHeap<LeaseRecord>,
    pub deferred: Vec<DeferredFree>,
    /// Cold backings by slot (out of line: few entries have one).
    pub cold: HashMap<u32, ColdSlot>,
    pub rng: StdRng,
}

impl Shard {
    pub fn new(rng: StdRng) -> Self {
        Self {
            scopes: HashMap::new(),
            slab: Vec::new(),
            free_slots: Vec::new(),
            pending: HashMap::new(),
            leases: BinaryHeap::new(),
            deferred: Vec::new(),
            cold: HashMap::new(),
            rng,
        }
    }

    pub fn lookup(&self, scope: ScopeId, key: &[u8]) -> Option<u32> {
        self.scopes.get(&scope)?.get(key).copied()
    }

    pub fn entry(&self, slot: u32) -> &Entry {
        self.slab[slot as usize]
            .as_ref()
            .expect("indexed slot holds an entry")
    }

    pub fn entry_mut(&mut self, slot: u32) -> &mut Entry {
        self.slab[slot as usize]
            .as_mut()
            .expect("indexed slot holds an entry")
    }

    pub fn insert(&mut self, scope: ScopeId, key: Box<[u8]>, entry: Entry) -> u32 {
        let slot = Self::place(&mut self.slab, &mut self.free_slots, entry);
        self.scopes.entry(scope).or_default().insert(key, slot);
        slot
    }

    /// Inserts the entry `make` builds under (`scope`, `key`) unless the key is indexed
    /// already, with one search of the key index (a lookup, then an insert, searches twice).
    /// `make` gets the shard's random source (for placement); it may decline (`Ok(None)`) or
    /// fail, and nothing is inserted then.
    pub fn insert_if_absent<E>(
        &mut self,
        scope: ScopeId,
        key: &[u8],
        make: impl FnOnce(&mut StdRng) -> Result<Option<Entry>, E>,
    ) -> Result<Claim, E> {
        let Self {
            scopes,
            slab,
            free_slots,
            rng,
            ..
        } = self;
        let index = scopes.entry(scope).or_default();
        // The key is boxed before the search, also when it turns out to be present (a repeated
        // put): a new key (the common case) needs the box anyway, and one search is worth
        // more than saving that allocation on the repeat path.
        let claim = match index.entry(Box::from(key)) {
            btree_map::Entry::Occupied(o) => Ok(Claim::Present(*o.get())),
            btree_map::Entry::Vacant(v) => match make(rng) {
                Ok(Some(entry)) => {
                    let slot = Self::place(slab, free_slots, entry);
                    v.insert(slot);
                    Ok(Claim::Inserted(slot))
                }
                Ok(None) => Ok(Claim::Declined),
                Err(e) => Err(e),
            },
        };
        if index.is_empty() {
            // A scope is indexed only while it holds a key.
            scopes.remove(&scope);
        }
        claim
    }

    /// Puts `entry` in a free slot of the slab (or a new one).
    fn place(slab: &mut Vec<Option<Entry>>, free_slots: &mut Vec<u32>, entry: Entry) -> u32 {
        match free_slots.pop() {
            Some(s) => {
                slab[s as usize] = Some(entry);
                s
            }
            None => {
                slab.push(Some(entry));
                (slab.len() - 1) as u32
            }
        }
    }

    /// Takes the entry out of the index and slab.
    pub fn remove(&mut self, scope: ScopeId, key: &[u8]) -> Option<Entry> {
        let index = self.scopes.get_mut(&scope)?;
        let slot = index.remove(key)?;
        if index.is_empty() {
            self.scopes.remove(&scope);
        }
        Some(self.release_slot(slot))
    }

    /// Frees a slot whose index entry is already gone.
    pub fn release_slot(&mut self, slot: u32) -> Entry {
        self.cold.remove(&slot);
        self.free_slots.push(slot);
        let entry = self.slab[slot as usize]
            .take()
            .expect("slot holds an entry");
        if let Some(p) = &entry.pending {
            self.pending.remove(&p.put_id);
        }
        entry
    }

    /// The slot of put `put_id` if it is in progress on the entry of (`scope`, `key`).
    pub fn pending_slot(&self, put_id: u64, scope: ScopeId, key: &[u8]) -> Option<u32> {
        let slot = *self.pending.get(&put_id)?;
        let p = self.entry(slot).pending.as_ref()?;
        (p.put_id == put_id && p.scope == scope && *p.key == *key).then_some(slot)
    }

    /// Defers the release of `replicas` (each a slot for a `size`-byte value) until `at`.
    pub fn defer(&mut self, replicas: &[Replica], size: u64, put_id: u64, at: Ticks, leased: bool) {
        self.deferred.extend(replicas.iter().map(|r| DeferredFree {
            at,
            segment: r.segment,
            offset: r.offset,
            size,
            put_id,
            leased,
        }));
    }

    pub fn len(&self) -> usize {
        self.slab.len() - self.free_slots.len()
    }
}
