//! Given/when/then tests of the operation state machine after reserve: publish, finalize,
//! abort, expiry and pruning, with the exact events.

use super::tests::*;
use super::*;
use crate::testing::{given, Given};

fn publish(op: &str, rv: u64) -> QuotaCommand {
    QuotaCommand::Publish {
        op_id: op.into(),
        route_version: rv,
        deadline_ms: DEADLINE + 1_000,
    }
}

fn finalize(op: &str, rv: u64) -> QuotaCommand {
    QuotaCommand::Finalize {
        op_id: op.into(),
        route_version: rv,
    }
}

fn abort(op: &str, reason: AbortReason) -> QuotaCommand {
    QuotaCommand::Abort {
        op_id: op.into(),
        reason,
    }
}

fn expire(now_ms: i64, limit: u32) -> QuotaCommand {
    QuotaCommand::ExpireDue { now_ms, limit }
}

fn transition(op: &str, state: &'static str, action: &'static str) -> QuotaError {
    QuotaError::InvalidTransition {
        op_id: op.into(),
        state,
        action,
    }
}

fn route_conflict(op: &str, published: u64, offered: u64) -> QuotaError {
    QuotaError::OperationConflict {
        op_id: op.into(),
        reason: format!("published route version Some({published}), not {offered}"),
    }
}

/// `with_a` plus `op` reserved as given.
fn with_reserved(op_event: QuotaEvent) -> Vec<QuotaEvent> {
    let mut events = with_a();
    events.push(op_event);
    events
}

fn grow_a() -> QuotaEvent {
    reserved("p1", "a", OpKind::Overwrite, 500, (300, Some(7)), (200, 0))
}

#[test]
fn publish_moves_pending_to_publishing_and_out_of_the_expiry_index() {
    let state = given::<QuotaRoot>(with_reserved(grow_a()))
        .when(publish("p1", 8))
        .then(vec![publishing("p1", 8)]);
    let op = state.operation("p1").unwrap();
    assert_eq!((op.state, op.route_version), (OpState::Publishing, Some(8)));
    assert_eq!(
        (state.pending_operations(), state.in_doubt_operations()),
        (0, 1)
    );
    assert_eq!(state.pending_bytes(), 200, "still charged while in doubt");
    assert!(state.due_pending(i64::MAX, 10).is_empty());
    assert_eq!(state.due_publishing(DEADLINE + 1_000, 10)[0].op_id, "p1");
    assert!(state.due_publishing(DEADLINE + 999, 10).is_empty());
}

#[test]
fn publish_is_idempotent_for_its_version_and_refused_after_abort() {
    let mut events = with_reserved(grow_a());
    events.push(publishing("p1", 8));
    given::<QuotaRoot>(events.clone())
        .when(publish("p1", 8))
        .then(vec![]);
    given::<QuotaRoot>(events)
        .when(publish("p1", 9))
        .then_error(route_conflict("p1", 8, 9));
    let mut events = with_reserved(grow_a());
    events.push(aborted("p1", "a", AbortReason::Expired, 200, 0));
    given::<QuotaRoot>(events)
        .when(publish("p1", 8))
        .then_error(transition("p1", "aborted", "publish"));
    given::<QuotaRoot>(with_a())
        .when(publish("nope", 8))
        .then_error(QuotaError::NotFound {
            op_id: "nope".into(),
        });
}

#[test]
fn finalizing_a_create_charges_its_size_and_one_object() {
    let mut events = with_reserved(reserved(
        "p1",
        "b",
        OpKind::Create,
        200,
        (0, None),
        (200, 1),
    ));
    events.push(publishing("p1", 8));
    let state = given::<QuotaRoot>(events)
        .when(finalize("p1", 8))
        .then(vec![finalized("p1", "b", 8, 200, 1)]);
    assert_eq!((state.used_bytes(), state.used_objects()), (500, 2));
    assert_eq!((state.pending_bytes(), state.pending_objects()), (0, 0));
    assert_eq!(
        state.object("b"),
        Some(&ObjectAccount {
            bytes: 200,
            version: 8,
            op_id: "p1".into()
        })
    );
    assert_eq!(state.lock_holder("b"), None);
    assert_eq!(state.in_doubt_operations(), 0);
}

#[test]
fn finalizing_an_overwrite_charges_the_new_size_minus_the_committed_one() {
    let mut events = with_reserved(grow_a());
    events.push(publishing("p1", 8));
    let state = given::<QuotaRoot>(events)
        .when(finalize("p1", 8))
        .then(vec![finalized("p1", "a", 8, 200, 0)]);
    assert_eq!((state.used_bytes(), state.used_objects()), (500, 1));
    assert_eq!(state.pending_bytes(), 0);
    assert_eq!(state.object("a").unwrap().bytes, 500);
    let mut events = with_reserved(reserved(
        "p1",
        "a",
        OpKind::Overwrite,
        100,
        (300, Some(7)),
        (0, 0),
    ));
    events.push(publishing("p1", 8));
    let state = given::<QuotaRoot>(events)
        .when(finalize("p1", 8))
        .then(vec![finalized("p1", "a", 8, -200, 0)]);
    assert_eq!(
        (state.used_bytes(), state.object("a").unwrap().version),
        (100, 8)
    );
}

#[test]
fn finalizing_a_delete_refunds_the_committed_row_once() {
    let mut events = with_reserved(reserved(
        "d1",
        "a",
        OpKind::Delete,
        0,
        (300, Some(7)),
        (0, 0),
    ));
    events.push(publishing("d1", 8));
    let state = given::<QuotaRoot>(events)
        .when(finalize("d1", 8))
        .then(vec![finalized("d1", "a", 8, -300, -1)]);
    assert_eq!((state.used_bytes(), state.used_objects()), (0, 0));
    assert_eq!(state.object("a"), None);
    // The finalize retried: nothing. A second delete of the key: nothing left to refund.
    let state = Given::state(state).when(finalize("d1", 8)).then(vec![]);
    let state = Given::state(state)
        .when(QuotaCommand::Reserve {
            item: item("d2", "a", ObjectChange::Delete),
            deadline_ms: DEADLINE,
        })
        .then(vec![reserved(
            "d2",
            "a",
            OpKind::Delete,
            0,
            (0, None),
            (0, 0),
        )]);
    let state = Given::state(state)
        .when(publish("d2", 9))
        .then(vec![publishing("d2", 9)]);
    let state = Given::state(state)
        .when(finalize("d2", 9))
        .then(vec![finalized("d2", "a", 9, 0, 0)]);
    assert_eq!((state.used_bytes(), state.used_objects()), (0, 0));
}

#[test]
fn finalize_needs_the_published_version_of_a_publishing_operation() {
    given::<QuotaRoot>(with_reserved(grow_a()))
        .when(finalize("p1", 8))
        .then_error(transition("p1", "pending", "finalize"));
    let mut events = with_reserved(grow_a());
    events.push(publishing("p1", 8));
    given::<QuotaRoot>(events.clone())
        .when(finalize("p1", 9))
        .then_error(route_conflict("p1", 8, 9));
    events.push(finalized("p1", "a", 8, 200, 0));
    given::<QuotaRoot>(events.clone())
        .when(finalize("p1", 8))
        .then(vec![]);
    given::<QuotaRoot>(events)
        .when(finalize("p1", 9))
        .then_error(route_conflict("p1", 8, 9));
    let mut events = with_reserved(grow_a());
    events.push(aborted("p1", "a", AbortReason::Failed, 200, 0));
    given::<QuotaRoot>(events)
        .when(finalize("p1", 8))
        .then_error(transition("p1", "aborted", "finalize"));
    given::<QuotaRoot>(with_a())
        .when(finalize("nope", 1))
        .then_error(QuotaError::NotFound {
            op_id: "nope".into(),
        });
}

#[test]
fn finalize_refuses_when_the_committed_row_changed_under_the_operation() {
    // Only a history that broke the key lock can get here: both reserved against version 7.
    let mut events = with_reserved(grow_a());
    events.push(reserved(
        "d1",
        "a",
        OpKind::Delete,
        0,
        (300, Some(7)),
        (0, 0),
    ));
    events.extend([
        publishing("p1", 8),
        finalized("p1", "a", 8, 200, 0),
        publishing("d1", 9),
    ]);
    given::<QuotaRoot>(events)
        .when(finalize("d1", 9))
        .then_error(QuotaError::OperationConflict {
            op_id: "d1".into(),
            reason: "reserved against accounting version Some(7) of \"a\", now Some(8)".into(),
        });
}

#[test]
fn abort_releases_a_pending_reservation_and_unlocks_the_key() {
    let events = with_reserved(reserved(
        "p1",
        "b",
        OpKind::Create,
        200,
        (0, None),
        (200, 1),
    ));
    for reason in [AbortReason::Revoked, AbortReason::Failed] {
        let state = given::<QuotaRoot>(events.clone())
            .when(abort("p1", reason))
            .then(vec![aborted("p1", "b", reason, 200, 1)]);
        assert_eq!((state.pending_bytes(), state.pending_objects()), (0, 0));
        assert_eq!((state.used_bytes(), state.used_objects()), (300, 1));
        assert_eq!(state.lock_holder("b"), None);
        assert_eq!(state.operation("p1").unwrap().abort_reason, Some(reason));
        // Repeated (with any reason): nothing more.
        Given::state(state)
            .when(abort("p1", AbortReason::Failed))
            .then(vec![]);
    }
}

#[test]
fn abort_is_refused_once_publishing_began_or_finished() {
    let mut events = with_reserved(grow_a());
    events.push(publishing("p1", 8));
    given::<QuotaRoot>(events.clone())
        .when(abort("p1", AbortReason::Revoked))
        .then_error(transition("p1", "publishing", "abort"));
    events.push(finalized("p1", "a", 8, 200, 0));
    given::<QuotaRoot>(events)
        .when(abort("p1", AbortReason::Failed))
        .then_error(transition("p1", "finalized", "abort"));
    given::<QuotaRoot>(with_a())
        .when(abort("nope", AbortReason::Failed))
        .then_error(QuotaError::NotFound {
            op_id: "nope".into(),
        });
    given::<QuotaRoot>(with_reserved(grow_a()))
        .when(abort("p1", AbortReason::Expired))
        .then_error(QuotaError::InvalidArgument {
            field: "reason",
            reason: "expiry is decided from the deadline by expire_due".into(),
        });
}

#[test]
fn expire_due_aborts_pending_operations_at_or_past_their_deadline_in_order() {
    let mut events = with_a();
    let at = |op: &str, key: &str, deadline_ms| {
        QuotaEvent::Reserved(Reserved {
            deadline_ms,
            ..match reserved(op, key, OpKind::Create, 10, (0, None), (10, 1)) {
                QuotaEvent::Reserved(r) => r,
                _ => unreachable!(),
            }
        })
    };
    events.extend([at("p3", "c", 300), at("p1", "b", 200), at("p2", "d", 300)]);
    events.push(reserved("p4", "e", OpKind::Create, 10, (0, None), (10, 1)));
    events.push(publishing("p4", 3));
    let state = given::<QuotaRoot>(events.clone())
        .when(expire(300, 2))
        .then(vec![
            aborted("p1", "b", AbortReason::Expired, 10, 1),
            aborted("p2", "d", AbortReason::Expired, 10, 1),
        ]);
    let state = Given::state(state).when(expire(300, 10)).then(vec![aborted(
        "p3",
        "c",
        AbortReason::Expired,
        10,
        1,
    )]);
    // Publishing p4 is past every deadline but is never expired.
    let state = Given::state(state).when(expire(i64::MAX, 10)).then(vec![]);
    assert_eq!((state.pending_bytes(), state.pending_objects()), (10, 1));
    given::<QuotaRoot>(events.clone())
        .when(expire(199, 10))
        .then(vec![]);
    given::<QuotaRoot>(events)
        .when(expire(300, 0))
        .then_error(QuotaError::InvalidArgument {
            field: "limit",
            reason: "0, 1..=1024 allowed".into(),
        });
}

#[test]
fn an_expired_operation_frees_its_key_for_the_next_writer() {
    let state = given::<QuotaRoot>(with_reserved(grow_a()))
        .when(expire(DEADLINE, 10))
        .then(vec![aborted("p1", "a", AbortReason::Expired, 200, 0)]);
    Given::state(state)
        .when(put("p2", "a", 700))
        .then(vec![reserved(
            "p2",
            "a",
            OpKind::Overwrite,
            700,
            (300, Some(7)),
            (400, 0),
        )]);
}

#[test]
fn prune_forgets_the_oldest_terminal_operations_beyond_keep() {
    let mut events = with_a();
    events.push(reserved("p1", "b", OpKind::Create, 1, (0, None), (1, 1)));
    events.push(aborted("p1", "b", AbortReason::Failed, 1, 1));
    events.push(reserved("p2", "b", OpKind::Create, 1, (0, None), (1, 1)));
    let state = given::<QuotaRoot>(events)
        .when(QuotaCommand::PruneTerminal { keep: 1 })
        .then(vec![QuotaEvent::TerminalPruned(TerminalPruned {
            op_ids: vec!["c1".into()],
        })]);
    assert!(state.operation("c1").is_none());
    assert_eq!(
        state.object("a").unwrap().op_id,
        "c1",
        "the committed row stays"
    );
    assert!(state.operation("p1").is_some() && state.operation("p2").is_some());
    assert_eq!(state.terminal_operations(), 1);
    let state = Given::state(state)
        .when(QuotaCommand::PruneTerminal { keep: 1 })
        .then(vec![]);
    let state = Given::state(state)
        .when(QuotaCommand::PruneTerminal { keep: 0 })
        .then(vec![QuotaEvent::TerminalPruned(TerminalPruned {
            op_ids: vec!["p1".into()],
        })]);
    // Pending p2 is never pruned.
    assert_eq!(state.operation("p2").unwrap().state, OpState::Pending);
    Given::state(state)
        .when(QuotaCommand::PruneTerminal { keep: 0 })
        .then(vec![]);
}
