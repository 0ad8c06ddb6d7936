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
    events.push(QuotaEvent::UsageRecorded(UsageRecorded {
        used_bytes: 300,
        used_objects: 1,
        at_ms: 20,
    }));
    events.push(super::tests_usage::reconciled((300, 1), (0, 0), 30));
    events.push(super::tests_allowance::recorded("east-2", 4000, 3));
    events.push(super::tests_allowance::released("east-2"));
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
    assert_eq!(
        json["recorded"]["used_bytes"], 0,
        "the reconciliation's rebuilt usage"
    );
    assert_eq!(json["reconciliation"]["recorded_bytes"], 300);
    // A snapshot written before the usage record existed still reads (no record yet).
    let policy_only = super::tests::with_a()[..1].to_vec();
    let before = crate::testing::state_after::<QuotaRoot>(&policy_only);
    let mut older = serde_json::to_value(&before).unwrap();
    let fields = older.as_object_mut().unwrap();
    assert!(fields.remove("recorded").is_some() && fields.remove("reconciliation").is_some());
    let older = rmp_serde::to_vec_named(&older).unwrap();
    assert_eq!(rmp_serde::from_slice::<QuotaRoot>(&older).unwrap(), before);
}

/// The journal form is pinned: journals of earlier builds must replay (docs/architecture.md,
/// "Aggregates"), and the schema is what the HA handshake compares (docs/ha.md, "Event versions
/// in a mixed pair").
#[test]
fn the_schema_and_the_journal_form_of_every_kind_are_pinned() {
    assert_eq!(
        QuotaEvent::schema(),
        &[
            ("quota_policy_set", 1),
            ("quota_reserved", 1),
            ("quota_publishing", 1),
            ("quota_finalized", 1),
            ("quota_aborted", 1),
            ("quota_terminal_pruned", 1),
            ("quota_usage_recorded", 1),
            ("quota_usage_reconciled", 1),
            ("quota_allowance_recorded", 1),
            ("quota_allowance_released", 1),
        ]
    );
    crate::testing::assert_journal_form(
        &every_event(),
        &[
            ("quota_policy_set", 1, "95cd03e8030101d94065613763323232646166316432643834343261386533656336376461353663326632353863303764303737643564396430626261396431383863383761656562"),
            ("quota_reserved", 1, "99a26331a161a6637265617465cd012c00c0cd012c01cd1388"),
            ("quota_publishing", 1, "93a2633107cd1770"),
            ("quota_finalized", 1, "95a26331a16107cd012c01"),
            ("quota_reserved", 1, "99a26431a161a664656c65746500cd012c070000cd1388"),
            ("quota_aborted", 1, "95a26431a161a7657870697265640000"),
            ("quota_terminal_pruned", 1, "9191a26331"),
            ("quota_usage_recorded", 1, "93cd012c0114"),
            ("quota_usage_reconciled", 1, "95cd012c0100001e"),
            ("quota_allowance_recorded", 1, "93a6656173742d32cd0fa003"),
            ("quota_allowance_released", 1, "91a6656173742d32"),
        ],
    );
}
