//! The replication (in-sync) marker against a real etcd: only the current term writes it, and
//! it decides who may campaign.

mod common;

use std::time::Duration;

use common::*;
use crescent_ha::{
    CampaignBlock, ClusterKeys, ErrorClass, HaError, ReplicationMarker, ReplicationMarkerStore,
    Role,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_term_cannot_write_the_marker() {
    let cluster = cluster();
    let (a, term1) = start_leader(&cluster, "a", 3).await;
    // Taking office wrote the claim: no standby in sync yet.
    assert_eq!(
        a.replication_marker().await.unwrap(),
        Some(ReplicationMarker::claim("a", term1))
    );

    let b = start_follower(&cluster, "b", 3).await;
    let mut b_rx = b.subscribe();
    // A follower is refused locally.
    assert!(matches!(
        b.mark_in_sync("a", 1).await,
        Err(HaError::NotLeader)
    ));

    a.mark_in_sync("b", 5).await.unwrap();
    a.resign().await.unwrap();
    let term2 = term_of(
        &wait_role(&mut b_rx, Duration::from_secs(10), "takeover", is_leader)
            .await
            .0,
    );
    assert!(term2 > term1);

    // etcd refuses the old term (and a term that never existed); the new leader's claim stays.
    let store = ReplicationMarkerStore::new(
        etcd().await,
        ClusterKeys::new(&cluster).unwrap(),
        Duration::from_secs(2),
    );
    for stale in [term1, term2 + 1000] {
        let marker = ReplicationMarker::with_standby("a", stale, "b", true, 99);
        let err = store.write_as_leader(stale, &marker).await.unwrap_err();
        assert!(
            matches!(err, HaError::Fenced { term } if term == stale),
            "{err}"
        );
        assert_eq!(err.class(), ErrorClass::User);
    }
    let stored = store.read().await.unwrap().unwrap();
    assert_eq!(stored.marker, ReplicationMarker::claim("b", term2));
    // A marker whose term differs from the one it is written under is a caller bug.
    let mismatched = ReplicationMarker::with_standby("b", term2, "a", true, 1);
    assert!(matches!(
        store.write_as_leader(term1, &mismatched).await,
        Err(HaError::InvalidArgument(_))
    ));
    b.resign().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_out_of_sync_standby_does_not_campaign_but_the_last_leader_does() {
    let cluster = cluster();
    let (a, term1) = start_leader(&cluster, "a", 2).await;
    let b = start_follower(&cluster, "b", 2).await;
    let mut b_rx = b.subscribe();

    a.mark_in_sync("b", 10).await.unwrap();
    a.mark_out_of_sync("b", 12).await.unwrap();
    // Within a term the seq never goes back: a late "in sync at 11" cannot undo "out at 12".
    let err = a.mark_in_sync("b", 11).await.unwrap_err();
    assert!(
        matches!(
            err,
            HaError::MarkerSeqRegression {
                seq: 11,
                current: 12,
                ..
            }
        ),
        "{err}"
    );
    assert!(matches!(
        a.mark_in_sync("a", 13).await,
        Err(HaError::InvalidArgument(_))
    ));
    assert!(matches!(
        a.mark_in_sync("b/x", 13).await,
        Err(HaError::InvalidArgument(_))
    ));

    a.resign().await.unwrap();
    let (role, _) = wait_role(
        &mut b_rx,
        Duration::from_secs(5),
        "blocked candidate",
        |r| matches!(r, Role::Candidate { blocked: Some(_) }),
    )
    .await;
    assert_eq!(
        role,
        Role::Candidate {
            blocked: Some(CampaignBlock::OutOfSync {
                leader: "a".into(),
                term: term1,
                seq: 12
            })
        }
    );
    // Well past the TTL, b still has not campaigned.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        matches!(b.role(), Role::Candidate { blocked: Some(_) }),
        "{:?}",
        b.role()
    );
    assert_eq!(b.metrics().elections_won(), 0);

    // The last leader comes back and wins under a new term; b follows it.
    let (a2, term2) = start_leader(&cluster, "a", 2).await;
    assert!(term2 > term1);
    let (role, _) = wait_role(&mut b_rx, Duration::from_secs(5), "follower", |r| {
        matches!(r, Role::Follower { .. })
    })
    .await;
    assert_eq!(term_of(&role), term2);
    a2.resign().await.unwrap();
    b.resign().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_not_named_in_sync_waits_and_an_unreadable_marker_blocks_everyone() {
    let cluster = cluster();
    let keys = ClusterKeys::new(&cluster).unwrap();
    let mut etcd = etcd().await;

    // The last leader "a" named "b" in sync; "c" is named nowhere.
    let marker = ReplicationMarker::with_standby("a", 1, "b", true, 7);
    etcd.put(keys.replication.as_str(), marker.encode(), None)
        .await
        .unwrap();
    let c = start(&cluster, "c", 2).await;
    let mut c_rx = c.subscribe();
    let (role, _) = wait_role(&mut c_rx, Duration::from_secs(5), "blocked", |r| {
        matches!(r, Role::Candidate { blocked: Some(_) })
    })
    .await;
    assert!(
        matches!(role, Role::Candidate { blocked: Some(CampaignBlock::NotInSync { standby: Some(ref s), .. }) } if s == "b"),
        "{role:?}"
    );
    // The named standby may take over.
    let b = start(&cluster, "b", 2).await;
    let mut b_rx = b.subscribe();
    wait_role(&mut b_rx, Duration::from_secs(10), "leader", is_leader).await;
    b.resign().await.unwrap();
    c.resign().await.unwrap();

    // A marker this build cannot read: nobody campaigns blind.
    etcd.put(keys.replication.as_str(), r#"{"format_version":9}"#, None)
        .await
        .unwrap();
    let d = start(&cluster, "b", 2).await;
    let mut d_rx = d.subscribe();
    let (role, _) = wait_role(&mut d_rx, Duration::from_secs(5), "blocked", |r| {
        matches!(r, Role::Candidate { blocked: Some(_) })
    })
    .await;
    assert!(
        matches!(
            role,
            Role::Candidate {
                blocked: Some(CampaignBlock::UnreadableMarker(_))
            }
        ),
        "{role:?}"
    );
    // An operator deleting the marker forces a takeover (documented as accepting loss).
    etcd.delete(keys.replication.as_str(), None).await.unwrap();
    wait_role(&mut d_rx, Duration::from_secs(10), "leader", is_leader).await;
    d.resign().await.unwrap();
}

/// A node's own campaign hold (crescentd: its journal lacks a record it quarantined) keeps it
/// from campaigning even as the last leader of a fresh cluster; it campaigns once the hold
/// lifts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_hold_blocks_the_campaign_until_it_lifts() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let cluster = cluster();
    let held = Arc::new(AtomicBool::new(true));
    let hold = held.clone();
    let config = config(&cluster, "a", 2).with_campaign_hold(move || {
        hold.load(Ordering::SeqCst)
            .then(|| "quarantined record at seq 7".to_string())
    });
    let a = crescent_ha::Elector::start(config, metrics())
        .await
        .unwrap();
    let mut rx = a.subscribe();
    let (role, _) = wait_role(&mut rx, Duration::from_secs(5), "held", |r| {
        matches!(r, Role::Candidate { blocked: Some(_) })
    })
    .await;
    assert!(
        matches!(role, Role::Candidate { blocked: Some(CampaignBlock::LocalHold(ref r)) } if r.contains("seq 7")),
        "{role:?}"
    );
    held.store(false, Ordering::SeqCst);
    wait_role(&mut rx, Duration::from_secs(10), "leader", is_leader).await;
    a.resign().await.unwrap();
}
