//! Managed weight revisions through a mesh on real etcd (docs/scale-out.md, "Clients"): each
//! revision lives at the cluster its lineage routes to, with every generation, manifest and
//! payload of it; `crescent --mesh M weights put/get/meta/ls/rm` reach it there, and the other
//! cluster refuses it WRONG_CLUSTER naming the authority.

use std::path::Path;

use crescent_client::{MeshClient, PutOptions};
use crescent_mesh::{Lineage, RouteKey, RouteTable};
use crescent_tests::binaries::crescent_command;
use crescent_tests::ha_pair::{etcd, Backend};
use crescent_tests::mesh::Mesh;
use crescent_tests::safetensors::safetensors;
use crescent_tests::store_e2e::crescent_cli;
use crescent_wire::store::DataType;
use serde_json::Value;

/// An HA node is replicated: weight mutations need the operator's confirmation.
const GATES: &str = "[weights]\nweight_management_oplog_capability_confirmed = true\n";

/// Two standalone clusters on etcd (embedded segments, the weight gates confirmed), and an
/// admin mesh client of them, on the returned runtime.
fn two_clusters(dir: &Path) -> (tokio::runtime::Runtime, Mesh, MeshClient) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let backend = Backend::Etcd(etcd());
    let mesh = rt.block_on(Mesh::start_with(dir, backend, &[1.0, 1.0], GATES, true));
    let client = rt.block_on(mesh.admin_client());
    (rt, mesh, client)
}

/// `crescent --etcd URL --mesh M --token ADMIN --json ARGS`: exit code and JSON output.
fn mesh_cli(mesh: &Mesh, args: &[&str]) -> (i32, Value, String) {
    let globals = mesh.cli_globals(&mesh.key.admin());
    let globals: Vec<&str> = globals.iter().map(String::as_str).collect();
    let out = crescent_command(&globals).args(args).output().unwrap();
    let body = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code().unwrap_or(-1), body, err)
}

fn id_args(resource: &str) -> Vec<String> {
    [
        "--namespace",
        "llama",
        "--resource",
        resource,
        "--revision",
        "main",
        "--generation",
        "1",
    ]
    .map(String::from)
    .to_vec()
}

/// Two resources whose revisions each cluster is the authority of (admin token: the default
/// tenant), in cluster order.
fn resources_per_cluster(client: &MeshClient, mesh: &Mesh) -> Vec<(String, String)> {
    let table = RouteTable::new(&client.membership());
    let authority = |resource: &str| {
        let lineage = Lineage {
            tenant: "default",
            namespace: "llama",
            resource_id: resource,
            revision: "main",
        };
        table
            .route(RouteKey::revision(&lineage))
            .unwrap()
            .to_string()
    };
    let mut out = Vec::new();
    for (cluster, _) in &mesh.clusters {
        let mine = (0..)
            .map(|i| format!("model-{i}"))
            .filter(|r| authority(r) == *cluster)
            .take(2);
        out.extend(mine.map(|r| (r, cluster.clone())));
    }
    out
}

#[test]
fn weight_revisions_live_at_their_lineage_authority() {
    let dir = tempfile::tempdir().unwrap();
    let (_rt, mesh, client) = two_clusters(dir.path());
    let revisions = resources_per_cluster(&client, &mesh);
    for (i, (resource, cluster)) in revisions.iter().enumerate() {
        put_and_read_back(&mesh, dir.path(), resource, cluster, i as u8);
    }
    // Every revision is listed once, where it lives.
    let (code, ls, err) = mesh_cli(&mesh, &["weights", "ls"]);
    assert_eq!(code, 0, "{err}");
    let listed: Vec<(String, String)> = ls["revisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let resource = r["id"]["resource_id"].as_str().unwrap().to_string();
            (resource, r["cluster"].as_str().unwrap().to_string())
        })
        .collect();
    let mut want = revisions.clone();
    want.sort();
    let mut got = listed;
    got.sort();
    assert_eq!(got, want, "{ls}");
    // A removal through the mesh deletes it at its authority (listed DELETED there).
    let (resource, _) = &revisions[0];
    let mut rm = vec!["weights".to_string(), "rm".to_string()];
    rm.extend(id_args(resource));
    let rm: Vec<&str> = rm.iter().map(String::as_str).collect();
    let (code, _, err) = mesh_cli(&mesh, &rm);
    assert_eq!(code, 0, "rm {resource}: {err}");
    let (_, ls, _) = mesh_cli(&mesh, &["weights", "ls"]);
    let deleted: Vec<&str> = ls["revisions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["availability"] == "DELETED")
        .map(|r| r["id"]["resource_id"].as_str().unwrap())
        .collect();
    assert_eq!(deleted, [resource.as_str()], "{ls}");
}

/// Puts revision `resource` through the mesh, reads it back byte-identical through the mesh,
/// finds its metadata at `cluster` and a WRONG_CLUSTER refusal naming `cluster` at the other.
fn put_and_read_back(mesh: &Mesh, dir: &Path, resource: &str, cluster: &str, seed: u8) {
    let model = safetensors(4, 8 << 10, seed);
    let src = dir.join(format!("{resource}-src"));
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("model.safetensors"), &model).unwrap();
    let with = |cmd: &str, tail: &[&str]| -> Vec<String> {
        let mut args = vec!["weights".to_string(), cmd.to_string()];
        args.extend(id_args(resource));
        args.extend(tail.iter().map(|s| s.to_string()));
        args
    };
    let put = with("put", &["--policy", "hot", src.to_str().unwrap()]);
    let (code, meta, err) = mesh_cli(mesh, &put.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, 0, "put {resource}: {err}");
    assert_eq!(meta["availability"], "READY", "{meta}");
    let out = dir.join(format!("{resource}-out"));
    let get = with("get", &["-o", out.to_str().unwrap()]);
    let (code, _, err) = mesh_cli(mesh, &get.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, 0, "get {resource}: {err}");
    assert_eq!(std::fs::read(out.join("model.safetensors")).unwrap(), model);
    let admin = mesh.key.admin();
    let meta = with("meta", &[]);
    let meta: Vec<&str> = std::iter::once("--json")
        .chain(meta.iter().map(String::as_str))
        .collect();
    for (name, node) in &mesh.clusters {
        let (code, body, err) = crescent_cli(&node.addr.to_string(), Some(&admin), &meta);
        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        if name == cluster {
            assert_eq!(code, 0, "meta {resource} at its authority {name}: {err}");
        } else {
            assert_ne!(code, 0, "{resource} answered at {name}, not its authority");
            assert_eq!(body["error"]["code"], "WRONG_CLUSTER", "{body} {err}");
            assert!(
                err.contains(cluster) || body.to_string().contains(cluster),
                "{body}"
            );
        }
    }
}

/// A drain stops at a managed revision's objects (they move only with their revision), the
/// cluster stays draining, and `mesh drain --cancel` makes it serve again: every object stays
/// readable through the mesh, the revision too, and a rebalance brings the moved objects back.
#[test]
fn a_drain_stopped_by_a_weight_revision_is_cancelled() {
    let dir = tempfile::tempdir().unwrap();
    let (rt, mesh, client) = two_clusters(dir.path());
    let drained = mesh.clusters[1].0.clone();
    let (resource, _) = resources_per_cluster(&client, &mesh)
        .into_iter()
        .find(|(_, c)| *c == drained)
        .unwrap();
    put_and_read_back(&mesh, dir.path(), &resource, &drained, 3);
    let keys: Vec<String> = (0..24).map(|i| format!("plain-{i}")).collect();
    // One of the drained cluster's objects put hard-pinned, as metadata: its copy keeps both.
    let pinned = keys
        .iter()
        .find(|k| client.authority(k).unwrap() == drained)
        .unwrap()
        .clone();
    rt.block_on(async {
        for k in &keys {
            let opts = PutOptions {
                hard_pin: *k == pinned,
                data_type: match *k == pinned {
                    true => DataType::Metadata,
                    false => DataType::Kvcache,
                },
                ..PutOptions::default()
            };
            client.put_with(k, k.as_bytes(), &opts).await.unwrap();
        }
    });
    let state_of = |name: &str| -> String {
        let ls = mesh.cli_json(&["mesh", "ls"]);
        let row = ls["clusters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name);
        row.unwrap()["state"].as_str().unwrap().to_string()
    };
    let out = mesh.cli(&["mesh", "drain", "--cluster", &drained]);
    assert_eq!(
        out.status.code(),
        Some(9),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["state"], "draining", "{summary}");
    assert!(summary["failed"].as_u64().unwrap() >= 1, "{summary}");
    assert_eq!(state_of(&drained), "draining");
    let moved = rt.block_on(async {
        let other = client.cluster_client(&mesh.clusters[0].0).unwrap();
        other.scan_objects(None, Some(1000)).await.unwrap()
    });
    let copy = moved
        .objects
        .iter()
        .find(|o| o.key == pinned)
        .expect("moved");
    assert_eq!(
        (copy.hard_pin, copy.data_type),
        (true, DataType::Metadata),
        "{copy:?}"
    );
    let cancelled = mesh.cli_json(&["mesh", "drain", "--cancel", "--cluster", &drained]);
    assert_eq!(cancelled["state"], "serving", "{cancelled}");
    assert_eq!(state_of(&drained), "serving");
    let again = mesh.cli_json(&["mesh", "drain", "--cancel", "--cluster", &drained]);
    assert_eq!(
        again["generation"], cancelled["generation"],
        "no change: {again}"
    );
    // Everything readable: the revision at its authority again, the plain objects where the
    // drain left them (found through the runner-up), then at their authorities.
    let fresh = rt.block_on(mesh.admin_client());
    let read_all = |c: &MeshClient| {
        rt.block_on(async {
            for k in &keys {
                assert_eq!(c.get(k).await.unwrap(), k.as_bytes(), "{k}");
            }
        })
    };
    read_all(&fresh);
    let out = dir.path().join("after-cancel");
    let mut get = vec!["weights".to_string(), "get".to_string()];
    get.extend(id_args(&resource));
    get.extend(["-o".to_string(), out.to_str().unwrap().to_string()]);
    let (code, _, err) = mesh_cli(&mesh, &get.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, 0, "the revision after the cancel: {err}");
    let moved_back = mesh.cli_json(&["mesh", "rebalance"]);
    assert_eq!(moved_back["failed"], 0, "{moved_back}");
    read_all(&fresh);
}
