use super::*;
use crescent_actors::{DecodeError, DomainEvent};

fn revoke(id: &str, exp: Option<u64>) -> RevocationCommand {
    RevocationCommand::Revoke {
        token_id: id.into(),
        expires_secs: exp,
    }
}

fn given(events: &[RevocationEvent]) -> RevocationList {
    crescent_actors::testing::state_after(events)
}

fn revoked(id: &str, exp: Option<u64>, at_ms: i64) -> RevocationEvent {
    RevocationEvent::Revoked(TokenRevoked {
        token_id: id.into(),
        expires_secs: exp,
        at_ms,
    })
}

#[test]
fn revoking_records_the_id_once() {
    let s = given(&[]);
    let events = s.decide(&revoke("t1", Some(50)), &Ctx::at(7)).unwrap();
    assert_eq!(events, vec![revoked("t1", Some(50), 7)]);
    let s = given(&events);
    assert!(s.is_revoked("t1") && !s.is_revoked("t2"));
    assert_eq!(s.decide(&revoke("t1", None), &Ctx::at(8)), Ok(vec![]));
}

#[test]
fn bad_ids_are_refused() {
    let s = given(&[]);
    assert_eq!(
        s.decide(&revoke("", None), &Ctx::at(0)),
        Err(RevocationError::BadTokenId)
    );
    let long = "x".repeat(MAX_TOKEN_ID_BYTES + 1);
    assert_eq!(
        s.decide(&revoke(&long, None), &Ctx::at(0)),
        Err(RevocationError::BadTokenId)
    );
    assert_eq!(
        RevocationError::BadTokenId.wire_code(),
        ErrorCode::InvalidArgument
    );
}

#[test]
fn pruning_drops_only_entries_already_expired() {
    let s = given(&[
        revoked("old", Some(10), 1),
        revoked("new", Some(100), 2),
        revoked("forever", None, 3),
    ]);
    let cmd = RevocationCommand::Prune { now_secs: 50 };
    let events = s.decide(&cmd, &Ctx::at(9)).unwrap();
    assert_eq!(
        events,
        vec![RevocationEvent::Pruned(RevocationsPruned {
            expired_before_secs: 50
        })]
    );
    let mut s = s;
    s.apply(&events[0]);
    assert!(!s.is_revoked("old") && s.is_revoked("new") && s.is_revoked("forever"));
    assert_eq!(s.decide(&cmd, &Ctx::at(9)), Ok(vec![]));
}

#[test]
fn events_round_trip_and_unknown_versions_fail_closed() {
    for e in [
        revoked("t", Some(3), 4),
        revoked("u", None, 5),
        RevocationEvent::Pruned(RevocationsPruned {
            expired_before_secs: 9,
        }),
    ] {
        assert_eq!(
            RevocationEvent::decode(e.kind(), 1, &e.encode()).unwrap(),
            e
        );
        assert!(matches!(
            RevocationEvent::decode(e.kind(), 2, &e.encode()),
            Err(DecodeError::UnsupportedVersion { .. })
        ));
    }
    assert!(matches!(
        RevocationEvent::decode("nope", 1, &[]),
        Err(DecodeError::UnknownKind { .. })
    ));
    assert!(RevocationEvent::decode(TOKEN_REVOKED, 1, b"\xc1").is_err());
}

/// The journal form is pinned: journals of earlier builds must replay (docs/architecture.md,
/// "Aggregates"), and the schema is what the HA handshake compares (docs/ha.md, "Event versions
/// in a mixed pair").
#[test]
fn the_schema_and_the_journal_form_of_every_kind_are_pinned() {
    assert_eq!(
        RevocationEvent::schema(),
        &[("token_revoked", 1), ("revocations_pruned", 1)]
    );
    let events = [
        revoked("t1", Some(50), 7),
        revoked("t2", None, 8),
        RevocationEvent::Pruned(RevocationsPruned {
            expired_before_secs: 50,
        }),
    ];
    crescent_actors::testing::assert_journal_form(
        &events,
        &[
            ("token_revoked", 1, "93a274313207"),
            ("token_revoked", 1, "93a27432c008"),
            ("revocations_pruned", 1, "9132"),
        ],
    );
}
