use super::*;
use crate::DomainEvent;

fn given(events: &[RemovedPutsEvent]) -> RemovedPuts {
    crate::testing::state_after(events)
}

fn removed(owner: &str, ids: &[u64]) -> RemovedPutsEvent {
    RemovedPutsEvent::Removed(OwnerPutIds {
        owner: owner.into(),
        put_ids: ids.to_vec(),
    })
}

fn remember(pairs: &[(&str, &[u64])]) -> RemovedPutsCommand {
    RemovedPutsCommand::Remember(
        pairs
            .iter()
            .map(|(o, ids)| (o.to_string(), ids.to_vec()))
            .collect(),
    )
}

/// One event of each kind, in schema order.
fn one_of_each_kind() -> [RemovedPutsEvent; 4] {
    [
        removed("a", &[1, 2]),
        RemovedPutsEvent::Settled(OwnerPutIds {
            owner: "a".into(),
            put_ids: vec![2],
        }),
        RemovedPutsEvent::SettledBelow(SettledBelow {
            owner: "a".into(),
            below: 9,
        }),
        RemovedPutsEvent::OwnerDropped(OwnerDropped { owner: "a".into() }),
    ]
}

fn when(s: &RemovedPuts, cmd: RemovedPutsCommand) -> Vec<RemovedPutsEvent> {
    s.decide(&cmd, &Ctx::at(0)).unwrap()
}

#[test]
fn remember_journals_only_new_put_ids_per_owner() {
    let s = given(&[removed("a", &[5])]);
    assert_eq!(
        when(&s, remember(&[("a", &[5, 7, 6]), ("b", &[9]), ("c", &[])])),
        vec![removed("a", &[6, 7]), removed("b", &[9])]
    );
    assert!(when(&s, remember(&[("a", &[5])])).is_empty(), "a repeat");
    assert_eq!(
        s.decide(&remember(&[("a", &[0])]), &Ctx::at(0)),
        Err(RemovedPutsError::ZeroPutId)
    );
    assert_eq!(
        s.decide(&remember(&[("", &[1])]), &Ctx::at(0)),
        Err(RemovedPutsError::EmptyOwner)
    );
}

#[test]
fn settling_forgets_exactly_what_the_owner_acknowledged() {
    let mut s = given(&[removed("a", &[5, 6, 7]), removed("b", &[8])]);
    let events = when(
        &s,
        RemovedPutsCommand::Settle {
            owner: "a".into(),
            put_ids: vec![6, 99],
        },
    );
    assert_eq!(
        events,
        vec![RemovedPutsEvent::Settled(OwnerPutIds {
            owner: "a".into(),
            put_ids: vec![6]
        })]
    );
    s.apply(&events[0]);
    assert_eq!(s.all_put_ids().collect::<Vec<_>>(), vec![5, 7, 8]);
    // Unknown owner or put ids: nothing to journal.
    assert!(when(
        &s,
        RemovedPutsCommand::Settle {
            owner: "z".into(),
            put_ids: vec![5]
        }
    )
    .is_empty());
    let events = when(
        &s,
        RemovedPutsCommand::Settle {
            owner: "b".into(),
            put_ids: vec![8],
        },
    );
    s.apply(&events[0]);
    assert!(!s.by_owner.contains_key("b"), "an empty owner is dropped");
}

#[test]
fn a_completed_replay_settles_every_earlier_run() {
    let run2 = 2u64 << 40;
    let mut s = given(&[removed("a", &[5, run2 + 1]), removed("b", &[6])]);
    let cmd = RemovedPutsCommand::SettleBelow {
        owner: "a".into(),
        below: run2,
    };
    let events = when(&s, cmd.clone());
    assert_eq!(
        events,
        vec![RemovedPutsEvent::SettledBelow(SettledBelow {
            owner: "a".into(),
            below: run2
        })]
    );
    s.apply(&events[0]);
    assert_eq!(
        s.by_owner["a"].iter().copied().collect::<Vec<_>>(),
        vec![run2 + 1]
    );
    assert!(when(&s, cmd).is_empty(), "nothing older is left");
    let events = when(&s, RemovedPutsCommand::DropOwner { owner: "b".into() });
    s.apply(&events[0]);
    assert_eq!(s.len(), 1);
    assert!(when(&s, RemovedPutsCommand::DropOwner { owner: "b".into() }).is_empty());
}

#[test]
fn events_round_trip_and_unknown_versions_fail_closed() {
    for e in one_of_each_kind() {
        let back = RemovedPutsEvent::decode(e.kind(), 1, &e.encode()).unwrap();
        assert_eq!(back, e);
        assert!(RemovedPutsEvent::decode(e.kind(), 2, &e.encode()).is_err());
    }
    assert!(RemovedPutsEvent::decode("nope", 1, &[]).is_err());
}

/// The journal form is pinned: journals of earlier builds must replay (docs/architecture.md,
/// "Aggregates"), and the schema is what the HA handshake compares (docs/ha.md, "Event versions
/// in a mixed pair").
#[test]
fn the_schema_and_the_journal_form_of_every_kind_are_pinned() {
    assert_eq!(
        RemovedPutsEvent::schema(),
        &[
            ("puts_removed", 1),
            ("removals_settled", 1),
            ("removals_settled_below", 1),
            ("owner_removals_dropped", 1),
        ]
    );
    crate::testing::assert_journal_form(
        &one_of_each_kind(),
        &[
            ("puts_removed", 1, "92a161920102"),
            ("removals_settled", 1, "92a1619102"),
            ("removals_settled_below", 1, "92a16109"),
            ("owner_removals_dropped", 1, "91a161"),
        ],
    );
}
