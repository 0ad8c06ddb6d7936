//! Route model tests: the CAS rules, the last-hot eviction rule and the cleanup guard.

use super::*;
use crate::device::{ReclaimRecord, ReclaimState};
use crate::ids::{ColdOpId, ReclaimId};

fn op(n: u128) -> ColdOpId {
    ColdOpId(uuid::Uuid::from_u128(n))
}

fn replica(n: u64) -> HotReplica {
    HotReplica {
        segment_id: "seg".into(),
        offset: n * 4096,
    }
}

fn hot_route() -> ObjectRoute {
    ObjectRoute {
        key: "k".into(),
        version: 1,
        content_op: 7,
        length: 100,
        checksum: 0xabc,
        replicas: vec![replica(1)],
        cold: None,
    }
}

fn pending_route() -> ObjectRoute {
    let r = hot_route();
    r.attach_pending(&r.expectation(), op(1), "owner", "dev1")
        .unwrap()
}

fn materialized_route() -> ObjectRoute {
    let r = pending_route();
    r.materialize(&r.expectation(), op(1), "objects/00/x.cold", 100, 0xabc)
        .unwrap()
}

#[test]
fn attach_pending_bumps_the_version_and_keeps_the_content() {
    let r = pending_route();
    assert_eq!((r.version, r.content_op), (2, 7));
    assert_eq!(
        r.cold,
        Some(ActiveColdBacking::PendingOffload {
            cold_op: op(1),
            content_op: 7,
            owner: "owner".into(),
            device_id: "dev1".into(),
            expected_length: 100,
            expected_checksum: 0xabc,
        })
    );
    assert!(!r.is_cold_only());
}

#[test]
fn attach_pending_refuses_a_second_backing_and_a_route_without_hot_copy() {
    let r = pending_route();
    assert_eq!(
        r.attach_pending(&r.expectation(), op(2), "o", "dev1")
            .unwrap_err()
            .code(),
        crescent_actors::ErrorCode::Conflict
    );
    let mut cold = hot_route();
    cold.replicas.clear();
    assert!(cold
        .attach_pending(&cold.expectation(), op(2), "o", "dev1")
        .is_err());
}

#[test]
fn every_mutation_is_a_cas_on_version_content_and_cold_identity() {
    let r = pending_route();
    let mut stale = r.expectation();
    stale.version -= 1;
    let err = r.materialize(&stale, op(1), "l", 100, 0xabc).unwrap_err();
    assert!(matches!(err, ColdError::RouteConflict { .. }), "{err}");
    let mut other_content = r.expectation();
    other_content.content_op = 8;
    assert!(r
        .materialize(&other_content, op(1), "l", 100, 0xabc)
        .is_err());
    let mut other_cold = r.expectation();
    other_cold.cold.as_mut().unwrap().cold_op = op(2);
    assert!(r.materialize(&other_cold, op(1), "l", 100, 0xabc).is_err());
    let m = materialized_route();
    let mut other_locator = m.expectation();
    other_locator.cold.as_mut().unwrap().locator = Some("objects/00/y.cold".into());
    assert!(m
        .evict_hot(
            &other_locator,
            &replica(1),
            Some(ColdOpState::UsageCommitted),
            true
        )
        .is_err());
}

#[test]
fn materialize_needs_the_same_pending_operation_and_payload() {
    let r = pending_route();
    assert!(r
        .materialize(&r.expectation(), op(2), "l", 100, 0xabc)
        .is_err());
    assert!(r
        .materialize(&r.expectation(), op(1), "l", 99, 0xabc)
        .is_err());
    assert!(r
        .materialize(&r.expectation(), op(1), "l", 100, 0xabd)
        .is_err());
    let m = materialized_route();
    assert_eq!((m.version, m.content_op), (3, 7));
    assert!(m.cold.as_ref().unwrap().is_materialized());
    assert!(
        m.materialize(&m.expectation(), op(1), "l", 100, 0xabc)
            .is_err(),
        "already materialized"
    );
}

#[test]
fn last_hot_eviction_needs_materialized_usage_committed_and_readable() {
    let h = hot_route();
    let err = h
        .evict_hot(&h.expectation(), &replica(1), None, true)
        .unwrap_err();
    assert_eq!(
        err,
        ColdError::EvictionRefused {
            key: "k".into(),
            reason: "no cold backing".into()
        }
    );
    let p = pending_route();
    let err = p
        .evict_hot(
            &p.expectation(),
            &replica(1),
            Some(ColdOpState::Reserved),
            true,
        )
        .unwrap_err();
    assert_eq!(
        err,
        ColdError::EvictionRefused {
            key: "k".into(),
            reason: "the cold backing is not materialized yet".into()
        }
    );
    let m = materialized_route();
    let err = m
        .evict_hot(
            &m.expectation(),
            &replica(1),
            Some(ColdOpState::RouteCommitted),
            true,
        )
        .unwrap_err();
    assert_eq!(
        err,
        ColdError::EvictionRefused {
            key: "k".into(),
            reason: "its cold operation is route_committed, not usage_committed".into()
        }
    );
    let err = m
        .evict_hot(
            &m.expectation(),
            &replica(1),
            Some(ColdOpState::UsageCommitted),
            false,
        )
        .unwrap_err();
    assert_eq!(
        err,
        ColdError::EvictionRefused {
            key: "k".into(),
            reason: "its cold device is not readable".into()
        }
    );
    let cold_only = m
        .evict_hot(
            &m.expectation(),
            &replica(1),
            Some(ColdOpState::UsageCommitted),
            true,
        )
        .unwrap();
    assert!(cold_only.is_cold_only());
    assert_eq!(cold_only.version, m.version + 1);
    assert_eq!(cold_only.content_op, 7);
}

#[test]
fn a_non_last_replica_may_always_go_but_must_be_in_the_route() {
    let mut h = hot_route();
    h.replicas.push(replica(2));
    let next = h
        .evict_hot(&h.expectation(), &replica(2), None, false)
        .unwrap();
    assert_eq!(next.replicas, vec![replica(1)]);
    assert!(matches!(
        h.evict_hot(&h.expectation(), &replica(3), None, false),
        Err(ColdError::RouteConflict { .. })
    ));
}

#[test]
fn promote_adds_a_hot_replica_to_a_cold_only_route() {
    let m = materialized_route();
    let c = m
        .evict_hot(
            &m.expectation(),
            &replica(1),
            Some(ColdOpState::UsageCommitted),
            true,
        )
        .unwrap();
    let p = c.promote(&c.expectation(), replica(5)).unwrap();
    assert_eq!(p.replicas, vec![replica(5)]);
    assert!(p.promote(&p.expectation(), replica(5)).is_err());
    assert!(
        p.promote(&c.expectation(), replica(6)).is_err(),
        "stale version"
    );
}

#[test]
fn drop_pending_only_drops_a_pending_backing() {
    let p = pending_route();
    assert_eq!(p.drop_pending(&p.expectation()).unwrap().cold, None);
    let m = materialized_route();
    assert!(m.drop_pending(&m.expectation()).is_err());
}

#[test]
fn cleanup_never_removes_a_referenced_locator() {
    let m = materialized_route();
    let record = ReclaimRecord {
        reclaim_id: ReclaimId(uuid::Uuid::from_u128(1)),
        op_id: op(1),
        content_op: 7,
        object_key: "k".into(),
        locator: "objects/00/x.cold".into(),
        length: 100,
        state: ReclaimState::Planned,
        released_from: None,
        planned_at_ms: 0,
        updated_at_ms: 0,
    };
    assert_eq!(
        check_cleanup(Some(&m), &record, "dev1").unwrap_err().code(),
        crescent_actors::ErrorCode::Conflict
    );
    assert!(
        check_cleanup(Some(&m), &record, "dev2").is_ok(),
        "same op id on another device is another locator"
    );
    assert!(check_cleanup(Some(&hot_route()), &record, "dev1").is_ok());
    assert!(check_cleanup(None, &record, "dev1").is_ok());
}

#[test]
fn check_materialize_classifies_the_route() {
    let p = pending_route();
    assert_eq!(
        check_materialize(Some(&p), "dev1", op(1)),
        MaterializeCheck::Pending(p.expectation())
    );
    let m = materialized_route();
    assert_eq!(
        check_materialize(Some(&m), "dev1", op(1)),
        MaterializeCheck::AlreadyMaterialized { version: 3 }
    );
    assert_eq!(
        check_materialize(Some(&m), "dev1", op(2)),
        MaterializeCheck::Obsolete
    );
    assert_eq!(
        check_materialize(None, "dev1", op(1)),
        MaterializeCheck::Obsolete
    );
}

#[test]
fn only_a_materialized_backing_is_read_and_its_restore_key_names_the_route_version() {
    assert_eq!(hot_route().materialized(), None);
    assert_eq!(pending_route().materialized(), None);
    let err = pending_route().require_materialized().unwrap_err();
    assert_eq!(err.code().as_str(), "NOT_FOUND", "{err}");
    let r = materialized_route();
    let m = r.require_materialized().unwrap();
    assert_eq!(
        m,
        Materialized {
            cold_op: op(1),
            owner: "owner",
            device_id: "dev1",
            locator: "objects/00/x.cold",
            length: 100,
            checksum: 0xabc,
            route_version: 3,
        }
    );
    let key = m.restore_key();
    assert_eq!(
        (key.cold_op, key.route_version, key.locator.as_str()),
        (op(1), 3, "objects/00/x.cold")
    );
}
