use super::*;

fn table() -> OwnershipTable {
    let t = OwnershipTable::new(IntGauge::new("t_owned", "test").unwrap());
    t.serve_segment("s1", 1 << 20);
    t.serve_segment("s2", 1 << 20);
    t
}

fn rep(tenant: Option<&str>, key: &str, put_id: u64, seg: &str, offset: u64) -> OwnedReplica {
    OwnedReplica {
        id: ObjectId::scoped(tenant, None, key),
        put_id,
        segment_id: Arc::from(seg),
        offset,
        length: 10,
        checksum: None,
        data_type: DataType::default(),
    }
}

use NoticeOutcome::{Recorded, Rejected, Stale};

#[test]
fn newer_puts_replace_and_stale_reports_are_ignored() {
    let t = table();
    assert_eq!(t.record(rep(None, "a", 5, "s1", 0)), Recorded);
    assert_eq!(t.record(rep(None, "a", 4, "s1", 100)), Stale);
    assert_eq!(t.lookup(&ObjectId::new("a"), "s1").unwrap().offset, 0);
    assert_eq!(t.record(rep(None, "a", 6, "s1", 200)), Recorded);
    assert_eq!(t.lookup(&ObjectId::new("a"), "s1").unwrap().put_id, 6);
    assert_eq!(
        t.record(rep(None, "a", 6, "s1", 200)),
        Recorded,
        "idempotent"
    );
    assert_eq!(t.len(), 1);
    assert_eq!(t.gauge.get(), 1);
}

#[test]
fn a_newer_put_at_a_reused_address_drops_the_older_replica() {
    let t = table();
    assert_eq!(t.record(rep(None, "k", 5, "s1", 0)), Recorded);
    // j's write overlapped k's bytes: k's replica is gone.
    assert_eq!(t.record(rep(None, "j", 6, "s1", 5)), Recorded);
    assert!(t.lookup(&ObjectId::new("k"), "s1").is_none());
    // A late or retried notice of k can never come back over j.
    assert_eq!(t.record(rep(None, "k", 5, "s1", 0)), Stale);
    assert_eq!(t.record(rep(None, "x", 4, "s1", 14)), Stale);
    // Adjacent, not overlapping: both live.
    assert_eq!(t.record(rep(None, "y", 3, "s1", 15)), Recorded);
    assert_eq!(t.len(), 2);
}

#[test]
fn an_empty_value_holds_its_address_like_any_replica() {
    let t = table();
    let empty = |key: &str, put_id: u64, offset: u64| OwnedReplica {
        length: 0,
        ..rep(None, key, put_id, "s1", offset)
    };
    assert_eq!(t.record(empty("e", 5, 64)), Recorded);
    assert_eq!(t.lookup(&ObjectId::new("e"), "s1").unwrap().length, 0);
    // An older put at its address is stale; a newer one (the slot was reused) replaces it.
    assert_eq!(t.record(rep(None, "old", 4, "s1", 64)), Stale);
    assert_eq!(t.record(rep(None, "new", 6, "s1", 64)), Recorded);
    assert!(t.lookup(&ObjectId::new("e"), "s1").is_none());
    // And an empty value of a newer put drops an older replica at its address.
    assert_eq!(t.record(empty("e2", 7, 64)), Recorded);
    assert!(t.lookup(&ObjectId::new("new"), "s1").is_none());
    assert_eq!(t.len(), 1);
}

#[test]
fn replicas_outside_served_segments_are_rejected() {
    let t = table();
    assert_eq!(t.record(rep(None, "a", 1, "elsewhere", 0)), Rejected);
    assert_eq!(t.record(rep(None, "a", 1, "s1", (1 << 20) - 5)), Rejected);
    assert_eq!(t.record(rep(None, "a", 0, "s1", 0)), Rejected);
    let outcomes = t.accept_notice(&[
        rep(None, "a", 1, "s1", 0).to_entry(),
        rep(None, "b", 1, "zz", 0).to_entry(),
        rep(None, "c", 2, "s2", 0).to_entry(),
    ]);
    assert_eq!(outcomes, vec![Recorded, Rejected, Recorded]);
    // After an unmount, late notices for that segment are refused.
    assert_eq!(t.forget_segment("s1"), 1);
    assert!(!t.serves("s1"));
    assert_eq!(
        t.accept_notice(&[rep(None, "a", 3, "s1", 0).to_entry()]),
        vec![Rejected]
    );
    assert_eq!(t.len(), 1);
}

#[test]
fn the_same_key_in_two_tenants_is_two_objects() {
    let t = table();
    t.record(rep(None, "a", 1, "s1", 0));
    t.record(rep(Some("t2"), "a", 2, "s1", 10));
    assert_eq!(t.len(), 2);
    assert_eq!(t.forget(&ObjectId::scoped(Some("t2"), None, "a")), 1);
    assert!(t.lookup(&ObjectId::new("a"), "s1").is_some());
}

#[test]
fn prefix_and_segment_cleanup() {
    let t = table();
    t.record(rep(None, "p/1", 1, "s1", 0));
    t.record(rep(None, "p/2", 2, "s2", 0));
    t.record(rep(None, "q/1", 3, "s1", 20));
    t.record(rep(Some("other"), "p/3", 4, "s1", 40));
    assert_eq!(t.forget_prefix("default", None, "p/"), 2);
    assert_eq!(t.len(), 2);
    assert_eq!(t.forget_segment("s1"), 2);
    assert!(t.is_empty());
    assert_eq!(t.gauge.get(), 0);
    // Freed addresses are free again in the index.
    t.serve_segment("s1", 1 << 20);
    assert_eq!(t.record(rep(None, "n", 1, "s1", 0)), Recorded);
}

#[test]
fn forget_if_unchanged_spares_newer_records() {
    let t = table();
    let old = rep(None, "a", 1, "s1", 0);
    t.record(old.clone());
    t.record(rep(None, "a", 2, "s1", 100));
    assert!(!t.forget_if_unchanged(&old));
    assert_eq!(t.len(), 1);
    let newer = t.lookup(&ObjectId::new("a"), "s1").unwrap();
    assert!(t.forget_if_unchanged(&newer));
    assert!(t.is_empty());
}

#[test]
fn snapshot_is_ordered_by_segment_and_offset() {
    let t = table();
    t.record(rep(None, "c", 1, "s2", 5));
    t.record(rep(None, "b", 1, "s1", 50));
    t.record(rep(None, "a", 1, "s1", 7));
    let order: Vec<_> = t
        .snapshot()
        .into_iter()
        .map(|r| (r.segment_id.to_string(), r.offset))
        .collect();
    assert_eq!(
        order,
        vec![("s1".into(), 7), ("s1".into(), 50), ("s2".into(), 5)]
    );
    assert_eq!(
        OwnedReplica::from_entry(&t.snapshot()[0].to_entry()),
        t.snapshot()[0]
    );
}

fn released(seq: u64, seg: &str, offset: u64, put_id: u64) -> ReleasedReplica {
    ReleasedReplica {
        version: RELEASE_WIRE_VERSION,
        seq,
        segment_id: seg.into(),
        offset,
        length: 10,
        put_id,
    }
}

#[test]
fn a_release_forgets_only_the_same_allocation() {
    let t = table();
    t.record(rep(None, "a", 5, "s1", 0));
    t.record(rep(None, "b", 6, "s1", 64));
    t.record(rep(None, "a", 5, "s2", 0));
    // An older put at b's address (b was written over a released slot): b stays.
    let r = t.forget_released(&[released(1, "s1", 64, 3)]);
    assert_eq!((r.forgotten, r.unmatched), (0, 1));
    assert!(t.lookup(&ObjectId::new("b"), "s1").is_some());
    // a's replica on s1 goes, its replica on s2 (another release) stays.
    let r = t.forget_released(&[released(2, "s1", 0, 5)]);
    assert_eq!(r.forgotten, 1);
    assert!(t.lookup(&ObjectId::new("a"), "s1").is_none());
    assert!(t.lookup(&ObjectId::new("a"), "s2").is_some());
    // Delivered again (the acknowledgement was lost): nothing more goes.
    let r = t.forget_released(&[released(2, "s1", 0, 5)]);
    assert_eq!((r.forgotten, r.unmatched), (0, 1));
    assert_eq!(t.len(), 2);
    assert_eq!(t.gauge.get(), 2);
}

#[test]
fn a_newer_object_at_a_released_address_is_kept() {
    let t = table();
    t.record(rep(None, "a", 5, "s1", 0));
    // crescentd released a (put 5) and placed c (put 9) at the same offset; the owner heard
    // of c before the release arrived.
    assert_eq!(t.record(rep(None, "c", 9, "s1", 0)), Recorded);
    let r = t.forget_released(&[released(1, "s1", 0, 5)]);
    assert_eq!(r.forgotten, 0);
    assert_eq!(t.lookup(&ObjectId::new("c"), "s1").unwrap().put_id, 9);
}

#[test]
fn a_notice_arriving_after_its_release_is_refused() {
    let t = table();
    let r = t.forget_released(&[released(1, "s1", 128, 7)]);
    assert_eq!(r.unmatched, 1);
    assert_eq!(t.record(rep(None, "late", 7, "s1", 128)), Stale);
    assert!(t.is_empty());
    // Another allocation at that address is a different object.
    assert_eq!(t.record(rep(None, "new", 8, "s1", 128)), Recorded);
}

#[test]
fn unknown_versions_and_foreign_segments_drop_nothing() {
    let t = table();
    t.record(rep(None, "a", 5, "s1", 0));
    let mut future = released(1, "s1", 0, 5);
    future.version = RELEASE_WIRE_VERSION + 1;
    let r = t.forget_released(&[future, released(2, "elsewhere", 0, 5)]);
    assert_eq!((r.forgotten, r.unmatched, r.unknown_version), (0, 1, 1));
    assert_eq!(t.len(), 1);
}

#[test]
fn forgetting_an_object_drops_its_replica_in_every_segment() {
    let t = table();
    t.record(rep(None, "a", 1, "s1", 0));
    t.record(rep(None, "a", 1, "s2", 0));
    t.record(rep(None, "b", 2, "s1", 20));
    assert_eq!(t.forget(&ObjectId::new("a")), 2);
    assert_eq!(t.len(), 1);
    assert_eq!(t.forget(&ObjectId::new("a")), 0);
    // The freed positions and addresses are reused.
    assert_eq!(t.record(rep(None, "c", 3, "s1", 0)), Recorded);
    assert_eq!(t.len(), 2);
}

/// The three views of the table agree: every held replica is found under its object and
/// segment and at its address, nothing else is indexed, and held replicas never overlap.
fn assert_consistent(t: &OwnershipTable) {
    let inner = t.lock();
    let live: Vec<(Index, &OwnedReplica)> = inner
        .slab
        .iter()
        .enumerate()
        .filter_map(|(at, r)| r.as_ref().map(|r| (at as Index, r)))
        .collect();
    assert_eq!(live.len(), inner.len());
    assert_eq!(inner.by_slot.len(), live.len());
    let addressed: usize = inner.by_address.values().map(|m| m.len()).sum();
    assert_eq!(addressed, live.len());
    for &(at, r) in &live {
        let h = inner.slot_hash(&r.id, &r.segment_id);
        assert_eq!(inner.find(h, &r.id, &r.segment_id), Some(at));
        assert_eq!(inner.by_address[&r.segment_id].get(&r.offset), Some(&at));
    }
    for (i, &(_, a)) in live.iter().enumerate() {
        for &(_, b) in &live[i + 1..] {
            let disjoint = a.end() <= b.offset || b.end() <= a.offset;
            assert!(
                a.segment_id != b.segment_id || disjoint,
                "{a:?} overlaps {b:?}"
            );
        }
    }
}

proptest::proptest! {
    #[test]
    fn random_records_releases_and_forgets_keep_the_views_consistent(
        ops in proptest::collection::vec((0u8..5, 0u8..6, 1u64..8, 0u8..2, 0u64..6), 1..80)
    ) {
        let t = table();
        for (op, key, put_id, seg, slot) in ops {
            let (key, seg, offset) = (format!("k{key}"), ["s1", "s2"][seg as usize], slot * 7);
            match op {
                0 | 1 => {
                    t.record(rep(None, &key, put_id, seg, offset));
                }
                2 => {
                    t.forget_released(&[released(put_id, seg, offset, put_id)]);
                }
                3 => {
                    t.forget(&ObjectId::new(&key));
                }
                _ => {
                    t.forget_prefix("default", None, "k1");
                }
            }
            assert_consistent(&t);
        }
    }
}
