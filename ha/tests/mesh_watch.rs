//! Following the mesh membership record in a real etcd and a real redis-server: newer
//! generations arrive, nothing ever moves the held generation backwards (an unreadable record,
//! an older one, a Redis that lost its data), and a record given again above the lost
//! generation is taken.

mod common;

use std::time::Duration;

use common::servers::{raw_put, OwnedEtcd, OwnedRedis, ServerUnderTest};
use crescent_ha::{membership_key, MembershipStore, MembershipWatch, StoredMembership};
use crescent_mesh::{ClusterEntry, ClusterState, Membership};

const TIMEOUT: Duration = Duration::from_secs(3);
/// Far above the Redis poll (100 ms) and an etcd watch event; below the etcd resync (5 s), so
/// an etcd watch that missed an event fails the test.
const SEEN_WITHIN: Duration = Duration::from_secs(3);

fn first(mesh: &str, generation: u64) -> Membership {
    let serving = ClusterEntry {
        name: "a".into(),
        leader: Some("a.example:7480".into()),
        weight: 1.0,
        state: ClusterState::Serving,
    };
    Membership {
        generation,
        ..Membership::new(mesh, vec![serving])
    }
}

fn joined(stored: &StoredMembership, name: &str) -> Membership {
    let mut m = stored.membership.clone();
    m.generation += 1;
    m.clusters.push(ClusterEntry {
        name: name.into(),
        leader: None,
        weight: 2.0,
        state: ClusterState::Joining,
    });
    m
}

/// Waits a little longer than a change takes to arrive, then checks the held generation.
async fn still_holds(watch: &MembershipWatch, generation: u64) {
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(watch.current().map(|m| m.generation), Some(generation));
}

async fn follows(server: &mut dyn ServerUnderTest) {
    let endpoint = server.endpoint();
    let watch = MembershipWatch::start(&endpoint, "watched", TIMEOUT)
        .await
        .unwrap();
    let store = MembershipStore::connect(&endpoint, "watched", TIMEOUT)
        .await
        .unwrap();
    assert!(watch
        .wait_for_generation(1, Duration::from_millis(300))
        .await
        .is_err());
    assert_eq!(watch.current(), None);

    let v1 = store
        .compare_and_set(None, first("watched", 1))
        .await
        .unwrap();
    assert_eq!(
        watch.wait_for_generation(1, SEEN_WITHIN).await.unwrap(),
        v1.membership
    );
    let v2 = store
        .compare_and_set(Some(&v1), joined(&v1, "b"))
        .await
        .unwrap();
    assert_eq!(
        watch.wait_for_generation(2, SEEN_WITHIN).await.unwrap(),
        v2.membership
    );

    // Garbage, then an older generation written behind the store's back: ignored.
    let key = membership_key("watched");
    raw_put(&endpoint, &key, b"not a record").await;
    still_holds(&watch, 2).await;
    raw_put(&endpoint, &key, &v1.membership.encode()).await;
    still_holds(&watch, 2).await;
    let v3 = Membership {
        generation: 3,
        ..v2.membership.clone()
    };
    raw_put(&endpoint, &key, &v3.encode()).await;
    assert_eq!(watch.wait_for_generation(3, SEEN_WITHIN).await.unwrap(), v3);

    // The backend restarts: etcd keeps the record; Redis without persistence loses it, and
    // the watch keeps generation 3 until the record is given again above it.
    server.restart();
    still_holds(&watch, 3).await;
    let stored = loop {
        match store.read().await {
            Ok(stored) => break stored,
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    };
    let v4 = match stored {
        Some(v3) => store
            .compare_and_set(Some(&v3), joined(&v3, "c"))
            .await
            .unwrap(),
        None => {
            assert_eq!(server.backend(), "redis");
            store
                .compare_and_set(None, first("watched", 4))
                .await
                .unwrap()
        }
    };
    assert_eq!(
        watch.wait_for_generation(4, SEEN_WITHIN).await.unwrap(),
        v4.membership
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_membership_watch() {
    follows(&mut OwnedEtcd::start()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_membership_watch() {
    follows(&mut OwnedRedis::start()).await;
}
