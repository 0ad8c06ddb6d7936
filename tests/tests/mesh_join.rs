//! A third cluster joins a mesh of two on real etcd while writers put through the mesh
//! (docs/scale-out.md, "Reads after a membership change"): every acknowledged object stays
//! readable through the mesh during and after the join, the writers keep being acknowledged
//! across it, and a rebalance then leaves every object at its authority.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crescent_client::MeshClient;
use crescent_tests::ha_pair::{etcd, Backend};
use crescent_tests::mesh::Mesh;

const WRITERS: usize = 4;

/// What one writer saw: its acknowledged keys, and when each was acknowledged.
#[derive(Default)]
struct Written {
    acked: Vec<(String, Instant)>,
    failed: usize,
}

/// Puts new keys `w{w}-{i}` (value `v-KEY`) until `stop`; a refusal while the membership
/// changes is counted, not fatal (the key may or may not be stored: it is not read back).
async fn write(client: MeshClient, w: usize, stop: Arc<AtomicBool>) -> Written {
    let mut out = Written::default();
    let mut i = 0;
    while !stop.load(Ordering::Acquire) {
        let key = format!("w{w}-{i}");
        match client.put(&key, format!("v-{key}").as_bytes()).await {
            Ok(_) => out.acked.push((key, Instant::now())),
            Err(e) => {
                out.failed += 1;
                eprintln!("{key}: not acknowledged: {e}");
            }
        }
        i += 1;
    }
    out
}

async fn assert_readable(client: &MeshClient, keys: &[String]) {
    let read = client.get_batch(keys).await.expect("batch get");
    for (k, v) in keys.iter().zip(read) {
        let v = v.unwrap_or_else(|e| panic!("{k} unreadable through the mesh: {e}"));
        assert_eq!(v, format!("v-{k}").into_bytes(), "{k}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_third_cluster_joins_under_load_and_every_acknowledged_object_stays_readable() {
    let dir = tempfile::tempdir().unwrap();
    let mut mesh = Mesh::start(dir.path(), Backend::Etcd(etcd()), &[1.0, 1.0]).await;
    let client = mesh.client().await;
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| tokio::spawn(write(client.clone(), w, stop.clone())))
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = client.generation();
    let join_started = Instant::now();
    let joined = mesh.add(dir.path(), 1.0).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while client.generation() <= before {
        assert!(Instant::now() < deadline, "the writers' client saw no join");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let joined_at = Instant::now();
    // Reads during the load, right after the join: objects acknowledged before it are found
    // at the cluster that held them (the runner-up of their keys).
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Release);
    let mut acked = Vec::new();
    let mut failed = 0;
    for w in writers {
        let written = w.await.expect("a writer panicked");
        acked.extend(written.acked);
        failed += written.failed;
    }
    let before_join = acked.iter().filter(|(_, at)| *at < join_started).count();
    let after_join = acked.iter().filter(|(_, at)| *at > joined_at).count();
    eprintln!(
        "{} acknowledged ({before_join} before the join, {after_join} after), {failed} not",
        acked.len()
    );
    assert!(
        before_join > 0 && after_join > 0,
        "writes on both sides of the join"
    );
    let keys: Vec<String> = acked.into_iter().map(|(k, _)| k).collect();
    let moved = keys
        .iter()
        .filter(|k| client.authority(k).unwrap() == joined)
        .count();
    assert!(moved > 0, "some keys route to the joined cluster");
    assert_readable(&client, &keys).await;
    let report = mesh.cli_json(&["mesh", "rebalance"]);
    assert_eq!(report["failed"], 0, "{report}");
    assert_readable(&client, &keys).await;
    // Each object now at its authority itself.
    for key in &keys {
        let at = client
            .cluster_client(&client.authority(key).unwrap())
            .unwrap();
        let value = at.get(key).await.unwrap_or_else(|e| panic!("{key}: {e}"));
        assert_eq!(value, format!("v-{key}").into_bytes());
    }
}
