//! The cold half of an object's route (docs/cold-tier.md, "Model"): an entry may carry one active
//! cold backing beside its hot replicas, and a fenced route version. The directory is the route
//! authority of the cold tier: exact lookup and compare-and-set of whole routes
//! ([`crescent_cold::driver::RouteAuthority`] through [`DirectoryRoutes`]).
//!
//! Backings are kept out of line, in a per-shard map keyed by slot, so entries without one
//! (nearly all of them) stay compact. A cold-only entry (a materialized backing, no hot
//! replica) is a complete entry with zero replicas: eviction, unmount and owner drop keep it.

use crescent_cold::driver::RouteAuthority;
use crescent_cold::route::{ActiveColdBacking, HotReplica, ObjectRoute, RouteExpectation};
use crescent_cold::ColdError;
use std::ops::Bound;

use crescent_wire::store::{
    ObjectId, RemovePrefixRequest, ReplicaDesc, ReplicaState, DEFAULT_TENANT,
};

use crate::allocator::slot_len;
use crate::directory::ObjectDirectory;
use crate::entry::{Entry, Replica, Replicas, COMPLETE, HAS_CHECKSUM};
use crate::error::StoreError;
use crate::identity::{validate_key, ObjectName, ScopeName};
use crate::route_change::{check_route_change, replica_change, ReplicaChange};
use crate::segments::SegmentTable;
use crate::shard::Shard;

/// The out-of-line cold state of one entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ColdSlot {
    pub backing: ActiveColdBacking,
    /// Set by the server once the backing's operation is UsageCommitted on a readable device:
    /// only then may eviction drop the last hot replica (the last-hot rule).
    pub evictable: bool,
    /// The reclaim of this materialized copy is planned: an overwrite or delete may drop it.
    /// Without it they refuse (`ColdBacked`), so no copy is ever dropped unaccounted.
    pub drop_allowed: bool,
}

impl ColdSlot {
    /// Whether an overwrite or delete may drop this backing now.
    pub fn may_drop(&self) -> bool {
        !self.backing.is_materialized() || self.drop_allowed
    }
}

/// The cold tier's name of an object: `tenant/domain/key` (domain empty when absent). Tenant
/// and domain never hold `/`, so the split is unambiguous while keys may.
pub fn cold_object_key(id: &ObjectId) -> String {
    format!(
        "{}/{}/{}",
        id.tenant.as_deref().unwrap_or(DEFAULT_TENANT),
        id.domain.as_deref().unwrap_or(""),
        id.key
    )
}

/// The inverse of [`cold_object_key`].
pub fn parse_cold_object_key(s: &str) -> Result<ObjectId, StoreError> {
    let mut parts = s.splitn(3, '/');
    let (Some(tenant), Some(domain), Some(key)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(StoreError::invalid(
            "object_key",
            format!("{s:?} is not tenant/domain/key"),
        ));
    };
    let id = ObjectId {
        tenant: (tenant != DEFAULT_TENANT).then(|| tenant.to_string()),
        domain: (!domain.is_empty()).then(|| domain.to_string()),
        key: key.to_string(),
    };
    ObjectName::parse(&id)?;
    Ok(id)
}

/// A hot slot allocated for a restore's re-promotion, not yet in any route. Install it with a
/// promote CAS, or give it back with [`ObjectDirectory::free_promotion`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromotionSlot {
    pub replica: HotReplica,
    pub desc: ReplicaDesc,
    pub size: u64,
}

pub(crate) fn conflict(key: &str, reason: impl Into<String>) -> ColdError {
    ColdError::RouteConflict {
        key: key.to_string(),
        reason: reason.into(),
    }
}

impl ObjectDirectory {
    fn route_of(
        &self,
        table: &SegmentTable,
        object_key: &str,
        e: &Entry,
        cold: Option<&ColdSlot>,
    ) -> ObjectRoute {
        ObjectRoute {
            key: object_key.to_string(),
            version: e.route_rev as u64,
            content_op: e.put_id,
            length: e.size,
            checksum: e.checksum,
            replicas: e
                .replicas
                .as_slice()
                .iter()
                .filter_map(|r| {
                    table.get(r.segment).map(|s| HotReplica {
                        segment_id: s.spec.segment_id.clone(),
                        offset: r.offset,
                    })
                })
                .collect(),
            cold: cold.map(|c| c.backing.clone()),
        }
    }

    /// Runs `f` on the shard and slot of the complete entry of `id` (None when absent or not
    /// complete).
    fn with_complete<T>(
        &self,
        id: &ObjectId,
        f: impl FnOnce(&mut Shard, Option<u32>) -> T,
    ) -> Result<T, StoreError> {
        let name = ObjectName::parse(id)?;
        let Some(scope) = self.scopes.lookup(name.scope) else {
            return Ok(f(&mut self.lock_shard(0), None));
        };
        let key = name.key.as_bytes();
        let mut shard = self.lock_shard(self.shard_of(scope, key));
        let slot = shard
            .lookup(scope, key)
            .filter(|&s| shard.entry(s).is_complete());
        Ok(f(&mut shard, slot))
    }

    /// Exact lookup of the route of the complete version of `id`.
    pub fn route(&self, id: &ObjectId) -> Result<Option<ObjectRoute>, StoreError> {
        let object_key = cold_object_key(id);
        self.with_complete(id, |shard, slot| {
            let slot = slot?;
            let table = self.table();
            Some(self.route_of(
                &table,
                &object_key,
                shard.entry(slot),
                shard.cold.get(&slot),
            ))
        })
    }

    /// Whether the complete version of `id` was stored with a checksum (a cold copy needs one:
    /// it is what a restore verifies against). `None` when there is no complete version.
    pub fn has_checksum(&self, id: &ObjectId) -> Result<Option<bool>, StoreError> {
        self.with_complete(id, |shard, slot| {
            slot.map(|s| shard.entry(s).checksum().is_some())
        })
    }

    /// Installs `new` as the route of `id` if its current route matches `expected`.
    ///
    /// Allowed changes: the cold backing (attach, materialize, drop), removing hot replicas
    /// (eviction: their allocator bytes are freed here, after the route changed) and adding
    /// replicas allocated with [`Self::allocate_promotion`] (restore). Content (put id, length,
    /// checksum) never changes through a route CAS. Removing replicas of a leased entry is
    /// refused (BUSY): a reader holds them.
    pub fn compare_and_set_route(
        &self,
        id: &ObjectId,
        expected: &RouteExpectation,
        new: ObjectRoute,
        now_ms: i64,
    ) -> Result<(), ColdError> {
        let _span = tracing::debug_span!("store.route_cas").entered();
        let object_key = cold_object_key(id);
        let now = self.now(now_ms);
        let gone = || conflict(&object_key, "the object has no complete version");
        let r = self
            .with_complete(id, |shard, slot| {
                let slot = slot.ok_or_else(gone)?;
                let table = self.table();
                let current = self.route_of(
                    &table,
                    &object_key,
                    shard.entry(slot),
                    shard.cold.get(&slot),
                );
                current.check(expected)?;
                check_route_change(&object_key, &current, &new)?;
                let ReplicaChange {
                    mut kept,
                    removed,
                    added,
                } = replica_change(
                    &object_key,
                    shard.entry(slot).replicas.as_slice(),
                    &current,
                    &new,
                    &table,
                )?;
                let e = shard.entry(slot);
                if !removed.is_empty() && e.leased(now) {
                    return Err(ColdError::Backpressure {
                        queue: "route",
                        reason: format!("{object_key:?} is under a read lease"),
                    });
                }
                if kept.is_empty() && added.is_empty() && !new.is_cold_only() {
                    return Err(conflict(
                        &object_key,
                        "the last hot replica may go only with a materialized cold backing",
                    ));
                }
                let (size, put_id) = (e.size, e.put_id);
                let (was_evictable, was_drop_allowed) = shard
                    .cold
                    .get(&slot)
                    .map_or((false, false), |c| (c.evictable, c.drop_allowed));
                let e = shard.entry_mut(slot);
                kept.extend(added);
                e.replicas = Replicas::from_vec(kept);
                e.route_rev = new.version as u32;
                match new.cold {
                    Some(backing) => {
                        let same = expected.cold.as_ref() == Some(&backing.identity());
                        shard.cold.insert(
                            slot,
                            ColdSlot {
                                backing,
                                evictable: was_evictable && same,
                                drop_allowed: was_drop_allowed && same,
                            },
                        );
                    }
                    None => {
                        shard.cold.remove(&slot);
                    }
                }
                // Allocator bytes of evicted replicas are freed only now, after the CAS.
                self.free_replicas(&table, &removed, size, put_id);
                Ok(())
            })
            .map_err(|e| ColdError::InvalidArgument {
                field: "object",
                reason: e.to_string(),
            })?;
        self.metrics.op(
            "route_cas",
            &r.as_ref().map_err(|_| StoreError::conflict("route")),
        );
        r
    }

    /// Marks the backing `cold_op` of `id` as safe for the last-hot eviction (the server calls
    /// this once the operation is UsageCommitted on a readable device). Returns whether it was
    /// still the route's materialized backing.
    pub fn mark_cold_evictable(
        &self,
        id: &ObjectId,
        cold_op: crescent_cold::ColdOpId,
        evictable: bool,
    ) -> Result<bool, StoreError> {
        self.with_complete(id, |shard, slot| {
            let Some(c) = slot.and_then(|s| shard.cold.get_mut(&s)) else {
                return false;
            };
            if c.backing.cold_op() != cold_op || !c.backing.is_materialized() {
                return false;
            }
            c.evictable = evictable;
            true
        })
    }

    /// Allows (or again forbids) an overwrite or delete of `id` to drop its materialized copy
    /// `cold_op`: the server calls it once the copy's reclaim is planned (and again with
    /// `false` if the reclaim was cancelled). Returns whether that copy is the route's.
    pub fn allow_cold_drop(
        &self,
        id: &ObjectId,
        cold_op: crescent_cold::ColdOpId,
        allowed: bool,
    ) -> Result<bool, StoreError> {
        self.with_complete(id, |shard, slot| {
            let Some(c) = slot.and_then(|s| shard.cold.get_mut(&s)) else {
                return false;
            };
            if c.backing.cold_op() != cold_op {
                return false;
            }
            c.drop_allowed = allowed;
            true
        })
    }

    /// Installs a cold-only route rebuilt from the journal (restart or failover, before owner
    /// replay). An entry already holding this or a newer content is left alone (`Ok(false)`).
    pub fn install_cold_route(
        &self,
        id: &ObjectId,
        route: &ObjectRoute,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let name = ObjectName::parse(id)?;
        let Some(backing) = route.cold.clone().filter(|b| b.is_materialized()) else {
            return Err(StoreError::invalid(
                "route",
                "a cold-only route needs a materialized backing",
            ));
        };
        let version = u32::try_from(route.version.max(1))
            .map_err(|_| StoreError::invalid("route", "version out of range"))?;
        let scope = self.scopes.intern(name.scope)?;
        let key = name.key.as_bytes();
        let now = self.now(now_ms);
        let mut shard = self.lock_shard(self.shard_of(scope, key));
        if let Some(s) = shard.lookup(scope, key) {
            let e = shard.entry(s);
            if e.is_complete() && e.put_id >= route.content_op {
                return Ok(false);
            }
            if e.pending.is_some() || e.is_complete() {
                return Ok(false);
            }
        }
        self.ensure_put_id_above(route.content_op);
        let mut e = Entry::cold_only(now);
        e.size = route.length;
        e.put_id = route.content_op;
        e.checksum = route.checksum;
        e.route_rev = version;
        e.flags = COMPLETE | HAS_CHECKSUM;
        let slot = shard.insert(scope, key.into(), e);
        self.tenant_of(scope).add_committed(route.length, 1);
        shard.cold.insert(
            slot,
            ColdSlot {
                backing,
                evictable: true,
                drop_allowed: false,
            },
        );
        self.metrics.objects.inc();
        Ok(true)
    }

    /// Allocates a hot slot of `size` bytes for a restore (preferring `segment_id`). It belongs
    /// to no route until a promote CAS adds it.
    pub fn allocate_promotion(
        &self,
        size: u64,
        segment_id: Option<&str>,
    ) -> Result<PromotionSlot, StoreError> {
        let table = self.table();
        let mut order: Vec<_> = table.iter().map(|(i, _)| i).collect();
        if let Some(p) = segment_id.and_then(|p| table.find(p)) {
            order.retain(|&i| i != p);
            order.insert(0, p);
        }
        for idx in order {
            let seg = table.get(idx).expect("listed segment");
            if let Some(offset) = seg.allocator().allocate(size) {
                self.metrics.bytes_used.add(slot_len(size) as i64);
                return Ok(PromotionSlot {
                    replica: HotReplica {
                        segment_id: seg.spec.segment_id.clone(),
                        offset,
                    },
                    desc: seg.describe(offset, size, ReplicaState::Complete),
                    size,
                });
            }
        }
        Err(StoreError::NoSpace {
            requested: size,
            reason: "no mounted segment can hold the restored value".into(),
        })
    }

    /// Where a hot replica lives: its segment's owner, transfer endpoint and transport (the
    /// cold tier reads offloads from, and writes restores into, other owners' segments).
    /// `None` when the segment is not mounted.
    pub fn describe_hot_replica(&self, replica: &HotReplica, length: u64) -> Option<ReplicaDesc> {
        let table = self.table();
        let idx = table.find(&replica.segment_id)?;
        let seg = table.get(idx)?;
        Some(seg.describe(replica.offset, length, ReplicaState::Complete))
    }

    /// Gives back a promotion slot whose CAS did not happen.
    pub fn free_promotion(&self, slot: &PromotionSlot) {
        let table = self.table();
        if let Some(idx) = table.find(&slot.replica.segment_id) {
            self.free_replicas(
                &table,
                &[Replica {
                    offset: slot.replica.offset,
                    segment: idx,
                }],
                slot.size,
                // Never committed: no owner recorded it, there is nothing to tell.
                0,
            );
        }
    }

    /// Every object with a cold backing (for reconciliation and `/stats`), paged by key.
    pub fn cold_backed(&self) -> Vec<(ObjectId, ActiveColdBacking)> {
        let mut out = Vec::new();
        for i in 0..self.shards.len() {
            let shard = self.lock_shard(i);
            for (scope, index) in shard.scopes.iter() {
                let Some((tenant, domain)) = self.scopes.name(*scope) else {
                    continue;
                };
                for (k, slot) in index.iter() {
                    if let Some(c) = shard.cold.get(slot) {
                        out.push((
                            ObjectId {
                                tenant: (tenant.as_ref() != DEFAULT_TENANT)
                                    .then(|| tenant.to_string()),
                                domain: domain.as_ref().map(|d| d.to_string()),
                                key: String::from_utf8_lossy(k).into_owned(),
                            },
                            c.backing.clone(),
                        ));
                    }
                }
            }
        }
        out
    }
}

impl ObjectDirectory {
    /// The objects under `req`'s prefix that `remove_prefix` skipped only because they carry
    /// a cold backing (whose reclaim must be planned before the entry goes): not managed, no
    /// put in progress, not leased, not pinned. The server removes each with its reclaim.
    pub fn cold_backed_under_prefix(
        &self,
        req: &RemovePrefixRequest,
        now_ms: i64,
    ) -> Result<Vec<ObjectId>, StoreError> {
        let scope_name = ScopeName::parse(req.tenant.as_deref(), req.domain.as_deref())?;
        validate_key("prefix", &req.prefix)?;
        let Some(scope) = self.scopes.lookup(scope_name) else {
            return Ok(Vec::new());
        };
        let prefix = req.prefix.as_bytes();
        let now = self.now(now_ms);
        let mut out = Vec::new();
        for i in 0..self.shards.len() {
            let shard = self.lock_shard(i);
            let Some(index) = shard.scopes.get(&scope) else {
                continue;
            };
            for (k, &slot) in index
                .range::<[u8], _>((Bound::Included(prefix), Bound::Unbounded))
                .take_while(|(k, _)| k.starts_with(prefix))
            {
                let e = shard.entry(slot);
                // What remove_prefix keeps for reasons other than the backing.
                let kept = self.is_managed(e)
                    || e.pending.is_some()
                    || (e.is_complete() && e.leased(now))
                    || e.hard_pinned()
                    || e.soft_pinned(now);
                let removable = shard.cold.contains_key(&slot) && !kept;
                if removable {
                    out.push(ObjectId {
                        tenant: req.tenant.clone(),
                        domain: req.domain.clone(),
                        key: String::from_utf8_lossy(k).into_owned(),
                    });
                }
            }
        }
        Ok(out)
    }
}

impl ObjectDirectory {
    /// Eviction-triggered offload on or off: when on, eviction never drops an entry without a
    /// cold copy; the server offloads [`Self::offload_candidates`] first.
    pub fn set_cold_first(&self, on: bool) {
        self.cold_first
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Usage of the mounted segments at or above the eviction high watermark.
    pub fn above_high_watermark(&self) -> bool {
        let (used, cap) = self.usage();
        cap > 0 && used as f64 >= self.config.high_watermark * cap as f64
    }

    /// Up to `limit` complete, checksummed, unprotected objects with hot replicas and no cold
    /// backing, least recently accessed first, with their sizes: the victims eviction-triggered
    /// offload materializes before eviction may drop them. A full scan: called only at the
    /// watermark, at most once per worker tick.
    pub fn offload_candidates(&self, limit: usize, now_ms: i64) -> Vec<(ObjectId, u64)> {
        let now = self.now(now_ms);
        let mut found = Vec::new();
        for i in 0..self.shards.len() {
            let shard = self.lock_shard(i);
            for (scope, index) in shard.scopes.iter() {
                let Some((tenant, domain)) = self.scopes.name(*scope) else {
                    continue;
                };
                for (k, slot) in index.iter() {
                    let e = shard.entry(*slot);
                    let eligible = e.is_complete()
                        && e.pending.is_none()
                        && !e.replicas.is_empty()
                        && e.checksum().is_some()
                        && !e.hard_pinned()
                        && !e.leased(now)
                        && !shard.cold.contains_key(slot);
                    if eligible {
                        let id = ObjectId {
                            tenant: (tenant.as_ref() != DEFAULT_TENANT).then(|| tenant.to_string()),
                            domain: domain.as_ref().map(|d| d.to_string()),
                            key: String::from_utf8_lossy(k).into_owned(),
                        };
                        found.push((e.last_access, id, e.size));
                    }
                }
            }
        }
        found.sort_by_key(|(at, _, _)| *at);
        found
            .into_iter()
            .take(limit)
            .map(|(_, id, size)| (id, size))
            .collect()
    }
}

/// The directory as the cold tier's route authority (object keys in [`cold_object_key`] form).
pub struct DirectoryRoutes<'a> {
    pub directory: &'a ObjectDirectory,
    pub now_ms: i64,
}

impl RouteAuthority for DirectoryRoutes<'_> {
    fn lookup(&self, object_key: &str) -> Option<ObjectRoute> {
        let id = parse_cold_object_key(object_key).ok()?;
        self.directory.route(&id).ok().flatten()
    }

    fn compare_and_set(
        &mut self,
        object_key: &str,
        expected: &RouteExpectation,
        new: ObjectRoute,
    ) -> Result<(), ColdError> {
        let id = parse_cold_object_key(object_key).map_err(|e| ColdError::InvalidArgument {
            field: "object_key",
            reason: e.to_string(),
        })?;
        self.directory
            .compare_and_set_route(&id, expected, new, self.now_ms)
    }
}
