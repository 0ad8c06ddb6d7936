//! Owner replay into the object directory: every merge rule of `rebuild_replay`.

mod common;

use common::*;
use crescent_store::ObjectDirectory;
use crescent_wire::rebuild::{compose_put_id, EntryOutcome, ReplayEntry, ReplayOutcome};
use crescent_wire::store::{ObjectId, PutEndRequest, ReplicaDesc};

const TERM: u64 = 42;

/// A directory restarted under incarnation 2 with segments s1 (owner a) and s2 (owner b).
fn rebuilt() -> ObjectDirectory {
    let d = dir();
    mount(&d, "s1", "a", 1 << 20);
    mount(&d, "s2", "b", 1 << 20);
    d.begin_incarnation(2, TERM).unwrap();
    d
}

fn old_put(seq: u64) -> u64 {
    compose_put_id(1, seq).unwrap()
}

fn entry(key: &str, put_id: u64, seg: &str, offset: u64, length: u64) -> ReplayEntry {
    ReplayEntry {
        id: ObjectId::new(key),
        put_id,
        segment_id: seg.into(),
        offset,
        length,
        checksum: None,
        data_type: Default::default(),
        grant: None,
    }
}

fn replay(d: &ObjectDirectory, owner: &str, entries: &[ReplayEntry]) -> Vec<ReplayOutcome> {
    d.rebuild_replay(owner, TERM, entries, T0)
        .unwrap()
        .into_iter()
        .map(|o| o.outcome)
        .collect()
}

fn where_is(d: &ObjectDirectory, key: &str) -> Option<(u64, Vec<(String, u64)>)> {
    let r = d.get(&ObjectId::new(key), T0).ok()?;
    let mut at: Vec<(String, u64)> = r
        .replicas
        .iter()
        .map(|r: &ReplicaDesc| (r.segment_id.clone(), r.offset))
        .collect();
    at.sort();
    Some((r.size, at))
}

fn used(d: &ObjectDirectory, seg: &str) -> u64 {
    d.segment_usage()
        .into_iter()
        .find(|u| u.segment_id == seg)
        .unwrap()
        .used
}

use ReplayOutcome::{Duplicate, Rejected, Replayed, Stale};

#[test]
fn same_entry_twice_is_a_duplicate_and_changes_nothing() {
    let d = rebuilt();
    let e = entry("k", old_put(5), "s1", 128, 100);
    assert_eq!(replay(&d, "a", std::slice::from_ref(&e)), vec![Replayed]);
    assert_eq!(replay(&d, "a", &[e.clone(), e]), vec![Duplicate, Duplicate]);
    assert_eq!(where_is(&d, "k"), Some((100, vec![("s1".into(), 128)])));
    assert_eq!(used(&d, "s1"), 128);
    assert_eq!(d.stats().objects, 1);
    assert_eq!(d.metrics().count("rebuild_entries", &["duplicate"]), 2);
}

#[test]
fn a_newer_put_replaces_and_frees_the_old_route() {
    let d = rebuilt();
    assert_eq!(
        replay(&d, "a", &[entry("k", old_put(5), "s1", 0, 100)]),
        vec![Replayed]
    );
    assert_eq!(
        replay(&d, "b", &[entry("k", old_put(9), "s2", 4096, 70_000)]),
        vec![Replayed]
    );
    assert_eq!(where_is(&d, "k"), Some((70_000, vec![("s2".into(), 4096)])));
    assert_eq!(used(&d, "s1"), 0, "the older version's slot went back");
    assert_eq!(used(&d, "s2"), 73_728);
    // Owner a holds the older version until its release arrives: fenced, so that a later
    // remove of k keeps it from coming back (docs/rebuild.md, "Removes are journaled").
    assert!(d.removals().is_fenced(old_put(5)));
    assert!(!d.removals().is_fenced(old_put(9)));
    assert_eq!(d.removals().take().by_owner["a"], vec![old_put(5)]);
}

#[test]
fn an_older_put_is_fenced_as_stale() {
    let d = rebuilt();
    assert_eq!(
        replay(&d, "b", &[entry("k", old_put(9), "s2", 0, 10)]),
        vec![Replayed]
    );
    assert_eq!(
        replay(&d, "a", &[entry("k", old_put(5), "s1", 0, 10)]),
        vec![Stale]
    );
    assert_eq!(where_is(&d, "k"), Some((10, vec![("s2".into(), 0)])));
    assert_eq!(used(&d, "s1"), 0, "a stale entry reserves nothing");
}

#[test]
fn a_reused_address_is_never_resurrected_whatever_the_order_or_retries() {
    // Old run: k was put at s1:0 (put 5), removed, and j reused the address (put 6). The owner
    // never learnt of the remove, so its table holds both.
    let k = entry("k", old_put(5), "s1", 0, 64);
    let j = entry("j", old_put(6), "s1", 0, 64);
    for order in [vec![k.clone(), j.clone()], vec![j.clone(), k.clone()]] {
        let d = rebuilt();
        replay(&d, "a", &order);
        // Retries, one at a time and reordered again.
        replay(&d, "a", std::slice::from_ref(&k));
        replay(&d, "a", &[j.clone(), k.clone(), j.clone()]);
        assert_eq!(where_is(&d, "k"), None, "k must not come back");
        assert_eq!(where_is(&d, "j"), Some((64, vec![("s1".into(), 0)])));
        assert_eq!(used(&d, "s1"), 64);
        assert_eq!(d.stats().objects, 1);
    }
    // Partly overlapping reuse: a newer 70 000-byte value over two older small ones.
    let d = rebuilt();
    let small = [
        entry("x", old_put(1), "s1", 0, 64),
        entry("y", old_put(2), "s1", 4032, 64),
    ];
    assert_eq!(replay(&d, "a", &small), vec![Replayed, Replayed]);
    assert_eq!(
        replay(&d, "a", &[entry("z", old_put(3), "s1", 0, 70_000)]),
        vec![Replayed]
    );
    assert_eq!(replay(&d, "a", &small), vec![Stale, Stale]);
    assert_eq!((where_is(&d, "x"), where_is(&d, "y")), (None, None));
    assert_eq!(used(&d, "s1"), 73_728);
}

#[test]
fn addresses_outside_the_owners_mounted_segments_are_rejected() {
    let d = rebuilt();
    let outcomes = d
        .rebuild_replay(
            "a",
            TERM,
            &[
                entry("k1", old_put(1), "s2", 0, 10),       // b's segment
                entry("k2", old_put(2), "nope", 0, 10),     // not mounted
                entry("k3", old_put(3), "s1", 1 << 20, 10), // beyond capacity
                entry("k4", old_put(4), "s1", 32, 10),      // not an allocation's alignment
                entry("k5", old_put(5), "s1", 64, 70_000),  // large values are 4 KiB aligned
            ],
            T0,
        )
        .unwrap();
    for o in &outcomes {
        assert_eq!(o.outcome, Rejected);
        assert!(o.reason.is_some());
    }
    assert_eq!(d.stats().objects, 0);
    // After an unmount, the segment's entries are rejected too.
    d.unmount_segment("s1", false, T0).unwrap();
    assert_eq!(
        replay(&d, "a", &[entry("k", old_put(1), "s1", 0, 10)]),
        vec![Rejected]
    );
}

#[test]
fn an_empty_value_is_replayed_on_its_slot() {
    let d = rebuilt();
    let e = entry("empty", old_put(9), "s1", 64, 0);
    assert_eq!(replay(&d, "a", std::slice::from_ref(&e)), vec![Replayed]);
    assert_eq!(replay(&d, "a", &[e]), vec![Duplicate]);
    assert_eq!(where_is(&d, "empty"), Some((0, vec![("s1".into(), 64)])));
    assert_eq!(used(&d, "s1"), 64);
    // Its slot is held like any other: an older put claiming the same address is stale.
    assert_eq!(
        replay(&d, "a", &[entry("other", old_put(3), "s1", 64, 0)]),
        vec![Stale]
    );
}

#[test]
fn one_bad_entry_fails_only_itself() {
    let d = rebuilt();
    let mut bad_key = entry("", old_put(2), "s1", 64, 10);
    bad_key.id.tenant = Some("bad tenant".into());
    let batch = [
        entry("a", old_put(1), "s1", 0, 10),
        bad_key,
        entry("b", 0, "s1", 128, 10),              // put id 0
        entry("c", old_put(3), "s1", 8 << 20, 10), // beyond the segment
        entry("d", compose_put_id(2, 1).unwrap(), "s1", 256, 10), // this incarnation's
        entry("e", old_put(4), "s1", 320, 10),
    ];
    assert_eq!(
        replay(&d, "a", &batch),
        vec![Replayed, Rejected, Rejected, Rejected, Rejected, Replayed]
    );
    assert!(where_is(&d, "a").is_some() && where_is(&d, "e").is_some());
    assert_eq!(d.stats().objects, 2);
}

#[test]
fn replicas_reported_by_different_owners_merge() {
    let d = rebuilt();
    let put = old_put(7);
    assert_eq!(
        replay(&d, "a", &[entry("k", put, "s1", 64, 500)]),
        vec![Replayed]
    );
    assert_eq!(
        replay(&d, "b", &[entry("k", put, "s2", 1024, 500)]),
        vec![Replayed]
    );
    assert_eq!(
        where_is(&d, "k"),
        Some((500, vec![("s1".into(), 64), ("s2".into(), 1024)]))
    );
    // The same put at another offset of a segment, or with another size, is inconsistent.
    assert_eq!(
        replay(&d, "b", &[entry("k", put, "s2", 2048, 500)]),
        vec![Rejected]
    );
    assert_eq!(
        replay(&d, "a", &[entry("k", put, "s1", 64, 501)]),
        vec![Rejected]
    );
    let mut sum = entry("c", old_put(8), "s1", 4096, 10);
    sum.checksum = Some(1);
    assert_eq!(replay(&d, "a", &[sum.clone()]), vec![Replayed]);
    let mut other = sum.clone();
    other.segment_id = "s2".into();
    other.checksum = Some(2);
    assert_eq!(replay(&d, "b", &[other]), vec![Rejected]);
    assert_eq!(d.get(&ObjectId::new("c"), T0).unwrap().checksum, Some(1));
}

#[test]
fn reserved_ranges_never_overlap_new_puts() {
    let d = dir();
    mount(&d, "s1", "a", 64 * 64);
    d.begin_incarnation(2, TERM).unwrap();
    // Every other slot replayed.
    let replayed: Vec<ReplayEntry> = (0..32)
        .map(|i| entry(&format!("old{i}"), old_put(i + 1), "s1", i * 128, 64))
        .collect();
    assert!(replay(&d, "a", &replayed).iter().all(|o| *o == Replayed));
    let mut new_offsets = Vec::new();
    for i in 0..32 {
        let p = put(&d, id(None, None, &format!("new{i}")), 64, T0);
        assert!(
            p > old_put(1000),
            "new put ids are above every replayed one"
        );
        let (_, at) = where_is(&d, &format!("new{i}")).unwrap();
        new_offsets.push(at[0].1);
    }
    for off in new_offsets {
        assert_eq!(
            off % 128,
            64,
            "a new put landed on a replayed slot at {off}"
        );
    }
    for i in 0..32 {
        assert!(where_is(&d, &format!("old{i}")).is_some());
    }
    assert_eq!(used(&d, "s1"), 64 * 64);
}

#[test]
fn a_failed_reservation_keeps_the_old_route() {
    let d = rebuilt();
    assert_eq!(
        replay(&d, "a", &[entry("k", old_put(5), "s1", 0, 64)]),
        vec![Replayed]
    );
    // A put of this incarnation holds s2's first slot.
    let r = d.put_start(&req(id(None, None, "new"), 64), T0).unwrap();
    let taken = &r.replicas[0];
    d.put_end(
        &PutEndRequest {
            id: ObjectId::new("new"),
            put_id: r.put_id,
        },
        T0,
    )
    .unwrap();
    let newer = entry("k", old_put(6), &taken.segment_id, taken.offset, 64);
    let owner = if taken.segment_id == "s1" { "a" } else { "b" };
    assert_eq!(replay(&d, owner, &[newer]), vec![Stale]);
    assert_eq!(
        where_is(&d, "k"),
        Some((64, vec![("s1".into(), 0)])),
        "old route kept"
    );
    assert!(where_is(&d, "new").is_some());
}

#[test]
fn replays_for_another_term_or_too_large_are_refused_whole() {
    let d = rebuilt();
    let e = d
        .rebuild_replay("a", TERM - 1, &[entry("k", old_put(1), "s1", 0, 1)], T0)
        .unwrap_err();
    assert_eq!(e.code(), "STALE_GENERATION");
    let many: Vec<ReplayEntry> = (0..=crescent_wire::rebuild::MAX_REPLAY_BATCH as u64)
        .map(|i| entry("k", old_put(i + 1), "s1", 0, 1))
        .collect();
    assert_eq!(
        d.rebuild_replay("a", TERM, &many, T0).unwrap_err().code(),
        "INVALID_ARGUMENT"
    );
    assert_eq!(
        d.rebuild_replay("", TERM, &[], T0).unwrap_err().code(),
        "INVALID_ARGUMENT"
    );
}

#[test]
fn incarnations_must_grow_and_put_ids_carry_them() {
    let d = dir();
    mount(&d, "s1", "a", 1 << 20);
    let before = put(&d, id(None, None, "a"), 1, T0);
    assert!(before < compose_put_id(1, 0).unwrap());
    d.begin_incarnation(3, 1).unwrap();
    let after = put(&d, id(None, None, "b"), 1, T0);
    assert_eq!(crescent_wire::rebuild::put_id_incarnation(after), 3);
    assert_eq!(
        d.begin_incarnation(3, 2).unwrap_err().code(),
        "INVALID_ARGUMENT"
    );
    assert_eq!(
        d.begin_incarnation(2, 2).unwrap_err().code(),
        "INVALID_ARGUMENT"
    );
    assert!(d.begin_incarnation(1 << 24, 2).is_err());
    assert_eq!((d.incarnation(), d.term()), (3, 1));
}

#[test]
fn an_exhausted_incarnation_refuses_puts_instead_of_spilling_over() {
    let d = dir();
    mount(&d, "s1", "a", 1 << 20);
    d.begin_incarnation(1, 1).unwrap();
    d.ensure_put_id_above(compose_put_id(1, crescent_wire::rebuild::PUT_SEQ_MASK).unwrap() - 1);
    let last = put(&d, id(None, None, "last"), 1, T0);
    assert_eq!(crescent_wire::rebuild::put_id_incarnation(last), 1);
    let e = d
        .put_start(&req(id(None, None, "over"), 1), T0)
        .unwrap_err();
    assert_eq!(e.code(), "UNAVAILABLE");
}

#[test]
fn finishing_the_rebuild_drops_the_ledger_only() {
    let d = rebuilt();
    let outcomes: Vec<EntryOutcome> = d
        .rebuild_replay("a", TERM, &[entry("k", old_put(1), "s1", 0, 1)], T0)
        .unwrap();
    assert_eq!(outcomes[0].outcome, Replayed);
    assert_eq!(d.replay_ledger_len(), 1);
    d.finish_rebuild();
    assert_eq!(d.replay_ledger_len(), 0);
    assert!(where_is(&d, "k").is_some());
    // Without the ledger, the allocator still fences the address.
    assert_eq!(
        replay(&d, "a", &[entry("j", old_put(0x10), "s1", 0, 1)]),
        vec![Stale]
    );
}
