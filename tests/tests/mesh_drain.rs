//! `crescent mesh drain --cluster C` on meshes of standalone clusters on real etcd and
//! redis-server (docs/scale-out.md, "Draining a cluster"): every object C held, of every
//! tenant and domain, is moved to its authority and reads back with the same bytes; C holds no
//! object and is `leaving` in `mesh ls`; a drain run again after stopping midway resumes and
//! keeps the objects already at their authority; an unknown, a leaving and the last serving
//! cluster are refused with their codes.

use std::time::{Duration, Instant};

use crescent_client::MeshClient;
use crescent_tests::binaries::crescent_command;
use crescent_tests::ha_pair::{etcd, Backend};
use crescent_tests::mesh::{Mesh, TENANT};
use crescent_tests::redis::test_redis;

/// An object put through the mesh: the client that put it, its tenant and domain, key and
/// value.
struct Stored {
    client: MeshClient,
    tenant: &'static str,
    domain: Option<&'static str>,
    key: String,
    value: Vec<u8>,
}

/// `n` objects in the client's tenant, a tenth in a domain of it, a tenth in another tenant.
async fn put_objects(mesh: &Mesh, n: usize) -> Vec<Stored> {
    let client = mesh.client().await;
    let admin = mesh.admin_client().await;
    let namespaces = [
        (client.clone(), TENANT, None),
        (
            client.with_scope(None, Some("dom")).unwrap(),
            TENANT,
            Some("dom"),
        ),
        (
            admin.with_scope(Some("other"), None).unwrap(),
            "other",
            None,
        ),
    ];
    let mut stored = Vec::new();
    for i in 0..n {
        let (client, tenant, domain) = namespaces[match i % 10 {
            3 => 1,
            7 => 2,
            _ => 0,
        }]
        .clone();
        let key = format!("obj-{i}");
        let value = format!("value of {key} {}", "x".repeat(i * 37)).into_bytes();
        client
            .put(&key, &value)
            .await
            .expect("put through the mesh");
        stored.push(Stored {
            client,
            tenant,
            domain,
            key,
            value,
        });
    }
    stored
}

/// Every object reads back with its bytes, through `fresh` clients (a new watch) too.
async fn assert_readable<'a>(mesh: &Mesh, stored: impl IntoIterator<Item = &'a Stored>) {
    let fresh = mesh.admin_client().await;
    for s in stored {
        assert_eq!(s.client.get(&s.key).await.expect("readable"), s.value);
        let scope = fresh.with_scope(Some(s.tenant), s.domain).unwrap();
        assert_eq!(scope.get(&s.key).await.expect("readable anew"), s.value);
    }
}

/// The row of `cluster` in `mesh ls --json`.
fn listed(mesh: &Mesh, cluster: &str) -> serde_json::Value {
    let ls = mesh.cli_json(&["mesh", "ls"]);
    ls["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == cluster)
        .unwrap_or_else(|| panic!("{cluster} not listed: {ls}"))
        .clone()
}

/// `mesh drain --cluster C` refused with `code` (exit 2), nothing changed.
fn assert_refused(mesh: &Mesh, cluster: &str, code: &str) {
    let out = mesh.cli(&["mesh", "drain", "--cluster", cluster]);
    let body: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    assert_eq!(
        out.status.code(),
        Some(2),
        "{body} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(body["error"]["code"], code, "{body}");
}

/// `mesh drain` with a client token: the scan is refused before anything is written.
fn assert_client_token_refused(mesh: &Mesh, cluster: &str) {
    let [flag, endpoint] = match &mesh.backend {
        Backend::Etcd(e) => ["--etcd", e.as_str()],
        Backend::Redis(r) => ["--redis", r.as_str()],
    };
    let token = mesh.key.client(TENANT);
    let globals = [
        flag, endpoint, "--mesh", &mesh.name, "--token", &token, "--json",
    ];
    let out = crescent_command(&globals)
        .args(["mesh", "drain", "--cluster", cluster])
        .output()
        .expect("running crescent");
    let body: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    assert_eq!(body["error"]["code"], "PERMISSION_DENIED", "{body}");
    assert_eq!(out.status.code(), Some(10), "{body}");
    assert_eq!(listed(mesh, cluster)["state"], "serving");
}

/// Drains `cluster` with the CLI; its JSON summary.
fn drain(mesh: &Mesh, cluster: &str) -> serde_json::Value {
    let started = Instant::now();
    let out = mesh.cli_json(&["mesh", "drain", "--cluster", cluster]);
    eprintln!("drained {cluster} in {:?}: {out}", started.elapsed());
    out
}

async fn drain_in_turn(backend: Backend, weights: &[f64]) {
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let mesh = Mesh::start(dir.path(), backend, weights).await;
    eprintln!(
        "{} clusters serving after {:?}",
        weights.len(),
        started.elapsed()
    );
    let stored = put_objects(&mesh, 60).await;
    assert_refused(&mesh, "no-such-cluster", "UNKNOWN_CLUSTER");
    assert_client_token_refused(&mesh, &mesh.clusters[0].0);
    let (last, drained) = mesh.clusters.split_last().unwrap();
    let mut total_moved = 0;
    for (cluster, _) in drained {
        let held = listed(&mesh, cluster)["objects"].as_u64().unwrap();
        let out = drain(&mesh, cluster);
        assert_eq!(out["failed"], 0, "{out}");
        assert_eq!(out["moved"], held, "{out}");
        assert_eq!(out["state"], "leaving", "{out}");
        total_moved += held;
        let row = listed(&mesh, cluster);
        assert_eq!(
            (&row["state"], &row["objects"]),
            (&"leaving".into(), &0.into()),
            "{row}"
        );
        assert_readable(&mesh, &stored).await;
        assert_refused(&mesh, cluster, "ILLEGAL_TRANSITION");
    }
    assert!(total_moved > 0, "the drained clusters held objects");
    assert_eq!(
        listed(&mesh, &last.0)["objects"],
        stored.len(),
        "all on the last"
    );
    assert_refused(&mesh, &last.0, "LAST_SERVING_CLUSTER");
    assert_eq!(listed(&mesh, &last.0)["state"], "serving");
    eprintln!("done after {:?}", started.elapsed());
}

/// A drain that stopped after marking the cluster draining, with two objects already at
/// their new authority (one copied, one written anew since): running it resumes, keeps both
/// objects at the authority (`skipped_newer`) and moves the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_drain_resumes_and_keeps_newer_objects() {
    let dir = tempfile::tempdir().unwrap();
    let mesh = Mesh::start(dir.path(), Backend::Etcd(etcd()), &[1.0, 1.0]).await;
    let client = mesh.client().await;
    let stored = put_objects(&mesh, 40).await;
    let cluster = mesh.clusters[0].0.clone();
    let held: Vec<&Stored> = stored
        .iter()
        .filter(|s| s.tenant == TENANT && s.domain.is_none())
        .filter(|s| client.authority(&s.key).unwrap() == cluster)
        .collect();
    assert!(held.len() >= 3, "{cluster} holds {}", held.len());
    let total = listed(&mesh, &cluster)["objects"].as_u64().unwrap();

    // What a drain that crashed after its first step leaves.
    let endpoint = crescent_ha::CoordinationEndpoint::Etcd(vec![etcd()]);
    let store =
        crescent_ha::MembershipStore::connect(&endpoint, &mesh.name, Duration::from_secs(5))
            .await
            .unwrap();
    let current = store.read().await.unwrap().unwrap();
    let next = crescent_mesh::drain_step(&current.membership, &cluster)
        .unwrap()
        .unwrap();
    let generation = store
        .compare_and_set(Some(&current), next)
        .await
        .unwrap()
        .membership
        .generation;
    client
        .wait_for_generation(generation, Duration::from_secs(10))
        .await;
    assert_eq!(listed(&mesh, &cluster)["state"], "draining");
    client.put(&held[0].key, &held[0].value).await.unwrap();
    client
        .put(&held[1].key, b"written after the drain began")
        .await
        .unwrap();

    let out = drain(&mesh, &cluster);
    assert_eq!(
        (&out["failed"], &out["skipped_newer"]),
        (&0.into(), &2.into()),
        "{out}"
    );
    assert_eq!(out["moved"], total - 2, "{out}");
    assert_eq!(out["state"], "leaving", "{out}");
    let newer = client.get(&held[1].key).await.unwrap();
    assert_eq!(newer, b"written after the drain began");
    let newer_key = held[1].key.clone();
    let rest = stored
        .iter()
        .filter(|s| !(s.tenant == TENANT && s.domain.is_none() && s.key == newer_key));
    assert_readable(&mesh, rest).await;
    assert_eq!(listed(&mesh, &cluster)["objects"], 0);
}

/// Three clusters on etcd: drain one, then another (objects moved once already move again),
/// then the last is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn drain_two_of_three_clusters_on_etcd() {
    drain_in_turn(Backend::Etcd(etcd()), &[1.0, 1.0, 1.0]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn drain_one_of_two_clusters_on_redis() {
    let dir = tempfile::tempdir().unwrap();
    let (url, _redis) = test_redis(dir.path());
    drain_in_turn(Backend::Redis(url), &[1.0, 1.0]).await;
}
