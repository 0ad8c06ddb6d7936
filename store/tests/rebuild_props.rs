//! Property: random puts, upserts (overwrites, possibly elsewhere) and removes under one
//! incarnation; then an empty directory rebuilt from the owners' ownership tables, replayed in
//! any order, in batches, with retries, equals the original committed view and reserves
//! exactly the same space.

mod common;

use std::collections::{BTreeMap, HashMap};

use common::*;
use crescent_store::ObjectDirectory;
use crescent_wire::rebuild::{ReplayEntry, ReplayOutcome};
use crescent_wire::store::{ObjectId, PutEndRequest, PutStartRequest};
use proptest::prelude::*;

const SEGMENTS: [(&str, &str); 3] = [("s1", "a"), ("s2", "a"), ("s3", "b")];
const SEG_BYTES: u64 = 1 << 20;

#[derive(Debug, Clone)]
enum Op {
    Put { key: u8, size: u64, replicas: u32 },
    Remove { key: u8 },
}

fn op() -> impl Strategy<Value = Op> {
    let size = prop_oneof![1u64..3000, Just(70_000u64), 64u64..=64];
    prop_oneof![
        4 => (0u8..24, size, 1u32..=2).prop_map(|(key, size, replicas)| Op::Put { key, size, replicas }),
        1 => (0u8..24).prop_map(|key| Op::Remove { key }),
    ]
}

/// Each owner's table: (key, segment) -> newest committed entry, as the owner records it.
type Tables = HashMap<&'static str, HashMap<(String, String), ReplayEntry>>;

fn owner_of(seg: &str) -> &'static str {
    SEGMENTS.iter().find(|(s, _)| *s == seg).unwrap().1
}

fn fresh(incarnation: u32) -> ObjectDirectory {
    let d = dir();
    for (seg, owner) in SEGMENTS {
        mount(&d, seg, owner, SEG_BYTES);
    }
    d.begin_incarnation(incarnation, incarnation as u64)
        .unwrap();
    d
}

fn run(d: &ObjectDirectory, ops: &[Op]) -> Tables {
    let mut tables: Tables = HashMap::new();
    for op in ops {
        match op {
            Op::Put {
                key,
                size,
                replicas,
            } => {
                let k = format!("k{key}");
                let req = PutStartRequest {
                    upsert: true,
                    replicas: *replicas,
                    ..req(ObjectId::new(&k), *size)
                };
                let Ok(r) = d.put_start(&req, T0) else {
                    continue;
                };
                if r.already_exists {
                    continue;
                }
                d.put_end(
                    &PutEndRequest {
                        id: ObjectId::new(&k),
                        put_id: r.put_id,
                    },
                    T0,
                )
                .unwrap();
                for rep in r.replicas {
                    let table = tables.entry(owner_of(&rep.segment_id)).or_default();
                    table.insert(
                        (k.clone(), rep.segment_id.clone()),
                        ReplayEntry {
                            id: ObjectId::new(&k),
                            put_id: r.put_id,
                            segment_id: rep.segment_id,
                            offset: rep.offset,
                            length: rep.length,
                            checksum: None,
                            data_type: Default::default(),
                            grant: None,
                        },
                    );
                }
            }
            Op::Remove { key } => {
                let k = format!("k{key}");
                if d.remove(&ObjectId::new(&k), false, T0).is_ok() {
                    // The remover's owner forgets it; others learn it through their writer.
                    for table in tables.values_mut() {
                        table.retain(|(key, _), _| *key != k);
                    }
                }
            }
        }
    }
    tables
}

/// key -> (size, replicas as (segment, offset)).
type View = BTreeMap<String, (u64, Vec<(String, u64)>)>;

fn view(d: &ObjectDirectory) -> View {
    let mut v = View::new();
    for key in 0..24u8 {
        let k = format!("k{key}");
        if let Ok(r) = d.get(&ObjectId::new(&k), T0) {
            let mut at: Vec<_> = r
                .replicas
                .into_iter()
                .map(|r| (r.segment_id, r.offset))
                .collect();
            at.sort();
            v.insert(k, (r.size, at));
        }
    }
    v
}

fn used(d: &ObjectDirectory) -> Vec<(String, u64)> {
    let mut u: Vec<_> = d
        .segment_usage()
        .into_iter()
        .map(|s| (s.segment_id, s.used))
        .collect();
    u.sort();
    u
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn rebuilt_directory_equals_the_committed_view(
        ops in prop::collection::vec(op(), 1..120),
        seed in any::<u64>(),
        batch in 1usize..7,
    ) {
        let original = fresh(1);
        let tables = run(&original, &ops);
        let expected = view(&original);

        let rebuilt = fresh(2);
        // Interleave the owners' entries in a seed-determined order, then replay in batches,
        // each batch sent twice (a retry after a lost answer).
        let mut all: Vec<(&str, ReplayEntry)> = tables
            .iter()
            .flat_map(|(o, t)| t.values().cloned().map(move |e| (*o, e)))
            .collect();
        all.sort_by_key(|(o, e)| (e.put_id.wrapping_mul(seed | 1).rotate_left(17), *o));
        for chunk in all.chunks(batch) {
            for _ in 0..2 {
                for (owner, e) in chunk {
                    let out = rebuilt.rebuild_replay(owner, 2, std::slice::from_ref(e), T0).unwrap();
                    prop_assert_ne!(out[0].outcome, ReplayOutcome::Rejected, "{:?}", out[0]);
                }
            }
        }
        prop_assert_eq!(view(&rebuilt), expected);
        prop_assert_eq!(used(&rebuilt), used(&original));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// The same, with every segment's entries replayed by its own thread at once (per-segment
    /// ledgers: replays of different segments run in parallel), in batches, each sent twice.
    /// Keys move between segments, so concurrent installs race on the same keys and on other
    /// segments' ledger hints.
    #[test]
    fn concurrent_replays_of_different_segments_equal_the_committed_view(
        ops in prop::collection::vec(op(), 1..120),
        seed in any::<u64>(),
        batch in 1usize..9,
    ) {
        let original = fresh(1);
        let tables = run(&original, &ops);
        let expected = view(&original);

        let rebuilt = fresh(2);
        let mut by_segment: BTreeMap<String, Vec<(&str, ReplayEntry)>> = BTreeMap::new();
        for (owner, table) in &tables {
            for e in table.values() {
                by_segment.entry(e.segment_id.clone()).or_default().push((*owner, e.clone()));
            }
        }
        for entries in by_segment.values_mut() {
            entries.sort_by_key(|(_, e)| e.put_id.wrapping_mul(seed | 1).rotate_left(17));
        }
        let rejected = std::thread::scope(|s| {
            let workers: Vec<_> = by_segment
                .values()
                .map(|entries| {
                    let rebuilt = &rebuilt;
                    s.spawn(move || {
                        let mut rejected = Vec::new();
                        for chunk in entries.chunks(batch) {
                            let owner = chunk[0].0;
                            let batch: Vec<ReplayEntry> =
                                chunk.iter().map(|(_, e)| e.clone()).collect();
                            for _ in 0..2 {
                                let out = rebuilt.rebuild_replay(owner, 2, &batch, T0).unwrap();
                                rejected.extend(
                                    out.into_iter().filter(|o| o.outcome == ReplayOutcome::Rejected),
                                );
                            }
                        }
                        rejected
                    })
                })
                .collect();
            workers.into_iter().flat_map(|w| w.join().unwrap()).collect::<Vec<_>>()
        });
        prop_assert!(rejected.is_empty(), "{:?}", rejected);
        prop_assert_eq!(view(&rebuilt), expected);
        prop_assert_eq!(used(&rebuilt), used(&original));
    }
}
