//! How many bytes one eviction may take from each tenant (docs/tenants.md, "Eviction").
//!
//! An allocation's eviction takes only from the writing tenant. Watermark eviction splits its
//! target: first among the tenants above their fair share of the store (capacity divided
//! among the tenants holding objects), in proportion to their excess, then, for what is left,
//! among all tenants in proportion to their use. A tenant whose budget is spent is not touched
//! again by that eviction, even if another tenant's objects could not be evicted.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::Arc;

use crate::tenants::TenantUsage;

/// Remaining bytes per tenant (keyed by the address of its [`TenantUsage`]).
#[derive(Debug)]
pub(crate) struct TenantBudgets {
    remaining: HashMap<usize, Cell<u64>>,
}

fn key(t: &Arc<TenantUsage>) -> usize {
    Arc::as_ptr(t) as usize
}

/// `total * part / whole`, rounded up (so the parts add up to at least `total`).
fn share(total: u64, part: u64, whole: u64) -> u64 {
    if whole == 0 {
        return 0;
    }
    ((total as u128 * part as u128).div_ceil(whole as u128)).min(u64::MAX as u128) as u64
}

impl TenantBudgets {
    /// All of `target` from `tenant` alone.
    pub fn only(tenant: &Arc<TenantUsage>, target: u64) -> Self {
        Self {
            remaining: HashMap::from([(key(tenant), Cell::new(target))]),
        }
    }

    /// `target` split among `tenants` (with their used bytes) as the module says.
    pub fn fair(tenants: &[(Arc<TenantUsage>, u64)], target: u64, capacity: u64) -> Self {
        let holding = tenants.iter().filter(|(_, used)| *used > 0).count() as u64;
        let fair_share = capacity.checked_div(holding).unwrap_or(0);
        let excess = |used: u64| used.saturating_sub(fair_share);
        let total_excess: u64 = tenants.iter().map(|(_, u)| excess(*u)).sum();
        let total_used: u64 = tenants.iter().map(|(_, u)| *u).sum();
        let from_excess = target.min(total_excess);
        let rest = target - from_excess;
        let remaining = tenants
            .iter()
            .map(|(t, used)| {
                let first = share(from_excess, excess(*used), total_excess).min(excess(*used));
                let second = share(rest, *used, total_used);
                (key(t), Cell::new(first.saturating_add(second)))
            })
            .collect();
        Self { remaining }
    }

    /// What `tenant` may still give (0: leave its objects alone).
    pub fn remaining(&self, tenant: &Arc<TenantUsage>) -> u64 {
        self.remaining.get(&key(tenant)).map_or(0, Cell::get)
    }

    /// `tenant` gave `bytes`.
    pub fn spend(&self, tenant: &Arc<TenantUsage>, bytes: u64) {
        if let Some(c) = self.remaining.get(&key(tenant)) {
            c.set(c.get().saturating_sub(bytes));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(name: &str) -> Arc<TenantUsage> {
        Arc::new(TenantUsage::new(
            Arc::from(name),
            (u64::MAX, u64::MAX),
            (u64::MAX, u64::MAX),
        ))
    }

    #[test]
    fn tenants_above_their_fair_share_give_first() {
        let (noisy, quiet) = (tenant("noisy"), tenant("quiet"));
        // Capacity 1000 between two: a fair share is 500. noisy holds 800, quiet 100.
        let b = TenantBudgets::fair(&[(noisy.clone(), 800), (quiet.clone(), 100)], 200, 1000);
        assert_eq!((b.remaining(&noisy), b.remaining(&quiet)), (200, 0));
    }

    #[test]
    fn beyond_the_excess_each_gives_in_proportion_to_its_use() {
        let (a, b_) = (tenant("a"), tenant("b"));
        let b = TenantBudgets::fair(&[(a.clone(), 600), (b_.clone(), 300)], 400, 1000);
        // Excess: a 100 (over 500), b 0; the other 300 split 2:1.
        assert_eq!((b.remaining(&a), b.remaining(&b_)), (300, 100));
    }

    #[test]
    fn only_one_tenant_and_spending() {
        let (a, other) = (tenant("a"), tenant("other"));
        let b = TenantBudgets::only(&a, 64);
        assert_eq!(b.remaining(&other), 0);
        b.spend(&a, 100);
        assert_eq!(b.remaining(&a), 0);
    }
}
