//! Given/when/then tests of policy and admission (reserve, batch reserve) and the event codec,
//! with the exact events. Shared fixtures for `tests_ops.rs` live here.

use super::*;
use crate::testing::{given, Given};

pub(super) const DEADLINE: i64 = 5_000;

pub(super) fn limits(max_bytes: Option<u64>, max_objects: Option<u64>) -> QuotaLimits {
    QuotaLimits {
        max_bytes,
        max_objects,
    }
}

pub(super) fn set_policy(
    max_bytes: u64,
    max_objects: Option<u64>,
    mode: PolicyMode,
) -> QuotaCommand {
    QuotaCommand::SetPolicy {
        limits: limits(Some(max_bytes), max_objects),
        mode,
    }
}

pub(super) fn policy_set(max_bytes: u64, max_objects: Option<u64>, version: u64) -> QuotaEvent {
    QuotaEvent::PolicySet(PolicySet {
        max_bytes: Some(max_bytes),
        max_objects,
        schema_version: 1,
        policy_version: version,
        fingerprint: limits(Some(max_bytes), max_objects).fingerprint(),
    })
}

pub(super) fn item(op: &str, key: &str, change: ObjectChange) -> ReserveItem {
    ReserveItem {
        op_id: op.into(),
        key: key.into(),
        change,
    }
}

pub(super) fn put(op: &str, key: &str, size: u64) -> QuotaCommand {
    QuotaCommand::Reserve {
        item: item(op, key, ObjectChange::Put { size }),
        deadline_ms: DEADLINE,
    }
}

pub(super) fn del(op: &str, key: &str) -> QuotaCommand {
    QuotaCommand::Reserve {
        item: item(op, key, ObjectChange::Delete),
        deadline_ms: DEADLINE,
    }
}

/// A `quota_reserved` with explicit facts: `pred` = (bytes, version) of the committed row,
/// `held` = (bytes, objects) reserved.
pub(super) fn reserved(
    op: &str,
    key: &str,
    kind: OpKind,
    next: u64,
    pred: (u64, Option<u64>),
    held: (u64, u64),
) -> QuotaEvent {
    QuotaEvent::Reserved(Reserved {
        op_id: op.into(),
        key: key.into(),
        kind,
        next_bytes: next,
        predecessor_bytes: pred.0,
        predecessor_version: pred.1,
        reserved_bytes: held.0,
        reserved_objects: held.1,
        deadline_ms: DEADLINE,
    })
}

pub(super) fn publishing(op: &str, route_version: u64) -> QuotaEvent {
    QuotaEvent::Publishing(Publishing {
        op_id: op.into(),
        route_version,
        deadline_ms: DEADLINE + 1_000,
    })
}

pub(super) fn finalized(op: &str, key: &str, rv: u64, bytes: i64, objects: i64) -> QuotaEvent {
    QuotaEvent::Finalized(Finalized {
        op_id: op.into(),
        key: key.into(),
        route_version: rv,
        bytes_delta: bytes,
        objects_delta: objects,
    })
}

pub(super) fn aborted(
    op: &str,
    key: &str,
    reason: AbortReason,
    bytes: u64,
    objects: u64,
) -> QuotaEvent {
    QuotaEvent::Aborted(Aborted {
        op_id: op.into(),
        key: key.into(),
        reason,
        released_bytes: bytes,
        released_objects: objects,
    })
}

/// The events of a create of `key` (`size` bytes, route version `rv`) that went all the way.
pub(super) fn created(op: &str, key: &str, size: u64, rv: u64) -> Vec<QuotaEvent> {
    vec![
        reserved(op, key, OpKind::Create, size, (0, None), (size, 1)),
        publishing(op, rv),
        finalized(op, key, rv, size as i64, 1),
    ]
}

/// A policy of 1000 bytes and 3 objects, and `a` committed at 300 bytes (version 7).
pub(super) fn with_a() -> Vec<QuotaEvent> {
    let mut events = vec![policy_set(1000, Some(3), 1)];
    events.extend(created("c1", "a", 300, 7));
    events
}

pub(super) fn exceeded(
    limit: QuotaLimit,
    key: &str,
    max: u64,
    used: u64,
    pending: u64,
    requested: u64,
) -> QuotaError {
    QuotaError::QuotaExceeded {
        limit,
        key: key.into(),
        max,
        used,
        pending,
        requested,
    }
}

pub(super) fn invalid(field: &'static str, reason: &str) -> QuotaError {
    QuotaError::InvalidArgument {
        field,
        reason: reason.into(),
    }
}

#[test]
fn bootstrap_creates_a_missing_policy_and_accepts_only_the_same_limits_after() {
    let state = given::<QuotaRoot>(vec![])
        .when(set_policy(1000, None, PolicyMode::Bootstrap))
        .then(vec![policy_set(1000, None, 1)]);
    let p = state.policy().unwrap();
    assert_eq!(
        p.fingerprint, "273479d3a6bd8cd64f529544f5cf73156ebf02556502c1935e4f925d4c277634",
        "sha256 of quota-policy/v1/max_bytes=1000/max_objects=unlimited"
    );
    let state = Given::state(state)
        .when(set_policy(1000, None, PolicyMode::Bootstrap))
        .then(vec![]);
    Given::state(state)
        .when(set_policy(2000, None, PolicyMode::Bootstrap))
        .then_error(QuotaError::PolicyMismatch {
            policy_version: 1,
            stored: limits(Some(1000), None),
            stored_fingerprint: limits(Some(1000), None).fingerprint(),
            offered: limits(Some(2000), None),
            offered_fingerprint: limits(Some(2000), None).fingerprint(),
        });
}

#[test]
fn an_admin_change_creates_or_replaces_and_bumps_the_version() {
    let state = given::<QuotaRoot>(vec![])
        .when(set_policy(1000, Some(5), PolicyMode::Change))
        .then(vec![policy_set(1000, Some(5), 1)]);
    let state = Given::state(state)
        .when(set_policy(500, None, PolicyMode::Change))
        .then(vec![policy_set(500, None, 2)]);
    assert_eq!(state.limits(), limits(Some(500), None));
    assert_eq!(state.policy().unwrap().policy_version, 2);
    Given::state(state)
        .when(set_policy(500, None, PolicyMode::Change))
        .then(vec![]);
}

#[test]
fn unlimited_is_a_policy_too_and_limits_are_bounded() {
    let unlimited = QuotaCommand::SetPolicy {
        limits: limits(None, None),
        mode: PolicyMode::Bootstrap,
    };
    let state = given::<QuotaRoot>(vec![])
        .when(unlimited)
        .then(vec![QuotaEvent::PolicySet(PolicySet {
            max_bytes: None,
            max_objects: None,
            schema_version: 1,
            policy_version: 1,
            fingerprint: "3e31ef0e704bc73971b59b4a37ca07746f7532e8ea743aa795ac681c108c4eee".into(),
        })]);
    assert_eq!(state.limits(), QuotaLimits::default());
    given::<QuotaRoot>(vec![])
        .when(set_policy(MAX_BYTES + 1, None, PolicyMode::Change))
        .then_error(invalid(
            "max_bytes",
            "9223372036854775808, at most 9223372036854775807",
        ));
}

#[test]
fn a_create_reserves_its_bytes_and_one_object_and_locks_the_key() {
    let state = given::<QuotaRoot>(with_a())
        .when(put("p1", "b", 200))
        .then(vec![reserved(
            "p1",
            "b",
            OpKind::Create,
            200,
            (0, None),
            (200, 1),
        )]);
    assert_eq!((state.pending_bytes(), state.pending_objects()), (200, 1));
    assert_eq!((state.used_bytes(), state.used_objects()), (300, 1));
    assert_eq!(state.lock_holder("b"), Some("p1"));
    assert_eq!(state.pending_operations(), 1);
}

#[test]
fn an_overwrite_reserves_only_the_growth_over_the_committed_row() {
    given::<QuotaRoot>(with_a())
        .when(put("p1", "a", 500))
        .then(vec![reserved(
            "p1",
            "a",
            OpKind::Overwrite,
            500,
            (300, Some(7)),
            (200, 0),
        )]);
    let state = given::<QuotaRoot>(with_a())
        .when(put("p1", "a", 100))
        .then(vec![reserved(
            "p1",
            "a",
            OpKind::Overwrite,
            100,
            (300, Some(7)),
            (0, 0),
        )]);
    assert_eq!(state.pending_bytes(), 0);
}

#[test]
fn a_delete_reserves_nothing_and_records_the_row_it_will_refund() {
    given::<QuotaRoot>(with_a())
        .when(del("d1", "a"))
        .then(vec![reserved(
            "d1",
            "a",
            OpKind::Delete,
            0,
            (300, Some(7)),
            (0, 0),
        )]);
    // A key with no committed row: nothing to refund.
    given::<QuotaRoot>(with_a())
        .when(del("d1", "zz"))
        .then(vec![reserved(
            "d1",
            "zz",
            OpKind::Delete,
            0,
            (0, None),
            (0, 0),
        )]);
}

#[test]
fn admission_counts_used_plus_pending_plus_the_positive_delta() {
    let mut events = with_a();
    events.push(reserved(
        "p1",
        "b",
        OpKind::Create,
        400,
        (0, None),
        (400, 1),
    ));
    // 300 used + 400 pending + 300 = 1000: admitted.
    given::<QuotaRoot>(events.clone())
        .when(put("p2", "c", 300))
        .then(vec![reserved(
            "p2",
            "c",
            OpKind::Create,
            300,
            (0, None),
            (300, 1),
        )]);
    given::<QuotaRoot>(events.clone())
        .when(put("p2", "c", 301))
        .then_error(exceeded(QuotaLimit::MaxBytes, "c", 1000, 300, 400, 301));
    // An overwrite of a growing 300 -> 601 asks for 301.
    given::<QuotaRoot>(events)
        .when(put("p2", "a", 601))
        .then_error(exceeded(QuotaLimit::MaxBytes, "a", 1000, 300, 400, 301));
}

#[test]
fn admission_counts_objects_and_overwrites_take_none() {
    let mut events = with_a();
    events.extend(created("c2", "b", 10, 8));
    events.push(reserved("p1", "c", OpKind::Create, 10, (0, None), (10, 1)));
    given::<QuotaRoot>(events.clone())
        .when(put("p2", "d", 1))
        .then_error(exceeded(QuotaLimit::MaxObjects, "d", 3, 2, 1, 1));
    given::<QuotaRoot>(events)
        .when(put("p2", "b", 20))
        .then(vec![reserved(
            "p2",
            "b",
            OpKind::Overwrite,
            20,
            (10, Some(8)),
            (10, 0),
        )]);
}

#[test]
fn an_object_larger_than_max_bytes_is_refused_at_once() {
    given::<QuotaRoot>(with_a())
        .when(put("p1", "b", 1001))
        .then_error(QuotaError::ObjectTooLarge {
            key: "b".into(),
            size: 1001,
            max_bytes: 1000,
        });
    // Even an overwrite that would shrink usage elsewhere: the object alone cannot fit.
    given::<QuotaRoot>(with_a())
        .when(put("p1", "a", 1001))
        .then_error(QuotaError::ObjectTooLarge {
            key: "a".into(),
            size: 1001,
            max_bytes: 1000,
        });
}

#[test]
fn shrinking_and_deleting_are_admitted_above_a_lowered_limit() {
    let mut events = with_a();
    events.push(policy_set(100, Some(3), 2));
    given::<QuotaRoot>(events.clone())
        .when(put("p1", "b", 1))
        .then_error(exceeded(QuotaLimit::MaxBytes, "b", 100, 300, 0, 1));
    given::<QuotaRoot>(events.clone())
        .when(put("p1", "a", 50))
        .then(vec![reserved(
            "p1",
            "a",
            OpKind::Overwrite,
            50,
            (300, Some(7)),
            (0, 0),
        )]);
    given::<QuotaRoot>(events)
        .when(del("d1", "a"))
        .then(vec![reserved(
            "d1",
            "a",
            OpKind::Delete,
            0,
            (300, Some(7)),
            (0, 0),
        )]);
}

#[test]
fn without_a_policy_nothing_is_refused_but_everything_is_accounted() {
    let state = given::<QuotaRoot>(vec![])
        .when(put("p1", "a", u64::MAX >> 1))
        .then(vec![reserved(
            "p1",
            "a",
            OpKind::Create,
            u64::MAX >> 1,
            (0, None),
            (u64::MAX >> 1, 1),
        )]);
    assert_eq!(state.pending_bytes(), u64::MAX >> 1);
}

#[test]
fn one_non_terminal_operation_per_key() {
    let mut events = with_a();
    events.push(reserved(
        "p1",
        "a",
        OpKind::Overwrite,
        10,
        (300, Some(7)),
        (0, 0),
    ));
    for cmd in [put("p2", "a", 5), del("d2", "a")] {
        given::<QuotaRoot>(events.clone())
            .when(cmd)
            .then_error(QuotaError::ObjectBusy {
                key: "a".into(),
                holder: "p1".into(),
            });
    }
}

#[test]
fn a_retried_reserve_is_idempotent_and_a_reused_op_id_conflicts() {
    let mut events = with_a();
    events.push(reserved(
        "p1",
        "b",
        OpKind::Create,
        200,
        (0, None),
        (200, 1),
    ));
    given::<QuotaRoot>(events.clone())
        .when(put("p1", "b", 200))
        .then(vec![]);
    // Even after it ended, and even if it would no longer be admitted.
    let mut ended = events.clone();
    ended.push(aborted("p1", "b", AbortReason::Failed, 200, 1));
    ended.push(policy_set(1, Some(3), 2));
    given::<QuotaRoot>(ended)
        .when(put("p1", "b", 200))
        .then(vec![]);
    // The create that committed `a` retried after the fact: nothing new either.
    given::<QuotaRoot>(events.clone())
        .when(put("c1", "a", 300))
        .then(vec![]);
    for (cmd, retried) in [
        (put("p1", "b", 201), "Put { size: 201 } of \"b\""),
        (put("p1", "c", 200), "Put { size: 200 } of \"c\""),
        (del("p1", "b"), "Delete of \"b\""),
    ] {
        given::<QuotaRoot>(events.clone())
            .when(cmd)
            .then_error(QuotaError::OperationConflict {
                op_id: "p1".into(),
                reason: format!("recorded as Create of \"b\" (200 bytes), retried as {retried}"),
            });
    }
}
