//! Stale put pre-emption and release, lease expiry and the lease cap, unmount and owner drop.

mod common;

use common::*;
use crescent_store::StoreConfig;
use crescent_wire::store::PutEndRequest;

#[test]
fn stale_put_is_preempted_and_its_space_released_later() {
    let d = dir();
    mount(&d, "s1", "o1", 1 << 20);
    let k = id(None, None, "k");
    let first = d.put_start(&req(k.clone(), 100), T0).unwrap();
    // Within the discard timeout: busy.
    assert_eq!(
        d.put_start(&req(k.clone(), 100), T0 + 29_999)
            .unwrap_err()
            .code(),
        "BUSY"
    );
    // After it: pre-empted by the new put; the old slot is still reserved.
    let second = d.put_start(&req(k.clone(), 100), T0 + 30_000).unwrap();
    assert!(second.put_id > first.put_id);
    assert_ne!(second.replicas[0].offset, first.replicas[0].offset);
    assert_eq!(d.stats().bytes_used, 256);
    let e = d
        .put_end(
            &PutEndRequest {
                id: k.clone(),
                put_id: first.put_id,
            },
            T0 + 30_001,
        )
        .unwrap_err();
    assert_eq!(e.code(), "NOT_FOUND");
    d.put_end(
        &PutEndRequest {
            id: k.clone(),
            put_id: second.put_id,
        },
        T0 + 30_001,
    )
    .unwrap();
    // Released at start + release timeout (600 s), not before.
    assert_eq!(d.tick(T0 + 599_000).deferred_released, 0);
    assert_eq!(d.stats().bytes_used, 256);
    assert_eq!(d.tick(T0 + 600_000).deferred_released, 1);
    assert_eq!(d.stats().bytes_used, 128);
    assert_eq!(d.get(&k, T0 + 600_000).unwrap().size, 100);
}

#[test]
fn abandoned_put_is_reclaimed_by_tick() {
    let d = dir();
    mount(&d, "s1", "o1", 1 << 20);
    let k = id(None, None, "k");
    d.put_start(&req(k.clone(), 100), T0).unwrap();
    assert_eq!(d.tick(T0 + 599_999).stale_puts_released, 0);
    assert_eq!(d.tick(T0 + 600_000).stale_puts_released, 1);
    assert_eq!(d.stats().objects, 0);
    assert_eq!(d.stats().bytes_used, 0);
    assert_eq!(d.get(&k, T0 + 600_000).unwrap_err().code(), "NOT_FOUND");
}

#[test]
fn leases_expire_and_renewal_chains_are_capped() {
    let d = dir();
    mount(&d, "s1", "o1", 1 << 20);
    let k = id(None, None, "k");
    put(&d, k.clone(), 100, T0);
    // Renew every 5 s: the chain never protects past first grant + 60 s.
    let mut last = 0;
    let mut t = T0;
    while t <= T0 + 65_000 {
        last = d.get(&k, t).unwrap().lease_until_ms;
        assert!(
            last <= T0 + 60_000 + 100,
            "lease {last} past the cap at {t}"
        );
        t += 5_000;
    }
    assert_eq!(last, T0 + 60_000);
    // One TTL of cool-down after the cap, then a new chain.
    let g = d.get(&k, T0 + 70_000).unwrap();
    assert_eq!(g.lease_until_ms, T0 + 80_000);
    d.remove(&k, true, T0 + 80_000).unwrap();
    put(&d, k.clone(), 100, T0);
    for t in (0..=60_000).step_by(5_000) {
        d.get(&k, T0 + t).unwrap();
    }
    // At the cap + cool-down, a remove goes through even though reads never stopped.
    assert_eq!(d.remove(&k, false, T0 + 59_000).unwrap_err().code(), "BUSY");
    d.remove(&k, false, T0 + 61_000).unwrap();
    assert!(d.metrics().count("leases", &["capped"]) > 0);
    // After the cool-down, a new chain starts.
    put(&d, k.clone(), 100, T0 + 90_000);
    let g = d.get(&k, T0 + 90_000).unwrap();
    assert_eq!(g.lease_until_ms, T0 + 100_000);
    let rep = d.tick(T0 + 100_000);
    assert!(rep.leases_expired >= 1);
    assert!(d.metrics().count("leases", &["expired"]) >= 1);
}

#[test]
fn unmount_refuses_leased_unless_forced_and_drops_objects() {
    let d = dir();
    mount(&d, "s1", "o1", 1 << 20);
    mount(&d, "s2", "o2", 1 << 20);
    let mut r = req(id(None, None, "both"), 100);
    r.replicas = 2;
    put_req(&d, r, T0);
    let mut only1 = req(id(None, None, "only1"), 100);
    only1.placement = crescent_wire::store::Placement::LocalFirst;
    only1.preferred_segment = Some("s1".into());
    put_req(&d, only1, T0);
    d.get(&id(None, None, "only1"), T0).unwrap();
    assert_eq!(
        d.unmount_segment("s1", false, T0 + 1).unwrap_err().code(),
        "BUSY"
    );
    assert_eq!(d.stats().segments, 2);
    assert_eq!(
        d.unmount_segment("nope", false, T0).unwrap_err().code(),
        "NOT_FOUND"
    );
    let rep = d.unmount_segment("s1", false, T0 + 20_000).unwrap();
    assert_eq!(
        (rep.segments, rep.objects_dropped, rep.replicas_dropped),
        (1, 1, 2)
    );
    assert!(!d.exist(&id(None, None, "only1"), T0).unwrap());
    let g = d.get(&id(None, None, "both"), T0 + 20_000).unwrap();
    assert_eq!(g.replicas.len(), 1);
    assert_eq!(g.replicas[0].segment_id, "s2");
    // Owner expiry: forced, leases notwithstanding.
    let rep = d.drop_owner("o2", T0 + 20_001);
    assert_eq!((rep.segments, rep.objects_dropped), (1, 1));
    assert_eq!(d.stats().objects, 0);
    assert_eq!(d.stats().bytes_capacity, 0);
    assert_eq!(d.metrics().count("dropped", &["owner_expired"]), 1);
    // Re-mount works on a fresh table slot.
    mount(&d, "s1", "o1", 1 << 20);
    put(&d, id(None, None, "again"), 10, T0 + 20_002);
}

#[test]
fn mount_is_idempotent_and_conflicts_on_other_parameters() {
    let d = dir_with(StoreConfig::default());
    mount(&d, "s1", "o1", 1 << 20);
    let spec = crescent_store::MountSpec {
        segment_id: "s1".into(),
        owner_id: "o1".into(),
        endpoint: Some("127.0.0.1:7000".into()),
        transport: crescent_wire::segments::TransportKind::Tcp,
        size: 1 << 20,
    };
    assert!(!d.mount_segment(spec.clone(), T0).unwrap());
    let other = crescent_store::MountSpec {
        size: 1 << 21,
        ..spec.clone()
    };
    assert_eq!(d.mount_segment(other, T0).unwrap_err().code(), "CONFLICT");
    let bad = crescent_store::MountSpec {
        segment_id: String::new(),
        ..spec
    };
    assert_eq!(
        d.mount_segment(bad, T0).unwrap_err().code(),
        "INVALID_ARGUMENT"
    );
    assert_eq!(d.stats().bytes_capacity, 1 << 20);
}
