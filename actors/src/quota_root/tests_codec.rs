//! The event codec (round trips, compact form, refusals) and the snapshot of the state.

use super::tests::*;
use super::*;
use crate::aggregate::{DecodeError, DomainEvent};
use crate::testing::given;

/// One event of every kind.
fn every_event() -> Vec<QuotaEvent> {
    let mut events = with_a();
    events.push(reserved(
        "d1",
        "a",
        OpKind::Delete,
        0,
        (300, Some(7)),
        (0, 0),
    ));
    events.push(aborted("d1", "a", AbortReason::Expired, 0, 0));
    events.push(QuotaEvent::TerminalPruned(TerminalPruned {
        op_ids: vec!["c1".into()],
    }));
    events
}

#[test]
fn every_event_kind_round_trips_and_is_in_the_schema() {
    let events = every_event();
    let kinds: std::collections::BTreeSet<_> = events.iter().map(|e| e.kind()).collect();
    assert_eq!(kinds.len(), QuotaEvent::schema().len(), "{kinds:?}");
    for e in events {
        assert!(QuotaEvent::schema().contains(&(e.kind(), 1)));
        assert_eq!(
            QuotaEvent::decode(e.kind(), e.version(), &e.encode()),
            Ok(e.clone())
        );
        let value: serde_json::Value = rmp_serde::from_slice(&e.encode()).unwrap();
        assert!(value.is_array(), "compact form: {value}");
    }
}

#[test]
fn decode_refuses_unknown_kinds_versions_and_garbage() {
    let e = &with_a()[1];
    assert_eq!(
        QuotaEvent::decode("quota_exploded", 1, &e.encode()),
        Err(DecodeError::UnknownKind {
            aggregate: "quota_root",
            kind: "quota_exploded".into()
        })
    );
    for version in [0, 2] {
        assert!(matches!(
            QuotaEvent::decode(e.kind(), version, &e.encode()),
            Err(DecodeError::UnsupportedVersion { supported: 1, .. })
        ));
    }
    assert!(matches!(
        QuotaEvent::decode(e.kind(), 1, b"\xc1garbage"),
        Err(DecodeError::Malformed { .. })
    ));
    // A payload of another kind's shape does not decode.
    assert!(matches!(
        QuotaEvent::decode(QUOTA_FINALIZED, 1, &e.encode()),
        Err(DecodeError::Malformed { .. })
    ));
}

#[test]
fn the_state_round_trips_through_a_snapshot_and_json() {
    let mut events = every_event();
    events.extend(created("c2", "b", 40, 9));
    events.push(reserved(
        "p3",
        "b",
        OpKind::Overwrite,
        90,
        (40, Some(9)),
        (50, 0),
    ));
    events.push(reserved("p4", "c", OpKind::Create, 5, (0, None), (5, 1)));
    events.push(publishing("p4", 11));
    let state = given::<QuotaRoot>(events)
        .when(QuotaCommand::PruneTerminal { keep: 100 })
        .then(vec![]);
    let bytes = rmp_serde::to_vec_named(&state).unwrap();
    assert_eq!(rmp_serde::from_slice::<QuotaRoot>(&bytes).unwrap(), state);
    let json = serde_json::to_value(&state).unwrap();
    assert_eq!(
        serde_json::from_value::<QuotaRoot>(json.clone()).unwrap(),
        state
    );
    assert_eq!(json["objects"]["b"]["bytes"], 40);
    assert_eq!(json["operations"]["p4"]["state"], "publishing");
}
