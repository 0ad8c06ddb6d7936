//! `ObjectDirectory::rebuild_replay`: merging owners' committed replicas into the directory.
//!
//! Rules, per entry (one entry's failure never affects another):
//! - Eligibility: a valid key, a size within limits, a put id of an earlier incarnation (the
//!   directory already knows every put of its own), a segment that is mounted and belongs to
//!   the replaying owner, and a slot inside it at an allocation's alignment. Else REJECTED.
//! - Version fence (per key): a newer complete version in the directory makes the entry STALE;
//!   the same put at the same place is a DUPLICATE; the same put on another segment adds a
//!   replica (owners of one object merge); an older version is replaced.
//! - Address fence (per range): a live replayed replica of a newer put overlapping the slot
//!   makes the entry STALE; live replicas of older puts lose that replica (their bytes were
//!   overwritten by the newer put); space neither free nor replayed belongs to a put of this
//!   incarnation (newer by construction) or awaits release, so the entry is STALE.
//! - Resource safety: the new slot is reserved in the allocator before the route changes; a
//!   failed reservation leaves the old route as it was.

use crescent_wire::rebuild::{
    put_id_incarnation, EntryOutcome, ReplayEntry, ReplayOutcome, MAX_REPLAY_BATCH,
};

use crate::allocator::slot_len;
use crate::directory::ObjectDirectory;
use crate::entry::{Entry, Replica, Replicas, COMPLETE, HAS_CHECKSUM};
use crate::error::StoreError;
use crate::identity::{ObjectName, ScopeId};
use crate::rebuild::ledger::{lock, Holder, SegmentLedger};
use crate::segments::{SegmentIdx, SegmentTable};
use crate::shard::Shard;
use crate::time::Ticks;

/// Replaced replicas on other segments than the one replayed, for their own ledgers:
/// (segment id, offset, put id).
type DeferredRemovals = Vec<(Box<str>, u64, u64)>;

/// A replay entry that passed the eligibility checks.
struct Eligible<'a> {
    scope: ScopeId,
    key: &'a [u8],
    segment: SegmentIdx,
    entry: &'a ReplayEntry,
}

/// How the entry relates to the key's complete version.
enum Relation {
    /// The key has no complete version, or an older one: the entry becomes the version.
    Replace,
    /// The same put, not yet on this segment: the entry adds a replica.
    AddReplica,
    Done(EntryOutcome),
}

fn stale(reason: impl Into<String>) -> EntryOutcome {
    EntryOutcome::because(ReplayOutcome::Stale, reason)
}

fn rejected(reason: impl Into<String>) -> EntryOutcome {
    EntryOutcome::because(ReplayOutcome::Rejected, reason)
}

impl ObjectDirectory {
    /// Merges a batch of `owner_id`'s committed replicas (module docs); one outcome per entry,
    /// in order. The whole batch is refused only when it names another `term` than the one of
    /// [`Self::begin_incarnation`] (STALE_GENERATION: the owner must re-read the term) or is
    /// malformed as a whole (no owner, more than [`MAX_REPLAY_BATCH`] entries).
    pub fn rebuild_replay(
        &self,
        owner_id: &str,
        term: u64,
        entries: &[ReplayEntry],
        now_ms: i64,
    ) -> Result<Vec<EntryOutcome>, StoreError> {
        let _span = tracing::info_span!("store.rebuild_replay", entries = entries.len()).entered();
        if owner_id.is_empty() {
            return Err(StoreError::invalid("owner_id", "must not be empty"));
        }
        if entries.len() > MAX_REPLAY_BATCH {
            return Err(StoreError::invalid(
                "entries",
                format!("{} in one batch; at most {MAX_REPLAY_BATCH}", entries.len()),
            ));
        }
        let current = self.term();
        if term != current {
            return Err(StoreError::StaleTerm {
                reason: format!("replay for term {term}, the directory rebuilds term {current}"),
            });
        }
        let now = self.now(now_ms);
        let mut outcomes: Vec<EntryOutcome> = Vec::with_capacity(entries.len());
        // Hints to drop from other segments' ledgers, applied once the run's lock is released
        // (one segment ledger lock at a time: ledger.rs).
        let mut deferred = Vec::new();
        let mut start = 0;
        while start < entries.len() {
            // A run of consecutive entries of one segment shares one hold of its ledger.
            let segment_id = &entries[start].segment_id;
            let end = start
                + entries[start..]
                    .iter()
                    .take_while(|e| e.segment_id == *segment_id)
                    .count();
            let run = &entries[start..end];
            if self.table().find(segment_id).is_none() {
                // No ledger for segments that are not mounted (bad input must not grow it).
                outcomes.extend(
                    run.iter()
                        .map(|_| rejected(format!("segment {segment_id:?} is not mounted"))),
                );
            } else {
                let cell = self.ledgers.segment(segment_id);
                let mut ledger = lock(&cell);
                for e in run {
                    let o = self.replay_one(&mut ledger, owner_id, e, now, &mut deferred);
                    if o.outcome == ReplayOutcome::Rejected {
                        tracing::debug!(owner = owner_id, key = %e.id.key, reason = ?o.reason,
                            "replay entry rejected");
                    }
                    outcomes.push(o);
                }
            }
            for (segment, offset, put_id) in deferred.drain(..) {
                self.ledgers.remove(&segment, offset, put_id);
            }
            start = end;
        }
        for o in &outcomes {
            self.metrics.rebuild_entry(o.outcome);
        }
        Ok(outcomes)
    }

    /// Drops the replay ledger (the server calls this when the gate reaches SERVING: no
    /// replay of an earlier incarnation is expected any more). Later replays still merge,
    /// fenced by put ids and by the allocator alone.
    pub fn finish_rebuild(&self) {
        self.ledgers.clear();
    }

    /// Replayed replicas the ledger tracks.
    pub fn replay_ledger_len(&self) -> usize {
        self.ledgers.len()
    }

    fn replay_one(
        &self,
        ledger: &mut SegmentLedger,
        owner_id: &str,
        entry: &ReplayEntry,
        now: Ticks,
        deferred: &mut Vec<(Box<str>, u64, u64)>,
    ) -> EntryOutcome {
        let e = match self.eligible(owner_id, entry) {
            Ok(e) => e,
            Err(outcome) => return outcome,
        };
        if self.removals.is_fenced(entry.put_id) {
            return stale("the put was removed (journaled: docs/rebuild.md)");
        }
        match self.relation(&e) {
            Relation::Done(o) => return o,
            Relation::Replace | Relation::AddReplica => {}
        }
        let slot = slot_len(entry.length);
        let holders = ledger.overlapping(entry.offset, slot);
        let mut older = Vec::new();
        for (offset, holder) in holders {
            if !self.holder_is_live(e.segment, offset, &holder) {
                ledger.remove(offset, holder.put_id);
                continue;
            }
            if holder.put_id >= entry.put_id {
                return stale(format!(
                    "put {} holds the address since put {}",
                    holder.put_id, entry.put_id
                ));
            }
            older.push((offset, holder));
        }
        let covered: u64 = older
            .iter()
            .map(|(o, h)| {
                let start = (*o).max(entry.offset);
                let end = (o + slot_len(h.size)).min(entry.offset + slot);
                end.saturating_sub(start)
            })
            .sum();
        let free = match self.table().get(e.segment) {
            Some(seg) => seg.allocator().free_within(entry.offset, slot),
            None => return rejected("segment was unmounted"),
        };
        if free + covered < slot {
            return stale("the address is held by a newer put or awaits release");
        }
        for (offset, holder) in older {
            self.evict_replica(e.segment, offset, &holder);
            ledger.remove(offset, holder.put_id);
        }
        self.install(ledger, &e, now, deferred)
    }

    fn eligible<'a>(
        &self,
        owner_id: &str,
        entry: &'a ReplayEntry,
    ) -> Result<Eligible<'a>, EntryOutcome> {
        let name = ObjectName::parse(&entry.id).map_err(|e| rejected(e.to_string()))?;
        if entry.length > self.config.max_object_bytes {
            return Err(rejected(format!(
                "length {}; a value holds 0..={} bytes",
                entry.length, self.config.max_object_bytes
            )));
        }
        if entry.put_id == 0 {
            return Err(rejected("put id 0 is never issued"));
        }
        let incarnation = put_id_incarnation(entry.put_id);
        if incarnation >= self.incarnation() {
            return Err(rejected(format!(
                "put {} is of incarnation {incarnation}, not earlier than the current {}",
                entry.put_id,
                self.incarnation()
            )));
        }
        let table = self.table();
        let segment = table
            .find(&entry.segment_id)
            .ok_or_else(|| rejected(format!("segment {:?} is not mounted", entry.segment_id)))?;
        let seg = table.get(segment).expect("found");
        if seg.spec.owner_id != owner_id {
            return Err(rejected(format!(
                "segment {:?} belongs to owner {:?}",
                entry.segment_id, seg.spec.owner_id
            )));
        }
        let align = crate::allocator::alignment_for(entry.length);
        let capacity = seg.capacity();
        let in_range = entry
            .offset
            .checked_add(slot_len(entry.length))
            .is_some_and(|end| end <= capacity);
        if !entry.offset.is_multiple_of(align) || !in_range {
            return Err(rejected(format!(
                "[{}, +{}) is not an allocatable slot of segment {:?} ({capacity} bytes)",
                entry.offset, entry.length, entry.segment_id
            )));
        }
        drop(table);
        let scope = self
            .scopes
            .intern(name.scope)
            .map_err(|e| rejected(e.to_string()))?;
        Ok(Eligible {
            scope,
            key: name.key.as_bytes(),
            segment,
            entry,
        })
    }

    /// Compares the entry with the key's complete version (under the key's shard lock).
    fn relation(&self, e: &Eligible<'_>) -> Relation {
        let shard = self.lock_shard(self.shard_of(e.scope, e.key));
        let Some(slot) = shard.lookup(e.scope, e.key) else {
            return Relation::Replace;
        };
        relation_to(shard.entry(slot), e, self.config.max_replicas)
    }

    /// Whether `holder` still holds `[offset, ..)` of the segment (its key's complete version
    /// is that put, with a replica there).
    fn holder_is_live(&self, segment: SegmentIdx, offset: u64, holder: &Holder) -> bool {
        let shard = self.lock_shard(self.shard_of(holder.scope, &holder.key));
        shard.lookup(holder.scope, &holder.key).is_some_and(|slot| {
            let e = shard.entry(slot);
            e.is_complete()
                && e.put_id == holder.put_id
                && e.replicas
                    .as_slice()
                    .iter()
                    .any(|r| r.segment == segment && r.offset == offset)
        })
    }

    /// Takes the replica at `offset` away from an older replayed put whose address a newer put
    /// reused; an object left without replicas disappears.
    fn evict_replica(&self, segment: SegmentIdx, offset: u64, holder: &Holder) {
        let mut shard = self.lock_shard(self.shard_of(holder.scope, &holder.key));
        let Some(slot) = shard.lookup(holder.scope, &holder.key) else {
            return;
        };
        let e = shard.entry_mut(slot);
        let before = e.replicas.as_slice().len();
        let kept: Vec<Replica> = e
            .replicas
            .as_slice()
            .iter()
            .copied()
            .filter(|r| !(r.segment == segment && r.offset == offset))
            .collect();
        if kept.len() == before {
            return;
        }
        e.replicas = Replicas::from_vec(kept);
        let gone = Replica { offset, segment };
        self.free_replicas(&self.table(), &[gone], holder.size, holder.put_id);
        if e.replicas.is_empty() {
            if e.is_complete() {
                self.tenant_of(holder.scope).refund(e.size, 1);
            }
            e.flags &= !COMPLETE;
            if e.pending.is_none() {
                shard.remove(holder.scope, &holder.key);
                self.metrics.objects.dec();
            }
        }
        self.metrics.rebuild_address_evictions.inc();
        tracing::debug!(
            put_id = holder.put_id,
            offset,
            "replayed replica lost its address to a newer put"
        );
    }

    /// The version a replayed entry replaced: logged as removed (a later remove of the key
    /// must fence it), its replicas taken out of the ledger (this segment) or queued for
    /// their own segment's ledger, and freed, or deferred while a read lease holds them.
    fn retire_replaced(
        &self,
        table: &SegmentTable,
        shard: &mut Shard,
        (ledger, deferred): (&mut SegmentLedger, &mut DeferredRemovals),
        segment: SegmentIdx,
        (replicas, size, put_id, lease_until): (Replicas, u64, u64, Ticks),
        now: Ticks,
    ) {
        self.log_removal(table, replicas.as_slice(), put_id);
        for r in replicas.as_slice() {
            if r.segment == segment {
                ledger.remove(r.offset, put_id);
            } else if let Some(old_seg) = table.get(r.segment) {
                deferred.push((
                    Box::from(old_seg.spec.segment_id.as_str()),
                    r.offset,
                    put_id,
                ));
            }
        }
        if lease_until > now {
            shard.defer(replicas.as_slice(), size, put_id, lease_until, true);
        } else {
            self.free_replicas(table, replicas.as_slice(), size, put_id);
        }
    }

    /// Reserves the slot and installs the entry as (a replica of) the key's version.
    fn install(
        &self,
        ledger: &mut SegmentLedger,
        e: &Eligible<'_>,
        now: Ticks,
        deferred: &mut Vec<(Box<str>, u64, u64)>,
    ) -> EntryOutcome {
        let entry = e.entry;
        let mut shard = self.lock_shard(self.shard_of(e.scope, e.key));
        let slot = shard.lookup(e.scope, e.key);
        // The shard lock was released since `relation`: decide again on what is there now.
        let relation = match slot {
            None => Relation::Replace,
            Some(s) => relation_to(shard.entry(s), e, self.config.max_replicas),
        };
        if let Relation::Done(o) = relation {
            return o;
        }
        let table = self.table();
        let Some(seg) = table.get(e.segment) else {
            return rejected("segment was unmounted");
        };
        if let Err(err) = seg.allocator().reserve(entry.offset, entry.length) {
            return stale(format!("the address was taken meanwhile: {err}"));
        }
        self.metrics.bytes_used.add(slot_len(entry.length) as i64);
        let replica = Replica {
            offset: entry.offset,
            segment: e.segment,
        };
        let flags = COMPLETE
            | if entry.checksum.is_some() {
                HAS_CHECKSUM
            } else {
                0
            };
        match (relation, slot) {
            (Relation::AddReplica, Some(s)) => {
                let current = shard.entry_mut(s);
                let mut all = current.replicas.as_slice().to_vec();
                all.push(replica);
                current.replicas = Replicas::from_vec(all);
            }
            (_, Some(s)) => {
                let current = shard.entry_mut(s);
                let usage = self.tenant_of(e.scope);
                if current.is_complete() {
                    usage.refund(current.size, 1);
                }
                usage.add_committed(entry.length, 1);
                let old = current.is_complete().then(|| {
                    (
                        std::mem::replace(&mut current.replicas, Replicas::one(replica)),
                        current.size,
                        current.put_id,
                        current.lease_until,
                    )
                });
                current.replicas = Replicas::one(replica);
                current.size = entry.length;
                current.put_id = entry.put_id;
                current.checksum = entry.checksum.unwrap_or(0);
                current.data_type = entry.data_type;
                current.group = None;
                current.lease_until = 0;
                current.lease_chain_start = 0;
                current.readers = 0;
                current.soft_pin_until = 0;
                current.last_access = now;
                current.flags = flags;
                if let Some(old) = old {
                    let removed = (&mut *ledger, &mut *deferred);
                    self.retire_replaced(&table, &mut shard, removed, e.segment, old, now);
                }
            }
            (_, None) => {
                let mut fresh = Entry::complete(entry.length, entry.put_id, replica, now);
                fresh.checksum = entry.checksum.unwrap_or(0);
                fresh.data_type = entry.data_type;
                fresh.flags = flags;
                shard.insert(e.scope, e.key.into(), fresh);
                self.tenant_of(e.scope).add_committed(entry.length, 1);
                self.metrics.objects.inc();
            }
        }
        drop(table);
        drop(shard);
        ledger.insert(
            entry.offset,
            Holder {
                scope: e.scope,
                key: e.key.into(),
                put_id: entry.put_id,
                size: entry.length,
            },
        );
        EntryOutcome::of(ReplayOutcome::Replayed)
    }
}

/// How a replay entry relates to what the directory holds for its key.
fn relation_to(current: &Entry, e: &Eligible<'_>, max_replicas: u32) -> Relation {
    let entry = e.entry;
    if !current.is_complete() || current.put_id < entry.put_id {
        return Relation::Replace;
    }
    if current.put_id > entry.put_id {
        return Relation::Done(stale(format!(
            "the directory holds put {} of the key, newer than {}",
            current.put_id, entry.put_id
        )));
    }
    let same_content = current.size == entry.length
        && (current.checksum().is_none()
            || entry.checksum.is_none()
            || current.checksum() == entry.checksum);
    if !same_content {
        return Relation::Done(rejected(format!(
            "put {} is known with another size or checksum",
            entry.put_id
        )));
    }
    match current
        .replicas
        .as_slice()
        .iter()
        .find(|r| r.segment == e.segment)
    {
        Some(r) if r.offset == entry.offset => {
            Relation::Done(EntryOutcome::of(ReplayOutcome::Duplicate))
        }
        Some(r) => Relation::Done(rejected(format!(
            "put {} is known at offset {} of this segment, not {}",
            entry.put_id, r.offset, entry.offset
        ))),
        None if current.replicas.as_slice().len() >= max_replicas as usize => {
            Relation::Done(rejected(format!(
                "put {} already has the most replicas allowed ({max_replicas})",
                entry.put_id
            )))
        }
        None => Relation::AddReplica,
    }
}
