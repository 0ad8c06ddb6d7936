//! A storage owner's cold device under an HA pair, for the failover tests
//! (`tests/ha_cold_owner.rs`, `tests/ha_cold_owner_down.rs`): two crescentd on a real etcd and
//! one `crescent owner --etcd --cluster --cold-device ob=DIR` that follows the leader.
//! crescentd's own device takes no offload and the nodes have no embedded segment, so every
//! hot replica is in the owner's segment and every cold payload in the owner's directory.
//! What the tests check after a failover: the device's `cold ls` row converging, its usage
//! against the live objects and the owner's payload files, and every object byte-identical.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crescent_client::{ClientOptions, CrescentClient};
use serde_json::Value;

use crate::auth::{with_token as client_with_token, DEFAULT_TENANT};
use crate::binaries::crescent_command;
use crate::crescentd::{log_tail, CrescentdProcess};
use crate::ha_pair::{assert_owners_recorded, wait_active, wait_gate, HaPair};
use crate::store_e2e::{with_token, OwnerProcess};

pub const OWNER_ID: &str = "ha-cold-owner";
pub const DEVICE: &str = "ob";
pub const OWNER_SEGMENT: u64 = 64 << 20;

/// Both nodes: crescentd's own device on a shared root (HA needs an explicit root) but not
/// schedulable, so placement picks the owner's; fast probes; restored objects stay cold-only
/// (no promotion) so that every read of them is a restore.
pub fn node_config(dir: &Path) -> String {
    format!(
        "\n[cold]\nroot = {:?}\nschedulable = false\nhealth_probe_interval_ms = 200\n\
         promote_on_read = false\n",
        dir.join("shared-cold").to_str().unwrap()
    )
}

pub fn owner_dir(dir: &Path) -> PathBuf {
    dir.join("owner-cold")
}

/// `crescent GLOBALS ARGS` with `token`: (exit code, stdout, stderr).
pub fn crescent(globals: &[&str], token: Option<&str>, args: &[&str]) -> (i32, Vec<u8>, String) {
    let mut cmd = crescent_command(globals);
    with_token(&mut cmd, token);
    let out = cmd.args(args).output().expect("running crescent");
    (
        out.status.code().unwrap_or(-1),
        out.stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `crescent --server NODE --json ARGS` as an operator (admin token), which must succeed.
pub fn json_ok(node: &CrescentdProcess, args: &[&str]) -> Value {
    let addr = node.addr.to_string();
    let mut full = vec!["--json"];
    full.extend_from_slice(args);
    let admin = node.admin_token();
    let (code, out, err) = crescent(&["--server", &addr], admin.as_deref(), &full);
    assert_eq!(
        code,
        0,
        "{args:?}: {}{err}\n{}",
        String::from_utf8_lossy(&out),
        log_tail(&node.log_path, 30)
    );
    serde_json::from_slice(&out).unwrap()
}

/// The owner device's `cold ls` row on `node` (null when not listed).
pub fn owner_row(node: &CrescentdProcess) -> Value {
    let list = json_ok(node, &["cold", "ls"]);
    list["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["id"] == DEVICE)
        .cloned()
        .unwrap_or(Value::Null)
}

pub fn wait_for(
    node: &CrescentdProcess,
    what: &str,
    within: Duration,
    mut ok: impl FnMut() -> bool,
) {
    let started = Instant::now();
    while !ok() {
        assert!(
            started.elapsed() < within,
            "{what}: not within {within:?}; row {}\nlog:\n{}",
            owner_row(node),
            log_tail(&node.log_path, 40)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until the owner device on `node` is healthy and settled: not busy, no reclaim or
/// reservation left, exactly `live` operations active (the materialized objects').
pub fn wait_converged(node: &CrescentdProcess, label: &str, live: u64) {
    wait_for(
        node,
        &format!("{label}: the owner device to converge"),
        Duration::from_secs(60),
        || {
            let d = owner_row(node);
            d["health"] == "healthy"
                && d["busy"].is_null()
                && d["active_operations"] == live
                && d["active_reclaims"] == 0
                && d["reserved"] == 0
        },
    );
}

/// The payload files in the owner device's directory, sorted.
pub fn payload_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let objects = owner_dir(dir).join("objects");
    for shard in std::fs::read_dir(objects).into_iter().flatten().flatten() {
        for f in std::fs::read_dir(shard.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            out.push(f.path());
        }
    }
    out.sort();
    out
}

pub fn payload(len: usize, seed: u32) -> Vec<u8> {
    (0..len as u32)
        .map(|i| {
            i.wrapping_mul(2_654_435_761)
                .wrapping_add(seed.wrapping_mul(40_503))
                .to_le_bytes()[2]
        })
        .collect()
}

/// `evict KEY --hot` on `node`, retried while a read lease (the owner's read for its write)
/// still holds the replica (BUSY).
pub fn evict_hot(node: &CrescentdProcess, key: &str) {
    let addr = node.addr.to_string();
    // Evicting the hot replica is cold-tier administration (docs/security.md: `cold`).
    let admin = node.admin_token();
    wait_for(node, "evict --hot", Duration::from_secs(30), || {
        let (code, out, err) = crescent(
            &["--server", &addr],
            admin.as_deref(),
            &["--json", "evict", key, "--hot"],
        );
        let v: Value = serde_json::from_slice(&out).unwrap_or_default();
        assert!(code == 0 || v["error"]["code"] == "BUSY", "{v} {err}");
        code == 0
    });
}

/// `rm KEY` on `node`, retried while a get's read lease (released shortly after the copy)
/// still holds it (BUSY).
pub fn remove(node: &CrescentdProcess, key: &str) {
    let addr = node.addr.to_string();
    let client = node.client_token(DEFAULT_TENANT);
    wait_for(node, "rm", Duration::from_secs(30), || {
        let (code, out, err) = crescent(
            &["--server", &addr],
            client.as_deref(),
            &["--json", "rm", key],
        );
        let v: Value = serde_json::from_slice(&out).unwrap_or_default();
        assert!(code == 0 || v["error"]["code"] == "BUSY", "{v} {err}");
        code == 0
    });
}

/// The objects of a test and what the cold tier holds of each.
pub struct Object {
    pub key: String,
    pub data: Vec<u8>,
    /// Materialized on the owner device.
    pub materialized: bool,
    /// No hot replica left.
    pub cold_only: bool,
}

/// Every object reads back byte-identical from `node`: through `client` (local restore of
/// the cold-only ones: this host sees the owner's directory), and through the CLI without
/// local restore (crescentd asks the owner to read and verify).
pub async fn check_objects(client: &CrescentClient, node: &CrescentdProcess, objects: &[Object]) {
    let addr = node.addr.to_string();
    let token = node.client_token(DEFAULT_TENANT);
    for o in objects {
        let got = client
            .get(&o.key)
            .await
            .unwrap_or_else(|e| panic!("get {}: {e}\n{}", o.key, log_tail(&node.log_path, 30)));
        assert!(got == o.data, "{}: local read differs", o.key);
        let (code, out, err) = crescent(
            &["--server", &addr],
            token.as_deref(),
            &["--no-local-cold-restore", "get", &o.key],
        );
        assert_eq!(
            code,
            0,
            "{}: {err}\n{}",
            o.key,
            log_tail(&node.log_path, 30)
        );
        assert!(out == o.data, "{}: remote read differs", o.key);
        let stat = json_ok(node, &["stat", &o.key]);
        assert_eq!(
            stat["replicas"].as_array().unwrap().is_empty(),
            o.cold_only,
            "{}: {stat}",
            o.key
        );
        if o.materialized {
            assert_eq!(stat["cold"]["device_id"], DEVICE, "{}: {stat}", o.key);
            assert_eq!(stat["cold"]["op_state"], "usage_committed", "{stat}");
        } else {
            assert!(stat["cold"].is_null(), "{}: {stat}", o.key);
        }
    }
}

/// The owner device's usage on `node` equals the live materialized lengths and the payload
/// files on the owner, and it names its owner.
pub fn check_usage(node: &CrescentdProcess, dir: &Path, objects: &[Object]) {
    let live: u64 = objects
        .iter()
        .filter(|o| o.materialized)
        .map(|o| o.data.len() as u64)
        .sum();
    let d = owner_row(node);
    assert_eq!(d["owner_id"], OWNER_ID, "{d}");
    assert_eq!(d["used"].as_u64(), Some(live), "{d}");
    assert_eq!(d["reserved"].as_u64(), Some(0), "{d}");
    assert_eq!(d["live_materialized_bytes"].as_u64(), Some(live), "{d}");
    let files = payload_files(dir);
    assert_eq!(
        files.len(),
        objects.iter().filter(|o| o.materialized).count(),
        "{files:?}"
    );
}

/// A pair, the owner with its device, and a client following the leader.
pub struct Setup {
    pub pair: HaPair,
    pub owner: OwnerProcess,
    pub client: CrescentClient,
    /// Objects `client` put (each one notice to the owner).
    pub puts: u64,
    /// crescentd's own (unused) device root, shared by both nodes.
    _shared: tempfile::TempDir,
}

pub async fn setup() -> Setup {
    setup_with("").await
}

/// [`setup`] with `extra` TOML appended to both nodes' configuration.
pub async fn setup_with(extra: &str) -> Setup {
    let shared = tempfile::tempdir().unwrap();
    let config = format!("{}{extra}", node_config(shared.path()));
    let pair = HaPair::start_with(false, &config).await;
    let owner = start_owner(&pair);
    let options = ClientOptions::etcd(&pair.etcd, &pair.cluster);
    let token = pair.client_token(DEFAULT_TENANT);
    let client = CrescentClient::connect(client_with_token(options, Some(token)))
        .await
        .expect("a client following the leader through etcd");
    Setup {
        pair,
        owner,
        client,
        puts: 0,
        _shared: shared,
    }
}

/// The storage owner [`OWNER_ID`] with its segment and the device [`DEVICE`], following the
/// pair's leader through etcd; returns once registered (also to restart it after a kill: same
/// id, same device directory, a new incarnation with an empty segment).
pub fn start_owner(pair: &HaPair) -> OwnerProcess {
    let globals = ["--etcd", &pair.etcd, "--cluster", &pair.cluster];
    let device = format!(
        "{DEVICE}={},capacity=64M",
        owner_dir(pair.dir.path()).display()
    );
    OwnerProcess::start_with_args(
        &globals,
        Some(&pair.owner_token(OWNER_ID)),
        OWNER_ID,
        OWNER_SEGMENT,
        &["--cold-device", &device],
    )
}

/// Puts `n` objects (into the owner's segment), offloads the first `materialized`, evicts the
/// hot replica of the first `cold_only` of those, and waits until the owner recorded every
/// put's notice (an object whose notice is not recorded is, by design, not rebuilt).
pub async fn put_objects(
    s: &mut Setup,
    active: usize,
    prefix: &str,
    n: usize,
    materialized: usize,
    cold_only: usize,
) -> Vec<Object> {
    let mut objects = Vec::new();
    for i in 0..n {
        let key = format!("{prefix}/obj-{i}");
        let data = payload(40_000 + i * 97_001, i as u32 + prefix.len() as u32 * 31);
        s.client.put(&key, &data).await.unwrap();
        s.puts += 1;
        objects.push(Object {
            key,
            data,
            materialized: i < materialized,
            cold_only: i < cold_only,
        });
    }
    assert_owners_recorded(&s.client, s.puts);
    let active = s.pair.node(active);
    for o in &objects {
        if o.materialized {
            let stat = json_ok(active, &["offload", &o.key]);
            assert_eq!(stat["cold"]["device_id"], DEVICE, "{stat}");
            assert_eq!(stat["cold"]["op_state"], "usage_committed", "{stat}");
        }
        if o.cold_only {
            evict_hot(active, &o.key);
        }
    }
    objects
}

/// Waits until `active`'s releases of evicted replicas reached the owner and the standby is
/// in sync, so the state the failover starts from is the one the test knows.
pub async fn settle(s: &Setup, active: &CrescentdProcess) {
    assert_owners_recorded(&s.client, s.puts);
    let url = active.base_url();
    let started = Instant::now();
    loop {
        let pending = crate::store_e2e::counter(&url, "crescent_store_releases_pending", "").await;
        if pending == 0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "releases pending"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    s.pair.wait_in_sync().await;
}

/// Kills the active, waits for the other node to serve (gate open, the owner replayed), and
/// returns its index.
pub async fn fail_over(s: &mut Setup, active: usize) -> usize {
    s.pair.node_mut(active).guard.sigkill();
    let survivor = 1 - active;
    let took = wait_active(s.pair.node(survivor), Duration::from_secs(30)).await;
    wait_gate(s.pair.node(survivor), "SERVING", Duration::from_secs(60)).await;
    eprintln!(
        "failover: {} active after {took:?}",
        s.pair.node(survivor).addr
    );
    assert!(
        s.owner.guard.try_exit_status().is_none(),
        "the owner exited during the failover"
    );
    survivor
}
