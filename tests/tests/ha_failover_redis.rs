//! An HA pair coordinated through Redis (`crescentd --redis`) instead of etcd: the Redis at
//! `CRESCENT_TEST_REDIS` (scripts/test.sh starts one), else a redis-server of its own.
//!
//! The pair elects, the standby replicates until in sync, and kill -9 of the active under 16
//! concurrent clients issuing journaled commands lets the standby take over under a greater
//! term with every command acknowledged before the kill; the CLI then finds the new active
//! through Redis (`crescent --redis`).

use std::time::{Duration, Instant};

use crescent_tests::binaries::crescent_command;
use crescent_tests::crescentd::{Auth, CrescentdProcess, Outcome};
use crescent_tests::ha_pair::{
    cluster_name, pair_key, start_node_on, wait_active, wait_pair_in_sync, Backend,
};
use crescent_tests::mount_load::MountLoad;
use crescent_tests::redis::test_redis;

/// The Redis leader record of `cluster`: (address, term).
async fn redis_leader(url: &str, cluster: &str) -> Option<(String, u64)> {
    let client = crescent_ha::redis::Client::open(url).ok()?;
    let mut conn = client.get_multiplexed_async_connection().await.ok()?;
    let raw: Option<Vec<u8>> = crescent_ha::redis::cmd("GET")
        .arg(format!("/crescent/{cluster}/leader"))
        .query_async(&mut conn)
        .await
        .ok()?;
    let record = crescent_ha::LeaderRecord::decode("leader", &raw?).ok()?;
    Some((record.address, record.term?))
}

/// Reads `GET /v1/ha/replication` of `node`: the active's term.
async fn active_term(node: &CrescentdProcess) -> u64 {
    let body: serde_json::Value = reqwest::Client::new()
        .get(format!("http://{}/v1/ha/replication", node.addr))
        .bearer_auth(node.auth.as_ref().expect("[auth] is on").admin())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    body["term"].as_u64().unwrap_or_else(|| panic!("{body}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pair_on_redis_fails_over_after_kill_9_without_losing_acknowledged_commands() {
    let dir = tempfile::tempdir().unwrap();
    let (url, _redis) = test_redis(dir.path());
    let backend = Backend::Redis(url.clone());
    let cluster = cluster_name();
    let auth = Auth::Key(pair_key(dir.path()));
    let mut nodes = ["a", "b"]
        .map(|name| start_node_on(dir.path(), name, &cluster, false, auth.clone(), &backend));
    let active = wait_pair_in_sync(&[&nodes[0], &nodes[1]]).await;
    let standby = 1 - active;
    let term1 = active_term(&nodes[active]).await;
    let (leader_address, leader_term) = redis_leader(&url, &cluster).await.expect("leader record");
    assert_eq!(
        leader_term, term1,
        "the active's term is the Redis record's"
    );
    assert_eq!(leader_address, nodes[active].addr.to_string());

    let client = nodes[active].segments_client(Duration::from_secs(5));
    let load = MountLoad::start(&client, 16, "seg");
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let killed_at = Instant::now();
    nodes[active].guard.sigkill();
    let acked = load.stop().await;
    assert!(
        acked.len() > 20,
        "too little load before the kill: {}",
        acked.len()
    );

    wait_active(&nodes[standby], Duration::from_secs(15)).await;
    let new_client = nodes[standby].segments_client(Duration::from_secs(5));
    loop {
        match new_client.mount("owner-x", "after-failover", 1 << 20).await {
            Outcome::Acked => break,
            other => {
                assert!(killed_at.elapsed() < Duration::from_secs(20), "{other:?}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    eprintln!(
        "failover on redis: first successful write {:?} after kill -9 ({} commands acknowledged before)",
        killed_at.elapsed(),
        acked.len()
    );
    let term2 = active_term(&nodes[standby]).await;
    assert!(term2 > term1, "term {term2} after {term1}");
    assert_eq!(
        redis_leader(&url, &cluster).await,
        Some((nodes[standby].addr.to_string(), term2))
    );
    let present = new_client.assert_listed(&acked, "after failover").await;
    assert!(present.contains("after-failover"));

    // A `crescent` process given only the Redis and the cluster finds the new active there.
    let admin = nodes[standby].admin_token().expect("[auth] is on");
    let globals = [
        "--redis",
        &url,
        "--cluster",
        &cluster,
        "--token",
        &admin,
        "--json",
    ];
    let out = crescent_command(&globals)
        .arg("status")
        .output()
        .expect("running crescent");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).expect("status JSON");
    assert_eq!(
        (status["role"].as_str(), status["term"].as_u64()),
        (Some("active"), Some(term2)),
        "the CLI reached the new active: {status}"
    );
}
