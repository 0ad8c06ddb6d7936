//! Eviction: frees the least recently used unprotected objects, never leased, hard-pinned,
//! incomplete or group-guarded ones; soft-pinned objects go last.

mod common;

use std::num::NonZeroU32;
use std::sync::Arc;

use common::*;
use crescent_store::StoreConfig;

const SEG: u64 = 64 * 1000; // 1000 slots of 64 bytes

fn full_dir() -> crescent_store::ObjectDirectory {
    let d = dir_with(StoreConfig {
        shards: 8,
        ..Default::default()
    });
    mount(&d, "s1", "o1", SEG);
    d
}

#[test]
fn below_watermark_nothing_happens() {
    let d = full_dir();
    for i in 0..800 {
        put(&d, id(None, None, &format!("k{i}")), 64, T0);
    }
    assert_eq!(d.maybe_evict(T0).evicted_objects, 0);
}

#[test]
fn evicts_least_recently_used_first() {
    let d = full_dir();
    for i in 0..950 {
        put(
            &d,
            id(None, None, &format!("k{i:03}")),
            64,
            T0 + i as i64 * 1000,
        );
    }
    let r = d.maybe_evict(T0 + 2_000_000);
    assert!(r.evicted_bytes >= 50 * 64, "{r:?}");
    assert!(r.evicted_objects <= 150, "{r:?}");
    // The newest half is untouched.
    for i in 475..950 {
        assert!(
            d.exist(&id(None, None, &format!("k{i:03}")), T0).unwrap(),
            "k{i:03}"
        );
    }
    assert_eq!(d.stats().objects, 950 - r.evicted_objects);
    assert_eq!(d.stats().bytes_used, (950 - r.evicted_objects) * 64);
    assert_eq!(
        d.metrics().count("evictions", &["watermark"]),
        r.evicted_objects
    );
}

#[test]
fn protected_objects_are_never_evicted_and_soft_pins_go_last() {
    let d = full_dir();
    let guarded = NonZeroU32::new(7).unwrap();
    d.set_group_guard(Some(Arc::new(move |g| g == guarded)));
    let t = T0 + 1000;
    // 190 each: leased, hard-pinned, incomplete, group-guarded, soft-pinned; then 10 plain.
    for i in 0..190 {
        put(&d, id(Some("leased"), None, &format!("{i}")), 64, T0);
        d.get(&id(Some("leased"), None, &format!("{i}")), t)
            .unwrap();
        let mut r = req(id(Some("hard"), None, &format!("{i}")), 64);
        r.hard_pin = true;
        put_req(&d, r, T0);
        d.put_start(&req(id(Some("writing"), None, &format!("{i}")), 64), t)
            .unwrap();
        let r = req(id(Some("group"), None, &format!("{i}")), 64);
        let s = d.put_start_in_group(&r, Some(guarded), T0).unwrap();
        d.put_end(
            &crescent_wire::store::PutEndRequest {
                id: r.id.clone(),
                put_id: s.put_id,
            },
            T0,
        )
        .unwrap();
        let mut r = req(id(Some("soft"), None, &format!("{i}")), 64);
        r.soft_pin_secs = Some(3600);
        put_req(&d, r, T0);
    }
    for i in 0..10 {
        put(&d, id(Some("plain"), None, &format!("{i}")), 64, t);
    }
    // Target 50 slots: 10 plain go first, then 40 soft-pinned.
    let r = d.maybe_evict(t + 1);
    assert_eq!(r.evicted_objects, 50, "{r:?}");
    assert_eq!(
        (
            r.skipped_leased,
            r.skipped_hard_pinned,
            r.skipped_incomplete,
            r.skipped_group_guarded
        ),
        (190, 190, 190, 190)
    );
    for i in 0..10 {
        assert!(!d
            .exist(&id(Some("plain"), None, &format!("{i}")), t)
            .unwrap());
    }
    for tenant in ["leased", "hard", "group"] {
        for i in 0..190 {
            assert!(
                d.exist(&id(Some(tenant), None, &format!("{i}")), t)
                    .unwrap(),
                "{tenant}/{i}"
            );
        }
    }
    for i in 0..190 {
        let e = d
            .get(&id(Some("writing"), None, &format!("{i}")), t)
            .unwrap_err();
        assert_eq!(e.code(), "NOT_READY");
    }
    let soft_left = (0..190)
        .filter(|i| {
            d.exist(&id(Some("soft"), None, &format!("{i}")), t)
                .unwrap()
        })
        .count();
    assert_eq!(soft_left, 150);
    assert_eq!(d.metrics().count("eviction_skips", &["leased"]), 190);
}

#[test]
fn allocation_failure_evicts_then_retries_once() {
    let d = full_dir();
    for i in 0..1000 {
        put(&d, id(None, None, &format!("k{i}")), 64, T0);
    }
    assert_eq!(d.stats().bytes_used, SEG);
    put(&d, id(None, None, "new"), 64, T0 + 1000);
    assert!(d.exist(&id(None, None, "new"), T0).unwrap());
    assert!(d.metrics().count("evictions", &["allocation"]) >= 1);
}

#[test]
fn futile_allocation_eviction_backs_off() {
    let d = full_dir();
    for i in 0..1000 {
        let mut r = req(id(None, None, &format!("k{i}")), 64);
        r.hard_pin = true;
        put_req(&d, r, T0);
    }
    for _ in 0..3 {
        let e = d.put_start(&req(id(None, None, "x"), 64), T0).unwrap_err();
        assert_eq!(e.code(), "OUT_OF_SPACE");
    }
    // One sweep counted the pinned objects once; the next two puts did not sweep again.
    assert_eq!(d.metrics().count("eviction_skips", &["hard_pinned"]), 1000);
    assert_eq!(d.stats().objects, 1000);
}
