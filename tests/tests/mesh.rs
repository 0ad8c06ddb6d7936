//! Meshes of standalone clusters on real etcd and redis-server (`CRESCENT_TEST_ETCD`,
//! `CRESCENT_TEST_REDIS`; scripts/test.sh starts both): objects spread by weight, every object
//! readable through the mesh (the Rust `MeshClient` and `crescent --mesh` processes), a
//! request sent to the wrong cluster redirected over RPC and HTTP, and kill -9 of one cluster
//! leaving the others' objects readable while its own fail at once with UNAVAILABLE;
//! `crescent --mesh M bench` through two clusters.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crescent_client::{BearerToken, ClientOptions, CrescentClient, MeshClient};
use crescent_tests::ha_pair::{etcd, Backend};
use crescent_tests::mesh::{Mesh, TENANT};
use crescent_tests::redis::test_redis;
use crescent_tests::store_e2e::counter;
use crescent_wire::ErrorCode;

fn keys(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("obj-{i}")).collect()
}

/// Puts `keys` (value `v-KEY`) through the mesh; returns how many each cluster holds.
async fn put_all(client: &MeshClient, keys: &[String]) -> BTreeMap<String, u64> {
    let values: Vec<String> = keys.iter().map(|k| format!("v-{k}")).collect();
    for r in client.put_batch(keys, &values).await.expect("batch put") {
        r.expect("every item stored");
    }
    let mut held = BTreeMap::new();
    for k in keys {
        *held.entry(client.authority(k).unwrap()).or_insert(0) += 1;
    }
    held
}

async fn assert_readable(client: &MeshClient, keys: &[String]) {
    let read = client.get_batch(keys).await.expect("batch get");
    for (k, v) in keys.iter().zip(read) {
        assert_eq!(
            v.expect("readable through the mesh"),
            format!("v-{k}").into_bytes()
        );
    }
}

/// The objects `crescent mesh ls` reports per cluster, checked against `held`.
fn assert_listed(mesh: &Mesh, held: &BTreeMap<String, u64>, generation: u64) {
    let ls = mesh.cli_json(&["mesh", "ls"]);
    assert_eq!(ls["generation"], generation, "{ls}");
    let rows = ls["clusters"].as_array().expect("clusters");
    assert_eq!(rows.len(), mesh.clusters.len(), "{ls}");
    for row in rows {
        let name = row["name"].as_str().unwrap();
        assert_eq!(row["state"], "serving", "{ls}");
        let node = &mesh.clusters[mesh.index(name)].1;
        assert_eq!(row["leader"], node.addr.to_string(), "{ls}");
        assert_eq!(row["objects"], held.get(name).copied().unwrap_or(0), "{ls}");
    }
}

/// A request for `key` sent straight to `wrong` is refused WRONG_CLUSTER naming `authority`,
/// over RPC (the client's fast path) and over HTTP.
async fn assert_redirected(mesh: &Mesh, key: &str, wrong: usize, authority: &str, generation: u64) {
    let token = mesh.key.client(TENANT);
    let addr = mesh.clusters[wrong].1.addr;
    let options = ClientOptions::servers(&addr.to_string()).with_token(BearerToken::new(&token));
    let direct = CrescentClient::connect(options).await.unwrap();
    let e = direct
        .get(key)
        .await
        .expect_err("not this cluster's object");
    let api = match e {
        crescent_client::ClientError::Api(api) => api,
        other => panic!("{other}"),
    };
    assert_eq!(api.code, ErrorCode::WrongCluster, "{api}");
    let redirect = api.redirect.expect("the redirect");
    assert_eq!(
        (redirect.cluster.as_str(), redirect.generation),
        (authority, generation)
    );
    let batch = direct.batch_is_exist(&[key]).await.unwrap();
    let item = batch[0].as_ref().expect_err("refused per item");
    assert_eq!(item.code(), Some(ErrorCode::WrongCluster));
    let http = reqwest::Client::new()
        .post(format!("http://{addr}/v1/objects/exist"))
        .bearer_auth(&token)
        .json(&serde_json::json!({"id": {"key": key}}))
        .send()
        .await
        .unwrap();
    assert_eq!(http.status().as_u16(), 421);
    let body: serde_json::Value = http.json().await.unwrap();
    assert_eq!(body["code"], "WRONG_CLUSTER", "{body}");
    assert_eq!(body["redirect"]["cluster"], authority, "{body}");
}

/// Two clusters of weights 1 and 3: objects spread by weight, all readable, the CLI routes
/// put/get/exist/rm, `mesh ls` counts each cluster's objects, a misrouted request is
/// redirected.
async fn two_clusters(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let mesh = Mesh::start(dir.path(), backend, &[1.0, 3.0]).await;
    let client = mesh.client().await;
    // The first cluster made generation 1; the second joined (2) and serves (3).
    assert_eq!(client.generation(), 3);
    let keys = keys(400);
    let held = put_all(&client, &keys).await;
    let heavy = held.get(&mesh.clusters[1].0).copied().unwrap_or(0);
    assert!(
        (240..=360).contains(&heavy),
        "weight 3 of 4 holds {heavy} of 400: {held:?}"
    );
    assert_readable(&client, &keys).await;
    assert_listed(&mesh, &held, 3);

    let file = dir.path().join("value");
    std::fs::write(&file, b"through the CLI").unwrap();
    let put = mesh.cli_json(&["put", "cli-key", file.to_str().unwrap()]);
    assert_eq!(
        put["cluster"],
        client.authority("cli-key").unwrap(),
        "{put}"
    );
    let got = mesh.cli_json(&["get", "cli-key"]);
    assert_eq!(got["value_utf8"], "through the CLI", "{got}");
    assert_eq!(mesh.cli_json(&["exist", "cli-key"])["exists"], true);
    assert_eq!(mesh.cli_json(&["rm", "cli-key"])["removed"], true);
    assert_eq!(mesh.cli(&["exist", "cli-key"]).status.code(), Some(1));

    let authority = client.authority(&keys[0]).unwrap();
    let wrong = 1 - mesh.index(&authority);
    assert_redirected(&mesh, &keys[0], wrong, &authority, 3).await;
}

/// Three clusters; kill -9 of one: the others' objects stay readable, its own fail at once
/// with UNAVAILABLE (exit 3 from the CLI).
async fn kill_one_of_three(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let mut mesh = Mesh::start(dir.path(), backend, &[1.0, 1.0, 2.0]).await;
    let client = mesh.client().await;
    let keys = keys(120);
    let held = put_all(&client, &keys).await;
    assert_eq!(held.len(), 3, "every cluster holds some: {held:?}");
    assert_listed(&mesh, &held, 5);
    let dead = mesh.clusters[1].0.clone();
    mesh.clusters[1].1.guard.sigkill();

    let (lost, kept): (Vec<String>, Vec<String>) = keys
        .iter()
        .cloned()
        .partition(|k| client.authority(k).unwrap() == dead);
    assert_readable(&client, &kept).await;
    let fresh = mesh.client().await;
    assert_readable(&fresh, &kept).await;
    for r in fresh.get_batch(&lost).await.unwrap() {
        assert_eq!(
            r.expect_err("on the dead cluster").code_str(),
            "UNAVAILABLE"
        );
    }
    let started = Instant::now();
    let out = mesh.cli(&["get", &lost[0]]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(err["error"]["code"], "UNAVAILABLE", "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "failed slowly: {:?}",
        started.elapsed()
    );
    let ok = mesh.cli_json(&["get", &kept[0]]);
    assert_eq!(ok["value_utf8"], format!("v-{}", kept[0]));
}

/// A key of `client`'s scope whose authority is `cluster`.
fn key_of(client: &MeshClient, cluster: &str, prefix: &str) -> String {
    (0..)
        .map(|i| format!("{prefix}-{i}"))
        .find(|k| client.authority(k).unwrap() == cluster)
        .unwrap()
}

/// The leader `crescent mesh ls` names for `cluster`, and the generation.
fn listed_leader(mesh: &Mesh, cluster: &str) -> (String, u64) {
    let ls = mesh.cli_json(&["mesh", "ls"]);
    let row = ls["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == cluster)
        .unwrap_or_else(|| panic!("{cluster} not listed: {ls}"))
        .clone();
    (
        row["leader"].as_str().unwrap_or("").to_string(),
        ls["generation"].as_u64().unwrap(),
    )
}

/// An HA pair beside a standalone cluster: kill -9 of the pair's active makes its standby
/// the active, which publishes its own address; `crescent --mesh` reaches the pair's cluster
/// there.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pair_in_a_mesh_publishes_its_new_active_after_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let mesh = Mesh::start(dir.path(), Backend::Etcd(etcd()), &[1.0]).await;
    let (cluster, mut nodes, active) = mesh.start_pair(dir.path(), "p", 1.0).await;
    let (leader, before) = listed_leader(&mesh, &cluster);
    assert_eq!(leader, nodes[active].addr.to_string());
    let client = mesh.client().await;
    let first = key_of(&client, &cluster, "pair");
    let file = dir.path().join("value");
    std::fs::write(&file, b"on the pair").unwrap();
    mesh.cli_json(&["put", &first, file.to_str().unwrap()]);

    nodes[active].guard.sigkill();
    let standby = 1 - active;
    crescent_tests::ha_pair::wait_active(&nodes[standby], Duration::from_secs(20)).await;
    let (leader, after) = listed_leader(&mesh, &cluster);
    assert_eq!(
        leader,
        nodes[standby].addr.to_string(),
        "the new active published itself"
    );
    assert_eq!(after, before + 1, "a leader change is one generation");
    let second = key_of(&client, &cluster, "after");
    let put = mesh.cli_json(&["put", &second, file.to_str().unwrap()]);
    assert_eq!(put["cluster"], cluster.as_str(), "{put}");
    assert_eq!(
        mesh.cli_json(&["get", &second])["value_utf8"],
        "on the pair"
    );
}

/// A third cluster joins a mesh holding objects: the objects whose authority moved to it are
/// read (and removed) where they still are (through the `MeshClient`, and new `crescent`
/// processes), the others at their authority; a new object goes to the joined cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn objects_stay_readable_after_a_join() {
    let dir = tempfile::tempdir().unwrap();
    let mut mesh = Mesh::start(dir.path(), Backend::Etcd(etcd()), &[1.0, 1.0]).await;
    let client = mesh.client().await;
    let keys = keys(120);
    put_all(&client, &keys).await;
    let joined = mesh.add(dir.path(), 2.0).await;
    let started = Instant::now();
    while client.generation() < 5 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the watch saw no join"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let moved: Vec<&String> = keys
        .iter()
        .filter(|k| client.authority(k).unwrap() == joined)
        .collect();
    assert!(!moved.is_empty(), "some keys moved to the joined cluster");
    assert_readable(&client, &keys).await;
    let got = mesh.cli_json(&["get", moved[0]]);
    assert_eq!(got["value_utf8"], format!("v-{}", moved[0]), "{got}");
    assert_eq!(mesh.cli_json(&["exist", moved[0]])["exists"], true);
    assert_eq!(mesh.cli(&["exist", "never-stored"]).status.code(), Some(1));
    // A moved object is removed where it still is; then it is gone.
    assert_eq!(mesh.cli_json(&["rm", moved[1]])["removed"], true);
    assert_eq!(mesh.cli(&["exist", moved[1]]).status.code(), Some(1));
    let gone = client.get(moved[1]).await.expect_err("removed");
    assert_eq!(gone.code_str(), "NOT_FOUND");
    let fresh = key_of(&client, &joined, "fresh");
    client.put(&fresh, b"v-new").await.unwrap();
    let held = BTreeMap::from([(joined.clone(), 1u64)]);
    let ls = mesh.cli_json(&["mesh", "ls"]);
    let row = ls["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == joined.as_str())
        .unwrap()
        .clone();
    assert_eq!(
        row["objects"], held[&joined],
        "only the new object is there: {ls}"
    );

    // A rebalance moves what the join left at the previous authorities: afterwards every
    // object is read at its authority itself, with no fallback.
    let report = mesh.cli_json(&["mesh", "rebalance"]);
    assert_eq!(report["failed"], 0, "{report}");
    assert_eq!(
        report["moved"],
        moved.len() as u64 - 1,
        "the removed one is gone: {report}"
    );
    for key in keys.iter().filter(|k| *k != moved[1]) {
        let authority = client.authority(key).unwrap();
        let at = client.cluster_client(&authority).unwrap();
        let value = at
            .get(key)
            .await
            .unwrap_or_else(|e| panic!("{key} at {authority}: {e}"));
        assert_eq!(value, format!("v-{key}").into_bytes());
    }
    let again = mesh.cli_json(&["mesh", "rebalance"]);
    assert_eq!(
        (&again["moved"], &again["failed"]),
        (&0.into(), &0.into()),
        "{again}"
    );
}

/// Every cluster's completed puts (`crescent_store_puts_total{outcome="completed"}`).
async fn completed_puts(mesh: &Mesh) -> Vec<u64> {
    let mut puts = Vec::new();
    for (_, node) in &mesh.clusters {
        let url = format!("http://{}", node.addr);
        let done = r#"outcome="completed""#;
        puts.push(counter(&url, "crescent_store_puts_total", done).await);
    }
    puts
}

/// `crescent --mesh M bench` through two clusters: all five figures, `clusters: 2`, both
/// clusters completed puts of it, and the bench's objects are gone from both
/// afterwards (it removes its keys and unmounts its owners' segments, as the single-cluster
/// bench does).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bench_through_two_clusters_on_etcd() {
    let dir = tempfile::tempdir().unwrap();
    let mesh = Mesh::start(dir.path(), Backend::Etcd(etcd()), &[1.0, 1.0]).await;
    let before = completed_puts(&mesh).await;
    let owner_token = mesh.key.owner("bench-owner");
    let report = mesh.cli_json(&[
        "bench",
        "--n",
        "200",
        "--size",
        "4096",
        "--owner-token",
        &owner_token,
        "--owner-id",
        "bench-owner",
    ]);
    for figure in ["put", "get", "put_batch", "get_batch", "exist"] {
        let rate = report[figure].as_f64().unwrap_or(0.0);
        assert!(rate > 0.0, "{figure}: {report}");
    }
    assert_eq!(
        (&report["n"], &report["size"], &report["clusters"]),
        (&200.into(), &4096.into(), &2.into()),
        "{report}"
    );
    let after = completed_puts(&mesh).await;
    for (i, (b, a)) in before.iter().zip(&after).enumerate() {
        // 400 keys split by rendezvous between two equal clusters: each takes well over 100.
        assert!(
            a - b >= 100,
            "cluster {i} completed puts {b} -> {a}: {report}"
        );
    }
    assert_listed(&mesh, &BTreeMap::new(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_clusters_on_etcd() {
    two_clusters(Backend::Etcd(etcd())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_clusters_on_redis() {
    let dir = tempfile::tempdir().unwrap();
    let (url, _redis) = test_redis(dir.path());
    two_clusters(Backend::Redis(url)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_9_of_one_of_three_clusters_on_etcd() {
    kill_one_of_three(Backend::Etcd(etcd())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_9_of_one_of_three_clusters_on_redis() {
    let dir = tempfile::tempdir().unwrap();
    let (url, _redis) = test_redis(dir.path());
    kill_one_of_three(Backend::Redis(url)).await;
}
