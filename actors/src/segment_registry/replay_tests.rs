//! The replay fold (`apply_encoded`) against the reference fold (`decode` + `apply_owned`):
//! same state for every event kind in both payload forms, same refusals, no half-applied
//! state; and the id order of everything the hashed segment map exposes.

use super::*;
use crate::aggregate::DomainEvent;

fn state_with_segments(ids: &[&str]) -> SegmentRegistry {
    let mut state = SegmentRegistry::default();
    for (i, id) in ids.iter().enumerate() {
        state.apply_owned(SegmentRegistryEvent::SegmentMounted(SegmentMounted {
            segment_id: (*id).into(),
            owner_id: "o1".into(),
            base: i as u64 * 64,
            size: 64,
            transport: TransportKind::Tcp,
            at_ms: 1,
        }));
    }
    state.apply_owned(SegmentRegistryEvent::OwnerRegistered(OwnerRegistered {
        owner_id: "o1".into(),
        endpoint: Some("h:1".into()),
        incarnation: 1,
        at_ms: 1,
    }));
    state
}

fn every_event() -> Vec<SegmentRegistryEvent> {
    vec![
        SegmentRegistryEvent::OwnerRegistered(OwnerRegistered {
            owner_id: "o2".into(),
            endpoint: None,
            incarnation: 1,
            at_ms: 2,
        }),
        SegmentRegistryEvent::SegmentMounted(SegmentMounted {
            segment_id: "s9".into(),
            owner_id: "o1".into(),
            base: 4096,
            size: 64,
            transport: TransportKind::TransferEngine,
            at_ms: 2,
        }),
        SegmentRegistryEvent::SegmentUnmounted(SegmentUnmounted {
            segment_id: "s1".into(),
            owner_id: "o1".into(),
            reason: UnmountReason::Requested,
            at_ms: 2,
        }),
        // Unmounting an id that is not mounted folds to no change on both paths.
        SegmentRegistryEvent::SegmentUnmounted(SegmentUnmounted {
            segment_id: "absent".into(),
            owner_id: "o1".into(),
            reason: UnmountReason::OwnerRemoved,
            at_ms: 2,
        }),
        SegmentRegistryEvent::OwnerRemoved(OwnerRemoved {
            owner_id: "o1".into(),
            reason: "decommissioned".into(),
            at_ms: 2,
        }),
    ]
}

/// The named (map) form of an event's payload, which older writers produced.
fn named_payload(event: &SegmentRegistryEvent) -> Vec<u8> {
    match event {
        SegmentRegistryEvent::OwnerRegistered(e) => rmp_serde::to_vec_named(e),
        #[cfg(not(feature = "upgrade-test-schema"))]
        SegmentRegistryEvent::SegmentMounted(e) => rmp_serde::to_vec_named(e),
        #[cfg(feature = "upgrade-test-schema")]
        SegmentRegistryEvent::SegmentMounted(e) => {
            rmp_serde::to_vec_named(&super::event_v3::SegmentMountedV3::from(e))
        }
        SegmentRegistryEvent::SegmentUnmounted(e) => rmp_serde::to_vec_named(e),
        SegmentRegistryEvent::OwnerRemoved(e) => rmp_serde::to_vec_named(e),
    }
    .unwrap()
}

#[test]
fn apply_encoded_folds_every_event_as_decode_then_apply() {
    let start = state_with_segments(&["s0", "s1", "s2"]);
    for event in every_event() {
        for payload in [event.encode(), named_payload(&event)] {
            let mut reference = start.clone();
            reference.apply_owned(
                SegmentRegistryEvent::decode(event.kind(), event.version(), &payload).unwrap(),
            );
            let mut replayed = start.clone();
            replayed
                .apply_encoded(event.kind(), event.version(), &payload)
                .unwrap();
            assert_eq!(replayed, reference, "{event:?}");
        }
    }
}

#[test]
fn apply_encoded_upcasts_segment_mounted_v1() {
    let v1 = SegmentMountedV1 {
        segment_id: "s7".into(),
        owner_id: "o1".into(),
        base: 0,
        size: 64,
        at_ms: 3,
    };
    let payload = rmp_serde::to_vec(&v1).unwrap();
    let mut state = SegmentRegistry::default();
    state.apply_encoded("segment_mounted", 1, &payload).unwrap();
    assert_eq!(state.segment("s7").unwrap().transport, TransportKind::Tcp);
}

#[test]
fn apply_encoded_refuses_what_decode_refuses_and_changes_nothing() {
    let start = state_with_segments(&["s0", "s1"]);
    let unmount = every_event()[2].encode();
    let removed = every_event()[4].encode();
    let cases: Vec<(&str, u16, Vec<u8>)> = vec![
        (
            "segment_unmounted",
            1,
            unmount[..unmount.len() - 1].to_vec(),
        ),
        ("segment_unmounted", 1, b"\xc1garbage".to_vec()),
        ("segment_unmounted", 2, unmount.clone()),
        ("segment_unmounted", 0, unmount.clone()),
        // The right shape of the wrong kind: an owner_removed payload is not an unmount.
        ("segment_unmounted", 1, removed.clone()),
        ("owner_removed", 1, removed[..removed.len() - 2].to_vec()),
        ("owner_removed", 1, unmount.clone()),
        ("owner_removed", 9, removed.clone()),
        ("owner_exploded", 1, removed.clone()),
        ("segment_mounted", 2, unmount.clone()),
    ];
    for (kind, version, payload) in cases {
        let expected = SegmentRegistryEvent::decode(kind, version, &payload).unwrap_err();
        let mut state = start.clone();
        let got = state.apply_encoded(kind, version, &payload).unwrap_err();
        assert_eq!(
            std::mem::discriminant(&got),
            std::mem::discriminant(&expected),
            "{kind} v{version}: {got:?} vs {expected:?}"
        );
        assert_eq!(state, start, "{kind} v{version} changed the state");
    }
}

#[test]
fn segments_are_listed_and_serialized_in_id_order_whatever_the_insertion_order() {
    let forward = state_with_segments(&["s0", "s1", "s2", "s3", "a9"]);
    let mut backward = SegmentRegistry::default();
    for id in ["a9", "s3", "s2", "s1", "s0"] {
        let seg = forward.segment(id).unwrap().clone();
        backward.apply_owned(SegmentRegistryEvent::SegmentMounted(SegmentMounted {
            segment_id: id.into(),
            owner_id: seg.owner_id,
            base: seg.base,
            size: seg.size,
            transport: seg.transport,
            at_ms: seg.mounted_at_ms,
        }));
    }
    backward.apply_owned(SegmentRegistryEvent::OwnerRegistered(OwnerRegistered {
        owner_id: "o1".into(),
        endpoint: Some("h:1".into()),
        incarnation: 1,
        at_ms: 1,
    }));
    assert_eq!(forward, backward);
    let ids: Vec<&String> = backward.segments().map(|(id, _)| id).collect();
    assert_eq!(ids, ["a9", "s0", "s1", "s2", "s3"]);
    let ids: Vec<&String> = backward.segments_of("o1").map(|(id, _)| id).collect();
    assert_eq!(ids, ["a9", "s0", "s1", "s2", "s3"]);
    assert_eq!(
        rmp_serde::to_vec_named(&forward).unwrap(),
        rmp_serde::to_vec_named(&backward).unwrap(),
        "snapshots of equal states are equal bytes"
    );
    let json = serde_json::to_string(&backward).unwrap();
    let positions: Vec<usize> = ["a9", "s0", "s1", "s2", "s3"]
        .iter()
        .map(|id| json.find(&format!("\"{id}\"")).unwrap())
        .collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{json}");
}

#[test]
fn a_restarted_owner_unmounts_its_segments_in_id_order() {
    let state = state_with_segments(&["s2", "s0", "s1"]);
    let events = state
        .decide(
            &SegmentRegistryCommand::RegisterOwner {
                owner_id: "o1".into(),
                endpoint: "h:1".into(),
                incarnation: 2,
            },
            &Ctx::at(5),
        )
        .unwrap();
    let unmounted: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            SegmentRegistryEvent::SegmentUnmounted(u) => Some(u.segment_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(unmounted, ["s0", "s1", "s2"]);
}
