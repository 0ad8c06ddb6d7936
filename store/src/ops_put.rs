//! put_start / put_end / put_revoke (and upsert through put_start's `upsert` flag).

use rand::rngs::StdRng;

use crescent_wire::store::{
    PutEndRequest, PutRevokeRequest, PutStartReply, PutStartRequest, ReplicaState,
};

use crate::allocator::slot_len;
use crate::directory::ObjectDirectory;
use crate::entry::{Entry, GroupId, PendingPut, Replica, Replicas};
use crate::error::StoreError;
use crate::identity::{ObjectName, ScopeId};
use crate::segments::SegmentTable;
use crate::shard::{Claim, Shard};
use crate::tenants::{Reservation, TenantUsage};
use crate::time::{Clock, Ticks};

enum Attempt {
    Done(PutStartReply),
    NoSpace,
}

impl ObjectDirectory {
    /// Starts a put: allocates `replicas` slots on distinct segments (best effort: the reply
    /// holds however many could be placed, at least one) in state PROCESSING.
    ///
    /// - Same content already complete (same size, and the same checksum when both sides give
    ///   one): `already_exists`, nothing allocated. With `upsert`, only an equal checksum on both
    ///   sides counts as the same content.
    /// - Different content: CONFLICT, unless `upsert` (the old version stays readable until
    ///   put_end swaps).
    /// - A put of this key in progress: BUSY, unless it is older than the discard timeout, in
    ///   which case it is pre-empted (its slots are reclaimed after the release timeout).
    /// - No room even after one eviction: OUT_OF_SPACE; no segment mounted: UNAVAILABLE.
    pub fn put_start(
        &self,
        req: &PutStartRequest,
        now_ms: i64,
    ) -> Result<PutStartReply, StoreError> {
        self.put_start_in_group(req, None, now_ms)
    }

    /// [`Self::put_start`] for an object of a managed group (see `set_group_guard`).
    pub fn put_start_in_group(
        &self,
        req: &PutStartRequest,
        group: Option<GroupId>,
        now_ms: i64,
    ) -> Result<PutStartReply, StoreError> {
        let _span = tracing::debug_span!("store.put_start").entered();
        let r = self.put_start_inner(req, group, now_ms);
        self.metrics.op("put_start", &r);
        r
    }

    fn put_start_inner(
        &self,
        req: &PutStartRequest,
        group: Option<GroupId>,
        now_ms: i64,
    ) -> Result<PutStartReply, StoreError> {
        let name = ObjectName::parse(&req.id)?;
        // A 0-byte value is valid: it takes the smallest slot so it is placed, listed and
        // replayed like any object; no bytes move (docs/api.md "Empty values").
        if req.size > self.config.max_object_bytes {
            return Err(StoreError::invalid(
                "size",
                format!(
                    "{} bytes; a value holds 0..={} bytes",
                    req.size, self.config.max_object_bytes
                ),
            ));
        }
        if req.replicas == 0 || req.replicas > self.config.max_replicas {
            return Err(StoreError::invalid(
                "replicas",
                format!("{}; allowed 1..={}", req.replicas, self.config.max_replicas),
            ));
        }
        let scope = self.scopes.intern(name.scope)?;
        let key = name.key.as_bytes();
        let shard_i = self.shard_of(scope, key);
        let tenant = self.tenant_of(scope);
        for attempt in 0..2 {
            let mut shard = self.lock_shard(shard_i);
            match self.try_put_start(&mut shard, (scope, key, &tenant), req, group, now_ms)? {
                Attempt::Done(reply) => return Ok(reply),
                Attempt::NoSpace if attempt == 0 => {
                    drop(shard);
                    let needed = slot_len(req.size).saturating_mul(req.replicas as u64);
                    self.evict_for_allocation(&tenant, needed, now_ms);
                }
                Attempt::NoSpace => {}
            }
        }
        Err(StoreError::NoSpace {
            requested: req.size,
            reason: "no mounted segment has a free range this large, even after eviction".into(),
        })
    }

    fn try_put_start(
        &self,
        shard: &mut Shard,
        (scope, key, usage): (ScopeId, &[u8], &TenantUsage),
        req: &PutStartRequest,
        group: Option<GroupId>,
        now_ms: i64,
    ) -> Result<Attempt, StoreError> {
        let now = self.now(now_ms);
        let create = Reservation {
            bytes: req.size,
            objects: 1,
            inflight: 0,
        };
        // A new key (the common case) is looked up and inserted with one search of the key
        // index; a key already there goes on below.
        let mut started = None;
        let claim = shard.insert_if_absent(scope, key, |rng| {
            let new = self.new_put(rng, (scope, key), req, group, (usage, create), now_ms)?;
            let Some((pending, reply)) = new else {
                return Ok(None);
            };
            started = Some(reply);
            Ok::<_, StoreError>(Some(Entry::pending_only(pending, now)))
        })?;
        let slot = match claim {
            Claim::Inserted(s) => {
                let reply = started.expect("an inserted entry has its reply");
                self.metrics.objects.inc();
                return Ok(self.started(shard, s, reply));
            }
            Claim::Declined => return Ok(Attempt::NoSpace),
            Claim::Present(s) => self.clear_stale_put(shard, (scope, key), s, group, req, now)?,
        };
        if let Some(s) = slot {
            if let Some(done) = self.same_content(shard, s, req, now)? {
                return Ok(done);
            }
        }
        // An overwrite reserves only what it adds to the committed version (docs/tenants.md).
        let want = match slot.map(|s| shard.entry(s)) {
            Some(e) if e.is_complete() => Reservation {
                bytes: req.size.saturating_sub(e.size),
                objects: 0,
                inflight: 0,
            },
            _ => create,
        };
        let new = self.new_put(
            &mut shard.rng,
            (scope, key),
            req,
            group,
            (usage, want),
            now_ms,
        )?;
        let Some((pending, reply)) = new else {
            return Ok(Attempt::NoSpace);
        };
        let s = match slot {
            Some(s) => {
                shard.entry_mut(s).pending = Some(pending);
                s
            }
            None => {
                self.metrics.objects.inc();
                shard.insert(scope, key.into(), Entry::pending_only(pending, now))
            }
        };
        Ok(self.started(shard, s, reply))
    }

    /// A put of a key already present: refused over a managed weight object (unless the put
    /// is one) or a put in progress; a put abandoned past the discard timeout is preempted.
    /// The entry's slot, or `None` when the preempted put left no committed version.
    fn clear_stale_put(
        &self,
        shard: &mut Shard,
        (scope, key): (ScopeId, &[u8]),
        s: u32,
        group: Option<GroupId>,
        req: &PutStartRequest,
        now: Ticks,
    ) -> Result<Option<u32>, StoreError> {
        let e = shard.entry(s);
        // A plain put or upsert never replaces a managed weight object (nor joins a put of
        // one in progress): it would drop the payload from its revision.
        if group.is_none() {
            if let Some(refusal) = self.managed_refusal(e, &req.id.key) {
                return Err(refusal);
            }
        }
        let Some(p) = &e.pending else {
            return Ok(Some(s));
        };
        if now
            < p.started
                .saturating_add(Clock::span(self.config.discard_timeout_ms))
        {
            return Err(StoreError::busy(format!(
                "put {} of this key is in progress",
                p.put_id
            )));
        }
        self.preempt(shard, s);
        if !shard.entry(s).is_complete() {
            shard.remove(scope, key);
            self.metrics.objects.dec();
            return Ok(None);
        }
        Ok(Some(s))
    }

    /// A put of the content the key already holds is done at once (`already_exists`); other
    /// content is refused unless the put is an upsert. `None`: go on with a new version.
    fn same_content(
        &self,
        shard: &mut Shard,
        s: u32,
        req: &PutStartRequest,
        now: Ticks,
    ) -> Result<Option<Attempt>, StoreError> {
        let e = shard.entry_mut(s);
        let same = e.size == req.size
            && match (e.checksum(), req.checksum) {
                (Some(a), Some(b)) => a == b,
                _ => !req.upsert,
            };
        if same {
            e.last_access = now;
            self.metrics.put("already_exists", 1);
            return Ok(Some(Attempt::Done(PutStartReply {
                put_id: e.put_id,
                already_exists: true,
                replicas: Vec::new(),
            })));
        }
        if !req.upsert {
            return Err(StoreError::conflict(format!(
                "the key holds other content ({} bytes); use upsert to replace it",
                e.size
            )));
        }
        Ok(None)
    }

    /// Indexes a started put by its id (put_end finds it there) and counts it.
    fn started(&self, shard: &mut Shard, slot: u32, reply: PutStartReply) -> Attempt {
        shard.pending.insert(reply.put_id, slot);
        self.metrics.put("started", 1);
        Attempt::Done(reply)
    }

    /// A new put of `key`: `want` reserved of its tenant's quota, its put id and its slots
    /// allocated (`None`: no room, nothing reserved). The caller attaches the pending put to
    /// the key's entry.
    fn new_put(
        &self,
        rng: &mut StdRng,
        (scope, key): (ScopeId, &[u8]),
        req: &PutStartRequest,
        group: Option<GroupId>,
        (usage, want): (&TenantUsage, Reservation),
        now_ms: i64,
    ) -> Result<Option<(Box<PendingPut>, PutStartReply)>, StoreError> {
        let table = self.table();
        if table.is_empty() {
            return Err(StoreError::Unavailable {
                reason: "no segment is mounted".into(),
            });
        }
        // Before any allocation or eviction: a put over the tenant's quota takes nothing.
        let want = usage.reserve(req.size, want, self.config.max_inflight_bytes_per_tenant)?;
        let put_id = match self.next_put_id() {
            Ok(id) => id,
            Err(e) => {
                usage.release(want);
                return Err(e);
            }
        };
        let placed = self.allocate(&table, rng, req);
        if placed.is_empty() {
            usage.release(want);
            return Ok(None);
        }
        let replicas = placed
            .iter()
            .map(|r| {
                table.get(r.segment).expect("just allocated").describe(
                    r.offset,
                    req.size,
                    ReplicaState::Processing,
                )
            })
            .collect();
        drop(table);
        let pending = Box::new(PendingPut {
            put_id,
            size: req.size,
            checksum: req.checksum,
            data_type: req.data_type,
            replicas: Replicas::from_vec(placed),
            started: self.now(now_ms),
            scope,
            key: key.into(),
            soft_pin_until: match req.soft_pin_secs {
                Some(secs) => self.clock.deadline(now_ms, secs.saturating_mul(1000)),
                None => 0,
            },
            hard_pin: req.hard_pin,
            group,
            reserved: want,
        });
        let reply = PutStartReply {
            put_id,
            already_exists: false,
            replicas,
        };
        Ok(Some((pending, reply)))
    }

    /// Allocates up to `req.replicas` slots on distinct segments, in placement order.
    fn allocate(
        &self,
        table: &SegmentTable,
        rng: &mut StdRng,
        req: &PutStartRequest,
    ) -> Vec<Replica> {
        let order = table.placement_order(req.placement, req.preferred_segment.as_deref(), rng);
        let mut placed = Vec::with_capacity(req.replicas as usize);
        for idx in order {
            if placed.len() == req.replicas as usize {
                break;
            }
            let seg = table.get(idx).expect("listed segment");
            if let Some(offset) = seg.allocator().allocate(req.size) {
                self.metrics.bytes_used.add(slot_len(req.size) as i64);
                placed.push(Replica {
                    offset,
                    segment: idx,
                });
            }
        }
        self.metrics.allocation(true, placed.len() as u64);
        self.metrics
            .allocation(false, req.replicas as u64 - placed.len() as u64);
        placed
    }

    /// Pre-empts the stale put of `slot`: its slots are released at start + release timeout.
    pub(crate) fn preempt(&self, shard: &mut Shard, slot: u32) {
        let Some(p) = shard.entry_mut(slot).pending.take() else {
            return;
        };
        shard.pending.remove(&p.put_id);
        self.tenant_of(p.scope).release(p.reserved);
        // Its writer may have had the owners record it: a later remove of the key covers it.
        self.log_removal(&self.table(), p.replicas.as_slice(), p.put_id);
        let at = p
            .started
            .saturating_add(Clock::span(self.config.release_timeout_ms));
        shard.defer(p.replicas.as_slice(), p.size, p.put_id, at, false);
        self.metrics.put("preempted", 1);
    }

    /// Completes a put: its replicas become the object's COMPLETE version. The previous
    /// version (upsert) is freed, or, if under a read lease, freed when the lease ends.
    /// Unknown put (never started, revoked, pre-empted, dropped): NOT_FOUND; already ended:
    /// CONFLICT.
    pub fn put_end(&self, req: &PutEndRequest, now_ms: i64) -> Result<(), StoreError> {
        let _span = tracing::debug_span!("store.put_end").entered();
        let r = self.end_put(req, now_ms, false);
        self.metrics.op("put_end", &r);
        r
    }

    /// Abandons a put and frees its slots at once (the writer declares it stopped writing).
    pub fn put_revoke(&self, req: &PutRevokeRequest, now_ms: i64) -> Result<(), StoreError> {
        let _span = tracing::debug_span!("store.put_revoke").entered();
        let r = self.end_put(req, now_ms, true);
        self.metrics.op("put_revoke", &r);
        r
    }

    fn end_put(&self, req: &PutEndRequest, now_ms: i64, revoke: bool) -> Result<(), StoreError> {
        let name = ObjectName::parse(&req.id)?;
        let unknown =
            || StoreError::not_found("put", format!("{} of {:?}", req.put_id, req.id.key));
        let scope = self.scopes.lookup(name.scope).ok_or_else(unknown)?;
        let key = name.key.as_bytes();
        let mut shard = self.lock_shard(self.shard_of(scope, key));
        // The put's own entry through the put id index; the key index only when that is not
        // it (to tell an ended put from an unknown one).
        let slot = match shard.pending_slot(req.put_id, scope, key) {
            Some(slot) => slot,
            None => shard.lookup(scope, key).ok_or_else(unknown)?,
        };
        let now = self.now(now_ms);
        let e = shard.entry(slot);
        if e.pending.as_ref().map(|p| p.put_id) != Some(req.put_id) {
            if e.is_complete() && e.put_id == req.put_id {
                return Err(StoreError::conflict(format!(
                    "put {} already ended",
                    req.put_id
                )));
            }
            return Err(unknown());
        }
        if !revoke && shard.cold.get(&slot).is_some_and(|c| !c.may_drop()) {
            return Err(StoreError::ColdBacked {
                key: req.id.key.clone(),
            });
        }
        shard.pending.remove(&req.put_id);
        if revoke {
            let p = shard.entry_mut(slot).pending.take().expect("checked");
            self.tenant_of(scope).release(p.reserved);
            let table = self.table();
            self.log_removal(&table, p.replicas.as_slice(), p.put_id);
            self.free_replicas(&table, p.replicas.as_slice(), p.size, p.put_id);
            drop(table);
            if !shard.entry(slot).is_complete() {
                shard.remove(scope, key);
                self.metrics.objects.dec();
            }
            self.metrics.put("revoked", 1);
            return Ok(());
        }
        // The new content has no cold backing; the old one's reclaim is the server's (planned
        // before this call for a materialized backing).
        shard.cold.remove(&slot);
        let e = shard.entry_mut(slot);
        let (reserved, new_size) = e
            .pending
            .as_ref()
            .map(|p| (p.reserved, p.size))
            .expect("checked");
        let replaced = e.complete_pending(now);
        let old_size = replaced.as_ref().map(|r| r.1);
        self.tenant_of(scope).commit(reserved, new_size, old_size);
        if let Some((old, size, old_put_id, lease_until)) = replaced {
            // The replaced version's owner holds it until its release arrives: a later remove
            // of the key must fence it too.
            let table = self.table();
            self.log_removal(&table, old.as_slice(), old_put_id);
            if lease_until > now {
                shard.defer(old.as_slice(), size, old_put_id, lease_until, true);
            } else {
                self.free_replicas(&table, old.as_slice(), size, old_put_id);
            }
        }
        self.metrics.put("completed", 1);
        Ok(())
    }

    /// Reclaims puts older than the release timeout; returns how many.
    pub(crate) fn release_stale_puts(&self, shard: &mut Shard, now: Ticks) -> u64 {
        let span = Clock::span(self.config.release_timeout_ms);
        let stale: Vec<u32> = shard
            .pending
            .values()
            .copied()
            .filter(|&s| {
                shard
                    .entry(s)
                    .pending
                    .as_ref()
                    .is_some_and(|p| p.started.saturating_add(span) <= now)
            })
            .collect();
        if stale.is_empty() {
            return 0;
        }
        let table = self.table();
        for &slot in &stale {
            let p = shard.entry_mut(slot).pending.take().expect("filtered");
            shard.pending.remove(&p.put_id);
            self.tenant_of(p.scope).release(p.reserved);
            self.log_removal(&table, p.replicas.as_slice(), p.put_id);
            self.free_replicas(&table, p.replicas.as_slice(), p.size, p.put_id);
            if !shard.entry(slot).is_complete() {
                shard.remove(p.scope, &p.key);
                self.metrics.objects.dec();
            }
        }
        self.metrics.put("released", stale.len() as u64);
        stale.len() as u64
    }
}
