//! Given/when/then tests of `ColdDevice`: every transition and every refused transition of
//! the cold operation and reclaim machines, with the exact events.

use super::*;
use crate::ids::PayloadFingerprint;
use crescent_actors::{DecodeError, DomainEvent};

use crescent_actors::testing::NOW;
const LEN: u64 = 4096;
const CRC: u32 = 0xdead_beef;

type When = crescent_actors::testing::When<ColdDevice>;

fn given(events: Vec<ColdDeviceEvent>) -> crescent_actors::testing::Given<ColdDevice> {
    crescent_actors::testing::given(events)
}

/// Asserts only the wire code of a refusal (where the message is incidental).
trait ThenCode {
    fn then_error_code(self, code: &str);
}

impl ThenCode for When {
    fn then_error_code(self, code: &str) {
        let e = self.refusal();
        assert_eq!(e.code().as_str(), code, "{e}");
    }
}

fn op(n: u128) -> ColdOpId {
    ColdOpId(uuid::Uuid::from_u128(n))
}

fn rid(n: u128) -> ReclaimId {
    ReclaimId(uuid::Uuid::from_u128(0xff00 + n))
}

fn fp(n: u8) -> PayloadFingerprint {
    PayloadFingerprint([n; 32])
}

pub(super) fn configured(capacity: u64) -> ColdDeviceEvent {
    ColdDeviceEvent::DeviceConfigured(DeviceConfigured {
        device_id: "dev1".into(),
        kind: DeviceKind::LocalDir,
        root: "/data/cold/dev1".into(),
        capacity,
        tags: vec!["ssd".into()],
        schedulable: true,
        at_ms: 1,
    })
}

fn configure(capacity: u64, tags: &[&str], schedulable: bool) -> ColdDeviceCommand {
    ColdDeviceCommand::Configure {
        device_id: "dev1".into(),
        kind: DeviceKind::LocalDir,
        root: "/data/cold/dev1".into(),
        capacity,
        tags: tags.iter().map(|t| t.to_string()).collect(),
        schedulable,
    }
}

fn planned(n: u128, key: &str, content: u64) -> ColdDeviceEvent {
    ColdDeviceEvent::OperationPlanned(OperationPlanned {
        op_id: op(n),
        object_key: key.into(),
        content_op: content,
        expected_length: LEN,
        expected_checksum: CRC,
        at_ms: NOW,
    })
}

fn plan(n: u128, key: &str, content: u64) -> ColdDeviceCommand {
    ColdDeviceCommand::PlanOffload {
        op_id: op(n),
        object_key: key.into(),
        content_op: content,
        expected_length: LEN,
        expected_checksum: CRC,
    }
}

fn reserved(n: u128) -> ColdDeviceEvent {
    ColdDeviceEvent::CapacityReserved(CapacityReserved {
        op_id: op(n),
        bytes: LEN,
        at_ms: NOW,
    })
}

fn locator(n: u128) -> String {
    format!("objects/00/{:032x}.cold", n)
}

fn written(n: u128) -> ColdDeviceEvent {
    ColdDeviceEvent::PayloadWritten(PayloadWritten {
        op_id: op(n),
        locator: locator(n),
        length: LEN,
        checksum: CRC,
        fingerprint: fp(n as u8),
        at_ms: NOW,
    })
}

fn write(n: u128) -> ColdDeviceCommand {
    ColdDeviceCommand::RecordPayloadWritten {
        op_id: op(n),
        locator: locator(n),
        length: LEN,
        checksum: CRC,
        fingerprint: fp(n as u8),
    }
}

fn route_committed(n: u128, version: u64) -> ColdDeviceEvent {
    ColdDeviceEvent::RouteCommitted(RouteCommitted {
        op_id: op(n),
        route_version: version,
        at_ms: NOW,
    })
}

fn usage_committed(n: u128) -> ColdDeviceEvent {
    ColdDeviceEvent::UsageCommitted(UsageCommitted {
        op_id: op(n),
        bytes: LEN,
        at_ms: NOW,
    })
}

fn cancelled(n: u128, cause: ReleaseCause, released: u64) -> ColdDeviceEvent {
    ColdDeviceEvent::OperationCancelled(OperationCancelled {
        op_id: op(n),
        cause,
        released_reserved: released,
        at_ms: NOW,
    })
}

fn reclaim_planned(r: u128, n: u128, orphan: bool) -> ColdDeviceEvent {
    ColdDeviceEvent::ReclaimPlanned(ReclaimPlanned {
        reclaim_id: rid(r),
        op_id: op(n),
        orphan,
        at_ms: NOW,
    })
}

fn backend_deleted(r: u128, n: u128) -> ColdDeviceEvent {
    ColdDeviceEvent::BackendDeleted(BackendDeleted {
        reclaim_id: rid(r),
        op_id: op(n),
        at_ms: NOW,
    })
}

fn usage_released(r: u128, n: u128, from: ReleasedFrom) -> ColdDeviceEvent {
    ColdDeviceEvent::UsageReleased(UsageReleased {
        reclaim_id: rid(r),
        op_id: op(n),
        from,
        bytes: LEN,
        at_ms: NOW,
    })
}

fn transition(
    what: &'static str,
    id: String,
    state: &'static str,
    action: &'static str,
) -> ColdError {
    ColdError::InvalidTransition {
        what,
        id,
        state,
        action,
    }
}

fn op_refused(n: u128, state: &'static str, action: &'static str) -> ColdError {
    transition("cold operation", op(n).to_string(), state, action)
}

fn reclaim_refused(r: u128, state: &'static str, action: &'static str) -> ColdError {
    transition("reclaim", rid(r).to_string(), state, action)
}

/// Events up to and including `state` for operation `n` of key "k" content 7.
fn op_at(n: u128, state: ColdOpState) -> Vec<ColdDeviceEvent> {
    let mut events = vec![configured(1 << 20), planned(n, "k", 7)];
    let steps = [
        (ColdOpState::Reserved, reserved(n)),
        (ColdOpState::PayloadWritten, written(n)),
        (ColdOpState::RouteCommitted, route_committed(n, 3)),
        (ColdOpState::UsageCommitted, usage_committed(n)),
    ];
    if state == ColdOpState::Planned {
        return events;
    }
    for (s, e) in steps {
        events.push(e);
        if s == state {
            return events;
        }
    }
    panic!("op_at covers the forward path only")
}

// ---- config ----

#[test]
fn configure_new_device_makes_it_healthy_and_schedulable() {
    let state = given(vec![])
        .when(configure(1 << 20, &["ssd", "ssd"], true))
        .then(vec![ColdDeviceEvent::DeviceConfigured(DeviceConfigured {
            device_id: "dev1".into(),
            kind: DeviceKind::LocalDir,
            root: "/data/cold/dev1".into(),
            capacity: 1 << 20,
            tags: vec!["ssd".into()],
            schedulable: true,
            at_ms: NOW,
        })]);
    assert_eq!(state.health(), DeviceHealth::Healthy);
    assert!(state.schedulable() && state.readable());
    assert_eq!(
        (
            state.capacity(),
            state.used(),
            state.reserved(),
            state.free()
        ),
        (1 << 20, 0, 0, 1 << 20)
    );
}

#[test]
fn configure_same_facts_is_a_noop() {
    given(vec![configured(1 << 20)])
        .when(configure(1 << 20, &["ssd"], true))
        .then(vec![]);
}

#[test]
fn configure_may_change_capacity_tags_and_schedulable() {
    let state = given(vec![configured(1 << 20)])
        .when(configure(2 << 20, &["nvme"], false))
        .then(vec![ColdDeviceEvent::DeviceConfigured(DeviceConfigured {
            device_id: "dev1".into(),
            kind: DeviceKind::LocalDir,
            root: "/data/cold/dev1".into(),
            capacity: 2 << 20,
            tags: vec!["nvme".into()],
            schedulable: false,
            at_ms: NOW,
        })]);
    assert_eq!(state.capacity(), 2 << 20);
    assert!(!state.schedulable());
}

#[test]
fn configure_refuses_another_root() {
    given(vec![configured(1 << 20)])
        .when(ColdDeviceCommand::Configure {
            device_id: "dev1".into(),
            kind: DeviceKind::LocalDir,
            root: "/elsewhere".into(),
            capacity: 1 << 20,
            tags: vec![],
            schedulable: true,
        })
        .then_error(ColdError::Conflict {
            what: "device",
            id: "dev1".into(),
            reason: "its root cannot change: every locator on it depends on it".into(),
        });
}

#[test]
fn configure_refuses_another_device_id() {
    given(vec![configured(1 << 20)])
        .when(ColdDeviceCommand::Configure {
            device_id: "dev2".into(),
            kind: DeviceKind::LocalDir,
            root: "/data/cold/dev1".into(),
            capacity: 1 << 20,
            tags: vec![],
            schedulable: true,
        })
        .then_error_code("CONFLICT");
}

#[test]
fn configure_refuses_capacity_below_what_is_held() {
    let mut events = op_at(1, ColdOpState::Reserved);
    events[0] = configured(LEN * 2);
    given(events)
        .when(configure(LEN - 1, &["ssd"], true))
        .then_error(ColdError::Conflict {
            what: "device",
            id: "dev1".into(),
            reason: format!(
                "capacity {} is below the {LEN} bytes used or reserved",
                LEN - 1
            ),
        });
}

#[test]
fn configure_validates_arguments() {
    given(vec![])
        .when(configure(0, &[], true))
        .then_error(ColdError::invalid("capacity", "must be greater than 0"));
    given(vec![])
        .when(ColdDeviceCommand::Configure {
            device_id: "a/b".into(),
            kind: DeviceKind::LocalDir,
            root: "/r".into(),
            capacity: 1,
            tags: vec![],
            schedulable: true,
        })
        .then_error_code("INVALID_ARGUMENT");
    given(vec![])
        .when(configure(1, &[""], true))
        .then_error_code("INVALID_ARGUMENT");
}

#[test]
fn set_health_and_schedulable() {
    let state = given(vec![configured(1 << 20)])
        .when(ColdDeviceCommand::SetHealth {
            health: DeviceHealth::Degraded,
            reason: "slow".into(),
        })
        .then(vec![ColdDeviceEvent::DeviceHealthChanged(
            DeviceHealthChanged {
                health: DeviceHealth::Degraded,
                reason: "slow".into(),
                at_ms: NOW,
            },
        )]);
    assert!(state.readable());
    crescent_actors::testing::Given::state(state)
        .when(ColdDeviceCommand::SetHealth {
            health: DeviceHealth::Degraded,
            reason: "again".into(),
        })
        .then(vec![]);
    given(vec![configured(1 << 20)])
        .when(ColdDeviceCommand::SetSchedulable { schedulable: false })
        .then(vec![ColdDeviceEvent::DeviceSchedulableChanged(
            DeviceSchedulableChanged {
                schedulable: false,
                at_ms: NOW,
            },
        )]);
    given(vec![configured(1 << 20)])
        .when(ColdDeviceCommand::SetSchedulable { schedulable: true })
        .then(vec![]);
}

#[test]
fn unconfigured_device_refuses_everything_but_configure() {
    given(vec![])
        .when(ColdDeviceCommand::SetHealth {
            health: DeviceHealth::Healthy,
            reason: String::new(),
        })
        .then_error_code("UNAVAILABLE");
    given(vec![])
        .when(plan(1, "k", 7))
        .then_error_code("UNAVAILABLE");
    assert!(!ColdDevice::default().readable());
}

// ---- Planned ----

#[test]
fn plan_offload_records_the_intent() {
    let state = given(vec![configured(1 << 20)])
        .when(plan(1, "k", 7))
        .then(vec![planned(1, "k", 7)]);
    assert_eq!(state.operation(&op(1)).unwrap().state, ColdOpState::Planned);
    assert_eq!(state.active_operation_count(), 1);
    assert_eq!(state.reserved(), 0);
}

#[test]
fn plan_offload_repeat_is_idempotent_and_other_content_conflicts() {
    given(op_at(1, ColdOpState::Planned))
        .when(plan(1, "k", 7))
        .then(vec![]);
    given(op_at(1, ColdOpState::Planned))
        .when(plan(1, "k", 8))
        .then_error(ColdError::Conflict {
            what: "cold operation",
            id: op(1).to_string(),
            reason: "already planned for other content".into(),
        });
}

#[test]
fn plan_offload_refuses_ineligible_devices_and_oversized_payloads() {
    let unhealthy = ColdDeviceEvent::DeviceHealthChanged(DeviceHealthChanged {
        health: DeviceHealth::Degraded,
        reason: String::new(),
        at_ms: 2,
    });
    given(vec![configured(1 << 20), unhealthy])
        .when(plan(1, "k", 7))
        .then_error(ColdError::DeviceNotEligible {
            device_id: "dev1".into(),
            reason: "health is degraded".into(),
        });
    let drained = ColdDeviceEvent::DeviceSchedulableChanged(DeviceSchedulableChanged {
        schedulable: false,
        at_ms: 2,
    });
    given(vec![configured(1 << 20), drained])
        .when(plan(1, "k", 7))
        .then_error(ColdError::DeviceNotEligible {
            device_id: "dev1".into(),
            reason: "not schedulable".into(),
        });
    given(vec![configured(LEN - 1)])
        .when(plan(1, "k", 7))
        .then_error_code("INVALID_ARGUMENT");
}

#[test]
fn an_empty_value_is_planned_like_any_other() {
    let empty = OperationPlanned {
        expected_length: 0,
        expected_checksum: 0,
        ..match planned(1, "k", 1) {
            ColdDeviceEvent::OperationPlanned(p) => p,
            _ => unreachable!(),
        }
    };
    given(vec![configured(LEN)])
        .when(ColdDeviceCommand::PlanOffload {
            op_id: op(1),
            object_key: "k".into(),
            content_op: 1,
            expected_length: 0,
            expected_checksum: 0,
        })
        .then(vec![ColdDeviceEvent::OperationPlanned(empty)]);
}

#[test]
fn planned_to_reserved_reserves_capacity() {
    let state = given(op_at(1, ColdOpState::Planned))
        .when(ColdDeviceCommand::Reserve { op_id: op(1) })
        .then(vec![reserved(1)]);
    assert_eq!(
        (state.reserved(), state.used(), state.free()),
        (LEN, 0, (1 << 20) - LEN)
    );
}

#[test]
fn reserve_refuses_without_capacity() {
    let mut events = op_at(1, ColdOpState::Reserved);
    events[0] = configured(LEN + 10);
    events.push(planned(2, "k2", 8));
    given(events)
        .when(ColdDeviceCommand::Reserve { op_id: op(2) })
        .then_error(ColdError::InsufficientCapacity {
            device_id: "dev1".into(),
            requested: LEN,
            free: 10,
        });
}

#[test]
fn reserve_is_idempotent_in_every_later_state() {
    for s in [
        ColdOpState::Reserved,
        ColdOpState::PayloadWritten,
        ColdOpState::RouteCommitted,
        ColdOpState::UsageCommitted,
    ] {
        given(op_at(1, s))
            .when(ColdDeviceCommand::Reserve { op_id: op(1) })
            .then(vec![]);
    }
}

#[test]
fn reserve_refuses_released_and_unknown_operations() {
    let mut events = op_at(1, ColdOpState::Planned);
    events.push(cancelled(1, ReleaseCause::Replaced, 0));
    given(events)
        .when(ColdDeviceCommand::Reserve { op_id: op(1) })
        .then_error(op_refused(1, "released", "reserve"));
    given(vec![configured(1)])
        .when(ColdDeviceCommand::Reserve { op_id: op(9) })
        .then_error(ColdError::NotFound {
            what: "cold operation",
            id: op(9).to_string(),
        });
}

#[test]
fn planned_to_released_when_replaced_before_reserve() {
    let state = given(op_at(1, ColdOpState::Planned))
        .when(ColdDeviceCommand::Cancel {
            op_id: op(1),
            cause: ReleaseCause::Replaced,
        })
        .then(vec![cancelled(1, ReleaseCause::Replaced, 0)]);
    let o = state.operation(&op(1)).unwrap();
    assert_eq!(
        (o.state, o.release_cause),
        (ColdOpState::Released, Some(ReleaseCause::Replaced))
    );
    assert_eq!(state.active_operation_count(), 0);
}

// ---- Reserved ----

#[test]
fn reserved_to_released_on_cancel_gives_the_reservation_back() {
    let state = given(op_at(1, ColdOpState::Reserved))
        .when(ColdDeviceCommand::Cancel {
            op_id: op(1),
            cause: ReleaseCause::Cancelled,
        })
        .then(vec![cancelled(1, ReleaseCause::Cancelled, LEN)]);
    assert_eq!(state.reserved(), 0);
}

#[test]
fn cancel_repeat_is_idempotent_other_cause_refused() {
    let mut events = op_at(1, ColdOpState::Reserved);
    events.push(cancelled(1, ReleaseCause::Cancelled, LEN));
    given(events.clone())
        .when(ColdDeviceCommand::Cancel {
            op_id: op(1),
            cause: ReleaseCause::Cancelled,
        })
        .then(vec![]);
    given(events)
        .when(ColdDeviceCommand::Cancel {
            op_id: op(1),
            cause: ReleaseCause::Replaced,
        })
        .then_error(op_refused(1, "released", "cancel"));
    given(op_at(1, ColdOpState::Reserved))
        .when(ColdDeviceCommand::Cancel {
            op_id: op(1),
            cause: ReleaseCause::Reclaimed,
        })
        .then_error_code("INVALID_ARGUMENT");
}

#[test]
fn cancel_refused_once_the_payload_is_written() {
    for (s, name) in [
        (ColdOpState::PayloadWritten, "payload_written"),
        (ColdOpState::RouteCommitted, "route_committed"),
        (ColdOpState::UsageCommitted, "usage_committed"),
    ] {
        given(op_at(1, s))
            .when(ColdDeviceCommand::Cancel {
                op_id: op(1),
                cause: ReleaseCause::Cancelled,
            })
            .then_error(op_refused(1, name, "cancel"));
    }
}

#[test]
fn reserved_to_payload_written_records_the_payload() {
    let state = given(op_at(1, ColdOpState::Reserved))
        .when(write(1))
        .then(vec![written(1)]);
    let o = state.operation(&op(1)).unwrap();
    assert_eq!(o.payload.as_ref().unwrap().locator, locator(1));
    assert_eq!(o.payload.as_ref().unwrap().fingerprint, fp(1));
    assert_eq!(state.reserved(), LEN);
    assert!(state.cold_route("k").is_none(), "no route before the CAS");
}

#[test]
fn payload_written_refuses_other_bytes_than_planned() {
    given(op_at(1, ColdOpState::Reserved))
        .when(ColdDeviceCommand::RecordPayloadWritten {
            op_id: op(1),
            locator: locator(1),
            length: LEN + 1,
            checksum: CRC,
            fingerprint: fp(1),
        })
        .then_error_code("CONFLICT");
    given(op_at(1, ColdOpState::Reserved))
        .when(ColdDeviceCommand::RecordPayloadWritten {
            op_id: op(1),
            locator: locator(1),
            length: LEN,
            checksum: CRC ^ 1,
            fingerprint: fp(1),
        })
        .then_error_code("CONFLICT");
}

#[test]
fn payload_written_is_idempotent_and_conflicts_on_other_facts() {
    for s in [
        ColdOpState::PayloadWritten,
        ColdOpState::RouteCommitted,
        ColdOpState::UsageCommitted,
    ] {
        given(op_at(1, s)).when(write(1)).then(vec![]);
    }
    given(op_at(1, ColdOpState::PayloadWritten))
        .when(ColdDeviceCommand::RecordPayloadWritten {
            op_id: op(1),
            locator: locator(1),
            length: LEN,
            checksum: CRC,
            fingerprint: fp(9),
        })
        .then_error(ColdError::Conflict {
            what: "cold operation",
            id: op(1).to_string(),
            reason: format!("payload already recorded at {}", locator(1)),
        });
}

#[test]
fn payload_written_refused_before_reserve_and_after_release() {
    given(op_at(1, ColdOpState::Planned))
        .when(write(1))
        .then_error(op_refused(1, "planned", "record payload written"));
    let mut events = op_at(1, ColdOpState::Reserved);
    events.push(cancelled(1, ReleaseCause::Cancelled, LEN));
    given(events)
        .when(write(1))
        .then_error(op_refused(1, "released", "record payload written"));
}

// ---- PayloadWritten ----

#[test]
fn payload_written_to_route_committed_journals_the_cold_route() {
    let state = given(op_at(1, ColdOpState::PayloadWritten))
        .when(ColdDeviceCommand::CommitRoute {
            op_id: op(1),
            route_version: 3,
        })
        .then(vec![route_committed(1, 3)]);
    let route = state.cold_route("k").unwrap();
    assert_eq!(
        (
            route.op_id,
            route.locator.as_str(),
            route.length,
            route.checksum
        ),
        (op(1), locator(1).as_str(), LEN, CRC)
    );
    assert_eq!(
        (
            route.device_id.as_str(),
            route.content_op,
            route.route_version,
            route.state
        ),
        ("dev1", 7, 3, ColdOpState::RouteCommitted)
    );
    assert_eq!(state.reserved(), LEN, "usage is not committed yet");
}

#[test]
fn commit_route_is_idempotent_and_refused_before_the_payload() {
    given(op_at(1, ColdOpState::RouteCommitted))
        .when(ColdDeviceCommand::CommitRoute {
            op_id: op(1),
            route_version: 9,
        })
        .then(vec![]);
    given(op_at(1, ColdOpState::UsageCommitted))
        .when(ColdDeviceCommand::CommitRoute {
            op_id: op(1),
            route_version: 3,
        })
        .then(vec![]);
    given(op_at(1, ColdOpState::Reserved))
        .when(ColdDeviceCommand::CommitRoute {
            op_id: op(1),
            route_version: 3,
        })
        .then_error(op_refused(1, "reserved", "commit route"));
    given(op_at(1, ColdOpState::Planned))
        .when(ColdDeviceCommand::CommitRoute {
            op_id: op(1),
            route_version: 3,
        })
        .then_error(op_refused(1, "planned", "commit route"));
}

#[test]
fn commit_route_refuses_while_another_backing_of_the_key_is_live() {
    let mut events = op_at(1, ColdOpState::UsageCommitted);
    events.extend([planned(2, "k", 8), reserved(2), written(2)]);
    given(events.clone())
        .when(ColdDeviceCommand::CommitRoute {
            op_id: op(2),
            route_version: 5,
        })
        .then_error(ColdError::Conflict {
            what: "object",
            id: "k".into(),
            reason: format!("the backing of operation {} has no reclaim record", op(1)),
        });
    // Once the old backing is under reclaim (planned before the overwrite CAS), it commits.
    events.push(reclaim_planned(1, 1, false));
    let state = given(events)
        .when(ColdDeviceCommand::CommitRoute {
            op_id: op(2),
            route_version: 5,
        })
        .then(vec![route_committed(2, 5)]);
    assert_eq!(state.cold_route("k").unwrap().op_id, op(2));
}

#[test]
fn payload_written_to_reclaiming_when_the_route_does_not_reference_it() {
    let state = given(op_at(1, ColdOpState::PayloadWritten))
        .when(ColdDeviceCommand::PlanReclaim {
            reclaim_id: rid(1),
            op_id: op(1),
        })
        .then(vec![reclaim_planned(1, 1, true)]);
    assert_eq!(
        state.operation(&op(1)).unwrap().state,
        ColdOpState::Reclaiming
    );
    let r = state.reclaim(&rid(1)).unwrap();
    assert_eq!(
        (r.state, r.locator.as_str(), r.length, r.content_op),
        (ReclaimState::Planned, locator(1).as_str(), LEN, 7)
    );
}

// ---- RouteCommitted ----

#[test]
fn route_committed_to_usage_committed_moves_reserved_to_used() {
    let state = given(op_at(1, ColdOpState::RouteCommitted))
        .when(ColdDeviceCommand::CommitUsage { op_id: op(1) })
        .then(vec![usage_committed(1)]);
    assert_eq!((state.reserved(), state.used()), (0, LEN));
    assert_eq!(
        state.cold_route("k").unwrap().state,
        ColdOpState::UsageCommitted
    );
    assert_eq!(state.live_materialized_bytes(), LEN);
}

#[test]
fn commit_usage_is_idempotent_and_refused_before_the_route() {
    given(op_at(1, ColdOpState::UsageCommitted))
        .when(ColdDeviceCommand::CommitUsage { op_id: op(1) })
        .then(vec![]);
    given(op_at(1, ColdOpState::PayloadWritten))
        .when(ColdDeviceCommand::CommitUsage { op_id: op(1) })
        .then_error(op_refused(1, "payload_written", "commit usage"));
    given(op_at(1, ColdOpState::Reserved))
        .when(ColdDeviceCommand::CommitUsage { op_id: op(1) })
        .then_error(op_refused(1, "reserved", "commit usage"));
}

#[test]
fn route_committed_to_released_consumes_the_reservation() {
    let mut events = op_at(1, ColdOpState::RouteCommitted);
    events.extend([reclaim_planned(1, 1, false), backend_deleted(1, 1)]);
    let state = given(events)
        .when(ColdDeviceCommand::ReleaseUsage {
            reclaim_id: rid(1),
            op_id: op(1),
        })
        .then(vec![usage_released(1, 1, ReleasedFrom::Reserved)]);
    assert_eq!((state.reserved(), state.used()), (0, 0));
    assert_eq!(
        state.operation(&op(1)).unwrap().state,
        ColdOpState::Released
    );
    assert_eq!(
        state.reclaim(&rid(1)).unwrap().state,
        ReclaimState::UsageReleased
    );
    assert_eq!(
        (state.active_operation_count(), state.active_reclaim_count()),
        (0, 0)
    );
}

// ---- UsageCommitted ----

#[test]
fn usage_committed_to_released_decrements_used() {
    let mut events = op_at(1, ColdOpState::UsageCommitted);
    events.extend([reclaim_planned(1, 1, false), backend_deleted(1, 1)]);
    let state = given(events)
        .when(ColdDeviceCommand::ReleaseUsage {
            reclaim_id: rid(1),
            op_id: op(1),
        })
        .then(vec![usage_released(1, 1, ReleasedFrom::Used)]);
    assert_eq!((state.reserved(), state.used()), (0, 0));
    let o = state.operation(&op(1)).unwrap();
    assert_eq!(o.release_cause, Some(ReleaseCause::Reclaimed));
}

#[test]
fn commit_usage_racing_a_reclaim_reaches_one_release() {
    // Reclaim planned while RouteCommitted, usage committed before the handoff: the handoff
    // releases the used bytes, once.
    let mut events = op_at(1, ColdOpState::RouteCommitted);
    events.push(reclaim_planned(1, 1, false));
    let state = given(events.clone())
        .when(ColdDeviceCommand::CommitUsage { op_id: op(1) })
        .then(vec![usage_committed(1)]);
    let mut events2 = events.clone();
    events2.extend([usage_committed(1), backend_deleted(1, 1)]);
    let state2 = given(events2)
        .when(ColdDeviceCommand::ReleaseUsage {
            reclaim_id: rid(1),
            op_id: op(1),
        })
        .then(vec![usage_released(1, 1, ReleasedFrom::Used)]);
    assert_eq!(
        (state.used(), state2.used(), state2.reserved()),
        (LEN, 0, 0)
    );
    // The other order: the handoff released the reservation; usage can no longer commit.
    events.extend([
        backend_deleted(1, 1),
        usage_released(1, 1, ReleasedFrom::Reserved),
    ]);
    given(events)
        .when(ColdDeviceCommand::CommitUsage { op_id: op(1) })
        .then_error(op_refused(1, "released", "commit usage"));
}

// ---- Reclaiming ----

#[test]
fn reclaiming_to_released_releases_the_reservation() {
    let mut events = op_at(1, ColdOpState::PayloadWritten);
    events.extend([reclaim_planned(1, 1, true), backend_deleted(1, 1)]);
    let state = given(events)
        .when(ColdDeviceCommand::ReleaseUsage {
            reclaim_id: rid(1),
            op_id: op(1),
        })
        .then(vec![usage_released(1, 1, ReleasedFrom::Reserved)]);
    assert_eq!(state.reserved(), 0);
}

#[test]
fn reclaiming_refuses_commit_route_and_cancel() {
    let mut events = op_at(1, ColdOpState::PayloadWritten);
    events.push(reclaim_planned(1, 1, true));
    given(events.clone())
        .when(ColdDeviceCommand::CommitRoute {
            op_id: op(1),
            route_version: 3,
        })
        .then_error(op_refused(1, "reclaiming", "commit route"));
    given(events.clone())
        .when(ColdDeviceCommand::CommitUsage { op_id: op(1) })
        .then_error(op_refused(1, "reclaiming", "commit usage"));
    given(events)
        .when(ColdDeviceCommand::Cancel {
            op_id: op(1),
            cause: ReleaseCause::Cancelled,
        })
        .then_error(op_refused(1, "reclaiming", "cancel"));
}

// ---- reclaim records ----

#[test]
fn plan_reclaim_of_a_materialized_backing_drops_its_cold_route() {
    for s in [ColdOpState::RouteCommitted, ColdOpState::UsageCommitted] {
        let state = given(op_at(1, s))
            .when(ColdDeviceCommand::PlanReclaim {
                reclaim_id: rid(1),
                op_id: op(1),
            })
            .then(vec![reclaim_planned(1, 1, false)]);
        assert!(state.cold_route("k").is_none());
        assert_eq!(
            state.operation(&op(1)).unwrap().state,
            s,
            "the operation keeps its state until the handoff"
        );
        assert_eq!(state.operation(&op(1)).unwrap().reclaim, Some(rid(1)));
    }
}

#[test]
fn plan_reclaim_is_idempotent_and_one_per_operation() {
    let mut events = op_at(1, ColdOpState::UsageCommitted);
    events.push(reclaim_planned(1, 1, false));
    given(events.clone())
        .when(ColdDeviceCommand::PlanReclaim {
            reclaim_id: rid(1),
            op_id: op(1),
        })
        .then(vec![]);
    given(events.clone())
        .when(ColdDeviceCommand::PlanReclaim {
            reclaim_id: rid(2),
            op_id: op(1),
        })
        .then_error(ColdError::Conflict {
            what: "cold operation",
            id: op(1).to_string(),
            reason: format!("already reclaimed by {}", rid(1)),
        });
    events.extend([planned(2, "k2", 1), reserved(2), written(2)]);
    given(events)
        .when(ColdDeviceCommand::PlanReclaim {
            reclaim_id: rid(1),
            op_id: op(2),
        })
        .then_error(ColdError::Conflict {
            what: "reclaim",
            id: rid(1).to_string(),
            reason: format!("already reclaims operation {}", op(1)),
        });
}

#[test]
fn plan_reclaim_refused_without_a_payload() {
    given(op_at(1, ColdOpState::Planned))
        .when(ColdDeviceCommand::PlanReclaim {
            reclaim_id: rid(1),
            op_id: op(1),
        })
        .then_error(op_refused(1, "planned", "plan a reclaim"));
    given(op_at(1, ColdOpState::Reserved))
        .when(ColdDeviceCommand::PlanReclaim {
            reclaim_id: rid(1),
            op_id: op(1),
        })
        .then_error(op_refused(1, "reserved", "plan a reclaim"));
    let mut events = op_at(1, ColdOpState::UsageCommitted);
    events.extend([
        reclaim_planned(1, 1, false),
        backend_deleted(1, 1),
        usage_released(1, 1, ReleasedFrom::Used),
    ]);
    given(events)
        .when(ColdDeviceCommand::PlanReclaim {
            reclaim_id: rid(2),
            op_id: op(1),
        })
        .then_error(op_refused(1, "released", "plan a reclaim"));
}

#[test]
fn planned_reclaim_to_backend_deleted() {
    let mut events = op_at(1, ColdOpState::UsageCommitted);
    events.push(reclaim_planned(1, 1, false));
    let state = given(events)
        .when(ColdDeviceCommand::RecordBackendDeleted { reclaim_id: rid(1) })
        .then(vec![backend_deleted(1, 1)]);
    assert_eq!(
        state.reclaim(&rid(1)).unwrap().state,
        ReclaimState::BackendDeleted
    );
    assert_eq!(state.used(), LEN, "usage is released only by the handoff");
}

#[test]
fn backend_deleted_is_idempotent() {
    let mut events = op_at(1, ColdOpState::UsageCommitted);
    events.extend([reclaim_planned(1, 1, false), backend_deleted(1, 1)]);
    given(events.clone())
        .when(ColdDeviceCommand::RecordBackendDeleted { reclaim_id: rid(1) })
        .then(vec![]);
    events.push(usage_released(1, 1, ReleasedFrom::Used));
    given(events)
        .when(ColdDeviceCommand::RecordBackendDeleted { reclaim_id: rid(1) })
        .then(vec![]);
    given(vec![configured(1)])
        .when(ColdDeviceCommand::RecordBackendDeleted { reclaim_id: rid(1) })
        .then_error(ColdError::NotFound {
            what: "reclaim",
            id: rid(1).to_string(),
        });
}

#[test]
fn release_usage_repeat_returns_the_terminal_result() {
    let mut events = op_at(1, ColdOpState::UsageCommitted);
    events.extend([
        reclaim_planned(1, 1, false),
        backend_deleted(1, 1),
        usage_released(1, 1, ReleasedFrom::Used),
    ]);
    let state = given(events)
        .when(ColdDeviceCommand::ReleaseUsage {
            reclaim_id: rid(1),
            op_id: op(1),
        })
        .then(vec![]);
    assert_eq!(state.used(), 0);
}

#[test]
fn release_usage_refused_before_backend_delete_and_for_another_operation() {
    let mut events = op_at(1, ColdOpState::UsageCommitted);
    events.push(reclaim_planned(1, 1, false));
    given(events.clone())
        .when(ColdDeviceCommand::ReleaseUsage {
            reclaim_id: rid(1),
            op_id: op(1),
        })
        .then_error(reclaim_refused(1, "planned", "release usage"));
    given(events)
        .when(ColdDeviceCommand::ReleaseUsage {
            reclaim_id: rid(1),
            op_id: op(2),
        })
        .then_error(ColdError::Conflict {
            what: "reclaim",
            id: rid(1).to_string(),
            reason: format!("reclaims operation {}, not {}", op(1), op(2)),
        });
}

#[test]
fn cancel_reclaim_restores_the_cold_route() {
    let mut events = op_at(1, ColdOpState::UsageCommitted);
    events.push(reclaim_planned(1, 1, false));
    let state = given(events.clone())
        .when(ColdDeviceCommand::CancelReclaim { reclaim_id: rid(1) })
        .then(vec![ColdDeviceEvent::ReclaimCancelled(ReclaimCancelled {
            reclaim_id: rid(1),
            op_id: op(1),
            at_ms: NOW,
        })]);
    assert_eq!(state.cold_route("k").unwrap().op_id, op(1));
    assert_eq!(state.operation(&op(1)).unwrap().reclaim, None);
    assert_eq!(
        state.reclaim(&rid(1)).unwrap().state,
        ReclaimState::Cancelled
    );
    // A new reclaim may be planned later.
    crescent_actors::testing::Given::state(state)
        .when(ColdDeviceCommand::PlanReclaim {
            reclaim_id: rid(2),
            op_id: op(1),
        })
        .then(vec![reclaim_planned(2, 1, false)]);
    events.push(ColdDeviceEvent::ReclaimCancelled(ReclaimCancelled {
        reclaim_id: rid(1),
        op_id: op(1),
        at_ms: NOW,
    }));
    given(events.clone())
        .when(ColdDeviceCommand::CancelReclaim { reclaim_id: rid(1) })
        .then(vec![]);
    given(events)
        .when(ColdDeviceCommand::RecordBackendDeleted { reclaim_id: rid(1) })
        .then_error(reclaim_refused(1, "cancelled", "record backend deleted"));
}

#[test]
fn cancel_reclaim_refused_after_delete_for_orphans_and_when_superseded() {
    let mut events = op_at(1, ColdOpState::UsageCommitted);
    events.extend([reclaim_planned(1, 1, false), backend_deleted(1, 1)]);
    given(events)
        .when(ColdDeviceCommand::CancelReclaim { reclaim_id: rid(1) })
        .then_error(reclaim_refused(1, "backend_deleted", "cancel"));
    let mut events = op_at(1, ColdOpState::PayloadWritten);
    events.push(reclaim_planned(1, 1, true));
    given(events)
        .when(ColdDeviceCommand::CancelReclaim { reclaim_id: rid(1) })
        .then_error(op_refused(1, "reclaiming", "cancel its reclaim"));
    let mut events = op_at(1, ColdOpState::UsageCommitted);
    events.extend([
        reclaim_planned(1, 1, false),
        planned(2, "k", 8),
        reserved(2),
        written(2),
        route_committed(2, 6),
    ]);
    given(events)
        .when(ColdDeviceCommand::CancelReclaim { reclaim_id: rid(1) })
        .then_error_code("CONFLICT");
}

#[test]
fn prune_forgets_terminal_records_only() {
    let mut events = op_at(1, ColdOpState::UsageCommitted);
    events.extend([
        reclaim_planned(1, 1, false),
        backend_deleted(1, 1),
        usage_released(1, 1, ReleasedFrom::Used),
    ]);
    events.extend([planned(2, "k2", 1)]);
    let state = given(events.clone())
        .when(ColdDeviceCommand::PruneTerminal {
            released_before_ms: NOW + 1,
        })
        .then(vec![ColdDeviceEvent::TerminalPruned(TerminalPruned {
            released_before_ms: NOW + 1,
            op_ids: vec![op(1)],
            reclaim_ids: vec![rid(1)],
            at_ms: NOW,
        })]);
    assert!(state.operation(&op(1)).is_none() && state.reclaim(&rid(1)).is_none());
    assert!(state.operation(&op(2)).is_some());
    given(events)
        .when(ColdDeviceCommand::PruneTerminal {
            released_before_ms: NOW,
        })
        .then(vec![]);
}

#[test]
fn active_pages_are_bounded_and_skip_terminal_records() {
    let mut events = vec![configured(1 << 30)];
    for n in 1..=5 {
        events.push(planned(n, &format!("k{n}"), n as u64));
    }
    events.push(cancelled(2, ReleaseCause::Replaced, 0));
    let state: ColdDevice = crescent_actors::testing::state_after(&events);
    let first: Vec<ColdOpId> = state
        .active_operations(None, 2)
        .iter()
        .map(|o| o.op_id)
        .collect();
    assert_eq!(first, vec![op(1), op(3)]);
    let second: Vec<ColdOpId> = state
        .active_operations(Some(op(3)), 2)
        .iter()
        .map(|o| o.op_id)
        .collect();
    assert_eq!(second, vec![op(4), op(5)]);
    assert!(state.active_operations(Some(op(5)), 2).is_empty());
}

// ---- events ----

fn every_event() -> Vec<ColdDeviceEvent> {
    vec![
        configured(1 << 20),
        ColdDeviceEvent::DeviceOwnerAssigned(DeviceOwnerAssigned {
            owner_id: "node-b".into(),
            endpoint: "10.0.0.2:7000".into(),
            at_ms: 1,
        }),
        ColdDeviceEvent::DeviceHealthChanged(DeviceHealthChanged {
            health: DeviceHealth::Unavailable,
            reason: "io".into(),
            at_ms: 2,
        }),
        ColdDeviceEvent::DeviceSchedulableChanged(DeviceSchedulableChanged {
            schedulable: false,
            at_ms: 3,
        }),
        planned(1, "k", 7),
        reserved(1),
        written(1),
        route_committed(1, 3),
        usage_committed(1),
        cancelled(2, ReleaseCause::Replaced, 0),
        reclaim_planned(1, 1, false),
        ColdDeviceEvent::ReclaimCancelled(ReclaimCancelled {
            reclaim_id: rid(1),
            op_id: op(1),
            at_ms: 4,
        }),
        backend_deleted(1, 1),
        usage_released(1, 1, ReleasedFrom::Used),
        ColdDeviceEvent::TerminalPruned(TerminalPruned {
            released_before_ms: 5,
            op_ids: vec![op(1)],
            reclaim_ids: vec![rid(1)],
            at_ms: 6,
        }),
    ]
}

#[test]
fn every_event_round_trips_at_its_version() {
    let events = every_event();
    let kinds: std::collections::BTreeSet<&str> = events.iter().map(|e| e.kind()).collect();
    assert_eq!(
        kinds.len(),
        ColdDeviceEvent::schema().len(),
        "the list covers every kind"
    );
    for e in events {
        let bytes = e.encode();
        assert_eq!(
            ColdDeviceEvent::decode(e.kind(), e.version(), &bytes).unwrap(),
            e
        );
        assert_eq!(e.version(), 1);
    }
}

/// The journal form is pinned: journals of earlier builds must replay (docs/architecture.md,
/// "Aggregates"), and the schema is what the HA handshake compares (docs/ha.md, "Event versions
/// in a mixed pair").
#[test]
fn the_schema_and_the_journal_form_of_every_kind_are_pinned() {
    let kinds: Vec<&str> = ColdDeviceEvent::schema().iter().map(|(k, _)| *k).collect();
    assert_eq!(
        kinds,
        [
            "cold_device_configured",
            "cold_device_health_changed",
            "cold_device_schedulable_changed",
            "cold_op_planned",
            "cold_capacity_reserved",
            "cold_payload_written",
            "cold_route_committed",
            "cold_usage_committed",
            "cold_op_cancelled",
            "cold_reclaim_planned",
            "cold_reclaim_cancelled",
            "cold_backend_deleted",
            "cold_usage_released",
            "cold_terminal_pruned",
            "cold_device_owner_assigned",
        ]
    );
    assert!(ColdDeviceEvent::schema().iter().all(|(_, v)| *v == 1));
    crescent_actors::testing::assert_journal_form(
        &every_event(),
        &[
            ("cold_device_configured", 1, "97a464657631a96c6f63616c5f646972af2f646174612f636f6c642f64657631ce0010000091a3737364c301"),
            ("cold_device_owner_assigned", 1, "93a66e6f64652d62ad31302e302e302e323a3730303001"),
            ("cold_device_health_changed", 1, "93ab756e617661696c61626c65a2696f02"),
            ("cold_device_schedulable_changed", 1, "92c203"),
            ("cold_op_planned", 1, "96c41000000000000000000000000000000001a16b07cd1000cedeadbeefcf0000018bcfe56800"),
            ("cold_capacity_reserved", 1, "93c41000000000000000000000000000000001cd1000cf0000018bcfe56800"),
            ("cold_payload_written", 1, "96c41000000000000000000000000000000001d9306f626a656374732f30302f30303030303030303030303030303030303030303030303030303030303030312e636f6c64cd1000cedeadbeefc4200101010101010101010101010101010101010101010101010101010101010101cf0000018bcfe56800"),
            ("cold_route_committed", 1, "93c4100000000000000000000000000000000103cf0000018bcfe56800"),
            ("cold_usage_committed", 1, "93c41000000000000000000000000000000001cd1000cf0000018bcfe56800"),
            ("cold_op_cancelled", 1, "94c41000000000000000000000000000000002a87265706c6163656400cf0000018bcfe56800"),
            ("cold_reclaim_planned", 1, "94c4100000000000000000000000000000ff01c41000000000000000000000000000000001c2cf0000018bcfe56800"),
            ("cold_reclaim_cancelled", 1, "93c4100000000000000000000000000000ff01c4100000000000000000000000000000000104"),
            ("cold_backend_deleted", 1, "93c4100000000000000000000000000000ff01c41000000000000000000000000000000001cf0000018bcfe56800"),
            ("cold_usage_released", 1, "95c4100000000000000000000000000000ff01c41000000000000000000000000000000001a475736564cd1000cf0000018bcfe56800"),
            ("cold_terminal_pruned", 1, "940591c4100000000000000000000000000000000191c4100000000000000000000000000000ff0106"),
        ],
    );
}

#[test]
fn events_use_the_compact_form_and_decode_the_named_form() {
    let e = OperationPlanned {
        op_id: op(1),
        object_key: "k".into(),
        content_op: 7,
        expected_length: LEN,
        expected_checksum: CRC,
        at_ms: NOW,
    };
    let compact = ColdDeviceEvent::OperationPlanned(e.clone()).encode();
    assert_eq!(compact[0] & 0xf0, 0x90, "a msgpack array");
    let named = rmp_serde::to_vec_named(&e).unwrap();
    assert_eq!(
        ColdDeviceEvent::decode("cold_op_planned", 1, &named).unwrap(),
        ColdDeviceEvent::OperationPlanned(e)
    );
}

#[test]
fn decode_refuses_unknown_kinds_versions_and_garbage() {
    assert_eq!(
        ColdDeviceEvent::decode("nope", 1, &[]),
        Err(DecodeError::UnknownKind {
            aggregate: STREAM_KIND,
            kind: "nope".into()
        })
    );
    for v in [0, 2] {
        assert_eq!(
            ColdDeviceEvent::decode("cold_op_planned", v, &[]),
            Err(DecodeError::UnsupportedVersion {
                kind: "cold_op_planned".into(),
                version: v,
                supported: 1
            })
        );
    }
    assert!(matches!(
        ColdDeviceEvent::decode("cold_op_planned", 1, &[0xc1]),
        Err(DecodeError::Malformed { .. })
    ));
}

#[test]
fn cold_routes_replay_from_decoded_events_alone() {
    let mut events = op_at(1, ColdOpState::UsageCommitted);
    events.extend([
        planned(2, "k2", 9),
        reserved(2),
        written(2),
        route_committed(2, 4),
    ]);
    let live: ColdDevice = crescent_actors::testing::state_after(&events);
    let mut replayed = ColdDevice::default();
    for e in &events {
        replayed.apply_owned(ColdDeviceEvent::decode(e.kind(), e.version(), &e.encode()).unwrap());
    }
    assert_eq!(replayed, live);
    let routes: Vec<ColdRoute> = replayed.cold_routes().collect();
    assert_eq!(routes.len(), 2);
    assert_eq!(routes[1].object_key, "k2");
    assert_eq!(routes[1].state, ColdOpState::RouteCommitted);
    // Snapshots serialize the state as msgpack.
    let snap = rmp_serde::to_vec(&live).unwrap();
    assert_eq!(rmp_serde::from_slice::<ColdDevice>(&snap).unwrap(), live);
}
