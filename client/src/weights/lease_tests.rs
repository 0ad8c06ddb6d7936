//! [`RevisionLease`] against a scripted fake crescentd: renewals every third of the TTL until
//! released, none after; a renewal refused for good marks the lease lost; a dropped lease is
//! released in the background.

use std::time::Duration;

use crescent_wire::weights::{self as w, routes};

use super::lease::RevisionLease;
use super::WeightStore;
use crate::client_options::ClientOptions;
use crate::fake_server::{Answer, FakeServer};
use crate::CrescentClient;

/// A lease grant (also parsed as the renewal's reply and, ignoring its fields, the release's
/// acknowledgement).
fn granted() -> &'static str {
    let metadata = w::WeightMetadata {
        id: w::WeightId::new("ns", "model", "main", 1),
        group_id: "wgrp-0".into(),
        manifest_key: "weights/default/ns/model/main/1/manifest".into(),
        availability: "READY".into(),
        residency: "HOT".into(),
        observed_hot_ratio: 1.0,
        metadata_generation: 2,
        policy: w::ResolvedPolicy {
            preferred_residency: "HOT".into(),
            mixed_hot_ratio: 0.5,
            migration_mode: "MANUAL".into(),
        },
        manifest_sha256: None,
        payload_count: None,
        logical_bytes: None,
        affinity_count: None,
        active_operation_id: None,
        active_lease_count: 1,
        retired_by_generation: None,
        created_at_ms: 0,
        updated_at_ms: 0,
    };
    let reply = w::LeaseReply {
        lease_id: "lease-1".into(),
        expires_at_ms: 0,
        metadata,
    };
    Box::leak(serde_json::to_string(&reply).unwrap().into_boxed_str())
}

async fn store(server: &FakeServer) -> WeightStore {
    let options = ClientOptions::servers(&server.address());
    WeightStore::new(&CrescentClient::connect(options).await.unwrap())
}

fn count(server: &FakeServer, route: &str) -> usize {
    server.requests().iter().filter(|p| *p == route).count()
}

async fn acquire(store: &WeightStore, ttl: Duration) -> RevisionLease {
    let id = w::WeightId::new("ns", "model", "main", 1);
    RevisionLease::acquire(store, &id, "test", ttl)
        .await
        .unwrap()
        .0
}

#[tokio::test]
async fn renewed_every_third_of_the_ttl_until_released() {
    let server = FakeServer::start(vec![Answer::Ok(granted())]).await;
    let store = store(&server).await;
    let lease = acquire(&store, Duration::from_millis(300)).await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let renewals = count(&server, routes::LEASE_RENEW);
    // About 9 at a third of 300 ms each; fewer on a loaded machine, never more often.
    assert!((3..=11).contains(&renewals), "{renewals} renewals in 1 s");
    lease.check().unwrap();
    lease.release().await.unwrap();
    assert_eq!(count(&server, routes::LEASE_RELEASE), 1);
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        count(&server, routes::LEASE_RENEW),
        renewals,
        "renewed after release"
    );
}

#[tokio::test]
async fn a_refused_renewal_marks_the_lease_lost() {
    let server = FakeServer::start(vec![Answer::Ok(granted()), Answer::NotFound]).await;
    let store = store(&server).await;
    let lease = acquire(&store, Duration::from_millis(300)).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let e = lease.check().unwrap_err();
    assert_eq!(e.code_str(), "LEASE_EXPIRED", "{e}");
    assert_eq!(
        count(&server, routes::LEASE_RENEW),
        1,
        "no renewal after a refusal"
    );
}

#[tokio::test]
async fn a_dropped_lease_is_released_in_the_background() {
    let server = FakeServer::start(vec![Answer::Ok(granted())]).await;
    let store = store(&server).await;
    drop(acquire(&store, Duration::from_secs(60)).await);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while count(&server, routes::LEASE_RELEASE) == 0 {
        assert!(tokio::time::Instant::now() < deadline, "never released");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(count(&server, routes::LEASE_RENEW), 0);
}
