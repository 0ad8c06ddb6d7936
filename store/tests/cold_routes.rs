//! The directory as the cold tier's route authority: exact lookup, route CAS, cold-only
//! entries surviving eviction / unmount / owner drop, allocator bytes freed after the CAS.

mod common;

use common::*;
use crescent_cold::driver::RouteAuthority;
use crescent_cold::route::{ActiveColdBacking, ObjectRoute};
use crescent_cold::ColdOpId;
use crescent_store::{cold_object_key, parse_cold_object_key, DirectoryRoutes};
use crescent_wire::store::ObjectId;

const SEG: u64 = 1 << 20;

fn op(n: u128) -> ColdOpId {
    ColdOpId::new(uuid::Uuid::from_u128(n))
}

fn with_checksum(key: &str, size: u64) -> crescent_wire::store::PutStartRequest {
    let mut r = req(ObjectId::new(key), size);
    r.checksum = Some(0xdead_beef);
    r
}

/// Attaches a pending backing and materializes it; returns the cold-only-capable route.
fn materialize(d: &crescent_store::ObjectDirectory, key: &str, n: u128) -> ObjectRoute {
    let id = ObjectId::new(key);
    let ck = cold_object_key(&id);
    let mut routes = DirectoryRoutes {
        directory: d,
        now_ms: T0,
    };
    let r = routes.lookup(&ck).expect("route");
    let e = r.expectation();
    let pending = r.attach_pending(&e, op(n), "crescentd", "dev0").unwrap();
    routes.compare_and_set(&ck, &e, pending.clone()).unwrap();
    let e = pending.expectation();
    let done = pending
        .materialize(
            &e,
            op(n),
            "objects/aa/x.cold",
            pending.length,
            pending.checksum,
        )
        .unwrap();
    routes.compare_and_set(&ck, &e, done.clone()).unwrap();
    assert_eq!(routes.lookup(&ck), Some(done.clone()));
    done
}

#[test]
fn cold_object_keys_round_trip() {
    for id in [
        ObjectId::new("a/b/c"),
        ObjectId::scoped(Some("t1"), None, "k"),
        ObjectId::scoped(Some("t1"), Some("d.x"), "k/with/slashes"),
    ] {
        assert_eq!(parse_cold_object_key(&cold_object_key(&id)).unwrap(), id);
    }
    assert!(parse_cold_object_key("no-slashes").is_err());
}

#[test]
fn stale_expectations_are_refused_and_content_is_fixed() {
    let d = dir();
    mount(&d, "s1", "o1", SEG);
    put_req(&d, with_checksum("k", 1000), T0);
    let id = ObjectId::new("k");
    let ck = cold_object_key(&id);
    let mut routes = DirectoryRoutes {
        directory: &d,
        now_ms: T0,
    };
    let r = routes.lookup(&ck).unwrap();
    assert_eq!(
        (r.length, r.checksum, r.replicas.len()),
        (1000, 0xdead_beef, 1)
    );
    let e = r.expectation();
    let pending = r.attach_pending(&e, op(1), "crescentd", "dev0").unwrap();
    routes.compare_and_set(&ck, &e, pending.clone()).unwrap();
    // The same expectation again is stale now.
    let again = r.attach_pending(&e, op(2), "crescentd", "dev0").unwrap();
    assert!(routes.compare_and_set(&ck, &e, again).is_err());
    // Content cannot change through a route CAS.
    let mut bad = pending.clone();
    bad.version += 1;
    bad.length = 7;
    assert!(routes
        .compare_and_set(&ck, &pending.expectation(), bad)
        .is_err());
}

#[test]
fn last_hot_replica_goes_only_to_a_materialized_backing_and_frees_after_the_cas() {
    let d = dir();
    mount(&d, "s1", "o1", SEG);
    put_req(&d, with_checksum("k", 1000), T0);
    let id = ObjectId::new("k");
    let ck = cold_object_key(&id);
    let used_before = d.stats().bytes_used;
    assert!(used_before > 0);
    let mut routes = DirectoryRoutes {
        directory: &d,
        now_ms: T0,
    };
    // Without a backing the authority refuses a route with no replica.
    let r = routes.lookup(&ck).unwrap();
    let mut bare = r.clone();
    bare.version += 1;
    bare.replicas.clear();
    assert!(routes.compare_and_set(&ck, &r.expectation(), bare).is_err());
    assert_eq!(d.stats().bytes_used, used_before);

    let done = materialize(&d, "k", 1);
    let replica = done.replicas[0].clone();
    let e = done.expectation();
    let cold_only = done
        .evict_hot(
            &e,
            &replica,
            Some(crescent_cold::device::ColdOpState::UsageCommitted),
            true,
        )
        .unwrap();
    routes.compare_and_set(&ck, &e, cold_only.clone()).unwrap();
    assert_eq!(d.stats().bytes_used, 0, "freed after the CAS");
    let now = routes.lookup(&ck).unwrap();
    assert!(now.is_cold_only());
    // A get of a cold-only object answers with no replica (the server restores it).
    let reply = d.get(&id, T0).unwrap();
    assert!(reply.replicas.is_empty());
    assert_eq!(reply.size, 1000);
}

#[test]
fn cold_only_entries_survive_eviction_unmount_and_owner_drop() {
    let d = dir();
    mount(&d, "s1", "o1", SEG);
    put_req(&d, with_checksum("cold", 1000), T0);
    put_req(&d, with_checksum("hot", 1000), T0);
    materialize(&d, "cold", 1);
    assert!(d
        .mark_cold_evictable(&ObjectId::new("cold"), op(1), true)
        .unwrap());
    let report = d.evict(u64::MAX, T0 + 60_000, "test");
    assert_eq!(report.evicted_objects, 2);
    assert_eq!(d.stats().bytes_used, 0);
    assert!(d.exist(&ObjectId::new("cold"), T0).unwrap());
    assert!(!d.exist(&ObjectId::new("hot"), T0).unwrap());
    let route = d.route(&ObjectId::new("cold")).unwrap().unwrap();
    assert!(route.is_cold_only());
    // Evicting again finds nothing to free in the cold-only entry.
    assert_eq!(d.evict(u64::MAX, T0 + 60_000, "test").evicted_objects, 0);
    d.unmount_segment("s1", true, T0 + 60_000).unwrap();
    d.drop_owner("o1", T0 + 60_000);
    assert!(d
        .route(&ObjectId::new("cold"))
        .unwrap()
        .unwrap()
        .is_cold_only());
}

#[test]
fn an_unmarked_backing_keeps_its_hot_replica_through_eviction_and_unmount_keeps_materialized() {
    let d = dir();
    mount(&d, "s1", "o1", SEG);
    put_req(&d, with_checksum("k", 1000), T0);
    materialize(&d, "k", 1);
    assert_eq!(d.evict(u64::MAX, T0 + 60_000, "test").evicted_objects, 0);
    assert_eq!(
        d.route(&ObjectId::new("k"))
            .unwrap()
            .unwrap()
            .replicas
            .len(),
        1
    );
    // The owner goes away: the materialized copy keeps the object readable.
    d.drop_owner("o1", T0 + 60_000);
    assert!(d
        .route(&ObjectId::new("k"))
        .unwrap()
        .unwrap()
        .is_cold_only());
}

#[test]
fn pending_backings_die_with_their_last_replica_and_overwrite_drops_the_backing() {
    let d = dir();
    mount(&d, "s1", "o1", SEG);
    put_req(&d, with_checksum("p", 1000), T0);
    let id = ObjectId::new("p");
    let ck = cold_object_key(&id);
    let mut routes = DirectoryRoutes {
        directory: &d,
        now_ms: T0,
    };
    let r = routes.lookup(&ck).unwrap();
    let e = r.expectation();
    routes
        .compare_and_set(&ck, &e, r.attach_pending(&e, op(9), "c", "dev0").unwrap())
        .unwrap();
    d.drop_owner("o1", T0);
    assert!(d.route(&id).unwrap().is_none());

    mount(&d, "s2", "o2", SEG);
    put_req(&d, with_checksum("o", 1000), T0);
    materialize(&d, "o", 3);
    let mut up = with_checksum("o", 2000);
    up.upsert = true;
    up.checksum = Some(1);
    assert!(d.allow_cold_drop(&ObjectId::new("o"), op(3), true).unwrap());
    put_req(&d, up, T0);
    let after = d.route(&ObjectId::new("o")).unwrap().unwrap();
    assert!(after.cold.is_none());
    assert_eq!(after.length, 2000);
}

#[test]
fn installed_cold_routes_are_readable_and_never_replace_newer_content() {
    let d = dir();
    let id = ObjectId::scoped(Some("t1"), None, "restored");
    let route = ObjectRoute {
        key: cold_object_key(&id),
        version: 4,
        content_op: 77,
        length: 4096,
        checksum: 5,
        replicas: Vec::new(),
        cold: Some(ActiveColdBacking::Materialized {
            cold_op: op(1),
            content_op: 77,
            owner: "crescentd".into(),
            device_id: "dev0".into(),
            locator: "objects/00/x.cold".into(),
            length: 4096,
            checksum: 5,
        }),
    };
    assert!(d.install_cold_route(&id, &route, T0).unwrap());
    assert!(!d.install_cold_route(&id, &route, T0).unwrap());
    assert_eq!(d.route(&id).unwrap(), Some(route.clone()));
    assert_eq!(d.get_size(&id).unwrap(), 4096);
    assert_eq!(d.cold_backed().len(), 1);
    // A pending route cannot be installed as cold-only.
    let mut pending = route.clone();
    pending.cold = None;
    assert!(d
        .install_cold_route(&ObjectId::new("x"), &pending, T0)
        .is_err());
}

#[test]
fn promotion_slots_join_a_cold_only_route_by_cas() {
    let d = dir();
    mount(&d, "s1", "o1", SEG);
    put_req(&d, with_checksum("k", 1000), T0);
    let done = materialize(&d, "k", 1);
    d.mark_cold_evictable(&ObjectId::new("k"), op(1), true)
        .unwrap();
    d.evict(u64::MAX, T0 + 60_000, "test");
    let id = ObjectId::new("k");
    let route = d.route(&id).unwrap().unwrap();
    assert!(route.is_cold_only());
    assert_ne!(route.version, done.version);
    let slot = d.allocate_promotion(1000, Some("s1")).unwrap();
    assert!(d.stats().bytes_used > 0);
    let e = route.expectation();
    let promoted = route.promote(&e, slot.replica.clone()).unwrap();
    d.compare_and_set_route(&id, &e, promoted, T0).unwrap();
    assert_eq!(d.get(&id, T0 + 60_000).unwrap().replicas.len(), 1);
    // A slot whose CAS lost is given back.
    let lost = d.allocate_promotion(1000, None).unwrap();
    let used = d.stats().bytes_used;
    d.free_promotion(&lost);
    assert!(d.stats().bytes_used < used);
}

#[test]
fn overwrite_and_delete_refuse_to_drop_an_unplanned_materialized_copy() {
    let d = dir();
    mount(&d, "s1", "o1", SEG);
    put_req(&d, with_checksum("k", 1000), T0);
    materialize(&d, "k", 1);
    let id = ObjectId::new("k");
    assert!(matches!(
        d.remove(&id, true, T0),
        Err(crescent_store::StoreError::ColdBacked { .. })
    ));
    let mut up = with_checksum("k", 2000);
    up.upsert = true;
    up.checksum = Some(9);
    let started = d.put_start(&up, T0).unwrap();
    let end = crescent_wire::store::PutEndRequest {
        id: id.clone(),
        put_id: started.put_id,
    };
    assert!(matches!(
        d.put_end(&end, T0),
        Err(crescent_store::StoreError::ColdBacked { .. })
    ));
    // A pending put still ends once the reclaim is planned (the server's order).
    assert!(d.allow_cold_drop(&id, op(1), true).unwrap());
    d.put_end(&end, T0).unwrap();
    assert!(d.route(&id).unwrap().unwrap().cold.is_none());
    assert!(!d.allow_cold_drop(&id, op(1), true).unwrap());
}
