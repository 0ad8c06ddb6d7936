//! Given/when/then tests of the journaled usage: write-behind records and the reconciliation
//! after a rebuild (docs/tenants.md, "Journaled usage and reconciliation").

use super::tests::with_a;
use super::*;
use crate::testing::{given, Given};

fn record(used_bytes: u64, used_objects: u64, at_ms: i64) -> QuotaCommand {
    QuotaCommand::RecordUsage {
        used_bytes,
        used_objects,
        at_ms,
    }
}

fn recorded(used_bytes: u64, used_objects: u64, at_ms: i64) -> QuotaEvent {
    QuotaEvent::UsageRecorded(UsageRecorded {
        used_bytes,
        used_objects,
        at_ms,
    })
}

fn reconcile(rebuilt_bytes: u64, rebuilt_objects: u64, at_ms: i64) -> QuotaCommand {
    QuotaCommand::ReconcileUsage {
        rebuilt_bytes,
        rebuilt_objects,
        at_ms,
    }
}

pub(super) fn reconciled(recorded: (u64, u64), rebuilt: (u64, u64), at_ms: i64) -> QuotaEvent {
    QuotaEvent::UsageReconciled(UsageReconciled {
        recorded_bytes: recorded.0,
        recorded_objects: recorded.1,
        rebuilt_bytes: rebuilt.0,
        rebuilt_objects: rebuilt.1,
        at_ms,
    })
}

#[test]
fn usage_is_recorded_only_when_it_changed() {
    let state = given::<QuotaRoot>(vec![])
        .when(record(0, 0, 10))
        .then(vec![]);
    assert_eq!(state.recorded_usage(), None, "nothing to record yet");
    let state = Given::state(state)
        .when(record(1000, 2, 20))
        .then(vec![recorded(1000, 2, 20)]);
    assert_eq!(
        state.recorded_usage(),
        Some(RecordedUsage {
            used_bytes: 1000,
            used_objects: 2,
            at_ms: 20
        })
    );
    let state = Given::state(state).when(record(1000, 2, 30)).then(vec![]);
    let state = Given::state(state)
        .when(record(0, 0, 40))
        .then(vec![recorded(0, 0, 40)]);
    assert_eq!(state.recorded_usage().map(|r| r.at_ms), Some(40));
}

#[test]
fn a_rebuild_that_brings_back_what_was_recorded_converges() {
    let state = given::<QuotaRoot>(vec![recorded(1000, 2, 20)])
        .when(reconcile(1000, 2, 50))
        .then(vec![reconciled((1000, 2), (1000, 2), 50)]);
    let r = state.last_reconciliation().unwrap();
    assert!(r.converged());
    assert_eq!(r.difference(), (0, 0));
}

#[test]
fn a_rebuild_that_differs_is_reported_and_becomes_the_record() {
    let state = given::<QuotaRoot>(vec![recorded(3000, 3, 20)])
        .when(reconcile(1000, 1, 50))
        .then(vec![reconciled((3000, 3), (1000, 1), 50)]);
    let r = state.last_reconciliation().unwrap();
    assert!(!r.converged());
    assert_eq!(
        r.difference(),
        (-2000, -2),
        "less came back than was recorded"
    );
    assert_eq!(
        state.recorded_usage(),
        Some(RecordedUsage {
            used_bytes: 1000,
            used_objects: 1,
            at_ms: 50
        }),
        "the next reconciliation starts from the rebuilt usage"
    );
    // A record of the same usage afterwards is nothing new.
    let state = Given::state(state).when(record(1000, 1, 60)).then(vec![]);
    // More came back than was recorded (puts after the last record): reported too.
    let state = Given::state(state)
        .when(reconcile(1500, 2, 70))
        .then(vec![reconciled((1000, 1), (1500, 2), 70)]);
    assert_eq!(state.last_reconciliation().unwrap().difference(), (500, 1));
}

#[test]
fn a_tenant_never_recorded_reconciles_only_if_something_came_back() {
    given::<QuotaRoot>(vec![])
        .when(reconcile(0, 0, 50))
        .then(vec![]);
    let state = given::<QuotaRoot>(vec![])
        .when(reconcile(700, 1, 50))
        .then(vec![reconciled((0, 0), (700, 1), 50)]);
    assert_eq!(state.last_reconciliation().unwrap().difference(), (700, 1));
}

#[test]
fn the_usage_record_is_apart_from_the_operations_accounting() {
    // The root's own operations keep their accounting; the record does not touch it.
    let mut events = with_a();
    events.push(recorded(5000, 9, 20));
    let state = given::<QuotaRoot>(events)
        .when(reconcile(4000, 8, 30))
        .then(vec![reconciled((5000, 9), (4000, 8), 30)]);
    assert_eq!((state.used_bytes(), state.used_objects()), (300, 1));
    assert_eq!(state.pending_bytes(), 0);
}
