//! Submission limits of batches (docs/tenants.md, "Soft isolation"): a batch is sent as
//! sub-batches of at most `max_batch_items_per_tenant` items and `max_batch_bytes` bytes (one
//! item larger than the byte budget goes alone), and a tenant's sub-batches in flight on one
//! client (its handles of every scope together) hold at most `max_inflight_bytes_per_tenant`
//! bytes: taken before anything is submitted, given back once the sub-batch completed or
//! failed for good.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Mutex;

use crescent_wire::store::{DEFAULT_TENANT, MAX_BATCH};
use tokio::sync::Notify;
use tracing::Instrument;

use crate::client_options::ClientOptions;

/// A client's limits and what each tenant has in flight (shared by its handles).
#[derive(Debug, Default)]
pub(crate) struct Submission {
    /// 0: unset (requests hold up to `MAX_BATCH` items; puts are not split further).
    max_items: usize,
    /// 0: no bound.
    max_bytes: u64,
    /// 0: no bound.
    max_inflight: u64,
    inflight: Mutex<HashMap<String, u64>>,
    released: Notify,
}

impl Submission {
    pub(crate) fn new(options: &ClientOptions) -> Self {
        let items = options.max_batch_items_per_tenant;
        Self {
            max_items: items.min(MAX_BATCH),
            max_bytes: options.max_batch_bytes,
            max_inflight: options.max_inflight_bytes_per_tenant,
            ..Self::default()
        }
    }

    /// Most items of one request.
    pub(crate) fn max_items(&self) -> usize {
        match self.max_items {
            0 => MAX_BATCH,
            n => n,
        }
    }

    /// Consecutive ranges of `sizes` within the item and byte budgets (without budgets, one
    /// range: the put path splits at `MAX_BATCH` itself).
    pub(crate) fn plan(&self, sizes: &[u64]) -> Vec<Range<usize>> {
        let items = match self.max_items {
            0 => usize::MAX,
            n => n,
        };
        plan(sizes, items, self.max_bytes)
    }

    /// Waits until `tenant` (`None`: the default tenant) may have `bytes` more in flight:
    /// within the bound, or alone (so one sub-batch larger than the bound still goes).
    pub(crate) async fn reserve(&self, tenant: Option<&str>, bytes: u64) -> Inflight<'_> {
        let tenant = tenant.unwrap_or(DEFAULT_TENANT).to_string();
        if self.max_inflight == 0 {
            return Inflight { at: None, bytes };
        }
        loop {
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            if self.try_reserve(&tenant, bytes) {
                return Inflight {
                    at: Some((self, tenant)),
                    bytes,
                };
            }
            let span = tracing::debug_span!("client.inflight_wait", tenant = %tenant, bytes);
            released.as_mut().instrument(span).await;
        }
    }

    fn try_reserve(&self, tenant: &str, bytes: u64) -> bool {
        let mut inflight = self.inflight.lock().expect("inflight mutex");
        let held = inflight.get(tenant).copied().unwrap_or(0);
        let fits = held == 0 || held.saturating_add(bytes) <= self.max_inflight;
        if fits {
            inflight.insert(tenant.to_string(), held.saturating_add(bytes));
        }
        fits
    }

    fn release(&self, tenant: &str, bytes: u64) {
        let mut inflight = self.inflight.lock().expect("inflight mutex");
        if let Some(held) = inflight.get_mut(tenant) {
            *held = held.saturating_sub(bytes);
            if *held == 0 {
                inflight.remove(tenant);
            }
        }
        drop(inflight);
        self.released.notify_waiters();
    }
}

/// Bytes a sub-batch holds in flight; given back when dropped.
pub(crate) struct Inflight<'a> {
    at: Option<(&'a Submission, String)>,
    bytes: u64,
}

impl Drop for Inflight<'_> {
    fn drop(&mut self) {
        if let Some((submission, tenant)) = &self.at {
            submission.release(tenant, self.bytes);
        }
    }
}

/// Splits `sizes` into consecutive ranges of at most `max_items` items and `max_bytes` bytes
/// (0: no byte bound); an item larger than `max_bytes` is a range of its own.
pub(crate) fn plan(sizes: &[u64], max_items: usize, max_bytes: u64) -> Vec<Range<usize>> {
    let max_bytes = if max_bytes == 0 { u64::MAX } else { max_bytes };
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, 0u64);
    for (i, size) in sizes.iter().enumerate() {
        let full = i - start >= max_items.max(1) || bytes.saturating_add(*size) > max_bytes;
        if i > start && full {
            out.push(start..i);
            (start, bytes) = (i, 0);
        }
        bytes = bytes.saturating_add(*size);
    }
    if start < sizes.len() {
        out.push(start..sizes.len());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn budgets_split_a_batch_in_order() {
        assert_eq!(plan(&[1; 5], 2, 0), [0..2, 2..4, 4..5]);
        assert_eq!(plan(&[4, 4, 9, 1, 1], 10, 8), [0..2, 2..3, 3..5]);
        assert!(plan(&[], 3, 3).is_empty());
    }

    #[tokio::test]
    async fn a_tenant_waits_for_its_own_bytes_in_flight_only() {
        let options = ClientOptions {
            max_inflight_bytes_per_tenant: 10,
            ..ClientOptions::default()
        };
        let s = Submission::new(&options);
        let first = s.reserve(Some("a"), 8).await;
        // Another tenant is not held back by "a".
        drop(s.reserve(Some("b"), 10).await);
        let mut second = Box::pin(s.reserve(Some("a"), 8));
        assert!(futures::poll!(second.as_mut()).is_pending());
        drop(first);
        drop(second.await);
        // Alone, a reservation larger than the bound goes.
        drop(s.reserve(Some("a"), 50).await);
        assert!(s.inflight.lock().unwrap().is_empty());
    }

    proptest! {
        #[test]
        fn every_range_is_within_budget_or_one_item(
            sizes in proptest::collection::vec(0u64..100, 0..60),
            items in 1usize..8,
            bytes in 1u64..300,
        ) {
            let ranges = plan(&sizes, items, bytes);
            let flat: Vec<usize> = ranges.iter().flat_map(|r| r.clone()).collect();
            prop_assert_eq!(flat, (0..sizes.len()).collect::<Vec<_>>());
            for r in ranges {
                let total: u64 = sizes[r.clone()].iter().sum();
                prop_assert!(r.len() <= items);
                prop_assert!(r.len() == 1 || total <= bytes);
            }
        }
    }
}
