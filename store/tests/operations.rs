//! Each operation and its errors.

mod common;

use common::*;
use crescent_store::{ErrorClass, StoreConfig};
use crescent_wire::store::{ItemResult, ListRequest, PutEndRequest, ReplicaState, MAX_BATCH};

#[test]
fn put_then_get_exist_size_remove() {
    let d = dir();
    mount(&d, "s1", "o1", 1 << 20);
    let k = id(None, None, "k");
    let reply = d.put_start(&req(k.clone(), 100), T0).unwrap();
    assert!(!reply.already_exists);
    assert_eq!(reply.replicas.len(), 1);
    let r = &reply.replicas[0];
    assert_eq!((r.segment_id.as_str(), r.owner_id.as_str()), ("s1", "o1"));
    assert_eq!((r.length, r.state), (100, ReplicaState::Processing));
    assert_eq!(r.offset % 64, 0);
    // In progress: not readable, not existing, size not ready.
    assert_eq!(d.get(&k, T0).unwrap_err().code(), "NOT_READY");
    assert!(!d.exist(&k, T0).unwrap());
    assert_eq!(d.get_size(&k).unwrap_err().code(), "NOT_READY");
    d.put_end(
        &PutEndRequest {
            id: k.clone(),
            put_id: reply.put_id,
        },
        T0,
    )
    .unwrap();
    let got = d.get(&k, T0).unwrap();
    assert_eq!(got.size, 100);
    assert_eq!(got.replicas[0].offset, r.offset);
    assert_eq!(got.replicas[0].state, ReplicaState::Complete);
    assert!(got.lease_until_ms >= T0 + 10_000);
    assert!(d.exist(&k, T0).unwrap());
    assert_eq!(d.get_size(&k).unwrap(), 100);
    assert_eq!(d.stats().bytes_used, 128);
    // Leased: remove refused, then allowed after the lease.
    let e = d.remove(&k, false, T0 + 1).unwrap_err();
    assert_eq!((e.code(), e.class()), ("BUSY", ErrorClass::Retryable));
    d.remove(&k, false, got.lease_until_ms).unwrap();
    assert!(!d.exist(&k, T0).unwrap());
    assert_eq!(d.get(&k, T0).unwrap_err().code(), "NOT_FOUND");
    assert_eq!(d.remove(&k, false, T0).unwrap_err().code(), "NOT_FOUND");
    assert_eq!(d.stats().bytes_used, 0);
    assert_eq!(d.stats().objects, 0);
}

#[test]
fn an_empty_value_is_an_object_in_every_path() {
    let d = dir();
    mount(&d, "s1", "o1", 1 << 20);
    let k = id(None, None, "empty");
    let reply = d.put_start(&req(k.clone(), 0), T0).unwrap();
    // One replica of length 0 on the smallest slot: placed (and replayable) like any object.
    assert_eq!(reply.replicas.len(), 1);
    assert_eq!(reply.replicas[0].length, 0);
    d.put_end(
        &PutEndRequest {
            id: k.clone(),
            put_id: reply.put_id,
        },
        T0,
    )
    .unwrap();
    let got = d.get(&k, T0).unwrap();
    assert_eq!((got.size, got.replicas.len()), (0, 1));
    assert!(d.exist(&k, T0).unwrap());
    assert_eq!(d.get_size(&k).unwrap(), 0);
    assert_eq!(d.stats().objects, 1);
    assert_eq!(d.stats().bytes_used, 64);
    let listed = d
        .list(&ListRequest {
            tenant: None,
            domain: None,
            prefix: String::new(),
            after: None,
            limit: Some(10),
        })
        .unwrap();
    assert_eq!(listed.keys.len(), 1);
    assert_eq!(
        (listed.keys[0].key.as_str(), listed.keys[0].size),
        ("empty", 0)
    );
    // The same empty content again is already there; other content is a conflict.
    assert!(d.put_start(&req(k.clone(), 0), T0).unwrap().already_exists);
    assert_eq!(
        d.put_start(&req(k.clone(), 5), T0).unwrap_err().code(),
        "CONFLICT"
    );
    // Batch forms.
    let b = id(None, None, "empty-b");
    let starts = d.batch_put_start(&[req(b.clone(), 0)], T0).unwrap();
    let ItemResult::Ok(started) = &starts[0] else {
        panic!("{starts:?}");
    };
    let ends = [PutEndRequest {
        id: b.clone(),
        put_id: started.put_id,
    }];
    assert!(matches!(
        d.batch_put_end(&ends, T0).unwrap()[0],
        ItemResult::Ok(())
    ));
    assert_eq!(
        d.batch_get_size(std::slice::from_ref(&b)).unwrap()[0],
        ItemResult::Ok(0)
    );
    assert_eq!(
        d.batch_exist(std::slice::from_ref(&b), T0).unwrap()[0],
        ItemResult::Ok(true)
    );
    // Removable (after the read leases end), and the slots come back.
    d.remove(&k, true, T0).unwrap();
    d.batch_remove(&[b], true, T0).unwrap();
    assert_eq!(d.stats().objects, 0);
    d.tick(T0 + 10_100);
    assert_eq!(d.stats().bytes_used, 0);
}

#[test]
fn bad_input_gets_stable_codes() {
    let d = dir_with(StoreConfig {
        max_object_bytes: 1000,
        ..Default::default()
    });
    mount(&d, "s1", "o1", 1 << 20);
    let cases = [
        req(id(None, None, ""), 1),
        req(id(None, None, &"k".repeat(4097)), 1),
        req(id(Some("bad tenant"), None, "k"), 1),
        req(id(None, Some("bad/domain"), "k"), 1),
        req(id(None, None, "k"), 1001),
    ];
    for r in &cases {
        let e = d.put_start(r, T0).unwrap_err();
        assert_eq!(
            (e.code(), e.class()),
            ("INVALID_ARGUMENT", ErrorClass::User),
            "{r:?}"
        );
    }
    let mut r = req(id(None, None, "k"), 10);
    r.replicas = 0;
    assert_eq!(d.put_start(&r, T0).unwrap_err().code(), "INVALID_ARGUMENT");
    // put_end of an unknown put, and of one already ended.
    let k = id(None, None, "k");
    let e = d
        .put_end(
            &PutEndRequest {
                id: k.clone(),
                put_id: 77,
            },
            T0,
        )
        .unwrap_err();
    assert_eq!(e.code(), "NOT_FOUND");
    let pid = put(&d, k.clone(), 10, T0);
    let e = d
        .put_end(
            &PutEndRequest {
                id: k.clone(),
                put_id: pid,
            },
            T0,
        )
        .unwrap_err();
    assert_eq!(e.code(), "CONFLICT");
    assert!(e.to_string().contains("already ended"));
    let e = d
        .put_revoke(
            &PutEndRequest {
                id: k.clone(),
                put_id: pid + 5,
            },
            T0,
        )
        .unwrap_err();
    assert_eq!(e.code(), "NOT_FOUND");
    // Nothing stored was lost by the refusals.
    assert_eq!(d.get_size(&k).unwrap(), 10);
    // Over-long batch refused whole.
    let many = vec![k.clone(); MAX_BATCH + 1];
    assert_eq!(
        d.batch_exist(&many, T0).unwrap_err().code(),
        "INVALID_ARGUMENT"
    );
    // Page over its limit.
    let lr = ListRequest {
        tenant: None,
        domain: None,
        prefix: String::new(),
        after: None,
        limit: Some(1001),
    };
    assert_eq!(d.list(&lr).unwrap_err().code(), "INVALID_ARGUMENT");
}

#[test]
fn no_segment_is_unavailable_and_full_is_out_of_space() {
    let d = dir();
    let e = d.put_start(&req(id(None, None, "k"), 10), T0).unwrap_err();
    assert_eq!(e.code(), "UNAVAILABLE");
    mount(&d, "s1", "o1", 128);
    let mut r = req(id(None, None, "a"), 100);
    r.hard_pin = true;
    put_req(&d, r, T0);
    let e = d.put_start(&req(id(None, None, "b"), 100), T0).unwrap_err();
    assert_eq!(e.code(), "OUT_OF_SPACE");
    assert_eq!(d.stats().objects, 1);
}

#[test]
fn same_content_is_idempotent_and_other_content_conflicts() {
    let d = dir();
    mount(&d, "s1", "o1", 1 << 20);
    let k = id(None, None, "k");
    let mut r = req(k.clone(), 100);
    r.checksum = Some(7);
    let pid = put_req(&d, r.clone(), T0);
    let used = d.stats().bytes_used;
    let again = d.put_start(&r, T0).unwrap();
    assert!(again.already_exists);
    assert_eq!(again.put_id, pid);
    assert!(again.replicas.is_empty());
    // Same size, no checksum on the new put: same content.
    assert!(
        d.put_start(&req(k.clone(), 100), T0)
            .unwrap()
            .already_exists
    );
    assert_eq!(d.stats().bytes_used, used);
    let mut other = r.clone();
    other.checksum = Some(8);
    assert_eq!(d.put_start(&other, T0).unwrap_err().code(), "CONFLICT");
    assert_eq!(
        d.put_start(&req(k.clone(), 99), T0).unwrap_err().code(),
        "CONFLICT"
    );
}

#[test]
fn upsert_keeps_old_readable_until_put_end_and_frees_it() {
    let d = dir();
    mount(&d, "s1", "o1", 1 << 20);
    let k = id(None, None, "k");
    put(&d, k.clone(), 100, T0);
    d.get(&k, T0).unwrap();
    let mut r = req(k.clone(), 200);
    r.upsert = true;
    let up = d.put_start(&r, T0 + 1).unwrap();
    assert!(!up.already_exists);
    // The old version stays readable; a second put of the key is busy meanwhile.
    let old = d.get(&k, T0 + 2).unwrap();
    assert_eq!(old.size, 100);
    assert_eq!(d.put_start(&r, T0 + 2).unwrap_err().code(), "BUSY");
    assert_eq!(d.stats().bytes_used, 128 + 256);
    d.put_end(
        &PutEndRequest {
            id: k.clone(),
            put_id: up.put_id,
        },
        T0 + 3,
    )
    .unwrap();
    let new = d.get(&k, T0 + 4).unwrap();
    assert_eq!(new.size, 200);
    assert_ne!(new.replicas[0].offset, old.replicas[0].offset);
    // The old slot was leased by the first get: freed only when that lease ends.
    assert_eq!(d.stats().bytes_used, 128 + 256);
    d.tick(old.lease_until_ms - 1);
    assert_eq!(d.stats().bytes_used, 128 + 256);
    let t = d.tick(old.lease_until_ms);
    assert_eq!(t.deferred_released, 1);
    assert_eq!(d.stats().bytes_used, 256);
    // Upsert of an unleased object frees the old slot at put_end.
    let mut r = req(k.clone(), 300);
    r.upsert = true;
    put_req(&d, r, new.lease_until_ms + 1);
    assert_eq!(d.stats().bytes_used, 320);
}

#[test]
fn revoke_frees_and_forgets_a_new_key() {
    let d = dir();
    mount(&d, "s1", "o1", 1 << 20);
    let k = id(None, None, "k");
    let s = d.put_start(&req(k.clone(), 100), T0).unwrap();
    d.put_revoke(
        &PutEndRequest {
            id: k.clone(),
            put_id: s.put_id,
        },
        T0,
    )
    .unwrap();
    assert_eq!(d.stats().bytes_used, 0);
    assert_eq!(d.stats().objects, 0);
    assert_eq!(d.get(&k, T0).unwrap_err().code(), "NOT_FOUND");
    assert_eq!(
        d.put_end(
            &PutEndRequest {
                id: k.clone(),
                put_id: s.put_id
            },
            T0
        )
        .unwrap_err()
        .code(),
        "NOT_FOUND"
    );
}

#[test]
fn replicas_go_to_distinct_segments_best_effort() {
    let d = dir();
    for s in ["s1", "s2", "s3"] {
        mount(&d, s, "o1", 1 << 20);
    }
    let mut r = req(id(None, None, "k"), 100);
    r.replicas = 5;
    let reply = d.put_start(&r, T0).unwrap();
    assert_eq!(reply.replicas.len(), 3);
    let mut segs: Vec<_> = reply
        .replicas
        .iter()
        .map(|r| r.segment_id.clone())
        .collect();
    segs.sort();
    segs.dedup();
    assert_eq!(segs.len(), 3);
}

#[test]
fn local_first_and_free_ratio_first_placement() {
    let d = dir();
    mount(&d, "s1", "o1", 1 << 20);
    mount(&d, "s2", "o2", 1 << 20);
    for i in 0..20 {
        let mut r = req(id(None, None, &format!("k{i}")), 1000);
        r.placement = crescent_wire::store::Placement::LocalFirst;
        r.preferred_segment = Some("s2".into());
        assert_eq!(d.put_start(&r, T0).unwrap().replicas[0].segment_id, "s2");
    }
    // s2 is fuller now: free_ratio_first picks s1.
    let mut r = req(id(None, None, "f"), 1000);
    r.placement = crescent_wire::store::Placement::FreeRatioFirst;
    assert_eq!(d.put_start(&r, T0).unwrap().replicas[0].segment_id, "s1");
    // local_first falls back when the preferred segment is full.
    let d = dir();
    mount(&d, "small", "o1", 128);
    mount(&d, "big", "o2", 1 << 20);
    let mut segs = Vec::new();
    for i in 0..3 {
        let mut r = req(id(None, None, &format!("k{i}")), 64);
        r.placement = crescent_wire::store::Placement::LocalFirst;
        r.preferred_segment = Some("small".into());
        segs.push(d.put_start(&r, T0).unwrap().replicas[0].segment_id.clone());
    }
    assert_eq!(segs, ["small", "small", "big"]);
}

#[test]
fn batches_fail_per_item() {
    let d = dir();
    mount(&d, "s1", "o1", 1 << 20);
    let items = vec![
        req(id(None, None, "a"), 10),
        req(id(None, None, ""), 10),
        req(id(None, None, "b"), 10),
    ];
    let starts = d.batch_put_start(&items, T0).unwrap();
    assert!(matches!(starts[0], ItemResult::Ok(_)));
    assert!(
        matches!(&starts[1], ItemResult::Err { code, .. } if code.as_str() == "INVALID_ARGUMENT")
    );
    let ends: Vec<PutEndRequest> = starts
        .iter()
        .zip(&items)
        .filter_map(|(r, i)| match r {
            ItemResult::Ok(r) => Some(PutEndRequest {
                id: i.id.clone(),
                put_id: r.put_id,
            }),
            _ => None,
        })
        .collect();
    assert!(d
        .batch_put_end(&ends, T0)
        .unwrap()
        .iter()
        .all(|r| matches!(r, ItemResult::Ok(()))));
    let ids = vec![
        id(None, None, "a"),
        id(None, None, "zz"),
        id(None, None, "b"),
    ];
    let ex = d.batch_exist(&ids, T0).unwrap();
    assert_eq!(
        ex,
        vec![
            ItemResult::Ok(true),
            ItemResult::Ok(false),
            ItemResult::Ok(true)
        ]
    );
    let gets = d.batch_get(&ids, T0).unwrap();
    assert!(matches!(&gets[1], ItemResult::Err { code, .. } if code.as_str() == "NOT_FOUND"));
    let sizes = d.batch_get_size(&ids).unwrap();
    assert_eq!(sizes[2], ItemResult::Ok(10));
    let rm = d.batch_remove(&ids, true, T0).unwrap();
    assert!(matches!(rm[0], ItemResult::Ok(())));
    assert!(matches!(&rm[1], ItemResult::Err { code, .. } if code.as_str() == "NOT_FOUND"));
    assert_eq!(d.stats().objects, 0);
    // Forced removal of leased objects: their slots come back when the leases end.
    assert_eq!(d.stats().bytes_used, 128);
    d.tick(T0 + 10_100);
    assert_eq!(d.stats().bytes_used, 0);
}

#[test]
fn list_pages_in_key_order_and_remove_prefix_skips_protected() {
    let d = dir_with(StoreConfig {
        shards: 7,
        ..Default::default()
    });
    mount(&d, "s1", "o1", 1 << 24);
    let mut keys: Vec<String> = (0..250).map(|i| format!("p/{i:04}")).collect();
    for k in &keys {
        put(&d, id(None, None, k), 64, T0);
    }
    put(&d, id(None, None, "q/other"), 64, T0);
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let page = d
            .list(&ListRequest {
                tenant: None,
                domain: None,
                prefix: "p/".into(),
                after: after.clone(),
                limit: Some(100),
            })
            .unwrap();
        assert!(page.keys.len() <= 100);
        seen.extend(page.keys.iter().map(|e| e.key.clone()));
        match page.next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    keys.sort();
    assert_eq!(seen, keys);
    // A leased, a hard-pinned and an in-progress key are skipped.
    d.get(&id(None, None, "p/0001"), T0).unwrap();
    let mut pinned = req(id(None, None, "p/pinned"), 64);
    pinned.hard_pin = true;
    put_req(&d, pinned, T0);
    d.put_start(&req(id(None, None, "p/writing"), 64), T0)
        .unwrap();
    let r = d
        .remove_prefix(
            &crescent_wire::store::RemovePrefixRequest {
                tenant: None,
                domain: None,
                prefix: "p/".into(),
            },
            T0 + 1,
        )
        .unwrap();
    assert_eq!((r.removed, r.skipped), (249, 3));
    assert!(d.exist(&id(None, None, "q/other"), T0).unwrap());
    assert!(d.exist(&id(None, None, "p/0001"), T0).unwrap());
    assert!(!d.exist(&id(None, None, "p/0002"), T0).unwrap());
    let empty = crescent_wire::store::RemovePrefixRequest {
        tenant: None,
        domain: None,
        prefix: String::new(),
    };
    assert_eq!(
        d.remove_prefix(&empty, T0).unwrap_err().code(),
        "INVALID_ARGUMENT"
    );
}

#[test]
fn put_ids_are_monotonic_and_can_be_fenced_upwards() {
    let d = dir();
    mount(&d, "s1", "o1", 1 << 20);
    let a = put(&d, id(None, None, "a"), 1, T0);
    let b = put(&d, id(None, None, "b"), 1, T0);
    assert!(b > a);
    d.ensure_put_id_above(1000);
    assert!(put(&d, id(None, None, "c"), 1, T0) > 1000);
}
