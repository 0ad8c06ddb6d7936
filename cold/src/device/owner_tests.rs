//! `AssignOwner`: a device whose IO a storage owner performs keeps that owner; a restart of
//! the owner with a new endpoint is recorded, a repeat is a no-op, another owner is refused.

use super::tests::configured;
use super::*;
use crescent_actors::Ctx;

const NOW: i64 = 1_700_000_000_000;

fn device(events: &[ColdDeviceEvent]) -> ColdDevice {
    let mut d = ColdDevice::default();
    for e in events {
        d.apply(e);
    }
    d
}

fn assign(owner_id: &str, endpoint: &str) -> ColdDeviceCommand {
    ColdDeviceCommand::AssignOwner {
        owner_id: owner_id.into(),
        endpoint: endpoint.into(),
    }
}

fn assigned(owner_id: &str, endpoint: &str) -> ColdDeviceEvent {
    ColdDeviceEvent::DeviceOwnerAssigned(DeviceOwnerAssigned {
        owner_id: owner_id.into(),
        endpoint: endpoint.into(),
        at_ms: NOW,
    })
}

#[test]
fn the_first_owner_is_recorded() {
    let d = device(&[configured(1 << 20)]);
    assert_eq!(d.owner(), None);
    let events = d.decide(&assign("node-b", "h:1"), &Ctx::at(NOW)).unwrap();
    assert_eq!(events, vec![assigned("node-b", "h:1")]);
    let d = device(&[configured(1 << 20), events[0].clone()]);
    assert_eq!(
        d.owner(),
        Some(&DeviceOwner {
            owner_id: "node-b".into(),
            endpoint: "h:1".into()
        })
    );
}

#[test]
fn the_same_owner_again_is_a_no_op_and_a_new_endpoint_is_recorded() {
    let d = device(&[configured(1 << 20), assigned("node-b", "h:1")]);
    assert_eq!(
        d.decide(&assign("node-b", "h:1"), &Ctx::at(NOW)).unwrap(),
        vec![]
    );
    assert_eq!(
        d.decide(&assign("node-b", "h:2"), &Ctx::at(NOW)).unwrap(),
        vec![assigned("node-b", "h:2")]
    );
}

#[test]
fn another_owner_is_refused() {
    let d = device(&[configured(1 << 20), assigned("node-b", "h:1")]);
    let err = d
        .decide(&assign("node-c", "h:9"), &Ctx::at(NOW))
        .unwrap_err();
    assert_eq!(
        err,
        ColdError::Conflict {
            what: "device",
            id: "dev1".into(),
            reason: "its IO is performed by owner \"node-b\"".into(),
        }
    );
}

#[test]
fn an_unconfigured_device_and_empty_ids_are_refused() {
    let err = ColdDevice::default()
        .decide(&assign("node-b", "h:1"), &Ctx::at(NOW))
        .unwrap_err();
    assert_eq!(err.code().as_str(), "UNAVAILABLE", "{err}");
    assert_eq!(
        assign("", "h:1").validate().unwrap_err().code(),
        crescent_actors::ErrorCode::InvalidArgument
    );
    assert_eq!(
        assign("b", "").validate().unwrap_err().code(),
        crescent_actors::ErrorCode::InvalidArgument
    );
}

#[test]
fn the_owner_survives_a_snapshot() {
    let d = device(&[configured(1 << 20), assigned("node-b", "h:1")]);
    let snap = rmp_serde::to_vec(&d).unwrap();
    assert_eq!(rmp_serde::from_slice::<ColdDevice>(&snap).unwrap(), d);
}
