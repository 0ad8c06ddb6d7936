//! The mesh membership record in a real etcd and a real redis-server, each test starting its
//! own (tests/common/servers.rs): create, update, refusals, racing writers, records this build
//! cannot read, and a backend restart.

mod common;

use std::time::Duration;

use common::servers::{raw_put, OwnedEtcd, OwnedRedis, ServerUnderTest};
use crescent_ha::{membership_key, ErrorClass, HaError, MembershipStore, StoredMembership};
use crescent_mesh::{ClusterEntry, ClusterState, Membership, MeshError};

const TIMEOUT: Duration = Duration::from_secs(3);

fn entry(name: &str, state: ClusterState) -> ClusterEntry {
    ClusterEntry {
        name: name.into(),
        leader: Some(format!("{name}.example:7480")),
        weight: 1.0,
        state,
    }
}

async fn store(server: &dyn ServerUnderTest, mesh: &str) -> MembershipStore {
    MembershipStore::connect(&server.endpoint(), mesh, TIMEOUT)
        .await
        .expect("connect")
}

/// The successor of `stored` with `change` applied and the generation advanced.
fn next(stored: &StoredMembership, change: impl FnOnce(&mut Membership)) -> Membership {
    let mut m = stored.membership.clone();
    m.generation += 1;
    change(&mut m);
    m
}

fn mesh_code(r: Result<StoredMembership, HaError>) -> (&'static str, HaError) {
    let e = r.expect_err("refused");
    (e.code(), e)
}

async fn lifecycle(server: &dyn ServerUnderTest) {
    let s = store(server, "lifecycle").await;
    assert_eq!(s.key(), "/crescent/mesh/lifecycle/membership");
    assert_eq!(s.read().await.unwrap(), None);

    let first = Membership::new("lifecycle", vec![entry("a", ClusterState::Serving)]);
    let v1 = s.compare_and_set(None, first.clone()).await.unwrap();
    assert_eq!(v1.membership, first);
    assert_eq!(s.read().await.unwrap().as_ref(), Some(&v1));

    // A second creation loses: the record exists, at generation 1.
    let (code, err) = mesh_code(s.compare_and_set(None, first.clone()).await);
    assert_eq!(code, "STALE_GENERATION", "{err}");
    assert_eq!(err.class(), ErrorClass::Retryable);

    // A join, then an update built from the old read: refused, naming generation 2.
    let joined = next(&v1, |m| m.clusters.push(entry("b", ClusterState::Joining)));
    let v2 = s.compare_and_set(Some(&v1), joined).await.unwrap();
    let late = next(&v1, |m| m.clusters[0].weight = 5.0);
    assert!(matches!(
        s.compare_and_set(Some(&v1), late).await,
        Err(HaError::Mesh(MeshError::StaleGeneration {
            current: 2,
            proposed: 2
        }))
    ));

    // The update rule runs before anything is written.
    let dropped = next(&v2, |m| {
        m.clusters.remove(0);
    });
    let (code, _) = mesh_code(s.compare_and_set(Some(&v2), dropped).await);
    assert_eq!(code, "ILLEGAL_TRANSITION");
    assert_eq!(s.read().await.unwrap().as_ref(), Some(&v2));

    // Serving, then a drain of the first cluster: both land.
    let serving = next(&v2, |m| m.clusters[1].state = ClusterState::Serving);
    let v3 = s.compare_and_set(Some(&v2), serving).await.unwrap();
    let draining = next(&v3, |m| m.clusters[0].state = ClusterState::Draining);
    let v4 = s.compare_and_set(Some(&v3), draining).await.unwrap();
    assert_eq!(s.read().await.unwrap().unwrap().membership.generation, 4);
    assert_eq!(
        v4.membership.cluster("a").unwrap().state,
        ClusterState::Draining
    );
}

/// Eight writers each add themselves from the same read: exactly one lands per read, and with
/// re-reads all eight land, one generation each.
async fn racing_writers(server: &dyn ServerUnderTest) {
    let endpoint = server.endpoint();
    let first = Membership::new("race", vec![entry("seed", ClusterState::Serving)]);
    let base = store(server, "race")
        .await
        .compare_and_set(None, first)
        .await
        .unwrap();

    let mut once = tokio::task::JoinSet::new();
    for i in 0..8 {
        let (base, endpoint) = (base.clone(), endpoint.clone());
        once.spawn(async move {
            let s = MembershipStore::connect(&endpoint, "race", TIMEOUT).await?;
            let own = next(&base, |m| {
                m.clusters
                    .push(entry(&format!("w{i}"), ClusterState::Joining))
            });
            s.compare_and_set(Some(&base), own).await
        });
    }
    let results = once.join_all().await;
    assert_eq!(
        results.iter().filter(|r| r.is_ok()).count(),
        1,
        "{results:?}"
    );
    for r in results.iter().filter(|r| r.is_err()) {
        assert!(
            matches!(
                r,
                Err(HaError::Mesh(MeshError::StaleGeneration { current: 2, .. }))
            ),
            "{r:?}"
        );
    }

    let mut retrying = tokio::task::JoinSet::new();
    for i in 0..8 {
        let endpoint = endpoint.clone();
        retrying.spawn(async move {
            let s = MembershipStore::connect(&endpoint, "race", TIMEOUT)
                .await
                .unwrap();
            let name = format!("w{i}");
            loop {
                let cur = s.read().await.unwrap().unwrap();
                if cur.membership.cluster(&name).is_some() {
                    return;
                }
                let own = next(&cur, |m| {
                    m.clusters.push(entry(&name, ClusterState::Joining))
                });
                match s.compare_and_set(Some(&cur), own).await {
                    Ok(_) => return,
                    Err(HaError::Mesh(MeshError::StaleGeneration { .. })) => continue,
                    Err(e) => panic!("{e}"),
                }
            }
        });
    }
    retrying.join_all().await;
    let last = store(server, "race")
        .await
        .read()
        .await
        .unwrap()
        .unwrap()
        .membership;
    assert_eq!(last.clusters.len(), 9);
    // One generation per landed update: the first record, the first race's winner, then
    // the seven others.
    assert_eq!(last.generation, 9);
}

/// A record of a newer format, or garbage, is reported as such and never overwritten as if
/// the mesh had no record.
async fn unreadable_records(server: &dyn ServerUnderTest) {
    let endpoint = server.endpoint();
    let s = store(server, "newer").await;
    raw_put(
        &endpoint,
        &membership_key("newer"),
        br#"{"format_version":2}"#,
    )
    .await;
    let err = s.read().await.unwrap_err();
    assert_eq!(err.code(), "UNSUPPORTED_VERSION", "{err}");
    assert_eq!(err.class(), ErrorClass::Fatal);
    let first = Membership::new("newer", vec![entry("a", ClusterState::Serving)]);
    let (code, _) = mesh_code(s.compare_and_set(None, first).await);
    assert_eq!(code, "UNSUPPORTED_VERSION");

    raw_put(&endpoint, &membership_key("newer"), b"\x00 not json").await;
    assert_eq!(s.read().await.unwrap_err().code(), "MALFORMED");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_membership_lifecycle() {
    let server = OwnedEtcd::start();
    lifecycle(&server).await;
    racing_writers(&server).await;
    unreadable_records(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_membership_lifecycle() {
    let server = OwnedRedis::start();
    lifecycle(&server).await;
    racing_writers(&server).await;
    unreadable_records(&server).await;
}

/// etcd keeps the record across a restart; a Redis without persistence loses it, and an
/// update built from before the restart is refused rather than written over nothing
/// (docs/scale-out.md, "Membership record").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_restart_keeps_or_visibly_loses_the_record() {
    let mut servers: Vec<Box<dyn ServerUnderTest>> =
        vec![Box::new(OwnedEtcd::start()), Box::new(OwnedRedis::start())];
    for server in servers.iter_mut() {
        let s = store(server.as_ref(), "restart").await;
        let first = Membership::new("restart", vec![entry("a", ClusterState::Serving)]);
        let v1 = s.compare_and_set(None, first).await.unwrap();
        server.restart();
        let update = next(&v1, |m| m.clusters.push(entry("b", ClusterState::Joining)));
        // The lazy connection may need a moment to reach the restarted server.
        let mut read = s.read().await;
        for _ in 0..50 {
            if read.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            read = s.read().await;
        }
        match server.backend() {
            "etcd" => {
                assert_eq!(read.unwrap().as_ref(), Some(&v1));
                s.compare_and_set(Some(&v1), update).await.unwrap();
            }
            _ => {
                assert_eq!(read.unwrap(), None);
                assert!(matches!(
                    s.compare_and_set(Some(&v1), update).await,
                    Err(HaError::Mesh(MeshError::StaleGeneration {
                        current: 0,
                        proposed: 2
                    }))
                ));
            }
        }
    }
}
