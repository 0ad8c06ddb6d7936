//! Placement over a device set: eligibility, most free space, deterministic tie-break, tags,
//! and the error that says why nothing qualifies.

use std::collections::BTreeSet;

use super::{choose_device, DeviceHealth, DeviceSummary};
use crate::error::ColdError;

fn dev(id: &str, capacity: u64, used: u64, reserved: u64) -> DeviceSummary {
    DeviceSummary {
        device_id: id.into(),
        configured: true,
        health: DeviceHealth::Healthy,
        schedulable: true,
        capacity,
        used,
        reserved,
        tags: BTreeSet::from(["ssd".to_string()]),
    }
}

#[test]
fn the_device_with_most_free_bytes_wins() {
    let devices = [
        dev("a", 100, 60, 0),
        dev("b", 100, 10, 20),
        dev("c", 50, 0, 0),
    ];
    assert_eq!(choose_device(&devices, 10, None).unwrap(), "b");
}

#[test]
fn ties_go_to_the_smallest_id_whatever_the_order() {
    let devices = [
        dev("z", 100, 0, 0),
        dev("m", 100, 0, 0),
        dev("n", 100, 0, 0),
    ];
    assert_eq!(choose_device(&devices, 1, None).unwrap(), "m");
    let reversed: Vec<_> = devices.iter().rev().cloned().collect();
    assert_eq!(choose_device(&reversed, 1, None).unwrap(), "m");
}

#[test]
fn unhealthy_unschedulable_unconfigured_and_full_devices_are_skipped() {
    let mut degraded = dev("a", 1000, 0, 0);
    degraded.health = DeviceHealth::Degraded;
    let mut unavailable = dev("b", 1000, 0, 0);
    unavailable.health = DeviceHealth::Unavailable;
    let mut drained = dev("c", 1000, 0, 0);
    drained.schedulable = false;
    let mut unconfigured = dev("d", 1000, 0, 0);
    unconfigured.configured = false;
    let full = dev("e", 1000, 990, 5);
    let small = dev("f", 20, 0, 0);
    let devices = [degraded, unavailable, drained, unconfigured, full, small];
    assert_eq!(choose_device(&devices, 20, None).unwrap(), "f");
    // Exactly the free bytes fit; one more does not.
    assert!(matches!(
        choose_device(&devices, 21, None),
        Err(ColdError::InsufficientCapacity { ref device_id, requested: 21, free: 20 })
            if device_id == "f"
    ));
}

#[test]
fn short_of_space_is_busy_and_names_the_roomiest_device() {
    let devices = [
        dev("a", 100, 95, 0),
        dev("b", 100, 80, 10),
        dev("c", 100, 99, 0),
    ];
    let err = choose_device(&devices, 50, None).unwrap_err();
    assert_eq!(
        err,
        ColdError::InsufficientCapacity {
            device_id: "b".into(),
            requested: 50,
            free: 10
        }
    );
    assert_eq!(crescent_actors::WireCoded::wire_code(&err).as_str(), "BUSY");
}

#[test]
fn no_eligible_device_is_unavailable_and_says_why_for_each() {
    let mut a = dev("a", 100, 0, 0);
    a.health = DeviceHealth::Unavailable;
    let mut b = dev("b", 100, 0, 0);
    b.schedulable = false;
    let err = choose_device(&[a, b], 1, None).unwrap_err();
    let ColdError::DeviceNotEligible { device_id, reason } = &err else {
        panic!("{err:?}");
    };
    assert!(device_id.is_empty());
    assert!(reason.contains("a: health is unavailable"), "{reason}");
    assert!(reason.contains("b: not schedulable"), "{reason}");
    assert_eq!(
        crescent_actors::WireCoded::wire_code(&err).as_str(),
        "UNAVAILABLE"
    );
}

#[test]
fn a_node_without_devices_says_so() {
    let err = choose_device(&[], 1, None).unwrap_err();
    assert!(err.to_string().contains("no cold device"), "{err}");
}

#[test]
fn a_tag_restricts_the_candidates() {
    let mut nfs = dev("big-nfs", 1000, 0, 0);
    nfs.tags = BTreeSet::from(["nfs".to_string()]);
    let ssd = dev("small-ssd", 100, 0, 0);
    let devices = [nfs, ssd];
    assert_eq!(choose_device(&devices, 10, None).unwrap(), "big-nfs");
    assert_eq!(
        choose_device(&devices, 10, Some("ssd")).unwrap(),
        "small-ssd"
    );
    assert_eq!(choose_device(&devices, 10, Some("nfs")).unwrap(), "big-nfs");
    let err = choose_device(&devices, 10, Some("tape")).unwrap_err();
    assert!(err.to_string().contains("has no tag \"tape\""), "{err}");
}

#[test]
fn the_summary_of_a_device_reflects_its_accounting() {
    let d = super::ColdDevice::default();
    let s = DeviceSummary::of("x", &d);
    assert!(!s.configured);
    assert_eq!((s.capacity, s.used, s.reserved, s.free()), (0, 0, 0, 0));
    assert!(choose_device(&[s], 0, None).is_err());
}
