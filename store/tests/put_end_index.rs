//! put_end finds its put through the put id index (no key search): the index must never end a
//! put under another key or scope, and every way a put stops being in progress (ended,
//! revoked, pre-empted, reclaimed, removed, its segment unmounted) must leave it.

mod common;

use common::*;
use crescent_store::StoreConfig;
use crescent_wire::store::PutEndRequest;

fn end(id: &crescent_wire::store::ObjectId, put_id: u64) -> PutEndRequest {
    PutEndRequest {
        id: id.clone(),
        put_id,
    }
}

#[test]
fn a_put_id_ends_only_its_own_key_and_scope() {
    let d = dir();
    mount(&d, "s1", "o1", 1 << 20);
    let a = id(None, None, "a");
    let b = id(None, None, "b");
    let a_other_tenant = id(Some("t2"), None, "a");
    let a_domain = id(None, Some("d1"), "a");
    let sa = d.put_start(&req(a.clone(), 100), T0).unwrap();
    let sb = d.put_start(&req(b.clone(), 100), T0).unwrap();
    assert_eq!(d.stats().puts_in_progress, 2);

    // Another key's put id, and the same key under another scope: unknown, nothing ended.
    for wrong in [
        end(&b, sa.put_id),
        end(&a_other_tenant, sa.put_id),
        end(&a_domain, sa.put_id),
    ] {
        assert_eq!(d.put_end(&wrong, T0).unwrap_err().code(), "NOT_FOUND");
    }
    assert_eq!(d.stats().puts_in_progress, 2);
    assert_eq!(d.get(&a, T0).unwrap_err().code(), "NOT_READY");

    d.put_end(&end(&a, sa.put_id), T0).unwrap();
    assert_eq!(d.get(&a, T0).unwrap().put_id, sa.put_id);
    // Ended: a repeat is CONFLICT (found through the key index), not a second completion.
    assert_eq!(
        d.put_end(&end(&a, sa.put_id), T0).unwrap_err().code(),
        "CONFLICT"
    );
    d.put_revoke(&end(&b, sb.put_id), T0).unwrap();
    assert_eq!(d.stats().puts_in_progress, 0);
    assert_eq!(
        d.put_end(&end(&b, sb.put_id), T0).unwrap_err().code(),
        "NOT_FOUND"
    );
}

#[test]
fn a_preempted_put_cannot_be_ended_and_its_successor_can() {
    let d = dir_with(StoreConfig {
        discard_timeout_ms: 1_000,
        release_timeout_ms: 5_000,
        ..StoreConfig::default()
    });
    mount(&d, "s1", "o1", 1 << 20);
    let k = id(None, None, "k");
    let old = d.put_start(&req(k.clone(), 100), T0).unwrap();
    assert_eq!(
        d.put_start(&req(k.clone(), 100), T0 + 10)
            .unwrap_err()
            .code(),
        "BUSY"
    );
    let new = d.put_start(&req(k.clone(), 100), T0 + 2_000).unwrap();
    assert_ne!(old.put_id, new.put_id);
    assert_eq!(d.stats().puts_in_progress, 1);
    assert_eq!(
        d.put_end(&end(&k, old.put_id), T0 + 2_000)
            .unwrap_err()
            .code(),
        "NOT_FOUND"
    );
    d.put_end(&end(&k, new.put_id), T0 + 2_000).unwrap();
    assert_eq!(d.stats().puts_in_progress, 0);
    assert_eq!(d.get(&k, T0 + 2_000).unwrap().put_id, new.put_id);
}

#[test]
fn stale_removed_and_unmounted_puts_leave_the_index() {
    let d = dir_with(StoreConfig {
        discard_timeout_ms: 1_000,
        release_timeout_ms: 5_000,
        ..StoreConfig::default()
    });
    mount(&d, "s1", "o1", 1 << 20);
    mount(&d, "s2", "o2", 1 << 20);
    let stale = id(None, None, "stale");
    let removed = id(None, None, "removed");
    let s_stale = d.put_start(&req(stale.clone(), 100), T0).unwrap();
    let s_removed = d.put_start(&req(removed.clone(), 100), T0).unwrap();
    assert_eq!(d.stats().puts_in_progress, 2);

    d.remove(&removed, true, T0).unwrap();
    assert_eq!(d.stats().puts_in_progress, 1);
    assert_eq!(
        d.put_end(&end(&removed, s_removed.put_id), T0)
            .unwrap_err()
            .code(),
        "NOT_FOUND"
    );

    // Past the release timeout, housekeeping reclaims the stale put.
    d.tick(T0 + 6_000);
    assert_eq!(d.stats().puts_in_progress, 0);
    assert_eq!(
        d.put_end(&end(&stale, s_stale.put_id), T0 + 6_000)
            .unwrap_err()
            .code(),
        "NOT_FOUND"
    );

    // A put whose only replica was on an unmounted segment is dropped with it.
    let on_s2 = id(None, None, "on-s2");
    let mut r = req(on_s2.clone(), 100);
    r.placement = crescent_wire::store::Placement::LocalFirst;
    r.preferred_segment = Some("s2".into());
    let s = d.put_start(&r, T0 + 6_000).unwrap();
    assert_eq!(s.replicas[0].segment_id, "s2");
    d.unmount_segment("s2", false, T0 + 6_000).unwrap();
    assert_eq!(d.stats().puts_in_progress, 0);
    assert_eq!(
        d.put_end(&end(&on_s2, s.put_id), T0 + 6_000)
            .unwrap_err()
            .code(),
        "NOT_FOUND"
    );
}
