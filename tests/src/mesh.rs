//! A mesh of standalone clusters for the mesh tests (docs/scale-out.md): each cluster one
//! crescentd (an HA node without a peer, so it is the active of its cluster) with the embedded
//! segment, all in one mesh on etcd or Redis, `[auth]` on with one key, and `crescent --mesh`
//! processes and [`MeshClient`]s routing through it. [`Mesh::start_with`] adds config text to
//! every node (a `[[tenants]]` policy, say) and can keep the objects on storage owners only, so
//! that a cluster killed and started again with [`Mesh::restart`] gets them back.

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use crescent_client::{BearerToken, ClientOptions, MeshClient};

use crate::auth::AuthKey;
use crate::binaries::crescent_command;
use crate::crescentd::{Auth, CrescentdProcess};
use crate::ha_pair::{cluster_name, pair_key, start_node_on, wait_active, wait_gate, Backend};
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
    /// TOML appended to every node's config.
    extra_config: String,
    /// Nodes mount the embedded segment (else their objects live on storage owners only).
    embedded: bool,
}

impl Mesh {
    /// Starts one cluster per weight, each serving before the next starts.
    pub async fn start(dir: &Path, backend: Backend, weights: &[f64]) -> Mesh {
        Self::start_with(dir, backend, weights, "", true).await
    }

    /// [`Mesh::start`] with `extra_config` (TOML) appended to every node's config, clusters
    /// included later; the embedded segment mounted only when `embedded` (else a cluster takes
    /// puts once a storage owner joined it: [`Mesh::start_owner`]).
    pub async fn start_with(
        dir: &Path,
        backend: Backend,
        weights: &[f64],
        extra_config: &str,
        embedded: bool,
    ) -> Mesh {
        let mut mesh = Mesh {
            name: cluster_name(),
            backend,
            key: pair_key(dir),
            clusters: Vec::new(),
            extra_config: extra_config.to_string(),
            embedded,
        };
        for w in weights {
            mesh.add(dir, *w).await;
        }
        mesh
    }

    /// Starts one more standalone cluster (node `cN`) of weight `weight` and waits until it
    /// serves; returns its name.
    pub async fn add(&mut self, dir: &Path, weight: f64) -> String {
        let node = standalone_node(self.clusters.len());
        self.write_config_on(dir, &node, STANDALONE_LEASE_SECS, weight, self.embedded);
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

    /// Kills cluster `index`'s crescentd with SIGKILL. Its lease stays in the backend until it
    /// expires, so [`Mesh::restart`] takes about a lease to serve again.
    pub fn kill(&mut self, index: usize) {
        self.clusters[index].1.guard.sigkill();
    }

    /// Starts cluster `index`'s crescentd again on its data dir and config (`DIR/cN`,
    /// `DIR/cN.toml`), on a new port (clients and owners find it through the backend), and
    /// waits until it is the active with its rebuild gate `SERVING` (its owners replayed
    /// into it). Call it from the test's own thread: the child dies with the thread that
    /// spawned it.
    pub async fn restart(&mut self, dir: &Path, index: usize) {
        let node = standalone_node(index);
        let auth = Auth::Key(self.key.clone());
        let cluster = self.clusters[index].0.clone();
        let p = start_node_on(dir, &node, &cluster, true, auth, &self.backend);
        wait_active(&p, Duration::from_secs(30)).await;
        wait_gate(&p, "SERVING", Duration::from_secs(30)).await;
        self.clusters[index].1 = p;
    }

    /// Writes node `node`'s config file (`DIR/node.toml`, read by `start_node_on`): lease
    /// `lease_secs`, the embedded segment mounted only when `embedded`, this mesh with weight
    /// `weight`, then the mesh's extra config.
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
             [store]\nembedded_segment_bytes = {}\n[mesh]\nname = {:?}\nweight = {weight}\n{}",
            64 << 20,
            self.name,
            self.extra_config
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
        self.client_with(self.key.client(TENANT)).await
    }

    /// A mesh client with the `admin` token: it acts in any tenant.
    pub async fn admin_client(&self) -> MeshClient {
        self.client_with(self.key.admin()).await
    }

    async fn client_with(&self, token: String) -> MeshClient {
        let options = match &self.backend {
            Backend::Etcd(e) => ClientOptions::etcd_mesh(e, &self.name),
            Backend::Redis(r) => ClientOptions::redis_mesh(r, &self.name),
        }
        .with_token(BearerToken::new(token))
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
        let globals = self.cli_globals(&token);
        let globals: Vec<&str> = globals.iter().map(String::as_str).collect();
        crescent_command(&globals)
            .args(args)
            .output()
            .expect("running crescent")
    }

    /// The global arguments of [`Mesh::cli`] with `token`: `--ETCD|REDIS URL --mesh M --token
    /// T --json`, for tests that run `crescent` processes without borrowing the mesh.
    pub fn cli_globals(&self, token: &str) -> Vec<String> {
        let [flag, endpoint] = self.backend_args();
        let rest = ["--mesh", &self.name, "--token", token, "--json"];
        [flag, endpoint]
            .into_iter()
            .chain(rest.iter().map(|s| s.to_string()))
            .collect()
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

/// The node name of the standalone cluster at `index` (its data dir and config in the mesh's
/// dir are named after it).
fn standalone_node(index: usize) -> String {
    format!("c{index}")
}
