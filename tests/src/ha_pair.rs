//! An HA pair for the failover tests: two crescentd processes on a real etcd
//! (`CRESCENT_TEST_ETCD`, started by scripts/test.sh), lease TTL 2 s, with `[auth]` on: both
//! nodes load one key file, `DIR/auth.key` ([`pair_key`]), and the tests' clients, owners and
//! operator calls carry tokens issued from it.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::auth::AuthKey;
use crate::binaries::ensure_workspace_binary;
use crate::crescentd::{log_tail, Auth, CrescentdProcess, Launch, SegmentsClient};

/// Exit status of an active deposed by a newer term.
pub const DEPOSED_EXIT_CODE: i32 = 75;
/// Exit status of a standby that must first drop a tail the active never received.
pub const REWIND_EXIT_CODE: i32 = 76;

/// The etcd endpoint of the test run.
pub fn etcd() -> String {
    std::env::var("CRESCENT_TEST_ETCD").expect(
        "CRESCENT_TEST_ETCD must name an etcd endpoint: run the suite through scripts/test.sh, \
         which starts etcd on loopback",
    )
}

/// Where a pair coordinates: etcd endpoints, or one Redis server.
#[derive(Debug, Clone)]
pub enum Backend {
    Etcd(String),
    Redis(String),
}

impl Backend {
    /// The crescentd flag and value that select it.
    fn args(&self) -> [String; 2] {
        match self {
            Backend::Etcd(endpoints) => ["--etcd".into(), endpoints.clone()],
            Backend::Redis(url) => ["--redis".into(), url.clone()],
        }
    }
}

/// A fresh cluster name, so runs never see each other's keys.
pub fn cluster_name() -> String {
    format!("t{}", &uuid::Uuid::new_v4().simple().to_string()[..12])
}

/// Writes node `name`'s config file `dir/name.toml`: lease TTL 2 s, sync timeout 1 s, then
/// `extra` (more TOML sections). [`start_node`] and restarts keep a config written before them.
pub fn write_node_config(dir: &Path, name: &str, extra: &str) {
    let text = format!("[ha]\nlease_ttl_secs = 2\nsync_timeout_ms = 1000\n{extra}");
    std::fs::write(dir.join(format!("{name}.toml")), text).expect("writing the node config");
}

/// The key both nodes of the pair in `dir` load (`dir/auth.key`, made on first use).
pub fn pair_key(dir: &Path) -> AuthKey {
    AuthKey::at(&dir.join("auth.key"))
}

/// Starts node `name` of `cluster` (data in `dir/name`, log `dir/name.log`, config
/// `dir/name.toml`, written with the defaults if absent) as an HA candidate, with `[auth]` on
/// with the pair's key ([`pair_key`]). `rpc`: keep the RPC fast path (on an OS-chosen port) or
/// serve HTTP only.
pub fn start_node(dir: &Path, name: &str, cluster: &str, rpc: bool) -> CrescentdProcess {
    start_node_as(dir, name, cluster, rpc, Auth::Key(pair_key(dir)))
}

/// [`start_node`] authenticating as `auth` says (both nodes of a pair alike).
pub fn start_node_as(
    dir: &Path,
    name: &str,
    cluster: &str,
    rpc: bool,
    auth: Auth,
) -> CrescentdProcess {
    start_node_on(dir, name, cluster, rpc, auth, &Backend::Etcd(etcd()))
}

/// [`start_node_as`] coordinating through `backend`.
pub fn start_node_on(
    dir: &Path,
    name: &str,
    cluster: &str,
    rpc: bool,
    auth: Auth,
    backend: &Backend,
) -> CrescentdProcess {
    start_node_with_env(dir, name, cluster, rpc, auth, backend, &[])
}

/// [`start_node_on`] with `env` set in the node's environment (the harness passes nothing of
/// its own environment that arms a crash point: a test names it here).
pub fn start_node_with_env(
    dir: &Path,
    name: &str,
    cluster: &str,
    rpc: bool,
    auth: Auth,
    backend: &Backend,
    env: &[(&str, &str)],
) -> CrescentdProcess {
    let bin = ensure_workspace_binary("crescent-server", "crescentd");
    let args = node_args(dir, name, cluster, rpc, backend);
    launch_node(&bin, dir, name, &args, auth, env)
}

/// [`start_node`] running the crescentd binary `bin` (another build: the rolling-upgrade test).
pub fn start_node_bin(bin: &Path, dir: &Path, name: &str, cluster: &str) -> CrescentdProcess {
    let args = node_args(dir, name, cluster, false, &Backend::Etcd(etcd()));
    launch_node(bin, dir, name, &args, Auth::Key(pair_key(dir)), &[])
}

fn launch_node(
    bin: &Path,
    dir: &Path,
    name: &str,
    args: &[String],
    auth: Auth,
    env: &[(&str, &str)],
) -> CrescentdProcess {
    let data = dir.join(name);
    let log = dir.join(format!("{name}.log"));
    let launch = Launch::new(bin, &data, &log)
        .with_args(args)
        .with_auth(auth)
        .with_env(env);
    CrescentdProcess::launch(&launch).unwrap_or_else(|e| panic!("starting {name}: {e}"))
}

/// The command line of node `name` (writing its default config if it has none).
fn node_args(dir: &Path, name: &str, cluster: &str, rpc: bool, backend: &Backend) -> Vec<String> {
    let config = dir.join(format!("{name}.toml"));
    if !config.exists() {
        write_node_config(dir, name, "");
    }
    let [flag, endpoint] = backend.args();
    let mut args: Vec<String> = [
        "--config",
        config.to_str().unwrap(),
        &flag,
        &endpoint,
        "--cluster",
        cluster,
        "--advertise",
        "{listen}",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if !rpc {
        args.extend(["--rpc-listen".to_string(), "off".to_string()]);
    }
    args
}

/// `/healthz` of `addr`, or `None` if it does not answer within 500 ms.
pub async fn health(addr: SocketAddr) -> Option<serde_json::Value> {
    let c = reqwest::Client::builder()
        .timeout(Duration::from_millis(500))
        .no_proxy()
        .build()
        .ok()?;
    c.get(format!("http://{addr}/healthz"))
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()
}

/// `GET /readyz` of `addr`: its status code and body (`None` if it does not answer).
pub async fn readiness(addr: SocketAddr) -> Option<(u16, serde_json::Value)> {
    let c = reqwest::Client::builder()
        .timeout(Duration::from_millis(500))
        .no_proxy()
        .build()
        .ok()?;
    let resp = c.get(format!("http://{addr}/readyz")).send().await.ok()?;
    let status = resp.status().as_u16();
    Some((status, resp.json().await.ok()?))
}

/// Waits until exactly one of `nodes` is active with an in-sync standby; returns its index.
pub async fn wait_pair_in_sync(nodes: &[&CrescentdProcess]) -> usize {
    let started = Instant::now();
    loop {
        for (i, n) in nodes.iter().enumerate() {
            if let Some(h) = health(n.addr).await {
                if h["role"] == "active"
                    && h["ha"]["mode"] == "sync"
                    && h["ha"]["standby_connected"] == true
                    && h["ha"]["standby_in_sync"] == true
                {
                    return i;
                }
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no active with an in-sync standby within 30 s; logs:\n{}\n---\n{}",
            log_tail(&nodes[0].log_path, 30),
            log_tail(&nodes[1].log_path, 30)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until `node` is active; returns how long that took.
pub async fn wait_active(node: &CrescentdProcess, within: Duration) -> Duration {
    let started = Instant::now();
    loop {
        if let Some(h) = health(node.addr).await {
            if h["role"] == "active" {
                return started.elapsed();
            }
        }
        assert!(
            started.elapsed() < within,
            "{} did not become active within {within:?}; log:\n{}",
            node.addr,
            log_tail(&node.log_path, 40)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Restarts a node on its data dir as a standby; a node that must first drop a tail the active
/// never received exits with the rewind code once, and comes back following (a supervisor's
/// job, done here by the test). Call it from the test's own thread, not a blocking-pool thread:
/// the child is killed when the thread that spawned it exits.
pub fn restart_standby(dir: &Path, name: &str, cluster: &str, rpc: bool) -> CrescentdProcess {
    restart_standby_as(dir, name, cluster, rpc, Auth::Key(pair_key(dir)))
}

/// [`restart_standby`] authenticating as `auth` says.
pub fn restart_standby_as(
    dir: &Path,
    name: &str,
    cluster: &str,
    rpc: bool,
    auth: Auth,
) -> CrescentdProcess {
    for _ in 0..3 {
        let mut p = start_node_as(dir, name, cluster, rpc, auth.clone());
        let t = Instant::now();
        loop {
            if let Some(status) = p.guard.try_exit_status() {
                assert_eq!(
                    status.code(),
                    Some(REWIND_EXIT_CODE),
                    "{name} exited: {status}; log:\n{}",
                    log_tail(&p.log_path, 30)
                );
                break;
            }
            if t.elapsed() > Duration::from_secs(4) {
                return p;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    panic!("{name} kept exiting on restart");
}

/// Asserts that the owners recorded every put the writer made into their segments: a put is
/// recorded by its owners before it is acknowledged (docs/rebuild.md, "Owners record before
/// the ack"), so there is nothing to wait for.
pub fn assert_owners_recorded(writer: &crescent_client::CrescentClient, expected: u64) {
    let rebuild = writer.metrics().rebuild();
    let recorded = rebuild.count("notices", "recorded");
    assert!(
        recorded >= expected,
        "owners recorded {recorded} of {expected} acknowledged puts"
    );
}

/// Waits until `node`'s rebuild gate is `state` (SERVING, DEGRADED, ...); returns its health
/// document.
pub async fn wait_gate(
    node: &CrescentdProcess,
    state: &str,
    within: Duration,
) -> serde_json::Value {
    let started = Instant::now();
    loop {
        let h = health(node.addr).await.unwrap_or_default();
        if h["gate"] == state {
            return h;
        }
        assert!(
            started.elapsed() < within,
            "gate of {} not {state} within {within:?}: {h}; log:\n{}",
            node.addr,
            log_tail(&node.log_path, 30)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The pair's [`Auth`]: its shared key, or open mode.
fn auth_mode(dir: &Path, auth: bool) -> Auth {
    if auth {
        Auth::Key(pair_key(dir))
    } else {
        Auth::Open
    }
}

/// The node names of a [`HaPair`], by index.
pub const NODE_NAMES: [&str; 2] = ["a", "b"];

/// Two crescentd nodes of a fresh cluster on the test etcd, in a temp dir, each in its slot
/// (`None` only while a test restarts it). Dropping it stops both.
pub struct HaPair {
    pub dir: tempfile::TempDir,
    pub cluster: String,
    pub etcd: String,
    /// The RPC fast path is on (`start_node`'s `rpc`).
    pub rpc: bool,
    /// `[auth]` is on (else open mode: [`HaPair::start_open_with`]).
    pub auth: bool,
    pub nodes: [Option<CrescentdProcess>; 2],
}

impl HaPair {
    /// Starts nodes `a` and `b` and waits until one is active with an in-sync standby.
    pub async fn start(rpc: bool) -> HaPair {
        Self::start_with(rpc, "").await
    }

    /// [`HaPair::start`] with `extra` TOML in both nodes' config (kept across restarts).
    pub async fn start_with(rpc: bool, extra: &str) -> HaPair {
        Self::launch(rpc, extra, true).await
    }

    /// [`HaPair::start_with`] in open mode (no `[auth]`): only for tests that cannot run
    /// with credentials (each says why); the token methods then return tokens nobody checks.
    pub async fn start_open_with(rpc: bool, extra: &str) -> HaPair {
        Self::launch(rpc, extra, false).await
    }

    /// [`HaPair::start_with`] with `env` in both nodes' first start (not in restarts): a
    /// crash point armed with `CRESCENT_CRASH_AT`, for example.
    pub async fn start_with_env(rpc: bool, extra: &str, env: &[(&str, &str)]) -> HaPair {
        Self::launch_env(rpc, extra, true, env).await
    }

    async fn launch(rpc: bool, extra: &str, auth: bool) -> HaPair {
        Self::launch_env(rpc, extra, auth, &[]).await
    }

    async fn launch_env(rpc: bool, extra: &str, auth: bool, env: &[(&str, &str)]) -> HaPair {
        let dir = tempfile::tempdir().expect("temp dir");
        for name in NODE_NAMES {
            write_node_config(dir.path(), name, extra);
        }
        let cluster = cluster_name();
        let mode = auth_mode(dir.path(), auth);
        let backend = Backend::Etcd(etcd());
        let nodes = NODE_NAMES.map(|name| {
            let node =
                start_node_with_env(dir.path(), name, &cluster, rpc, mode.clone(), &backend, env);
            Some(node)
        });
        let pair = HaPair {
            dir,
            cluster,
            etcd: etcd(),
            rpc,
            auth,
            nodes,
        };
        pair.wait_in_sync().await;
        pair
    }

    /// Node `i` (panics while it is being restarted).
    pub fn node(&self, i: usize) -> &CrescentdProcess {
        self.nodes[i].as_ref().expect("node is running")
    }

    pub fn node_mut(&mut self, i: usize) -> &mut CrescentdProcess {
        self.nodes[i].as_mut().expect("node is running")
    }

    /// The key both nodes load.
    pub fn key(&self) -> AuthKey {
        pair_key(self.dir.path())
    }

    /// An `admin` token (operator calls).
    pub fn admin_token(&self) -> String {
        self.key().admin()
    }

    /// A `client` token of `tenant`.
    pub fn client_token(&self, tenant: &str) -> String {
        self.key().client(tenant)
    }

    /// An `owner` token for owner id `owner`.
    pub fn owner_token(&self, owner: &str) -> String {
        self.key().owner(owner)
    }

    /// Options of a library client following the pair's leader through etcd, as a client of
    /// `tenant`.
    pub fn client_options(&self, tenant: &str) -> crescent_client::ClientOptions {
        let options = crescent_client::ClientOptions::etcd(&self.etcd, &self.cluster);
        crate::auth::with_token(options, Some(self.client_token(tenant)))
    }

    /// A `crescent owner` process `owner_id` following the pair's leader through etcd, with its
    /// owner token. Spawn from the test's own thread (the child dies with it).
    pub fn start_owner(&self, owner_id: &str, size: u64) -> crate::store_e2e::OwnerProcess {
        let globals = ["--etcd", &self.etcd, "--cluster", &self.cluster];
        let token = self.owner_token(owner_id);
        crate::store_e2e::OwnerProcess::start_with(&globals, Some(&token), owner_id, size)
    }

    /// A segments client of node `i` with the admin token.
    pub fn segments_client(&self, i: usize, timeout: Duration) -> SegmentsClient {
        self.node(i).segments_client(timeout)
    }

    /// Waits until one node is active with an in-sync standby; returns its index.
    pub async fn wait_in_sync(&self) -> usize {
        wait_pair_in_sync(&[self.node(0), self.node(1)]).await
    }

    /// Stops node `i` (if still running) and starts it again on its data dir as a standby
    /// ([`restart_standby`]). Call it from the test's own thread (see there).
    pub fn restart_as_standby(&mut self, i: usize) {
        self.nodes[i] = None;
        self.nodes[i] = Some(restart_standby_as(
            self.dir.path(),
            NODE_NAMES[i],
            &self.cluster,
            self.rpc,
            auth_mode(self.dir.path(), self.auth),
        ));
    }
}
