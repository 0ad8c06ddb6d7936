//! The object directory: shards of object metadata, the segment table, the scope interner and
//! the put-id counter. Operations live in `ops_*.rs`, housekeeping in `housekeeping.rs` and
//! `eviction.rs`.
//!
//! Lock order (deadlock freedom): a segment's replay ledger lock (at most one at a time,
//! rebuild/ledger.rs) before shard locks, shard locks before the segment table lock, the segment
//! table before an allocator's lock. The tenant ledger's lock (`tenants.rs`) is taken last, under
//! any of them, and takes only the scope interner's. A thread holds one shard lock at a time, except unmount and
//! owner drop, which take all of them in ascending order.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crescent_wire::rebuild::{compose_put_id, put_id_incarnation, MAX_PUT_INCARNATION};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard};

use rand::rngs::StdRng;
use rand::SeedableRng;

use crate::allocator::slot_len;
use crate::config::StoreConfig;
use crate::entry::{GroupId, Replica};
use crate::error::StoreError;
use crate::identity::{ScopeId, ScopeInterner};
use crate::metrics::StoreMetrics;
use crate::rebuild::ReplayLedgers;
use crate::releases::ReleaseQueues;
use crate::segments::{SegmentTable, SegmentUsage};
use crate::shard::Shard;
use crate::time::{Clock, Ticks};

/// Decides whether a managed group's objects are protected from eviction.
pub type GroupGuard = Arc<dyn Fn(GroupId) -> bool + Send + Sync>;

/// Aggregate figures, for `/stats`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectoryStats {
    pub objects: u64,
    pub bytes_used: u64,
    pub bytes_capacity: u64,
    pub segments: u64,
    pub scopes: u64,
    pub puts_in_progress: u64,
}

pub struct ObjectDirectory {
    pub(crate) config: StoreConfig,
    pub(crate) clock: Clock,
    pub(crate) shards: Box<[Mutex<Shard>]>,
    pub(crate) scopes: ScopeInterner,
    pub(crate) segments: RwLock<SegmentTable>,
    next_put_id: AtomicU64,
    /// The incarnation of this run: the high bits of every put id issued (see
    /// [`ObjectDirectory::begin_incarnation`]).
    incarnation: AtomicU32,
    /// The leader term owner replays must name.
    pub(crate) term: AtomicU64,
    /// Replayed ranges per segment (the address fence); one lock per segment, so owners
    /// replaying different segments run in parallel.
    pub(crate) ledgers: ReplayLedgers,
    pub(crate) group_guard: RwLock<Option<GroupGuard>>,
    pub(crate) managed_skips: RwLock<Option<crate::groups::ManagedSkipHook>>,
    pub(crate) group_namer: RwLock<Option<crate::groups::GroupNamer>>,
    pub(crate) metrics: StoreMetrics,
    /// Eviction-triggered offload: eviction drops hot replicas only of entries whose cold
    /// copy allows it and never an entry without one (the server offloads those first).
    pub(crate) cold_first: std::sync::atomic::AtomicBool,
    /// Releases on remote owners' segments, awaiting delivery on their heartbeats.
    pub(crate) releases: ReleaseQueues,
    /// Put ids removed from remote owners' segments: to journal, and fenced from replays.
    pub(crate) removals: crate::removals::RemovalLog,
    /// Per-tenant usage and hard limits (docs/tenants.md, "Enforcement on the put path").
    pub(crate) tenants: crate::tenants::TenantLedger,
}

impl std::fmt::Debug for ObjectDirectory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectDirectory")
            .field("config", &self.config)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl ObjectDirectory {
    /// A directory whose metrics are exported nowhere.
    pub fn new(config: StoreConfig, now_ms: i64) -> Result<Self, StoreError> {
        Self::with_metrics(config, StoreMetrics::unregistered(), now_ms)
    }

    /// A directory counting into `metrics` (see [`StoreMetrics::register`]).
    pub fn with_metrics(
        config: StoreConfig,
        metrics: StoreMetrics,
        now_ms: i64,
    ) -> Result<Self, StoreError> {
        config.validate()?;
        let shards = (0..config.shards)
            .map(|i| {
                let seed = config.seed ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                Mutex::new(Shard::new(StdRng::seed_from_u64(seed)))
            })
            .collect();
        Ok(Self {
            scopes: ScopeInterner::new(config.max_scopes),
            clock: Clock::new(now_ms),
            shards,
            segments: RwLock::new(SegmentTable::default()),
            next_put_id: AtomicU64::new(1),
            incarnation: AtomicU32::new(0),
            term: AtomicU64::new(0),
            ledgers: ReplayLedgers::default(),
            group_guard: RwLock::new(None),
            managed_skips: RwLock::new(None),
            group_namer: RwLock::new(None),
            metrics: metrics.clone(),
            cold_first: std::sync::atomic::AtomicBool::new(false),
            releases: ReleaseQueues::new(config.release_queue_limit, metrics.releases.clone()),
            removals: Default::default(),
            tenants: Default::default(),
            config,
        })
    }

    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    pub fn metrics(&self) -> &StoreMetrics {
        &self.metrics
    }

    /// Installs (or clears) the predicate telling eviction which groups are managed.
    pub fn set_group_guard(&self, guard: Option<GroupGuard>) {
        *self.group_guard.write().expect("guard lock") = guard;
    }

    /// Makes every later put id larger than `floor` (owner replay after a failover brings back
    /// objects with their original put ids). Put ids already carry the incarnation, so after
    /// [`Self::begin_incarnation`] this is a no-op for every replayed id; it stays for callers
    /// that restore ids of the current incarnation.
    pub fn ensure_put_id_above(&self, floor: u64) {
        self.next_put_id
            .fetch_max(floor.saturating_add(1), Ordering::SeqCst);
    }

    /// Starts a run under `incarnation` and leader `term`: every put id issued from now on is
    /// `incarnation << 40 | seq`, above every put id of an earlier incarnation (the version
    /// fence of owner replay), and replays must name `term`. The incarnation must be strictly
    /// greater than the current one (the server takes it from its journal: a fresh one on
    /// every restart and promotion) and at most [`MAX_PUT_INCARNATION`].
    pub fn begin_incarnation(&self, incarnation: u32, term: u64) -> Result<(), StoreError> {
        let current = self.incarnation.load(Ordering::SeqCst);
        if incarnation <= current || incarnation > MAX_PUT_INCARNATION {
            return Err(StoreError::invalid(
                "incarnation",
                format!(
                    "{incarnation}: must be in {}..={MAX_PUT_INCARNATION} (the current one is {current})",
                    current + 1
                ),
            ));
        }
        let first = compose_put_id(incarnation, 1).expect("checked range");
        self.incarnation.store(incarnation, Ordering::SeqCst);
        self.next_put_id.fetch_max(first, Ordering::SeqCst);
        self.releases.begin(first);
        self.term.store(term, Ordering::SeqCst);
        tracing::info!(incarnation, term, "directory incarnation started");
        Ok(())
    }

    /// The incarnation put ids are issued under.
    pub fn incarnation(&self) -> u32 {
        self.incarnation.load(Ordering::SeqCst)
    }

    /// The leader term replays must name.
    pub fn term(&self) -> u64 {
        self.term.load(Ordering::SeqCst)
    }

    /// The next put id. Refuses (UNAVAILABLE) rather than let a put id spill into the next
    /// incarnation's range, which would break the replay fence: 2^40 puts per incarnation.
    pub(crate) fn next_put_id(&self) -> Result<u64, StoreError> {
        let id = self.next_put_id.fetch_add(1, Ordering::SeqCst);
        if put_id_incarnation(id) != self.incarnation() {
            self.next_put_id.fetch_sub(1, Ordering::SeqCst);
            return Err(StoreError::Unavailable {
                reason: "the put ids of this incarnation are exhausted; restart or fail over \
                         to start a new incarnation"
                    .into(),
            });
        }
        Ok(id)
    }

    pub(crate) fn now(&self, now_ms: i64) -> Ticks {
        self.clock.now(now_ms)
    }

    pub(crate) fn shard_of(&self, scope: ScopeId, key: &[u8]) -> usize {
        let mut h = DefaultHasher::new();
        scope.hash(&mut h);
        key.hash(&mut h);
        (h.finish() % self.shards.len() as u64) as usize
    }

    pub(crate) fn lock_shard(&self, i: usize) -> MutexGuard<'_, Shard> {
        self.shards[i].lock().expect("shard lock")
    }

    pub(crate) fn lock_all(&self) -> Vec<MutexGuard<'_, Shard>> {
        self.shards
            .iter()
            .map(|s| s.lock().expect("shard lock"))
            .collect()
    }

    pub(crate) fn table(&self) -> RwLockReadGuard<'_, SegmentTable> {
        self.segments.read().expect("segment table lock")
    }

    /// The replica releases awaiting delivery to owners (the server answers heartbeats from
    /// it: [`ReleaseQueues::exchange`]).
    pub fn releases(&self) -> &ReleaseQueues {
        &self.releases
    }

    /// Put ids removed from remote owners' segments (module `removals`).
    pub fn tenants(&self) -> &crate::tenants::TenantLedger {
        &self.tenants
    }

    /// The usage counters of the tenant of `scope`.
    pub(crate) fn tenant_of(&self, scope: ScopeId) -> Arc<crate::tenants::TenantUsage> {
        self.tenants.of_scope(scope, &self.scopes)
    }

    pub fn removals(&self) -> &crate::removals::RemovalLog {
        &self.removals
    }

    /// Returns the slots of put `put_id`'s replicas to their segments' allocators, and queues
    /// each for its owner to forget (`releases.rs`; 0 for an allocation no owner ever
    /// recorded). A segment that is gone took its space with it; a refused free is an
    /// invariant break, logged and left allocated (lost space, never double use).
    pub(crate) fn free_replicas(
        &self,
        table: &SegmentTable,
        replicas: &[Replica],
        size: u64,
        put_id: u64,
    ) {
        for r in replicas {
            let Some(seg) = table.get(r.segment) else {
                continue;
            };
            match seg.allocator().free(r.offset, size) {
                Ok(()) => {
                    self.metrics.bytes_used.sub(slot_len(size) as i64);
                    self.releases.record(
                        &seg.spec.owner_id,
                        &seg.spec.segment_id,
                        r.offset,
                        size,
                        put_id,
                    );
                }
                Err(e) => tracing::error!(
                    segment = %seg.spec.segment_id, offset = r.offset, size, error = %e,
                    "refused free"
                ),
            }
        }
    }

    pub fn stats(&self) -> DirectoryStats {
        let (mut objects, mut pending) = (0u64, 0u64);
        for s in self.shards.iter() {
            let s = s.lock().expect("shard lock");
            objects += s.len() as u64;
            pending += s.pending.len() as u64;
        }
        let table = self.table();
        let (mut used, mut cap, mut n) = (0u64, 0u64, 0u64);
        for (_, seg) in table.iter() {
            let a = seg.allocator();
            used += a.used_bytes();
            cap += a.capacity();
            n += 1;
        }
        DirectoryStats {
            objects,
            bytes_used: used,
            bytes_capacity: cap,
            segments: n,
            scopes: self.scopes.len() as u64,
            puts_in_progress: pending,
        }
    }

    /// Usage of every mounted segment.
    pub fn segment_usage(&self) -> Vec<SegmentUsage> {
        self.table()
            .iter()
            .map(|(_, seg)| {
                let a = seg.allocator();
                SegmentUsage {
                    segment_id: seg.spec.segment_id.clone(),
                    owner_id: seg.spec.owner_id.clone(),
                    capacity: a.capacity(),
                    used: a.used_bytes(),
                    free_ranges: a.free_ranges(),
                    largest_free: a.largest_free(),
                }
            })
            .collect()
    }

    /// (used, capacity) over all mounted segments (what the high watermark is checked against).
    pub fn usage(&self) -> (u64, u64) {
        let table = self.table();
        table.iter().fold((0, 0), |(u, c), (_, seg)| {
            let a = seg.allocator();
            (u + a.used_bytes(), c + a.capacity())
        })
    }
}
