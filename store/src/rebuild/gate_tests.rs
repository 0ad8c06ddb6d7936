use super::*;
use crescent_wire::rebuild::ReplayOutcome;

const T0: i64 = 1_700_000_000_000;

fn counts(replayed: u64) -> ReplayCounts {
    ReplayCounts {
        replayed,
        ..Default::default()
    }
}

#[test]
fn nothing_expected_is_serving_at_once() {
    let g = RebuildGate::begin(3, Vec::<String>::new(), T0, 120_000);
    assert_eq!(g.state(), GateState::Serving);
    assert!(g.admit(OperationClass::Object).is_ok());
    assert_eq!(RebuildGate::serving(3, T0).status().opened_at_ms, Some(T0));
}

#[test]
fn all_owners_complete_then_serving() {
    let mut g = RebuildGate::begin(7, ["a", "b"], T0, 120_000);
    assert_eq!(g.state(), GateState::Rebuilding);
    let e = g.admit(OperationClass::Object).unwrap_err();
    assert_eq!(e.code(), "UNAVAILABLE");
    assert!(e.to_string().starts_with("REBUILDING"), "{e}");
    assert_eq!(
        g.complete("a", 7, counts(5), T0 + 10).unwrap(),
        GateState::Rebuilding
    );
    // A repeat is a no-op; the first report stays.
    assert_eq!(
        g.complete("a", 7, counts(9), T0 + 11).unwrap(),
        GateState::Rebuilding
    );
    assert_eq!(g.reported("a"), Some(counts(5)));
    assert_eq!(g.status().owners_completed, 1);
    assert_eq!(g.status().waiting_for, vec!["b".to_string()]);
    assert_eq!(
        g.complete("b", 7, counts(1), T0 + 20).unwrap(),
        GateState::Serving
    );
    let s = g.status();
    assert_eq!((s.owners_expected, s.owners_completed), (2, 2));
    assert_eq!(s.opened_at_ms, Some(T0 + 20));
    assert!(g.admit(OperationClass::Object).is_ok());
}

#[test]
fn control_plane_is_admitted_while_rebuilding() {
    let g = RebuildGate::begin(1, ["a"], T0, 120_000);
    assert!(g.admit(OperationClass::ControlPlane).is_ok());
    assert!(g.admit(OperationClass::Object).is_err());
}

#[test]
fn an_owner_that_never_completes_opens_degraded_at_the_timeout() {
    let mut g = RebuildGate::begin(2, ["alive", "gone"], T0, 120_000);
    g.record_replay(&vec![EntryOutcome::of(ReplayOutcome::Replayed); 3]);
    // The live owner's completion counts at once, whatever the other does.
    g.complete("alive", 2, counts(3), T0 + 1_000).unwrap();
    assert_eq!(g.status().owners_completed, 1);
    assert_eq!(g.poll(T0 + 119_999), GateState::Rebuilding);
    assert_eq!(g.degraded_deadline_ms(), T0 + 120_000);
    assert_eq!(g.poll(T0 + 120_000), GateState::Degraded);
    assert!(g.admit(OperationClass::Object).is_ok());
    let s = g.status();
    assert_eq!(s.state, GateState::Degraded);
    assert_eq!((s.owners_expected, s.owners_completed), (2, 1));
    assert_eq!(s.entries.replayed, 3);
    assert_eq!(s.opened_at_ms, Some(T0 + 120_000));
    // The straggler still completes later: the gate is whole again.
    assert_eq!(
        g.complete("gone", 2, counts(0), T0 + 200_000).unwrap(),
        GateState::Serving
    );
    assert_eq!(g.status().opened_at_ms, Some(T0 + 120_000));
}

#[test]
fn a_lost_owner_stops_holding_the_gate_but_leaves_it_degraded() {
    let mut g = RebuildGate::begin(2, ["a", "b"], T0, 120_000);
    g.complete("a", 2, counts(1), T0).unwrap();
    assert_eq!(g.owner_lost("b", T0 + 5), GateState::Degraded);
    assert_eq!(g.status().owners_lost, 1);
    // Losing an owner that already completed changes nothing.
    let mut g = RebuildGate::begin(2, ["a", "b"], T0, 120_000);
    g.complete("a", 2, counts(1), T0).unwrap();
    assert_eq!(g.owner_lost("a", T0), GateState::Rebuilding);
}

#[test]
fn other_terms_and_unexpected_owners_do_not_move_the_gate() {
    let mut g = RebuildGate::begin(5, ["a"], T0, 120_000);
    let e = g.complete("a", 4, counts(1), T0).unwrap_err();
    assert_eq!(e.code(), "STALE_GENERATION");
    assert_eq!(
        g.complete("late-joiner", 5, counts(1), T0).unwrap(),
        GateState::Rebuilding
    );
    assert_eq!(g.status().owners_completed, 0);
    assert!(g.complete("", 5, counts(0), T0).is_err());
    assert!(g.is_waiting_for("a"));
}

#[test]
fn waiting_list_is_bounded() {
    let owners: Vec<String> = (0..100).map(|i| format!("o{i:03}")).collect();
    let g = RebuildGate::begin(1, owners, T0, 1);
    assert_eq!(g.status().waiting_for.len(), MAX_LISTED_OWNERS);
    assert_eq!(g.status().owners_expected, 100);
}
