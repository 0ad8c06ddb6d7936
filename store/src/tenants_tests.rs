use std::sync::Arc;

use super::*;

fn usage(max_bytes: u64, max_objects: u64) -> TenantUsage {
    TenantUsage::new(
        Arc::from("t"),
        (max_bytes, max_objects),
        (UNLIMITED, UNLIMITED),
    )
}

fn create(bytes: u64) -> Reservation {
    Reservation {
        bytes,
        objects: 1,
        inflight: bytes,
    }
}

#[test]
fn admission_counts_used_and_pending_against_the_limit() {
    let u = usage(100, UNLIMITED);
    u.reserve(60, create(60), 0).unwrap();
    let e = u.reserve(50, create(50), 0).unwrap_err();
    assert_eq!(e.code(), "QUOTA_EXCEEDED");
    u.commit(create(60), 60, None);
    assert_eq!((u.figures().used_bytes, u.figures().pending_bytes), (60, 0));
    u.reserve(40, create(40), 0).unwrap();
    assert!(u.reserve(1, create(1), 0).is_err());
    u.release(create(40));
    u.reserve(40, create(40), 0).unwrap();
}

#[test]
fn a_value_over_the_byte_limit_is_refused_whatever_the_usage() {
    let u = usage(100, UNLIMITED);
    let e = u.reserve(101, Reservation::default(), 0).unwrap_err();
    assert_eq!(e.code(), "QUOTA_EXCEEDED");
    assert!(e.to_string().contains("over the limit of 100 bytes"), "{e}");
}

#[test]
fn an_object_refusal_gives_back_the_bytes_it_took() {
    let u = usage(UNLIMITED, 1);
    u.reserve(10, create(10), 0).unwrap();
    assert!(u.reserve(10, create(10), 0).is_err());
    let f = u.figures();
    assert_eq!((f.pending_bytes, f.pending_objects), (10, 1));
}

#[test]
fn a_request_of_nothing_is_admitted_above_a_lowered_limit() {
    let u = usage(UNLIMITED, UNLIMITED);
    u.add_committed(500, 5);
    u.max_bytes.store(100, Ordering::Release);
    u.max_objects.store(1, Ordering::Release);
    u.reserve(50, Reservation::default(), 0).unwrap();
    assert!(u.reserve(50, create(50), 0).is_err());
}

#[test]
fn concurrent_reservations_never_pass_the_limit() {
    let u = Arc::new(usage(1000, UNLIMITED));
    let admitted: u64 = (0..16)
        .map(|_| {
            let u = u.clone();
            std::thread::spawn(move || {
                (0..200)
                    .filter(|_| u.reserve(7, create(7), 0).is_ok())
                    .count()
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap() as u64)
        .sum();
    assert!(admitted * 7 <= 1000, "{admitted} admitted");
    assert_eq!(u.figures().pending_bytes, admitted * 7);
    assert_eq!(admitted, 1000 / 7, "nothing is left unused at the end");
}

#[test]
fn limits_set_before_a_tenant_is_seen_apply_when_it_is() {
    let ledger = TenantLedger::default();
    ledger.set_limits("acme", Some(10), None);
    let interner = ScopeInterner::new(8);
    let scope = interner
        .intern(crate::identity::ScopeName::parse(Some("acme"), Some("d")).unwrap())
        .unwrap();
    let u = ledger.of_scope(scope, &interner);
    assert!(u.reserve(11, create(11), 0).is_err());
    assert_eq!(ledger.figures("acme").max_bytes, Some(10));
    assert_eq!(ledger.figures("nobody").max_bytes, None);
    assert_eq!(ledger.all().len(), 1);
}

#[test]
fn a_tenants_puts_in_progress_hold_at_most_the_inflight_bound() {
    let u = usage(UNLIMITED, UNLIMITED);
    // Alone, a put larger than the bound starts; with one in progress, nothing more.
    let big = u.reserve(300, create(300), 200).unwrap();
    let e = u.reserve(1, create(1), 200).unwrap_err();
    assert_eq!(e.code(), "BUSY");
    u.release(big);
    let a = u.reserve(150, create(150), 200).unwrap();
    assert!(u.reserve(60, create(60), 200).is_err());
    let b = u.reserve(50, create(50), 200).unwrap();
    u.commit(a, 150, None);
    u.release(b);
    assert_eq!(u.inflight_bytes.load(Ordering::Acquire), 0);
    assert_eq!(u.figures().pending_bytes, 0);
}
