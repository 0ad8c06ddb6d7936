//! `crescent mesh drain --cluster C` on meshes of standalone clusters on real etcd and
//! redis-server (docs/scale-out.md, "Draining a cluster"): every object C held, of every
//! tenant and domain, is moved to its authority and reads back with the same bytes; C holds no
//! object and is `leaving` in `mesh ls`; an unknown, a leaving and the last serving cluster
//! are refused with their codes.

use std::time::{Duration, Instant};

use crescent_client::{BearerToken, ClientOptions, MeshClient};
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

/// A mesh client with the admin token: it acts in any tenant.
async fn admin_client(mesh: &Mesh) -> MeshClient {
    let options = match &mesh.backend {
        Backend::Etcd(e) => ClientOptions::etcd_mesh(e, &mesh.name),
        Backend::Redis(r) => ClientOptions::redis_mesh(r, &mesh.name),
    }
    .with_token(BearerToken::new(mesh.key.admin()))
    .with_failover_timeout(Duration::from_secs(3));
    MeshClient::connect(options).await.expect("connecting")
}

/// `n` objects in the client's tenant, a tenth in a domain of it, a tenth in another tenant.
async fn put_objects(mesh: &Mesh, n: usize) -> Vec<Stored> {
    let client = mesh.client().await;
    let admin = admin_client(mesh).await;
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
async fn assert_readable(mesh: &Mesh, stored: &[Stored]) {
    let fresh = admin_client(mesh).await;
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

/// Drains `cluster` with the CLI; its JSON summary.
fn drain(mesh: &Mesh, cluster: &str) -> serde_json::Value {
    let started = Instant::now();
    let out = mesh.cli_json(&["mesh", "drain", "--cluster", cluster]);
    eprintln!("drained {cluster} in {:?}: {out}", started.elapsed());
    out
}

async fn drain_in_turn(backend: Backend, weights: &[f64]) {
    let dir = tempfile::tempdir().unwrap();
    let mesh = Mesh::start(dir.path(), backend, weights).await;
    let stored = put_objects(&mesh, 60).await;
    assert_refused(&mesh, "no-such-cluster", "UNKNOWN_CLUSTER");
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
