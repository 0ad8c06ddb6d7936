//! restore(snapshot at S) + replay(tail) == replay(everything), for random SegmentRegistry
//! histories; and decode(encode(e)) == e for every event kind.

use crescent_actors::event_codec::{new_record, RecordChain};
use crescent_actors::segment_registry::{
    OwnerRegistered, OwnerRemoved, SegmentMounted, SegmentRegistryCommand, SegmentRegistryEvent,
    SegmentUnmounted, TransportKind, UnmountReason,
};
use crescent_actors::{Aggregate, Ctx, DomainEvent, SegmentRegistry, World};
use std::time::Duration;

use crescent_journal::memory::{MemoryBackend, MemoryStore};
use crescent_journal::{Journal, JournalOptions, Record};
use crescent_snapshot::{
    restore, JournalSource, RecordBuffer, ReplayState, SnapshotDir, SnapshotMetrics, Snapshotter,
    SnapshotterConfig,
};
use proptest::prelude::*;

fn transport() -> impl Strategy<Value = TransportKind> {
    prop_oneof![
        Just(TransportKind::Tcp),
        Just(TransportKind::TransferEngine),
        Just(TransportKind::Embedded),
    ]
}

/// Commands over small id pools, so that idempotent repeats, conflicts, restarts and
/// refusals all happen often.
fn command() -> impl Strategy<Value = SegmentRegistryCommand> {
    let owner = prop::sample::select(vec!["o0", "o1", "o2", ""]).prop_map(String::from);
    let segment = prop::sample::select(vec!["s0", "s1", "s2", "s3", "s4"]).prop_map(String::from);
    let endpoint = prop::sample::select(vec!["h0:1", "h1:1"]).prop_map(String::from);
    prop_oneof![
        1 => (owner.clone(), endpoint, 0u64..4).prop_map(|(owner_id, endpoint, incarnation)| {
            SegmentRegistryCommand::RegisterOwner {
                owner_id,
                endpoint,
                incarnation,
            }
        }),
        3 => (
            segment.clone(),
            owner.clone(),
            prop::sample::select(vec![0u64, 4096, u64::MAX - 8]),
            prop::sample::select(vec![0u64, 8, 4096]),
            transport()
        )
            .prop_map(|(segment_id, owner_id, base, size, transport)| {
                SegmentRegistryCommand::MountSegment {
                    segment_id,
                    owner_id,
                    base,
                    size,
                    transport,
                }
            }),
        1 => segment.prop_map(|segment_id| SegmentRegistryCommand::UnmountSegment { segment_id }),
        1 => owner.prop_map(|owner_id| SegmentRegistryCommand::RemoveOwner {
            owner_id,
            reason: "test".into()
        }),
    ]
}

/// Runs the commands against two registry instances, returning the journal records of every
/// event decided and the decide-side states.
fn history(cmds: &[(bool, SegmentRegistryCommand)]) -> (Vec<Record>, [SegmentRegistry; 2]) {
    let ids = ["cluster", "cluster-b"];
    let mut states = [SegmentRegistry::default(), SegmentRegistry::default()];
    let mut chain = RecordChain::default();
    let mut records = Vec::new();
    for (i, (second, cmd)) in cmds.iter().enumerate() {
        let which = usize::from(*second);
        let now = 1_000 + i as i64;
        let term = 1 + (i as u64) / 10;
        if let Ok(events) = states[which].decide(cmd, &Ctx::at(now)) {
            for e in &events {
                states[which].apply(e);
                records.push(chain.push(term, new_record::<SegmentRegistry>(ids[which], e, now)));
            }
        }
    }
    (records, states)
}

fn replay(records: &[Record]) -> World {
    let mut w = World::standard();
    for r in records {
        w.apply(r).expect("every decided event replays");
    }
    w
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn snapshot_plus_tail_equals_full_replay(
        cmds in prop::collection::vec((any::<bool>(), command()), 0..80),
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
    ) {
        let (records, states) = history(&cmds);
        let full = replay(&records);
        // The world agrees with the decide side.
        prop_assert_eq!(full.get::<SegmentRegistry>("cluster").cloned().unwrap_or_default(), states[0].clone());
        prop_assert_eq!(full.get::<SegmentRegistry>("cluster-b").cloned().unwrap_or_default(), states[1].clone());

        let s = cut.index(records.len() + 1);
        let at_s = replay(&records[..s]);
        let tmp = tempfile::tempdir().unwrap();
        let dir = SnapshotDir::new(tmp.path());
        dir.write(&at_s.position(), 0, &at_s.to_sections().unwrap()).unwrap();

        let journal = RecordBuffer::new();
        journal.push(records.clone()).unwrap();
        if truncate {
            // What the snapshotter does after writing: drop the prefix behind the snapshot.
            journal.truncate_prefix(s as u64 + 1).unwrap();
        }
        let restored = restore(&dir, &journal, World::standard()).unwrap();
        prop_assert_eq!(restored.replayed, (records.len() - s) as u64);
        prop_assert_eq!(&restored.state, &full);
        prop_assert_eq!(restored.state.to_json().unwrap(), full.to_json().unwrap());
    }
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![".{0,40}", "[a-z0-9:_-]{1,20}"]
}

fn unmount_reason() -> impl Strategy<Value = UnmountReason> {
    prop_oneof![
        Just(UnmountReason::Requested),
        Just(UnmountReason::OwnerRestarted),
        Just(UnmountReason::OwnerRemoved),
    ]
}

fn event() -> impl Strategy<Value = SegmentRegistryEvent> {
    prop_oneof![
        (text(), prop::option::of(text()), any::<u64>(), any::<i64>()).prop_map(
            |(owner_id, endpoint, incarnation, at_ms)| {
                SegmentRegistryEvent::OwnerRegistered(OwnerRegistered {
                    owner_id,
                    endpoint,
                    incarnation,
                    at_ms,
                })
            }
        ),
        (
            text(),
            text(),
            any::<u64>(),
            any::<u64>(),
            transport(),
            any::<i64>()
        )
            .prop_map(|(segment_id, owner_id, base, size, transport, at_ms)| {
                SegmentRegistryEvent::SegmentMounted(SegmentMounted {
                    segment_id,
                    owner_id,
                    base,
                    // Only ranges a mount accepts (base + size fits: command.rs), which the
                    // `[start, end)` of the upgrade-test build's v3 can say too.
                    size: size.min(u64::MAX - base),
                    transport,
                    at_ms,
                })
            }),
        (text(), text(), unmount_reason(), any::<i64>()).prop_map(
            |(segment_id, owner_id, reason, at_ms)| {
                SegmentRegistryEvent::SegmentUnmounted(SegmentUnmounted {
                    segment_id,
                    owner_id,
                    reason,
                    at_ms,
                })
            }
        ),
        (text(), text(), any::<i64>()).prop_map(|(owner_id, reason, at_ms)| {
            SegmentRegistryEvent::OwnerRemoved(OwnerRemoved {
                owner_id,
                reason,
                at_ms,
            })
        }),
    ]
}

proptest! {
    #[test]
    fn decode_encode_round_trips(e in event()) {
        let decoded = SegmentRegistryEvent::decode(e.kind(), e.version(), &e.encode());
        prop_assert_eq!(decoded, Ok(e));
    }
}

/// The same path with the real (memory-backed) journal: commands appended through the journal,
/// the snapshotter shadowing it, then a reopen restored from snapshot + tail.
#[test]
fn live_journal_snapshotter_and_restore_agree() {
    let store = MemoryStore::new();
    let open = || {
        Journal::open(
            Box::new(MemoryBackend::new(store.clone())),
            JournalOptions::default(),
        )
        .unwrap()
    };
    let journal = open();
    let tmp = tempfile::tempdir().unwrap();
    let dir = SnapshotDir::new(tmp.path());
    let snapshotter = Snapshotter::start(
        World::standard(),
        journal.clone(),
        dir.clone(),
        SnapshotterConfig {
            every_events: 25,
            every: Duration::from_secs(3600),
            retain: 2,
            truncate_journal: true,
            retry_backoff: Duration::from_millis(50),
        },
        SnapshotMetrics::new(),
    )
    .unwrap();
    let mut registry = SegmentRegistry::default();
    for i in 0..120u64 {
        let cmd = if i % 10 == 9 {
            SegmentRegistryCommand::RegisterOwner {
                owner_id: format!("o{}", i % 4),
                endpoint: "h:1".into(),
                incarnation: 2 + i,
            }
        } else {
            SegmentRegistryCommand::MountSegment {
                segment_id: format!("s{i}"),
                owner_id: format!("o{}", i % 4),
                base: i * 4096,
                size: 4096,
                transport: TransportKind::Tcp,
            }
        };
        let now = 5_000 + i as i64;
        let events = registry.decide(&cmd, &Ctx::at(now)).unwrap();
        let records = events
            .iter()
            .map(|e| {
                registry.apply(e);
                new_record::<SegmentRegistry>("cluster", e, now)
            })
            .collect();
        journal.append_blocking(1, records).unwrap();
    }
    let info = snapshotter.snapshot_now().unwrap();
    assert_eq!(info.position.seq, journal.last_seq());
    snapshotter.stop().unwrap();
    assert!(dir.list().unwrap().len() == 2, "retention keeps two");
    journal.shutdown().unwrap();

    let journal = open();
    assert!(
        JournalSource::first_seq(&journal) > 1,
        "the journal prefix was truncated"
    );
    let restored = restore(&dir, &journal, World::standard()).unwrap();
    assert_eq!(restored.last_applied_seq(), journal.last_seq());
    assert_eq!(
        restored.state.get::<SegmentRegistry>("cluster"),
        Some(&registry)
    );
    journal.shutdown().unwrap();
}
