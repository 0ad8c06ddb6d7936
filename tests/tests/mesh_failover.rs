//! One HA pair (its objects on a `crescent owner` process) beside a standalone cluster in one
//! mesh on etcd (docs/scale-out.md, "Failure cases"): writers put through the mesh while the
//! pair's active is killed with SIGKILL; the standby takes over, the owner replays into it,
//! and every acknowledged object of either cluster reads back with its value, through the
//! `MeshClient` and through `crescent --mesh` processes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crescent_client::MeshClient;
use crescent_tests::ha_pair::{etcd, wait_active, wait_gate, Backend};
use crescent_tests::mesh::Mesh;

const WRITERS: usize = 4;
const OWNER_SEGMENT: u64 = 32 << 20;

fn value_of(key: &str) -> Vec<u8> {
    format!("value of {key}").into_bytes()
}

/// Puts keys `w{writer}-{n}` until `stop`, remembering those acknowledged; a refused or failed
/// put (while the pair fails over) is not acknowledged and is not retried.
fn spawn_writer(
    client: MeshClient,
    writer: usize,
    acked: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<u64> {
    tokio::spawn(async move {
        let mut failed = 0;
        for n in 0.. {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let key = format!("w{writer}-{n}");
            match client.put(&key, &value_of(&key)).await {
                Ok(_) => acked.lock().unwrap().push(key),
                Err(_) => {
                    failed += 1;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
        failed
    })
}

/// Waits until a put to `cluster` succeeds (its owner's segment is mounted).
async fn wait_writable(client: &MeshClient, cluster: &str) {
    let key = (0..)
        .map(|i| format!("probe-{i}"))
        .find(|k| client.authority(k).unwrap() == cluster)
        .unwrap();
    let started = Instant::now();
    while client.put(&key, &value_of(&key)).await.is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the pair never took a put"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failover_of_a_pair_under_load_loses_no_acknowledged_object() {
    let dir = tempfile::tempdir().unwrap();
    let mesh = Mesh::start(dir.path(), Backend::Etcd(etcd()), &[1.0]).await;
    let standalone = mesh.clusters[0].0.clone();
    let (pair, mut nodes, active) = mesh.start_pair_on(dir.path(), "p", 1.0, false).await;
    let _owner = mesh.start_owner(&pair, "mesh-owner", OWNER_SEGMENT);
    let client = mesh.client().await;
    wait_writable(&client, &pair).await;

    let acked = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let client = mesh.client().await;
        writers.push(spawn_writer(client, w, acked.clone(), stop.clone()));
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    let before_kill = acked.lock().unwrap().len();
    nodes[active].guard.sigkill();
    let standby = 1 - active;
    wait_active(&nodes[standby], Duration::from_secs(20)).await;
    wait_gate(&nodes[standby], "SERVING", Duration::from_secs(20)).await;
    // The writers reach the new active: acknowledged puts on the pair after the failover.
    let started = Instant::now();
    let after_failover = |acked: &[String]| {
        acked[before_kill..]
            .iter()
            .filter(|k| client.authority(k).unwrap() == pair)
            .count()
    };
    while after_failover(&acked.lock().unwrap()) < 20 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no put reached the pair's new active"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.unwrap();
    }

    let acked = acked.lock().unwrap().clone();
    let on_pair = acked
        .iter()
        .filter(|k| client.authority(k).unwrap() == pair)
        .count();
    assert!(before_kill > 0, "the writers wrote before the kill");
    assert!(
        on_pair > 0 && on_pair < acked.len(),
        "both clusters took puts: {on_pair} of {}",
        acked.len()
    );
    let reader = mesh.client().await;
    for chunk in acked.chunks(256) {
        let read = reader.get_batch(chunk).await.expect("batch get");
        for (key, value) in chunk.iter().zip(read) {
            let cluster = reader.authority(key).unwrap();
            let value = value.unwrap_or_else(|e| {
                panic!("acknowledged {key} on {cluster} lost after the failover: {e}")
            });
            assert_eq!(value, value_of(key), "{key} on {cluster}");
        }
    }
    // A new process reads an object the old active acknowledged, and one of the standalone.
    for cluster in [&pair, &standalone] {
        let key = acked[..before_kill]
            .iter()
            .find(|k| reader.authority(k).unwrap() == *cluster)
            .expect("a put before the kill on each cluster");
        let got = mesh.cli_json(&["get", key]);
        assert_eq!(
            got["value_utf8"],
            String::from_utf8(value_of(key)).unwrap(),
            "{got}"
        );
    }
}
