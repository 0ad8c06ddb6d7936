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
use crate::ha_pair::{cluster_name, pair_key, start_node_on, wait_active, Backend};
use crate::store_e2e::OwnerProcess;

/// Lease of a standalone cluster's node: it never fails over in these tests, and a longer
/// lease keeps it the active on a loaded machine (a lost lease restarts it, which empties its
/// embedded segment). On a Redis a new cluster serves one lease after its first election.
const STANDALONE_LEASE_SECS: u64 = 4;
/// Lease of a pair's nodes: the failover test waits about this long.
const PAIR_LEASE_SECS: u64 = 3;

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
        for w in weights {
            mesh.add(dir, *w).await;
        }
        mesh
    }

    /// Starts one more standalone cluster (node `cN`) of weight `weight` and waits until it
    /// serves; returns its name.
    pub async fn add(&mut self, dir: &Path, weight: f64) -> String {
        let node = format!("c{}", self.clusters.len());
        self.write_config(dir, &node, STANDALONE_LEASE_SECS, weight);
        let cluster = cluster_name();
        let auth = Auth::Key(self.key.clone());
        let p = start_node_on(dir, &node, &cluster, true, auth, &self.backend);
        wait_active(&p, Duration::from_secs(20)).await;
        self.clusters.push((cluster.clone(), p));
        cluster
    }

    /// Starts an HA pair (nodes `NODE-a`, `NODE-b`) as one more cluster of weight `weight`
    /// (not added to `clusters`); returns its name, its nodes and the active's index.
    pub async fn start_pair(
        &self,
        dir: &Path,
        node: &str,
        weight: f64,
    ) -> (String, [CrescentdProcess; 2], usize) {
        self.start_pair_on(dir, node, weight, true).await
    }

    /// [`Mesh::start_pair`], its objects on storage owners only when `embedded` is false
    /// (start them with [`Mesh::start_owner`]): what survives a failover.
    pub async fn start_pair_on(
        &self,
        dir: &Path,
        node: &str,
        weight: f64,
        embedded: bool,
    ) -> (String, [CrescentdProcess; 2], usize) {
        let cluster = cluster_name();
        let nodes = ["a", "b"].map(|n| {
            let name = format!("{node}-{n}");
            self.write_config_on(dir, &name, PAIR_LEASE_SECS, weight, embedded);
            let auth = Auth::Key(self.key.clone());
            start_node_on(dir, &name, &cluster, true, auth, &self.backend)
        });
        let active = crate::ha_pair::wait_pair_in_sync(&[&nodes[0], &nodes[1]]).await;
        (cluster, nodes, active)
    }

    /// Writes node `node`'s config file (`DIR/node.toml`, read by `start_node_on`): lease
    /// `lease_secs`, the embedded segment, this mesh with weight `weight`.
    fn write_config(&self, dir: &Path, node: &str, lease_secs: u64, weight: f64) {
        self.write_config_on(dir, node, lease_secs, weight, true);
    }

    /// [`Mesh::write_config`], the embedded segment mounted only when `embedded`.
    fn write_config_on(
        &self,
        dir: &Path,
        node: &str,
        lease_secs: u64,
        weight: f64,
        embedded: bool,
    ) {
        let text = format!(
            "[ha]\nlease_ttl_secs = {lease_secs}\nsync_timeout_ms = 1000\nembedded_segment = {embedded}\n\
             [store]\nembedded_segment_bytes = {}\n[mesh]\nname = {:?}\nweight = {weight}\n",
            64 << 20,
            self.name
        );
        std::fs::write(dir.join(format!("{node}.toml")), text).expect("writing the node config");
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

    /// A `crescent owner` process `owner_id` of `size` bytes following cluster `cluster`'s
    /// leader through the mesh's backend. Spawn from the test's own thread (the child dies
    /// with it).
    pub fn start_owner(&self, cluster: &str, owner_id: &str, size: u64) -> OwnerProcess {
        let [flag, endpoint] = self.backend_args();
        let globals = [flag.as_str(), &endpoint, "--cluster", cluster];
        OwnerProcess::start_with(&globals, Some(&self.key.owner(owner_id)), owner_id, size)
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
