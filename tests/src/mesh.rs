//! A mesh of standalone clusters for the mesh tests (docs/scale-out.md): each cluster one
//! crescentd (an HA node without a peer, so it is the active of its cluster) with the embedded
//! segment, all in one mesh on etcd or Redis, `[auth]` on with one key, and `crescent --mesh`
//! processes and [`MeshClient`]s routing through it.

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use crescent_client::{BearerToken, ClientOptions, MeshClient};

use crate::auth::AuthKey;
use crate::binaries::crescent_command;
use crate::crescentd::{Auth, CrescentdProcess};
use crate::ha_pair::{
    cluster_name, pair_key, start_node_on, wait_active, write_node_config, Backend,
};

/// The tenant the tests' client token binds.
pub const TENANT: &str = "meshy";

/// Clusters of one mesh, started in order (the first makes the mesh).
pub struct Mesh {
    pub name: String,
    pub backend: Backend,
    pub key: AuthKey,
    /// (cluster name, its crescentd)
    pub clusters: Vec<(String, CrescentdProcess)>,
}

impl Mesh {
    /// Starts one cluster per weight, each serving before the next starts.
    pub async fn start(dir: &Path, backend: Backend, weights: &[f64]) -> Mesh {
        let mut mesh = Mesh {
            name: cluster_name(),
            backend,
            key: pair_key(dir),
            clusters: Vec::new(),
        };
        for (i, w) in weights.iter().enumerate() {
            let node = format!("c{i}");
            write_node_config(dir, &node, &mesh.node_config(*w));
            let cluster = cluster_name();
            let auth = Auth::Key(mesh.key.clone());
            let p = start_node_on(dir, &node, &cluster, true, auth, &mesh.backend);
            wait_active(&p, Duration::from_secs(20)).await;
            mesh.clusters.push((cluster, p));
        }
        mesh
    }

    /// Starts an HA pair (nodes `NODE-a`, `NODE-b`) as one more cluster of weight `weight`
    /// (not added to `clusters`); returns its name, its nodes and the active's index.
    pub async fn start_pair(
        &self,
        dir: &Path,
        node: &str,
        weight: f64,
    ) -> (String, [CrescentdProcess; 2], usize) {
        let cluster = cluster_name();
        let nodes = ["a", "b"].map(|n| {
            let name = format!("{node}-{n}");
            write_node_config(dir, &name, &self.node_config(weight));
            let auth = Auth::Key(self.key.clone());
            start_node_on(dir, &name, &cluster, true, auth, &self.backend)
        });
        let active = crate::ha_pair::wait_pair_in_sync(&[&nodes[0], &nodes[1]]).await;
        (cluster, nodes, active)
    }

    /// The `[ha]` tail and sections of a node of this mesh with weight `weight`.
    fn node_config(&self, weight: f64) -> String {
        format!(
            "embedded_segment = true\n[store]\nembedded_segment_bytes = {}\n[mesh]\nname = {:?}\nweight = {weight}\n",
            64 << 20,
            self.name
        )
    }

    /// The index of cluster `name`.
    pub fn index(&self, name: &str) -> usize {
        self.clusters
            .iter()
            .position(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no cluster {name}"))
    }

    fn backend_args(&self) -> [String; 2] {
        match &self.backend {
            Backend::Etcd(e) => ["--etcd".into(), e.clone()],
            Backend::Redis(r) => ["--redis".into(), r.clone()],
        }
    }

    /// A mesh client with a `client` token of [`TENANT`].
    pub async fn client(&self) -> MeshClient {
        let options = match &self.backend {
            Backend::Etcd(e) => ClientOptions::etcd_mesh(e, &self.name),
            Backend::Redis(r) => ClientOptions::redis_mesh(r, &self.name),
        }
        .with_token(BearerToken::new(self.key.client(TENANT)))
        .with_failover_timeout(Duration::from_secs(3));
        MeshClient::connect(options)
            .await
            .expect("connecting to the mesh")
    }

    /// Runs `crescent --ETCD|REDIS --mesh M --token T --json ARGS` (admin token for `mesh`
    /// commands, else the client token) and returns its output.
    pub fn cli(&self, args: &[&str]) -> Output {
        let token = match args.first() {
            Some(&"mesh") => self.key.admin(),
            _ => self.key.client(TENANT),
        };
        let [flag, endpoint] = self.backend_args();
        let globals = [
            flag.as_str(),
            &endpoint,
            "--mesh",
            &self.name,
            "--token",
            &token,
            "--json",
        ];
        crescent_command(&globals)
            .args(args)
            .output()
            .expect("running crescent")
    }

    /// [`Mesh::cli`] expecting success; its JSON output.
    pub fn cli_json(&self, args: &[&str]) -> serde_json::Value {
        let out = self.cli(args);
        assert!(
            out.status.success(),
            "crescent {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("JSON output")
    }
}
