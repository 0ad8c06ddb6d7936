use std::sync::Arc;

use super::*;
use crate::tenants::Reservation;

fn create(bytes: u64) -> Reservation {
    Reservation {
        bytes,
        objects: 1,
        inflight: bytes,
    }
}

fn ledger_with_limits(max_bytes: u64, max_objects: u64) -> TenantLedger {
    let ledger = TenantLedger::default();
    ledger.set_limits("t", Some(max_bytes), Some(max_objects));
    ledger
}

#[test]
fn a_closed_cap_refuses_allowance_short_until_raised() {
    let ledger = ledger_with_limits(1000, 10);
    ledger.join_mesh();
    let u = ledger.usage("t");
    let e = u.reserve(10, create(10), 0).unwrap_err();
    assert_eq!(e.code(), "UNAVAILABLE");
    assert!(matches!(e, crate::StoreError::AllowanceShort { .. }), "{e}");
    assert_eq!(ledger.cap("t"), Some((0, 0)));
    ledger.raise_cap("t", Some((100, 2)));
    u.reserve(60, create(60), 0).unwrap();
    let e = u.reserve(60, create(60), 0).unwrap_err();
    assert!(matches!(e, crate::StoreError::AllowanceShort { .. }), "{e}");
    ledger.raise_cap("t", None);
    u.reserve(60, create(60), 0).unwrap();
    assert_eq!(ledger.cap("t"), None);
}

#[test]
fn the_limit_refuses_before_the_cap() {
    let ledger = ledger_with_limits(100, 10);
    ledger.join_mesh();
    ledger.raise_cap("t", Some((1000, 10)));
    let e = ledger.usage("t").reserve(200, create(200), 0).unwrap_err();
    assert_eq!(e.code(), "QUOTA_EXCEEDED");
}

#[test]
fn a_lowered_cap_is_never_below_what_is_held() {
    let ledger = ledger_with_limits(1000, 10);
    let u = ledger.usage("t");
    let r = u.reserve(30, create(30), 0).unwrap();
    u.commit(r, 30, None);
    u.reserve(20, create(20), 0).unwrap();
    assert_eq!(ledger.holdings("t"), (50, 2));
    assert_eq!(ledger.lower_cap("t", (0, 0)), (50, 2));
    assert_eq!(ledger.lower_cap("t", (100, 1)), (50, 2), "never raised");
    ledger.raise_cap("t", Some((70, 3)));
    assert_eq!(ledger.lower_cap("t", (5, 0)), (55, 2));
}

#[test]
fn grants_count_as_used_at_the_home() {
    let ledger = ledger_with_limits(1000, 10);
    let u = ledger.usage("t");
    let r = u.reserve(300, create(300), 0).unwrap();
    u.commit(r, 300, None);
    assert_eq!(ledger.grant("t", (500, 4)), (500, 4));
    assert_eq!(
        ledger.grant("t", (500, 4)),
        (200, 4),
        "what the limit leaves"
    );
    assert_eq!(ledger.grant("t", (1, 1)), (0, 1));
    let e = u.reserve(1, create(1), 0).unwrap_err();
    assert_eq!(e.code(), "QUOTA_EXCEEDED");
    assert!(e.to_string().contains("held by other clusters"), "{e}");
    ledger.sub_granted("t", (100, 1));
    u.reserve(100, create(100), 0).unwrap();
    let f = ledger.figures("t");
    assert_eq!((f.granted_bytes, f.granted_objects), (600, 8));
    assert_eq!((f.pending_bytes, f.pending_objects), (100, 1));
}

#[test]
fn a_reported_holding_is_counted_even_past_the_limit() {
    let ledger = ledger_with_limits(100, 10);
    ledger.add_granted("t", (150, 1));
    assert_eq!(ledger.grant("t", (10, 1)), (0, 1));
    let e = ledger.usage("t").reserve(1, create(1), 0).unwrap_err();
    assert_eq!(e.code(), "QUOTA_EXCEEDED");
    ledger.sub_granted("t", (1000, 1000));
    assert_eq!(ledger.figures("t").granted_bytes, 0, "saturates");
}

#[test]
fn what_has_no_limit_is_granted_in_full() {
    let ledger = TenantLedger::default();
    ledger.set_limits("t", Some(100), None);
    assert_eq!(ledger.grant("t", (500, 7)), (100, 7));
}

#[test]
fn concurrent_puts_and_grants_never_pass_the_limit() {
    let ledger = Arc::new(ledger_with_limits(10_000, u64::MAX - 1));
    let u = ledger.usage("t");
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let ledger = ledger.clone();
            let u = u.clone();
            std::thread::spawn(move || {
                let mut mine = 0;
                for _ in 0..2000 {
                    if i % 2 == 0 {
                        if let Ok(r) = u.reserve(7, create(7), 0) {
                            u.commit(r, 7, None);
                            mine += 7;
                        }
                    } else {
                        mine += ledger.grant("t", (13, 0)).0;
                    }
                }
                mine
            })
        })
        .collect();
    let total: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    let f = ledger.figures("t");
    assert_eq!(total, f.used_bytes + f.granted_bytes);
    assert!(total <= 10_000, "{total}");
    assert!(total > 10_000 - 13, "the limit was reached: {total}");
}

#[test]
fn concurrent_puts_never_pass_a_lowered_cap() {
    let ledger = Arc::new(ledger_with_limits(u64::MAX - 1, u64::MAX - 1));
    let u = ledger.usage("t");
    let writers: Vec<_> = (0..3)
        .map(|_| {
            let u = u.clone();
            std::thread::spawn(move || {
                for _ in 0..3000 {
                    if let Ok(r) = u.reserve(3, create(3), 0) {
                        u.commit(r, 3, None);
                    }
                }
            })
        })
        .collect();
    let mut reported = Vec::new();
    for _ in 0..200 {
        reported.push(ledger.lower_cap("t", (30, 10)).0);
        std::thread::yield_now();
    }
    for w in writers {
        w.join().unwrap();
    }
    let final_cap = ledger.lower_cap("t", (0, 0)).0;
    assert!(ledger.figures("t").used_bytes <= final_cap);
    assert!(
        reported.windows(2).all(|w| w[0] <= w[1] + 30),
        "{reported:?}"
    );
}

#[test]
fn in_a_mesh_only_tenants_with_limits_are_capped() {
    let ledger = TenantLedger::default();
    ledger.set_limits("limited", Some(1000), None);
    ledger.join_mesh();
    assert_eq!(ledger.cap("limited"), Some((0, 0)));
    assert_eq!(ledger.cap("free"), None, "no limit: no cap");
    ledger.set_limits("later", None, Some(5));
    assert_eq!(ledger.cap("later"), Some((0, 0)), "a policy set later caps");
    ledger.set_default_limits(Some(10), None);
    assert_eq!(ledger.cap("free"), Some((0, 0)), "a finite default caps");
    assert_eq!(
        ledger.cap("new"),
        Some((0, 0)),
        "and every tenant seen later"
    );
}
