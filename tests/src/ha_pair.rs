//! An HA pair for the failover tests: two crescentd processes on a real etcd
//! (`CRESCENT_TEST_ETCD`, started by scripts/test.sh), lease TTL 2 s.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::binaries::ensure_workspace_binary;
use crate::crescentd::{log_tail, CrescentdProcess};

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

/// Starts node `name` of `cluster` (data in `dir/name`, log `dir/name.log`, config
/// `dir/name.toml`, written with the defaults if absent) as an HA candidate. `rpc`: keep the RPC
/// fast path (on an OS-chosen port) or serve HTTP only.
pub fn start_node(dir: &Path, name: &str, cluster: &str, rpc: bool) -> CrescentdProcess {
    let bin = ensure_workspace_binary("crescent-server", "crescentd");
    let data = dir.join(name);
    let config = dir.join(format!("{name}.toml"));
    if !config.exists() {
        write_node_config(dir, name, "");
    }
    let mut args: Vec<String> = [
        "--config",
        config.to_str().unwrap(),
        "--etcd",
        &etcd(),
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
    CrescentdProcess::start(&bin, &data, &dir.join(format!("{name}.log")), &args)
        .unwrap_or_else(|e| panic!("starting {name}: {e}"))
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
    for _ in 0..3 {
        let mut p = start_node(dir, name, cluster, rpc);
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
    pub nodes: [Option<CrescentdProcess>; 2],
}

impl HaPair {
    /// Starts nodes `a` and `b` and waits until one is active with an in-sync standby.
    pub async fn start(rpc: bool) -> HaPair {
        Self::start_with(rpc, "").await
    }

    /// [`HaPair::start`] with `extra` TOML in both nodes' config (kept across restarts).
    pub async fn start_with(rpc: bool, extra: &str) -> HaPair {
        let dir = tempfile::tempdir().expect("temp dir");
        for name in NODE_NAMES {
            write_node_config(dir.path(), name, extra);
        }
        let cluster = cluster_name();
        let nodes = NODE_NAMES.map(|name| Some(start_node(dir.path(), name, &cluster, rpc)));
        let pair = HaPair {
            dir,
            cluster,
            etcd: etcd(),
            rpc,
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

    /// Waits until one node is active with an in-sync standby; returns its index.
    pub async fn wait_in_sync(&self) -> usize {
        wait_pair_in_sync(&[self.node(0), self.node(1)]).await
    }

    /// Stops node `i` (if still running) and starts it again on its data dir as a standby
    /// ([`restart_standby`]). Call it from the test's own thread (see there).
    pub fn restart_as_standby(&mut self, i: usize) {
        self.nodes[i] = None;
        self.nodes[i] = Some(restart_standby(
            self.dir.path(),
            NODE_NAMES[i],
            &self.cluster,
            self.rpc,
        ));
    }
}
