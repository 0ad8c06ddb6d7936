//! Per-tenant usage and hard limits, kept exactly by the directory (docs/tenants.md,
//! "Enforcement on the put path").
//!
//! A tenant's committed usage is the sum and count of its complete object versions; its pending
//! usage is what its puts in progress reserved at put_start. Both are counters changed under the
//! same shard lock that changes the entry, so they are exact at every instant, and admission
//! (`used + pending + requested <= limit`) is one atomic reservation: concurrent writers of one
//! tenant never exceed its limit together. Nothing here is journaled: after a restart or a
//! failover the directory is rebuilt from the owners' replays, and the counters with it; the
//! limits come from the journaled `QuotaRoot` aggregates, which the server installs with
//! [`TenantLedger::set_limits`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use crate::error::StoreError;
use crate::identity::{ScopeId, ScopeInterner};

/// No limit (the default of a tenant without a policy).
pub const UNLIMITED: u64 = u64::MAX;

/// One tenant's counters and limits. Domains share their tenant's.
#[derive(Debug)]
pub struct TenantUsage {
    name: Arc<str>,
    used_bytes: AtomicU64,
    used_objects: AtomicU64,
    pending_bytes: AtomicU64,
    pending_objects: AtomicU64,
    /// Puts in progress holding a reservation (overwrites reserve no object).
    pending_puts: AtomicU64,
    /// The value bytes of those puts (soft isolation: `max_inflight_bytes_per_tenant`).
    inflight_bytes: AtomicU64,
    /// What removes took out of `used` that the journal does not cover yet ([`HeldRefund`]):
    /// admission still counts it.
    removing_bytes: AtomicU64,
    removing_objects: AtomicU64,
    max_bytes: AtomicU64,
    max_objects: AtomicU64,
    /// At the tenant's home cluster of a mesh: what the other clusters may hold, counted by
    /// admission against the limits like usage (docs/tenants.md, "Quota across a mesh").
    pub(crate) granted_bytes: AtomicU64,
    pub(crate) granted_objects: AtomicU64,
    /// In a mesh: the most this cluster may hold of the tenant (its allowance, or what it
    /// holds while it waits for one); [`UNLIMITED`] outside a mesh and at a ready home. A put
    /// past it is refused `AllowanceShort`, not `QUOTA_EXCEEDED`: the mesh may have room.
    pub(crate) cap_bytes: AtomicU64,
    pub(crate) cap_objects: AtomicU64,
    /// Whether the limits are the tenant's own policy ([`TenantLedger::set_limits`]) rather
    /// than the default for tenants without one.
    has_policy: AtomicBool,
    /// After an allocation-triggered eviction of this tenant's objects freed nothing, the
    /// next waits until this tick, so a tenant of protected objects does not sweep on every
    /// put (`eviction.rs`).
    pub(crate) evict_backoff_until: AtomicU32,
}

/// What a put in progress reserved for its tenant, released when it ends either way.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Reservation {
    /// Of the quota: what the put adds to the committed usage.
    pub bytes: u64,
    pub objects: u64,
    /// In flight: the value's whole size (set by [`TenantUsage::reserve`]).
    pub inflight: u64,
}

/// A tenant's figures at one instant, for `tenant show` and `/v1/stats?tenant=`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TenantFigures {
    pub tenant: String,
    pub used_bytes: u64,
    pub used_objects: u64,
    pub pending_bytes: u64,
    pub pending_objects: u64,
    /// Puts in progress.
    pub pending_puts: u64,
    /// Removed, and not yet durably: admission still counts these ([`HeldRefund`]).
    pub removing_bytes: u64,
    pub removing_objects: u64,
    /// The limits in force. `None`: unlimited.
    pub max_bytes: Option<u64>,
    pub max_objects: Option<u64>,
    /// At the tenant's home cluster of a mesh: what the other clusters may hold.
    pub granted_bytes: u64,
    pub granted_objects: u64,
    /// In a mesh: the most this cluster may hold (`None`: no cap).
    pub cap_bytes: Option<u64>,
    pub cap_objects: Option<u64>,
    /// True when they are the tenant's own policy, false when they are the default for
    /// tenants without one.
    pub has_policy: bool,
}

/// One of the two quantities a quota limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dimension {
    Bytes,
    Objects,
}

impl Dimension {
    fn as_str(self) -> &'static str {
        match self {
            Dimension::Bytes => "bytes",
            Dimension::Objects => "objects",
        }
    }
}

/// The counters of one [`Dimension`] of a tenant.
pub(crate) struct Counters<'a> {
    pub used: &'a AtomicU64,
    pub removing: &'a AtomicU64,
    pub pending: &'a AtomicU64,
    pub granted: &'a AtomicU64,
    pub max: &'a AtomicU64,
    pub cap: &'a AtomicU64,
}

fn limit(v: u64) -> Option<u64> {
    (v != UNLIMITED).then_some(v)
}

impl TenantUsage {
    pub(crate) fn new(
        name: Arc<str>,
        (max_bytes, max_objects): (u64, u64),
        (cap_bytes, cap_objects): (u64, u64),
    ) -> Self {
        Self {
            name,
            used_bytes: AtomicU64::new(0),
            used_objects: AtomicU64::new(0),
            pending_bytes: AtomicU64::new(0),
            pending_objects: AtomicU64::new(0),
            pending_puts: AtomicU64::new(0),
            inflight_bytes: AtomicU64::new(0),
            removing_bytes: AtomicU64::new(0),
            removing_objects: AtomicU64::new(0),
            max_bytes: AtomicU64::new(max_bytes),
            max_objects: AtomicU64::new(max_objects),
            granted_bytes: AtomicU64::new(0),
            granted_objects: AtomicU64::new(0),
            cap_bytes: AtomicU64::new(cap_bytes),
            cap_objects: AtomicU64::new(cap_objects),
            has_policy: AtomicBool::new(false),
            evict_backoff_until: AtomicU32::new(0),
        }
    }

    /// Reserves `want` for a put of a `size`-byte value, or refuses it with `QUOTA_EXCEEDED`.
    /// A value larger than the byte limit is refused whatever the usage: no eviction or
    /// removal could admit it. Returns the reservation to release when the put ends.
    pub(crate) fn reserve(
        &self,
        size: u64,
        want: Reservation,
        max_inflight: u64,
    ) -> Result<Reservation, StoreError> {
        let want = Reservation {
            inflight: size,
            ..want
        };
        self.admit_inflight(size, max_inflight)?;
        let admitted = self.reserve_quota(size, want);
        if admitted.is_err() {
            self.inflight_bytes.fetch_sub(size, Ordering::AcqRel);
        }
        admitted.map(|()| want)
    }

    /// Soft isolation: one tenant's puts in progress hold at most `max` bytes together (0: no
    /// bound), except that a tenant with none in progress may always start one.
    fn admit_inflight(&self, size: u64, max: u64) -> Result<(), StoreError> {
        let before = self.inflight_bytes.fetch_add(size, Ordering::AcqRel);
        if max != 0 && before > 0 && before.saturating_add(size) > max {
            self.inflight_bytes.fetch_sub(size, Ordering::AcqRel);
            return Err(StoreError::busy(format!(
                "tenant {} has {before} bytes of puts in progress; at most {max} \
                 (store.max_inflight_bytes_per_tenant)",
                self.name
            )));
        }
        Ok(())
    }

    fn reserve_quota(&self, size: u64, want: Reservation) -> Result<(), StoreError> {
        let max_bytes = self.max_bytes.load(Ordering::Acquire);
        if size > max_bytes {
            return Err(StoreError::QuotaExceeded {
                tenant: self.name.to_string(),
                reason: format!("a {size}-byte value is over the limit of {max_bytes} bytes"),
            });
        }
        self.admit(Dimension::Bytes, want.bytes, true)?;
        let admitted = self.admit(Dimension::Objects, want.objects, true);
        match admitted {
            Ok(()) => self.pending_puts.fetch_add(1, Ordering::AcqRel),
            Err(_) => self.pending_bytes.fetch_sub(want.bytes, Ordering::AcqRel),
        };
        admitted
    }

    /// Adds `want` to the pending count of `dim` unless `used + removing + pending + want`
    /// would pass the limit less what other clusters were granted (`QUOTA_EXCEEDED`) or, when
    /// `capped`, this cluster's cap (`AllowanceShort`). The reservation is taken first and
    /// given back on refusal, so two concurrent ones can never both fit where only one does
    /// (one of them may be refused where, a moment later, it would fit: that is the safe side).
    pub(crate) fn admit(&self, dim: Dimension, want: u64, capped: bool) -> Result<(), StoreError> {
        if want == 0 {
            return Ok(());
        }
        let c = self.counters(dim);
        // SeqCst with the cap's store in `tenant_allowance.rs`: a cap lowered after this
        // reservation's load of the old cap always sees the reservation in its re-read.
        let before = c.pending.fetch_add(want, Ordering::SeqCst);
        // `used` first, then `removing`: a hold adds its bytes to `removing` before it takes
        // them out of `used`, so in this order a hold running between the two loads is seen
        // in both (counted twice: the safe side), never in neither. A grant adds to `granted`
        // before it leaves `pending`: the same.
        let used_before = c.used.load(Ordering::SeqCst);
        let used_now = used_before.saturating_add(c.removing.load(Ordering::SeqCst));
        let held = used_now.saturating_add(before).saturating_add(want);
        let granted = c.granted.load(Ordering::SeqCst);
        let max = c.max.load(Ordering::Acquire);
        let cap = match capped {
            true => c.cap.load(Ordering::SeqCst),
            false => UNLIMITED,
        };
        let refusal = if max != UNLIMITED && held.saturating_add(granted) > max {
            Some(StoreError::QuotaExceeded {
                tenant: self.name.to_string(),
                reason: format!(
                    "{}: used {used_now} + pending {before} + {want}{} is over the limit of {max}",
                    dim.as_str(),
                    match granted {
                        0 => String::new(),
                        g => format!(" + {g} held by other clusters"),
                    }
                ),
            })
        } else if cap != UNLIMITED && held > cap {
            Some(StoreError::AllowanceShort {
                tenant: self.name.to_string(),
                reason: format!(
                    "{}: used {used_now} + pending {before} + {want} is over this cluster's \
                     allowance of {cap}",
                    dim.as_str()
                ),
            })
        } else {
            None
        };
        match refusal {
            Some(e) => {
                c.pending.fetch_sub(want, Ordering::SeqCst);
                Err(e)
            }
            None => Ok(()),
        }
    }

    /// A put of a `size`-byte value ended: its reservation leaves pending, and its version
    /// replaces the complete one of `replaced` bytes (`None`: a new object). Used grows before
    /// pending shrinks, so a concurrent admission never sees less than is held.
    pub(crate) fn commit(&self, r: Reservation, size: u64, replaced: Option<u64>) {
        self.add_committed(size, u64::from(replaced.is_none()));
        self.release(r);
        self.refund(replaced.unwrap_or(0), 0);
    }

    /// A put ended without committing (revoked, pre-empted, reclaimed, dropped).
    pub(crate) fn release(&self, r: Reservation) {
        self.pending_bytes.fetch_sub(r.bytes, Ordering::AcqRel);
        self.pending_objects.fetch_sub(r.objects, Ordering::AcqRel);
        self.pending_puts.fetch_sub(1, Ordering::AcqRel);
        self.inflight_bytes.fetch_sub(r.inflight, Ordering::AcqRel);
    }

    /// A complete version appeared without a put of this run (an owner's replay, a cold
    /// route restored).
    pub(crate) fn add_committed(&self, bytes: u64, objects: u64) {
        self.used_bytes.fetch_add(bytes, Ordering::AcqRel);
        self.used_objects.fetch_add(objects, Ordering::AcqRel);
    }

    /// A complete version left the directory (removed, evicted, its last replica lost).
    pub(crate) fn refund(&self, bytes: u64, objects: u64) {
        self.used_bytes.fetch_sub(bytes, Ordering::AcqRel);
        self.used_objects.fetch_sub(objects, Ordering::AcqRel);
    }

    /// A remove took a complete version out of the directory, but until the journal covers
    /// the remove the version may replay back after a crash: its bytes leave `used` now and
    /// stay counted by admission until [`HeldRefund::settle`] (docs/tenants.md, "Removes").
    pub(crate) fn hold_refund(self: &Arc<Self>, bytes: u64, objects: u64) -> HeldRefund {
        self.removing_bytes.fetch_add(bytes, Ordering::AcqRel);
        self.removing_objects.fetch_add(objects, Ordering::AcqRel);
        self.refund(bytes, objects);
        HeldRefund {
            usage: self.clone(),
            bytes,
            objects,
        }
    }

    fn figures(&self) -> TenantFigures {
        TenantFigures {
            tenant: self.name.to_string(),
            used_bytes: self.used_bytes.load(Ordering::Acquire),
            used_objects: self.used_objects.load(Ordering::Acquire),
            pending_bytes: self.pending_bytes.load(Ordering::Acquire),
            pending_objects: self.pending_objects.load(Ordering::Acquire),
            pending_puts: self.pending_puts.load(Ordering::Acquire),
            removing_bytes: self.removing_bytes.load(Ordering::Acquire),
            removing_objects: self.removing_objects.load(Ordering::Acquire),
            max_bytes: limit(self.max_bytes.load(Ordering::Acquire)),
            max_objects: limit(self.max_objects.load(Ordering::Acquire)),
            granted_bytes: self.granted_bytes.load(Ordering::Acquire),
            granted_objects: self.granted_objects.load(Ordering::Acquire),
            cap_bytes: limit(self.cap_bytes.load(Ordering::Acquire)),
            cap_objects: limit(self.cap_objects.load(Ordering::Acquire)),
            has_policy: self.has_policy.load(Ordering::Acquire),
        }
    }

    pub(crate) fn counters(&self, dim: Dimension) -> Counters<'_> {
        match dim {
            Dimension::Bytes => Counters {
                used: &self.used_bytes,
                removing: &self.removing_bytes,
                pending: &self.pending_bytes,
                granted: &self.granted_bytes,
                max: &self.max_bytes,
                cap: &self.cap_bytes,
            },
            Dimension::Objects => Counters {
                used: &self.used_objects,
                removing: &self.removing_objects,
                pending: &self.pending_objects,
                granted: &self.granted_objects,
                max: &self.max_objects,
                cap: &self.cap_objects,
            },
        }
    }

    fn store_limits(&self, (max_bytes, max_objects): (u64, u64)) {
        self.max_bytes.store(max_bytes, Ordering::Release);
        self.max_objects.store(max_objects, Ordering::Release);
    }
}

/// A removed version's quota, given back once its remove is durable (the removal log carries
/// it: `crate::removals`). Dropping it without settling keeps the quota held.
#[derive(Debug)]
#[must_use = "a held refund is given back only by settle"]
pub struct HeldRefund {
    usage: Arc<TenantUsage>,
    bytes: u64,
    objects: u64,
}

impl HeldRefund {
    /// The remove is durable: the tenant may use the quota again.
    pub fn settle(self) {
        self.usage
            .removing_bytes
            .fetch_sub(self.bytes, Ordering::AcqRel);
        self.usage
            .removing_objects
            .fetch_sub(self.objects, Ordering::AcqRel);
    }
}

#[derive(Debug)]
pub(crate) struct LedgerState {
    pub(crate) by_tenant: HashMap<Arc<str>, Arc<TenantUsage>>,
    /// Indexed by scope id (ids are dense, from 0).
    by_scope: Vec<Arc<TenantUsage>>,
    /// The limits of a tenant without a policy (`[tenant_default]`; unlimited by default).
    default_limits: (u64, u64),
    /// In a mesh, a tenant with limits admits nothing beyond its cap until its home answered
    /// (`tenant_allowance.rs`).
    pub(crate) in_mesh: bool,
}

impl LedgerState {
    /// The cap of a tenant seen for the first time: none, or in a mesh with default limits,
    /// nothing until its home answered.
    pub(crate) fn new_cap(&self) -> (u64, u64) {
        match self.in_mesh && self.default_limits != (UNLIMITED, UNLIMITED) {
            true => (0, 0),
            false => (UNLIMITED, UNLIMITED),
        }
    }
}

impl Default for LedgerState {
    fn default() -> Self {
        Self {
            by_tenant: HashMap::new(),
            by_scope: Vec::new(),
            default_limits: (UNLIMITED, UNLIMITED),
            in_mesh: false,
        }
    }
}

/// Every tenant's [`TenantUsage`], found by name or by scope id.
#[derive(Debug, Default)]
pub struct TenantLedger {
    pub(crate) state: RwLock<LedgerState>,
}

impl TenantLedger {
    /// The usage of the tenant of `scope` (an interned id of `interner`).
    pub(crate) fn of_scope(&self, scope: ScopeId, interner: &ScopeInterner) -> Arc<TenantUsage> {
        if let Some(u) = self
            .state
            .read()
            .expect("ledger lock")
            .by_scope
            .get(scope as usize)
        {
            return u.clone();
        }
        let mut state = self.state.write().expect("ledger lock");
        while state.by_scope.len() <= scope as usize {
            let id = state.by_scope.len() as ScopeId;
            let (tenant, _) = interner.name(id).expect("scope ids are interned densely");
            let usage = Self::tenant_in(&mut state, tenant);
            state.by_scope.push(usage);
        }
        state.by_scope[scope as usize].clone()
    }

    pub(crate) fn tenant_in(state: &mut LedgerState, tenant: Arc<str>) -> Arc<TenantUsage> {
        if let Some(u) = state.by_tenant.get(&tenant) {
            return u.clone();
        }
        let usage = Arc::new(TenantUsage::new(
            tenant.clone(),
            state.default_limits,
            state.new_cap(),
        ));
        state.by_tenant.insert(tenant, usage.clone());
        usage
    }

    /// Installs a tenant's hard limits (`None`: unlimited), creating its counters if it has
    /// none yet (its scopes find them when interned). Puts admitted before keep their
    /// reservations; a lowered limit refuses only what asks for more.
    pub fn set_limits(&self, tenant: &str, max_bytes: Option<u64>, max_objects: Option<u64>) {
        let mut state = self.state.write().expect("ledger lock");
        let usage = Self::tenant_in(&mut state, Arc::from(tenant));
        usage.has_policy.store(true, Ordering::Release);
        let limits = (
            max_bytes.unwrap_or(UNLIMITED),
            max_objects.unwrap_or(UNLIMITED),
        );
        usage.store_limits(limits);
        if state.in_mesh {
            usage.cap_if_limited(limits);
        }
    }

    /// Installs the limits of every tenant without a policy (`None`: unlimited), the ones it
    /// has already and the ones it gets later (docs/tenants.md, "Default limits").
    pub fn set_default_limits(&self, max_bytes: Option<u64>, max_objects: Option<u64>) {
        let limits = (
            max_bytes.unwrap_or(UNLIMITED),
            max_objects.unwrap_or(UNLIMITED),
        );
        let mut state = self.state.write().expect("ledger lock");
        state.default_limits = limits;
        for usage in state.by_tenant.values() {
            if !usage.has_policy.load(Ordering::Acquire) {
                usage.store_limits(limits);
                if state.in_mesh {
                    usage.cap_if_limited(limits);
                }
            }
        }
    }

    /// One tenant's figures (zeros and the default limits if it never stored anything nor
    /// had a policy).
    pub fn figures(&self, tenant: &str) -> TenantFigures {
        let state = self.state.read().expect("ledger lock");
        match state.by_tenant.get(tenant) {
            Some(u) => u.figures(),
            None => TenantFigures {
                tenant: tenant.to_string(),
                max_bytes: limit(state.default_limits.0),
                max_objects: limit(state.default_limits.1),
                cap_bytes: limit(state.new_cap().0),
                cap_objects: limit(state.new_cap().1),
                ..TenantFigures::default()
            },
        }
    }

    /// Every tenant seen, with its used bytes now (for eviction's budgets).
    pub(crate) fn usages(&self) -> Vec<(Arc<TenantUsage>, u64)> {
        let state = self.state.read().expect("ledger lock");
        state
            .by_tenant
            .values()
            .map(|u| (u.clone(), u.used_bytes.load(Ordering::Acquire)))
            .collect()
    }

    /// Every tenant that stored something or has limits, by name.
    pub fn all(&self) -> Vec<TenantFigures> {
        let state = self.state.read().expect("ledger lock");
        let mut all: Vec<TenantFigures> = state.by_tenant.values().map(|u| u.figures()).collect();
        all.sort_by(|a, b| a.tenant.cmp(&b.tenant));
        all
    }
}

#[cfg(test)]
#[path = "tenants_tests.rs"]
mod tests;
