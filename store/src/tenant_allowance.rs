//! A tenant's quota across the clusters of a mesh, as one cluster's ledger holds it
//! (docs/tenants.md, "Quota across a mesh").
//!
//! The tenant's home cluster admits against its limits counting what it **granted** the other
//! clusters as used; every other cluster admits against its **cap**, the allowance the home
//! recorded for it. The server moves room between them (`crescent_server::mesh::quota`);
//! this module only keeps the counters exact under concurrent puts:
//!
//! - a cap is lowered before it is reported and raised only after the home recorded it, and
//!   a lowered cap is re-read against what is held, so the cap a cluster reports is never
//!   below what it holds or may still admit;
//! - a grant is admitted like a put (a reservation against the limits), then moved into
//!   `granted`, so concurrent puts at the home and grants never pass the limit together.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::tenants::{Counters, Dimension, TenantLedger, TenantUsage, UNLIMITED};

/// Bytes and objects.
pub type Amount = (u64, u64);

/// What `c` holds now: committed, being removed and reserved by puts in progress. Read
/// pending first: a commit adds to `used` before it leaves `pending`, and a remove's hold adds
/// to `removing` before it leaves `used`, so a change between two loads is counted twice at
/// worst, never missed.
fn held(c: &Counters<'_>) -> u64 {
    let pending = c.pending.load(Ordering::SeqCst);
    let used = c.used.load(Ordering::SeqCst);
    let removing = c.removing.load(Ordering::SeqCst);
    pending.saturating_add(used).saturating_add(removing)
}

impl TenantUsage {
    /// In a mesh: a tenant given limits `max` while it had no cap is capped at what it holds
    /// until its home answers.
    pub(crate) fn cap_if_limited(&self, max: Amount) {
        let uncapped =
            both(|d| self.counters(d).cap.load(Ordering::SeqCst)) == (UNLIMITED, UNLIMITED);
        if uncapped && max != (UNLIMITED, UNLIMITED) {
            self.lower_cap(Dimension::Bytes, 0);
            self.lower_cap(Dimension::Objects, 0);
        }
    }

    /// Lowers the cap of `dim` to what is held plus `room` (never raises it) and returns the
    /// cap in force: at least everything held or admitted, since an admission that read the
    /// old cap had already reserved before the new one was stored (both SeqCst).
    fn lower_cap(&self, dim: Dimension, room: u64) -> u64 {
        let c = self.counters(dim);
        let current = c.cap.load(Ordering::SeqCst);
        let mut cap = held(&c).saturating_add(room).min(current);
        c.cap.store(cap, Ordering::SeqCst);
        loop {
            let now = held(&c);
            if now <= cap {
                return cap;
            }
            cap = now;
            c.cap.store(cap, Ordering::SeqCst);
        }
    }

    /// Grants up to `want` of `dim` from what the limit leaves (nothing when it leaves
    /// nothing; all of it without a limit); returns what was granted.
    fn grant(&self, dim: Dimension, want: u64) -> u64 {
        let c = self.counters(dim);
        let max = c.max.load(Ordering::Acquire);
        if want == 0 || max == UNLIMITED {
            return want;
        }
        for _ in 0..4 {
            let taken = held(&c).saturating_add(c.granted.load(Ordering::SeqCst));
            let give = want.min(max.saturating_sub(taken));
            if give == 0 {
                return 0;
            }
            if self.admit(dim, give, false).is_ok() {
                c.granted.fetch_add(give, Ordering::SeqCst);
                c.pending.fetch_sub(give, Ordering::SeqCst);
                return give;
            }
        }
        0
    }
}

fn both<T>(f: impl Fn(Dimension) -> T) -> (T, T) {
    (f(Dimension::Bytes), f(Dimension::Objects))
}

fn sub_saturating(counter: &std::sync::atomic::AtomicU64, by: u64) {
    let _ = counter.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| {
        Some(v.saturating_sub(by))
    });
}

impl TenantLedger {
    /// `tenant`'s counters, created if it has none. The read lock first: the exchange asks
    /// for every tenant each pass, and a write lock would stall the puts' lookups.
    fn usage(&self, tenant: &str) -> Arc<TenantUsage> {
        if let Some(u) = self
            .state
            .read()
            .expect("ledger lock")
            .by_tenant
            .get(tenant)
        {
            return u.clone();
        }
        let mut state = self.state.write().expect("ledger lock");
        Self::tenant_in(&mut state, Arc::from(tenant))
    }

    /// This cluster is in a mesh: every tenant with limits (its policy or the default), now
    /// and from now on, admits nothing beyond what it holds until its home answered. A tenant
    /// without limits is not capped: its home names it if it has limits there.
    pub fn join_mesh(&self) {
        let mut state = self.state.write().expect("ledger lock");
        state.in_mesh = true;
        for usage in state.by_tenant.values() {
            let max = both(|d| usage.counters(d).max.load(Ordering::Acquire));
            usage.cap_if_limited(max);
        }
    }

    /// What this cluster holds of `tenant`: committed, being removed and reserved.
    pub fn holdings(&self, tenant: &str) -> Amount {
        let usage = self.usage(tenant);
        both(|d| held(&usage.counters(d)))
    }

    /// Lowers `tenant`'s cap to what it holds plus `room` (never raises it); returns the cap
    /// in force, never below what is held or admitted.
    pub fn lower_cap(&self, tenant: &str, room: Amount) -> Amount {
        let usage = self.usage(tenant);
        (
            usage.lower_cap(Dimension::Bytes, room.0),
            usage.lower_cap(Dimension::Objects, room.1),
        )
    }

    /// Raises `tenant`'s cap to `cap` (`None`: no cap), once the home recorded it.
    pub fn raise_cap(&self, tenant: &str, cap: Option<Amount>) {
        let usage = self.usage(tenant);
        let (b, o) = cap.unwrap_or((UNLIMITED, UNLIMITED));
        let raise = |d: Dimension, to: u64| {
            let _ = usage
                .counters(d)
                .cap
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| Some(v.max(to)));
        };
        raise(Dimension::Bytes, b);
        raise(Dimension::Objects, o);
    }

    /// `tenant`'s cap (`None`: no cap).
    pub fn cap(&self, tenant: &str) -> Option<Amount> {
        let usage = self.usage(tenant);
        let (b, o) = both(|d| usage.counters(d).cap.load(Ordering::SeqCst));
        (b != UNLIMITED || o != UNLIMITED).then_some((b, o))
    }

    /// At the home: grants up to `want` from what the limits leave; returns what it granted.
    pub fn grant(&self, tenant: &str, want: Amount) -> Amount {
        let usage = self.usage(tenant);
        (
            usage.grant(Dimension::Bytes, want.0),
            usage.grant(Dimension::Objects, want.1),
        )
    }

    /// At the home: counts `amount` more as held by other clusters, whatever the limits (what
    /// a cluster reports holding is held).
    pub fn add_granted(&self, tenant: &str, amount: Amount) {
        let usage = self.usage(tenant);
        usage.granted_bytes.fetch_add(amount.0, Ordering::SeqCst);
        usage.granted_objects.fetch_add(amount.1, Ordering::SeqCst);
    }

    /// At the home: counts `amount` less as held by other clusters.
    pub fn sub_granted(&self, tenant: &str, amount: Amount) {
        let usage = self.usage(tenant);
        sub_saturating(&usage.granted_bytes, amount.0);
        sub_saturating(&usage.granted_objects, amount.1);
    }

    /// Every tenant seen, by name.
    pub fn names(&self) -> Vec<String> {
        let state = self.state.read().expect("ledger lock");
        let mut names: Vec<String> = state.by_tenant.keys().map(|t| t.to_string()).collect();
        names.sort();
        names
    }
}

#[cfg(test)]
#[path = "tenant_allowance_tests.rs"]
mod tests;
