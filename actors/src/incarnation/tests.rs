use super::*;
use crate::{DecodeError, DomainEvent};

fn ctx(term: u64, now_ms: i64) -> Ctx {
    Ctx {
        term,
        ..Ctx::at(now_ms)
    }
}

#[test]
fn each_begin_is_one_more_under_its_term() {
    let mut s = NodeIncarnation::default();
    let events = s.decide(&IncarnationCommand::Begin, &ctx(3, 10)).unwrap();
    assert_eq!(
        events,
        vec![IncarnationEvent::Begun(IncarnationBegun {
            incarnation: 1,
            term: 3,
            at_ms: 10
        })]
    );
    s.apply(&events[0]);
    let events = s.decide(&IncarnationCommand::Begin, &ctx(3, 20)).unwrap();
    s.apply(&events[0]);
    assert_eq!((s.incarnation, s.term, s.began_at_ms), (2, 3, 20));
}

#[test]
fn an_older_term_and_an_exhausted_counter_are_refused() {
    let s = NodeIncarnation {
        incarnation: 4,
        term: 9,
        began_at_ms: 0,
    };
    assert_eq!(
        s.decide(&IncarnationCommand::Begin, &ctx(8, 0)),
        Err(IncarnationError::StaleTerm {
            term: 8,
            current: 9
        })
    );
    let full = NodeIncarnation {
        incarnation: MAX_INCARNATION,
        ..s
    };
    assert_eq!(
        full.decide(&IncarnationCommand::Begin, &ctx(10, 0)),
        Err(IncarnationError::Exhausted(MAX_INCARNATION))
    );
    assert_eq!(
        IncarnationError::Exhausted(1).wire_code(),
        ErrorCode::Unavailable
    );
}

#[test]
fn events_round_trip_and_unknown_versions_fail_closed() {
    let e = IncarnationEvent::Begun(IncarnationBegun {
        incarnation: 7,
        term: 2,
        at_ms: 5,
    });
    let back = IncarnationEvent::decode(e.kind(), 1, &e.encode()).unwrap();
    assert_eq!(back, e);
    assert!(matches!(
        IncarnationEvent::decode(INCARNATION_BEGUN, 2, &e.encode()),
        Err(DecodeError::UnsupportedVersion { .. })
    ));
    assert!(matches!(
        IncarnationEvent::decode("nope", 1, &e.encode()),
        Err(DecodeError::UnknownKind { .. })
    ));
    assert!(IncarnationEvent::decode(INCARNATION_BEGUN, 1, b"\xc1").is_err());
}

/// The journal form is pinned: journals of earlier builds must replay (docs/architecture.md,
/// "Aggregates"), and the schema is what the HA handshake compares (docs/ha.md, "Event versions
/// in a mixed pair").
#[test]
fn the_schema_and_the_journal_form_of_every_kind_are_pinned() {
    assert_eq!(IncarnationEvent::schema(), &[("incarnation_begun", 1)]);
    let events = [IncarnationEvent::Begun(IncarnationBegun {
        incarnation: 7,
        term: 2,
        at_ms: 5,
    })];
    crate::testing::assert_journal_form(&events, &[("incarnation_begun", 1, "93070205")]);
}
