//! remove and remove by key prefix.

use std::ops::Bound;

use crescent_wire::store::{ObjectId, RemovePrefixReply, RemovePrefixRequest};

use crate::directory::ObjectDirectory;
use crate::entry::Replica;
use crate::error::StoreError;
use crate::identity::{validate_key, ObjectName, ScopeId, ScopeName};
use crate::segments::SegmentTable;
use crate::shard::Shard;
use crate::tenants::HeldRefund;
use crate::time::{Clock, Ticks};

impl ObjectDirectory {
    /// Removes an object. BUSY while its replicas are under a read lease or a put of it is in
    /// progress, unless `force`: then the entry goes at once and leased slots are freed when
    /// their lease ends, in-progress slots after the release timeout (their writer may still
    /// be writing).
    pub fn remove(&self, id: &ObjectId, force: bool, now_ms: i64) -> Result<(), StoreError> {
        let _span = tracing::debug_span!("store.remove").entered();
        let r = self.remove_inner(id, force, now_ms);
        self.metrics.op("remove", &r);
        r
    }

    fn remove_inner(&self, id: &ObjectId, force: bool, now_ms: i64) -> Result<(), StoreError> {
        let name = ObjectName::parse(id)?;
        let missing = || StoreError::not_found("object", id.key.clone());
        let scope = self.scopes.lookup(name.scope).ok_or_else(missing)?;
        let key = name.key.as_bytes();
        let mut shard = self.lock_shard(self.shard_of(scope, key));
        let slot = shard.lookup(scope, key).ok_or_else(missing)?;
        let now = self.now(now_ms);
        let e = shard.entry(slot);
        // Managed weight groups are removed only by their revision's deletion workflow,
        // forced or not.
        if let Some(refusal) = self.managed_refusal(e, &id.key) {
            drop(shard);
            self.managed_skipped("remove", 1);
            return Err(refusal);
        }
        if shard.cold.get(&slot).is_some_and(|c| !c.may_drop()) {
            return Err(StoreError::ColdBacked {
                key: id.key.clone(),
            });
        }
        let e = shard.entry(slot);
        if !force {
            if e.is_complete() && e.leased(now) {
                return Err(StoreError::busy(format!(
                    "{:?} is under a read lease (retry, or force)",
                    id.key
                )));
            }
            if e.pending.is_some() {
                return Err(StoreError::busy(format!(
                    "a put of {:?} is in progress (retry, or force)",
                    id.key
                )));
            }
        }
        self.remove_entry(&mut shard, scope, key, now);
        Ok(())
    }

    /// Removes the entry and frees or defers its space. The put ids it held in remote owners'
    /// segments enter the removal log (the server journals them before it acknowledges).
    pub(crate) fn remove_entry(&self, shard: &mut Shard, scope: ScopeId, key: &[u8], now: Ticks) {
        let Some(mut e) = shard.remove(scope, key) else {
            return;
        };
        self.metrics.objects.dec();
        let usage = self.tenant_of(scope);
        // The removed version's quota is held until its remove is journaled (a crash before
        // would replay it back), unless no owner can replay it.
        let refund = e.is_complete().then(|| usage.hold_refund(e.size, 1));
        if let Some(p) = &e.pending {
            usage.release(p.reserved);
        }
        // One hold of the segment table for the removal log and the free below.
        let table = self.table();
        let unrecorded = self.log_removal_holding(&table, e.replicas.as_slice(), e.put_id, refund);
        if let Some(refund) = unrecorded {
            refund.settle();
        }
        if let Some(p) = e.pending.take() {
            self.log_removal(&table, p.replicas.as_slice(), p.put_id);
            let at = p
                .started
                .saturating_add(Clock::span(self.config.release_timeout_ms));
            shard.defer(p.replicas.as_slice(), p.size, p.put_id, at, false);
        }
        if e.is_complete() {
            if e.leased(now) {
                shard.defer(e.replicas.as_slice(), e.size, e.put_id, e.lease_until, true);
            } else {
                self.free_replicas(&table, e.replicas.as_slice(), e.size, e.put_id);
            }
        }
    }

    /// Records `put_id` as removed from the owners of `replicas` that have a process to tell:
    /// a removed object, and also a version that is gone while its key lives on (replaced by
    /// an upsert or a replay, or a put abandoned), whose owner may still hold it until its
    /// release arrives. Those wait in the log for the next journal write (a remove's, or the
    /// housekeeping pass), so a later remove of the key is acknowledged only once they are
    /// journaled too: otherwise a restart would replay the old version of a removed key
    /// (docs/rebuild.md, "Removes are journaled"). Only for a put id that no replica serves
    /// any more: a fenced put id is `Stale` to every replay.
    pub(crate) fn log_removal(&self, table: &SegmentTable, replicas: &[Replica], put_id: u64) {
        let _none = self.log_removal_holding(table, replicas, put_id, None);
    }

    /// [`Self::log_removal`] with the quota the removal holds until it is journaled; returns
    /// `refund` if nothing was logged (to settle at once).
    pub(crate) fn log_removal_holding(
        &self,
        table: &SegmentTable,
        replicas: &[Replica],
        put_id: u64,
        refund: Option<HeldRefund>,
    ) -> Option<HeldRefund> {
        let owners: Vec<&str> = replicas
            .iter()
            .filter_map(|r| table.get(r.segment))
            .map(|seg| seg.spec.owner_id.as_str())
            .filter(|owner| self.releases.tracks(owner))
            .collect();
        self.removals.record_all(&owners, put_id, refund)
    }

    /// Removes every object of one scope whose key starts with `prefix` (non-empty), except
    /// those under a read lease, pinned (hard, or soft and still active) or with a put in
    /// progress; reports both counts.
    pub fn remove_prefix(
        &self,
        req: &RemovePrefixRequest,
        now_ms: i64,
    ) -> Result<RemovePrefixReply, StoreError> {
        let _span = tracing::debug_span!("store.remove_prefix").entered();
        let r = self.remove_prefix_inner(req, now_ms);
        self.metrics.op("remove_prefix", &r);
        r
    }

    fn remove_prefix_inner(
        &self,
        req: &RemovePrefixRequest,
        now_ms: i64,
    ) -> Result<RemovePrefixReply, StoreError> {
        let scope_name = ScopeName::parse(req.tenant.as_deref(), req.domain.as_deref())?;
        validate_key("prefix", &req.prefix)?;
        let mut reply = RemovePrefixReply {
            removed: 0,
            skipped: 0,
        };
        let Some(scope) = self.scopes.lookup(scope_name) else {
            return Ok(reply);
        };
        let prefix = req.prefix.as_bytes();
        let now = self.now(now_ms);
        let mut managed = 0u64;
        for i in 0..self.shards.len() {
            let mut shard = self.lock_shard(i);
            let Some(index) = shard.scopes.get(&scope) else {
                continue;
            };
            let mut doomed = Vec::new();
            for (k, &slot) in index
                .range::<[u8], _>((Bound::Included(prefix), Bound::Unbounded))
                .take_while(|(k, _)| k.starts_with(prefix))
            {
                let e = shard.entry(slot);
                if self.is_managed(e) {
                    managed += 1;
                    reply.skipped += 1;
                    continue;
                }
                // A cold backing needs its reclaim planned first: the server removes those
                // one by one (`remove` after `plan_obsolete_backing`).
                let kept = shard.cold.contains_key(&slot)
                    || e.pending.is_some()
                    || (e.is_complete() && e.leased(now))
                    || e.hard_pinned()
                    || e.soft_pinned(now);
                if kept {
                    reply.skipped += 1;
                } else {
                    doomed.push(k.clone());
                }
            }
            reply.removed += doomed.len() as u64;
            for k in doomed {
                self.remove_entry(&mut shard, scope, &k, now);
            }
        }
        self.managed_skipped("prefix_remove", managed);
        Ok(reply)
    }
}
