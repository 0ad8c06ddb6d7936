//! Eviction by approximate LRU.
//!
//! A uniform sample of entries (random slab slots of every shard) gives the distribution of
//! last-access times; sweeps then evict entries older than a threshold taken from that sample,
//! starting at the quantile matching the bytes to free and doubling it until enough is freed.
//! Objects under a read lease, hard-pinned, incomplete (a put in progress, including an
//! upsert) or in a guarded group are never touched; soft-pinned objects are only considered
//! once every other candidate is gone.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use rand::Rng;

use crate::allocator::slot_len;
use crate::cold::ColdSlot;
use crate::directory::ObjectDirectory;
use crate::entry::{Entry, Replicas};
use crate::eviction_budgets::TenantBudgets;
use crate::tenants::TenantUsage;
use crate::time::Ticks;

const SAMPLES_PER_SHARD: usize = 32;
/// Wait after an allocation-triggered eviction that freed nothing (1 s in ticks).
const FUTILE_BACKOFF: Ticks = 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EvictReport {
    /// Bytes eviction set out to free (slot bytes).
    pub target_bytes: u64,
    pub evicted_objects: u64,
    /// Slot bytes returned to segments.
    pub evicted_bytes: u64,
    pub skipped_leased: u64,
    pub skipped_hard_pinned: u64,
    pub skipped_incomplete: u64,
    pub skipped_group_guarded: u64,
}

/// What one sweep evicts: `phase` objects last accessed at or before `threshold`, within each
/// tenant's budget (`None`: of anyone).
struct Pass<'a> {
    phase: Class,
    threshold: Ticks,
    now: Ticks,
    budgets: Option<&'a TenantBudgets>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Normal,
    SoftPinned,
    Leased,
    HardPinned,
    Incomplete,
    GroupGuarded,
    /// Has a cold backing that does not (yet) allow dropping the last hot replica, or has no
    /// hot replica left to drop.
    ColdHeld,
}

impl ObjectDirectory {
    fn classify(
        e: &Entry,
        cold: Option<&ColdSlot>,
        cold_first: bool,
        now: Ticks,
        guard: &dyn Fn(&Entry) -> bool,
    ) -> Class {
        let cold_held = match cold {
            Some(c) => e.replicas.is_empty() || !(c.evictable && c.backing.is_materialized()),
            None => cold_first,
        };
        if !e.is_complete() || e.pending.is_some() {
            Class::Incomplete
        } else if cold_held {
            Class::ColdHeld
        } else if e.hard_pinned() {
            Class::HardPinned
        } else if e.leased(now) {
            Class::Leased
        } else if guard(e) {
            Class::GroupGuarded
        } else if e.soft_pinned(now) {
            Class::SoftPinned
        } else {
            Class::Normal
        }
    }

    /// Evicts `evict_ratio` of capacity when usage is at or above the high watermark.
    pub fn maybe_evict(&self, now_ms: i64) -> EvictReport {
        let (used, cap) = self.usage();
        if cap == 0 || (used as f64) < self.config.high_watermark * cap as f64 {
            return EvictReport::default();
        }
        let target = (self.config.evict_ratio * cap as f64).ceil() as u64;
        let budgets = TenantBudgets::fair(&self.tenants.usages(), target, cap);
        self.evict_in(target, now_ms, "watermark", (Some(&budgets), true))
    }

    /// Eviction before an allocation's retry: at least `needed` bytes, at least the ratio, of
    /// the writing tenant's own objects only: a write never evicts another tenant's object to
    /// admit itself (docs/tenants.md, "Eviction").
    pub(crate) fn evict_for_allocation(
        &self,
        tenant: &Arc<TenantUsage>,
        needed: u64,
        now_ms: i64,
    ) -> EvictReport {
        let now = self.now(now_ms);
        if now < tenant.evict_backoff_until.load(Ordering::Relaxed) {
            return EvictReport::default();
        }
        let (_, cap) = self.usage();
        let target = needed.max((self.config.evict_ratio * cap as f64).ceil() as u64);
        let budgets = TenantBudgets::only(tenant, target);
        let r = self.evict_in(target, now_ms, "allocation", (Some(&budgets), false));
        if r.evicted_bytes == 0 {
            tenant
                .evict_backoff_until
                .store(now.saturating_add(FUTILE_BACKOFF), Ordering::Relaxed);
        }
        r
    }

    /// Frees at least `target` slot bytes if enough unprotected objects exist.
    pub fn evict(&self, target: u64, now_ms: i64, reason: &'static str) -> EvictReport {
        self.evict_in(target, now_ms, reason, (None, false))
    }

    /// [`Self::evict`] within each tenant's budget (`None`: of anyone); with `spill`, what the
    /// budgets cannot free is then taken from anyone.
    fn evict_in(
        &self,
        target: u64,
        now_ms: i64,
        reason: &'static str,
        (budgets, spill): (Option<&TenantBudgets>, bool),
    ) -> EvictReport {
        let _span = tracing::debug_span!("store.evict", target, reason).entered();
        let now = self.now(now_ms);
        let mut report = EvictReport {
            target_bytes: target,
            ..Default::default()
        };
        if target == 0 {
            return report;
        }
        let guard_fn = self.group_guard.read().expect("guard lock").clone();
        let guard = |e: &Entry| match (e.group, &guard_fn) {
            (Some(g), Some(f)) => f(g),
            _ => false,
        };
        let cold_first = self.cold_first.load(std::sync::atomic::Ordering::Relaxed);
        let (mut normal, mut soft) = (Vec::new(), Vec::new());
        for i in 0..self.shards.len() {
            let mut shard = self.lock_shard(i);
            let n = shard.slab.len();
            for _ in 0..SAMPLES_PER_SHARD.min(n) {
                let slot = shard.rng.gen_range(0..n);
                if let Some(e) = &shard.slab[slot] {
                    let cold = shard.cold.get(&(slot as u32));
                    match Self::classify(e, cold, cold_first, now, &guard) {
                        Class::Normal => normal.push(e.last_access),
                        Class::SoftPinned => soft.push(e.last_access),
                        _ => {}
                    }
                }
            }
        }
        let (used, _) = self.usage();
        let frac = (target as f64 / used.max(1) as f64).min(1.0);
        let mut first_sweep = true;
        for (phase, mut sample) in [(Class::Normal, normal), (Class::SoftPinned, soft)] {
            sample.sort_unstable();
            let mut sweeps = |budgets: Option<&TenantBudgets>, report: &mut EvictReport| {
                let mut q = (frac * 1.5).min(1.0);
                loop {
                    let threshold = if q >= 1.0 || sample.is_empty() {
                        Ticks::MAX
                    } else {
                        let at = (q * sample.len() as f64).ceil() as usize;
                        sample[at.clamp(1, sample.len()) - 1]
                    };
                    let pass = Pass {
                        phase,
                        threshold,
                        now,
                        budgets,
                    };
                    self.sweep(&pass, &guard, first_sweep, report);
                    first_sweep = false;
                    if report.evicted_bytes >= target || threshold == Ticks::MAX {
                        break;
                    }
                    q = (q * 2.0).min(1.0);
                }
            };
            sweeps(budgets, &mut report);
            // Within each phase, what the budgets could not free (a tenant's objects all
            // protected) may come from anyone, if `spill`.
            if spill && budgets.is_some() && report.evicted_bytes < target {
                sweeps(None, &mut report);
            }
            if report.evicted_bytes >= target {
                break;
            }
        }
        self.record_eviction(reason, target, &report);
        report
    }

    /// The metrics and the log line of one eviction.
    fn record_eviction(&self, reason: &'static str, target: u64, report: &EvictReport) {
        self.metrics
            .evicted(reason, report.evicted_objects, report.evicted_bytes);
        self.metrics.skipped("leased", report.skipped_leased);
        self.metrics
            .skipped("hard_pinned", report.skipped_hard_pinned);
        self.metrics
            .skipped("incomplete", report.skipped_incomplete);
        self.metrics
            .skipped("group_guarded", report.skipped_group_guarded);
        let guarded_operation = match reason {
            "allocation" => "quota_evict",
            _ => "evict",
        };
        self.managed_skipped(guarded_operation, report.skipped_group_guarded);
        if report.evicted_objects > 0 {
            tracing::info!(
                objects = report.evicted_objects,
                bytes = report.evicted_bytes,
                target,
                reason,
                "evicted"
            );
        }
    }

    /// One pass over every shard evicting what `pass` names, stopping once the target is met.
    fn sweep(
        &self,
        pass: &Pass<'_>,
        guard: &dyn Fn(&Entry) -> bool,
        count_skips: bool,
        report: &mut EvictReport,
    ) {
        let cold_first = self.cold_first.load(Ordering::Relaxed);
        let Pass {
            phase,
            threshold,
            now,
            budgets,
        } = *pass;
        for i in 0..self.shards.len() {
            if report.evicted_bytes >= report.target_bytes && !count_skips {
                return;
            }
            let mut shard = self.lock_shard(i);
            let table = self.table();
            let shard = &mut *shard;
            let mut released = Vec::new();
            let slab = &mut shard.slab;
            let cold = &shard.cold;
            for (&scope, index) in shard.scopes.iter_mut() {
                let usage = self.tenant_of(scope);
                let spent = |b: &TenantBudgets| b.remaining(&usage) == 0;
                // (The first sweep looks at every entry: it counts what is protected.)
                if !count_skips && budgets.is_some_and(spent) {
                    continue;
                }
                index.retain(|_, slot| {
                    let e = slab[*slot as usize].as_mut().expect("indexed slot");
                    let backing = cold.get(slot);
                    let class = Self::classify(e, backing, cold_first, now, guard);
                    if count_skips {
                        match class {
                            Class::Leased => report.skipped_leased += 1,
                            Class::HardPinned => report.skipped_hard_pinned += 1,
                            Class::Incomplete => report.skipped_incomplete += 1,
                            Class::GroupGuarded => report.skipped_group_guarded += 1,
                            _ => {}
                        }
                    }
                    if class != phase
                        || e.last_access > threshold
                        || report.evicted_bytes >= report.target_bytes
                        || budgets.is_some_and(spent)
                    {
                        return true;
                    }
                    let freed = slot_len(e.size) * e.replicas.as_slice().len() as u64;
                    report.evicted_objects += 1;
                    report.evicted_bytes += freed;
                    if let Some(b) = budgets {
                        b.spend(&usage, freed);
                    }
                    if backing.is_some() {
                        // Materialized, UsageCommitted, readable (`evictable`): the entry
                        // stays as a cold-only route; the route changes first, then the
                        // allocator bytes are freed.
                        let hot = std::mem::replace(&mut e.replicas, Replicas::none());
                        e.route_rev = e.route_rev.saturating_add(1);
                        self.free_replicas(&table, hot.as_slice(), e.size, e.put_id);
                        return true;
                    }
                    // Complete with no put in progress (`Class::Incomplete` is never taken).
                    // Its quota is held until the eviction is journaled, like a remove's: a
                    // crash before would replay it back and count it again (docs/tenants.md,
                    // "Eviction").
                    let refund = usage.hold_refund(e.size, 1);
                    let replicas = e.replicas.as_slice();
                    if let Some(r) =
                        self.log_removal_holding(&table, replicas, e.put_id, Some(refund))
                    {
                        r.settle();
                    }
                    self.free_replicas(&table, replicas, e.size, e.put_id);
                    released.push(*slot);
                    false
                });
            }
            shard.scopes.retain(|_, index| !index.is_empty());
            self.metrics.objects.sub(released.len() as i64);
            for slot in released {
                shard.release_slot(slot);
            }
        }
    }
}
