//! Tenant quotas on the put path (docs/tenants.md, "Enforcement on the put path"): exact usage
//! through every way an object comes and goes, admission against the hard limits, and a refusal
//! that takes nothing from anyone.

mod common;

use std::sync::Arc;

use common::*;
use crescent_store::{ObjectDirectory, StoreConfig, TenantFigures};
use crescent_wire::store::PutEndRequest;

fn figures(d: &ObjectDirectory, tenant: &str) -> (u64, u64, u64, u64) {
    let TenantFigures {
        used_bytes,
        used_objects,
        pending_bytes,
        pending_objects,
        ..
    } = d.tenants().figures(tenant);
    (used_bytes, used_objects, pending_bytes, pending_objects)
}

fn acme(key: &str) -> crescent_wire::store::ObjectId {
    id(Some("acme"), None, key)
}

#[test]
fn usage_follows_puts_overwrites_and_removes_across_domains() {
    let d = dir();
    mount(&d, "s1", "o1", 1 << 20);
    put(&d, acme("a"), 100, T0);
    put(&d, id(Some("acme"), Some("d1"), "a"), 50, T0);
    put(&d, id(Some("other"), None, "a"), 7, T0);
    assert_eq!(figures(&d, "acme"), (150, 2, 0, 0));
    assert_eq!(figures(&d, "other"), (7, 1, 0, 0));
    // The same content again changes nothing; an upsert charges the difference.
    put(&d, acme("a"), 100, T0);
    let mut r = req(acme("a"), 300);
    r.upsert = true;
    put_req(&d, r, T0);
    assert_eq!(figures(&d, "acme"), (350, 2, 0, 0));
    d.remove(&acme("a"), false, T0).unwrap();
    assert_eq!(figures(&d, "acme"), (50, 1, 0, 0));
    assert_eq!(figures(&d, "default"), (0, 0, 0, 0));
}

#[test]
fn a_put_in_progress_holds_its_reservation_until_it_ends() {
    let d = dir();
    mount(&d, "s1", "o1", 1 << 20);
    let started = d.put_start(&req(acme("a"), 100), T0).unwrap();
    assert_eq!(figures(&d, "acme"), (0, 0, 100, 1));
    let end = PutEndRequest {
        id: acme("a"),
        put_id: started.put_id,
    };
    d.put_revoke(&end, T0).unwrap();
    assert_eq!(figures(&d, "acme"), (0, 0, 0, 0));
    // An abandoned put holds it until the release timeout reclaims it.
    d.put_start(&req(acme("b"), 40), T0).unwrap();
    assert_eq!(figures(&d, "acme"), (0, 0, 40, 1));
    let later = T0 + d.config().release_timeout_ms as i64 + 1000;
    d.tick(later);
    assert_eq!(figures(&d, "acme"), (0, 0, 0, 0));
}

#[test]
fn a_put_over_the_quota_is_refused_and_other_tenants_are_untouched() {
    let d = dir();
    mount(&d, "s1", "o1", 1 << 20);
    d.tenants().set_limits("acme", Some(1000), Some(3));
    put(&d, acme("a"), 600, T0);
    let e = d.put_start(&req(acme("b"), 500), T0).unwrap_err();
    assert_eq!(e.code(), "QUOTA_EXCEEDED");
    assert!(
        !d.exist(&acme("b"), T0).unwrap(),
        "a refused put leaves no entry"
    );
    put(&d, id(Some("other"), None, "b"), 5000, T0);
    put(&d, acme("b"), 100, T0);
    put(&d, acme("c"), 100, T0);
    let e = d.put_start(&req(acme("d"), 1), T0).unwrap_err();
    assert_eq!(e.code(), "QUOTA_EXCEEDED", "the object limit");
    // A shrinking overwrite is admitted at the limit; a growing one is not.
    let mut shrink = req(acme("a"), 10);
    shrink.upsert = true;
    put_req(&d, shrink, T0);
    let mut grow = req(acme("a"), 900);
    grow.upsert = true;
    assert_eq!(d.put_start(&grow, T0).unwrap_err().code(), "QUOTA_EXCEEDED");
    assert_eq!(figures(&d, "acme"), (210, 3, 0, 0));
}

#[test]
fn a_value_larger_than_the_quota_fails_at_once_without_evicting() {
    let d = dir_with(StoreConfig {
        shards: 4,
        ..Default::default()
    });
    mount(&d, "s1", "o1", 64 * 100);
    for i in 0..100 {
        put(&d, id(Some("other"), None, &format!("k{i}")), 64, T0);
    }
    d.tenants().set_limits("acme", Some(64), None);
    let e = d.put_start(&req(acme("big"), 65), T0 + 5000).unwrap_err();
    assert_eq!(e.code(), "QUOTA_EXCEEDED");
    assert_eq!(d.stats().objects, 100, "nothing was evicted to make room");
    assert_eq!(figures(&d, "other"), (6400, 100, 0, 0));
}

#[test]
fn eviction_and_unmount_give_the_usage_back_eviction_once_journaled() {
    let d = dir_with(StoreConfig {
        shards: 4,
        ..Default::default()
    });
    mount(&d, "s1", "o1", 64 * 100);
    mount(&d, "s2", "o2", 64 * 100);
    for i in 0..150 {
        put(&d, acme(&format!("k{i}")), 64, T0);
    }
    assert_eq!(figures(&d, "acme"), (150 * 64, 150, 0, 0));
    d.tenants().set_limits("acme", Some(150 * 64), None);
    let report = d.evict(64 * 10, T0 + 1000, "test");
    let evicted = report.evicted_objects;
    assert!(evicted > 0);
    let left = 150 - evicted;
    assert_eq!(figures(&d, "acme"), (left * 64, left, 0, 0));
    // Until the eviction is journaled a crash would replay the evicted objects back: their
    // quota stays taken, as a remove's does.
    let f = d.tenants().figures("acme");
    assert_eq!(
        (f.removing_bytes, f.removing_objects),
        (evicted * 64, evicted)
    );
    let e = d.put_start(&req(acme("new"), 64), T0 + 1000).unwrap_err();
    assert_eq!(e.code(), "QUOTA_EXCEEDED");
    let mut taken = d.removals().take();
    let journaled: usize = taken.by_owner.values().map(Vec::len).sum();
    assert_eq!(
        journaled as u64, evicted,
        "every evicted put id is journaled"
    );
    taken.settle_refunds();
    put(&d, acme("new"), 64, T0 + 1000);
    let left = left + 1;
    assert_eq!(figures(&d, "acme"), (left * 64, left, 0, 0));
    d.unmount_segment("s1", true, T0 + 1000).unwrap();
    let left = d.stats().objects;
    assert_eq!(figures(&d, "acme"), (left * 64, left, 0, 0));
}

#[test]
fn sixteen_concurrent_writers_of_one_tenant_never_exceed_its_quota() {
    let d = Arc::new(dir());
    mount(&d, "s1", "o1", 64 << 20);
    d.tenants().set_limits("acme", Some(100_000), None);
    let writers: Vec<_> = (0..16)
        .map(|w| {
            let d = d.clone();
            std::thread::spawn(move || {
                for i in 0..200 {
                    let key = acme(&format!("w{w}-{i}"));
                    if let Ok(s) = d.put_start(&req(key.clone(), 1000), T0) {
                        let f = d.tenants().figures("acme");
                        assert!(f.used_bytes + f.pending_bytes <= 100_000, "{f:?}");
                        let end = PutEndRequest {
                            id: key,
                            put_id: s.put_id,
                        };
                        d.put_end(&end, T0).unwrap();
                    }
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    assert_eq!(figures(&d, "acme"), (100_000, 100, 0, 0));
}

#[test]
fn a_write_that_needs_room_evicts_only_its_own_tenants_objects() {
    let d = dir_with(StoreConfig {
        shards: 4,
        ..Default::default()
    });
    mount(&d, "s1", "o1", 64 * 100);
    for i in 0..90 {
        put(&d, id(Some("other"), None, &format!("k{i}")), 64, T0);
    }
    for i in 0..10 {
        put(&d, acme(&format!("old{i}")), 64, T0);
    }
    // Full: acme's put evicts acme's own objects, however recently the others were read.
    put(&d, acme("new"), 64, T0 + 5000);
    assert_eq!(figures(&d, "other"), (90 * 64, 90, 0, 0));
    assert!(d.exist(&acme("new"), T0 + 5000).unwrap());
    // A tenant with nothing of its own to evict is refused, and takes nothing from others.
    let e = d
        .put_start(&req(id(Some("third"), None, "x"), 64 * 20), T0 + 6000)
        .unwrap_err();
    assert_eq!(e.code(), "OUT_OF_SPACE");
    assert_eq!(figures(&d, "other"), (90 * 64, 90, 0, 0));
}

#[test]
fn watermark_eviction_takes_from_the_tenant_above_its_share_not_the_least_recent() {
    let d = dir_with(StoreConfig {
        shards: 4,
        ..Default::default()
    });
    mount(&d, "s1", "o1", 64 * 1000);
    // The quiet tenant's objects are the oldest: plain LRU would evict them first.
    for i in 0..100 {
        put(&d, id(Some("quiet"), None, &format!("k{i}")), 64, T0);
    }
    for i in 0..870 {
        put(&d, acme(&format!("k{i}")), 64, T0 + 10_000);
    }
    let r = d.maybe_evict(T0 + 20_000);
    assert!(r.evicted_objects > 0, "{r:?}");
    assert_eq!(figures(&d, "quiet"), (6400, 100, 0, 0), "{r:?}");
    let left = 870 - r.evicted_objects;
    assert_eq!(figures(&d, "acme"), (left * 64, left, 0, 0));
}

#[test]
fn a_tenants_puts_in_progress_are_bounded_and_other_tenants_write_on() {
    let d = dir_with(StoreConfig {
        max_inflight_bytes_per_tenant: 1000,
        ..Default::default()
    });
    mount(&d, "s1", "o1", 1 << 20);
    d.put_start(&req(acme("a"), 600), T0).unwrap();
    d.put_start(&req(acme("b"), 400), T0).unwrap();
    let e = d.put_start(&req(acme("c"), 1), T0).unwrap_err();
    assert_eq!(e.code(), "BUSY");
    assert!(!d.exist(&acme("c"), T0).unwrap());
    put(&d, id(Some("other"), None, "x"), 5000, T0);
    assert_eq!(figures(&d, "acme"), (0, 0, 1000, 2));
}

#[test]
fn a_removes_quota_is_held_until_the_remove_is_journaled() {
    let d = dir();
    mount(&d, "s1", "o1", 1 << 20);
    d.tenants().set_limits("acme", Some(1000), None);
    put(&d, acme("a"), 600, T0);
    d.remove(&acme("a"), false, T0).unwrap();
    let f = d.tenants().figures("acme");
    assert_eq!(
        (
            f.used_bytes,
            f.used_objects,
            f.removing_bytes,
            f.removing_objects
        ),
        (0, 0, 600, 1)
    );
    // Until the remove is journaled, a crash would replay the object back: its quota stays
    // taken, so the tenant cannot end up above its limit.
    let e = d.put_start(&req(acme("b"), 500), T0).unwrap_err();
    assert_eq!(e.code(), "QUOTA_EXCEEDED");
    let taken = d.removals().take();
    assert_eq!(taken.refunds.len(), 1);
    d.removals().restore(taken);
    assert!(
        d.put_start(&req(acme("b"), 500), T0).is_err(),
        "a failed journal write keeps it held"
    );
    let mut taken = d.removals().take();
    assert_eq!(taken.by_owner["o1"].len(), 1, "restored with its put id");
    taken.settle_refunds();
    let f = d.tenants().figures("acme");
    assert_eq!((f.removing_bytes, f.removing_objects), (0, 0));
    put(&d, acme("b"), 500, T0);
    assert_eq!(figures(&d, "acme"), (500, 1, 0, 0));
}

#[test]
fn a_tenant_without_a_policy_is_held_to_the_default_limits() {
    let d = dir();
    mount(&d, "s1", "o1", 1 << 20);
    put(&d, acme("before"), 100, T0);
    d.tenants().set_limits("policied", Some(10_000), None);
    d.tenants().set_default_limits(Some(1000), Some(3));
    // A tenant seen before the default, one seen after, and one with its own policy.
    let f = d.tenants().figures("acme");
    assert_eq!(
        (f.max_bytes, f.max_objects, f.has_policy),
        (Some(1000), Some(3), false)
    );
    let fresh = d.tenants().figures("fresh");
    assert_eq!((fresh.max_bytes, fresh.max_objects), (Some(1000), Some(3)));
    let e = d.put_start(&req(acme("big"), 901), T0).unwrap_err();
    assert_eq!(e.code(), "QUOTA_EXCEEDED");
    put(&d, id(Some("fresh"), None, "a"), 1000, T0);
    let e = d
        .put_start(&req(id(Some("fresh"), None, "b"), 1), T0)
        .unwrap_err();
    assert_eq!(
        e.code(),
        "QUOTA_EXCEEDED",
        "a tenant first seen after the default"
    );
    put(&d, id(Some("policied"), None, "a"), 5000, T0);
    let p = d.tenants().figures("policied");
    assert_eq!(
        (p.max_bytes, p.max_objects, p.has_policy),
        (Some(10_000), None, true)
    );
    // A policy set later replaces the default for its tenant only.
    d.tenants().set_limits("acme", None, None);
    put(&d, acme("big"), 901, T0);
    d.tenants().set_default_limits(None, None);
    put(&d, id(Some("fresh"), None, "b"), 1, T0);
}
