//! Single-flight and batch grouping tests.

use super::*;

fn key(device: &str, op: u128, version: u64) -> RestoreKey {
    RestoreKey {
        device_id: device.into(),
        cold_op: ColdOpId(uuid::Uuid::from_u128(op)),
        locator: format!("objects/00/{op:032x}.cold"),
        route_version: version,
    }
}

#[test]
fn concurrent_restores_of_one_backing_share_one_flight() {
    let mut sf: SingleFlight<RestoreKey, u32> = SingleFlight::new(8, 8);
    let k = key("d", 1, 3);
    assert_eq!(sf.join(&k, 1).unwrap(), Joined::Leader);
    assert_eq!(sf.join(&k, 2).unwrap(), Joined::Follower);
    assert_eq!(sf.join(&k, 3).unwrap(), Joined::Follower);
    assert_eq!(sf.waiters(&k), 3);
    assert_eq!(sf.complete(&k), vec![1, 2, 3]);
    assert_eq!(sf.in_flight(), 0);
    assert_eq!(
        sf.join(&k, 4).unwrap(),
        Joined::Leader,
        "a new flight after completion"
    );
}

#[test]
fn flights_are_not_shared_across_route_versions_or_backings() {
    let mut sf: SingleFlight<RestoreKey, u32> = SingleFlight::new(8, 8);
    assert_eq!(sf.join(&key("d", 1, 3), 1).unwrap(), Joined::Leader);
    assert_eq!(sf.join(&key("d", 1, 4), 2).unwrap(), Joined::Leader);
    assert_eq!(sf.join(&key("d", 2, 3), 3).unwrap(), Joined::Leader);
    assert_eq!(sf.join(&key("e", 1, 3), 4).unwrap(), Joined::Leader);
    assert_eq!(sf.in_flight(), 4);
}

#[test]
fn single_flight_is_bounded() {
    let mut sf: SingleFlight<RestoreKey, u32> = SingleFlight::new(1, 2);
    sf.join(&key("d", 1, 1), 1).unwrap();
    sf.join(&key("d", 1, 1), 2).unwrap();
    let err = sf.join(&key("d", 1, 1), 3).unwrap_err();
    assert_eq!(err.code().as_str(), "BUSY");
    assert!(matches!(
        sf.join(&key("d", 2, 1), 4),
        Err(ColdError::Backpressure { .. })
    ));
}

#[test]
fn batches_group_by_owner_and_device_and_merge_duplicates() {
    let req = |obj: &str, owner: &str, k: RestoreKey| RestoreRequest {
        object_key: obj.into(),
        owner: owner.into(),
        key: k,
        length: 10,
        checksum: 1,
    };
    let batch = vec![
        req("a", "o1", key("d1", 3, 1)),
        req("b", "o1", key("d2", 1, 1)),
        req("c", "o1", key("d1", 1, 1)),
        req("a2", "o1", key("d1", 3, 1)),
        req("e", "o2", key("d1", 5, 1)),
    ];
    let groups = group_by_device(&batch);
    assert_eq!(groups.len(), 3);
    assert_eq!(
        (groups[0].owner.as_str(), groups[0].device_id.as_str()),
        ("o1", "d1")
    );
    let objects: Vec<&str> = groups[0]
        .reads
        .iter()
        .map(|r| r.object_key.as_str())
        .collect();
    assert_eq!(
        objects,
        vec!["c", "a"],
        "locator order, one read for the duplicate backing"
    );
    assert_eq!(groups[0].answers, vec![(0, 1), (2, 0), (3, 1)]);
    assert_eq!(
        (groups[1].device_id.as_str(), groups[1].answers.clone()),
        ("d2", vec![(1, 0)])
    );
    assert_eq!(
        (groups[2].owner.as_str(), groups[2].answers.clone()),
        ("o2", vec![(4, 0)])
    );
    let answered: usize = groups.iter().map(|g| g.answers.len()).sum();
    assert_eq!(answered, batch.len());
}
