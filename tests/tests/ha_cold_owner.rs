//! A cold device on a storage owner across an HA failover, on a real etcd (CRESCENT_TEST_ETCD,
//! started by scripts/test.sh): two crescentd and one `crescent owner --etcd --cluster
//! --cold-device ob=DIR` that follows the leader. crescentd's own device takes no offload and
//! the nodes have no embedded segment, so every hot replica is in the owner's segment and
//! every cold payload in the owner's directory.
//!
//! The device is journaled (`Configure`, `AssignOwner`): after a SIGKILL of the active, the
//! new active lists it with its owner, the owner's poll (answered NOT_FOUND there) makes it
//! register again, the device is reconciled and healthy, its usage is the live lengths, and
//! every object reads back byte-identical, cold-only ones both locally and through the owner.
//! A second test kills the active in the middle of cold work: an offload whose write the
//! (stopped) owner has not taken, and a reclaim whose payload delete has not reached it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crescent_client::{ClientOptions, CrescentClient};
use crescent_tests::binaries::ensure_workspace_binary;
use crescent_tests::crescentd::{log_tail, CrescentdProcess};
use crescent_tests::env_count;
use crescent_tests::ha_pair::{wait_active, wait_gate, wait_notices_settled, HaPair};
use crescent_tests::store_e2e::OwnerProcess;
use serde_json::Value;

/// The HA tests each run two crescentd processes: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const OWNER_ID: &str = "ha-cold-owner";
const DEVICE: &str = "ob";
const OWNER_SEGMENT: u64 = 64 << 20;

/// Both nodes: crescentd's own device on a shared root (HA needs an explicit root) but not
/// schedulable, so placement picks the owner's; fast probes; restored objects stay cold-only
/// (no promotion) so that every read of them is a restore.
fn node_config(dir: &Path) -> String {
    format!(
        "\n[cold]\nroot = {:?}\nschedulable = false\nhealth_probe_interval_ms = 200\n\
         promote_on_read = false\n",
        dir.join("shared-cold").to_str().unwrap()
    )
}

fn owner_dir(dir: &Path) -> PathBuf {
    dir.join("owner-cold")
}

/// `crescent GLOBALS ARGS`: (exit code, stdout, stderr).
fn crescent(globals: &[&str], args: &[&str]) -> (i32, Vec<u8>, String) {
    let bin = ensure_workspace_binary("crescent-client", "crescent");
    let out = Command::new(bin)
        .args(globals)
        .args(args)
        .env_remove("CRESCENT_SERVER")
        .env_remove("CRESCENT_ETCD")
        .env_remove("CRESCENT_CLUSTER")
        .env_remove("CRESCENT_TENANT")
        .env_remove("CRESCENT_DOMAIN")
        .stdin(Stdio::null())
        .output()
        .expect("running crescent");
    (
        out.status.code().unwrap_or(-1),
        out.stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `crescent --server NODE --json ARGS`, which must succeed.
fn json_ok(node: &CrescentdProcess, args: &[&str]) -> Value {
    let addr = node.addr.to_string();
    let mut full = vec!["--json"];
    full.extend_from_slice(args);
    let (code, out, err) = crescent(&["--server", &addr], &full);
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
fn owner_row(node: &CrescentdProcess) -> Value {
    let list = json_ok(node, &["cold", "ls"]);
    list.as_array()
        .unwrap()
        .iter()
        .find(|d| d["id"] == DEVICE)
        .cloned()
        .unwrap_or(Value::Null)
}

fn wait_for(node: &CrescentdProcess, what: &str, within: Duration, mut ok: impl FnMut() -> bool) {
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
fn wait_converged(node: &CrescentdProcess, label: &str, live: u64) {
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
fn payload_files(dir: &Path) -> Vec<PathBuf> {
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

fn payload(len: usize, seed: u32) -> Vec<u8> {
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
fn evict_hot(node: &CrescentdProcess, key: &str) {
    let addr = node.addr.to_string();
    wait_for(node, "evict --hot", Duration::from_secs(30), || {
        let (code, out, err) = crescent(&["--server", &addr], &["--json", "evict", key, "--hot"]);
        let v: Value = serde_json::from_slice(&out).unwrap_or_default();
        assert!(code == 0 || v["error"]["code"] == "BUSY", "{v} {err}");
        code == 0
    });
}

/// `rm KEY` on `node`, retried while a get's read lease (released shortly after the copy)
/// still holds it (BUSY).
fn remove(node: &CrescentdProcess, key: &str) {
    let addr = node.addr.to_string();
    wait_for(node, "rm", Duration::from_secs(30), || {
        let (code, out, err) = crescent(&["--server", &addr], &["--json", "rm", key]);
        let v: Value = serde_json::from_slice(&out).unwrap_or_default();
        assert!(code == 0 || v["error"]["code"] == "BUSY", "{v} {err}");
        code == 0
    });
}

/// The objects of a test and what the cold tier holds of each.
struct Object {
    key: String,
    data: Vec<u8>,
    /// Materialized on the owner device.
    materialized: bool,
    /// No hot replica left.
    cold_only: bool,
}

/// Every object reads back byte-identical from `node`: through `client` (local restore of
/// the cold-only ones: this host sees the owner's directory), and through the CLI without
/// local restore (crescentd asks the owner to read and verify).
async fn check_objects(client: &CrescentClient, node: &CrescentdProcess, objects: &[Object]) {
    let addr = node.addr.to_string();
    for o in objects {
        let got = client
            .get(&o.key)
            .await
            .unwrap_or_else(|e| panic!("get {}: {e}\n{}", o.key, log_tail(&node.log_path, 30)));
        assert!(got == o.data, "{}: local read differs", o.key);
        let (code, out, err) = crescent(
            &["--server", &addr],
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
fn check_usage(node: &CrescentdProcess, dir: &Path, objects: &[Object]) {
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
struct Setup {
    pair: HaPair,
    owner: OwnerProcess,
    client: CrescentClient,
    /// Objects `client` put (each one notice to the owner).
    puts: u64,
    /// crescentd's own (unused) device root, shared by both nodes.
    _shared: tempfile::TempDir,
}

async fn setup() -> Setup {
    let shared = tempfile::tempdir().unwrap();
    let pair = HaPair::start_with(false, &node_config(shared.path())).await;
    let globals = ["--etcd", &pair.etcd, "--cluster", &pair.cluster];
    let device = format!(
        "{DEVICE}={},capacity=64M",
        owner_dir(pair.dir.path()).display()
    );
    let owner = OwnerProcess::start_with_args(
        &globals,
        OWNER_ID,
        OWNER_SEGMENT,
        &["--cold-device", &device],
    );
    let client = CrescentClient::connect(ClientOptions::etcd(&pair.etcd, &pair.cluster))
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

/// Puts `n` objects (into the owner's segment), offloads the first `materialized`, evicts the
/// hot replica of the first `cold_only` of those, and waits until the owner recorded every
/// put's notice (an object whose notice is not recorded is, by design, not rebuilt).
async fn put_objects(
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
    wait_notices_settled(&s.client, s.puts).await;
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
async fn settle(s: &Setup, active: &CrescentdProcess) {
    wait_notices_settled(&s.client, s.puts).await;
    let url = active.base_url();
    let started = Instant::now();
    loop {
        let pending =
            crescent_tests::store_e2e::counter(&url, "crescent_store_releases_pending", "").await;
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
async fn fail_over(s: &mut Setup, active: usize) -> usize {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_device_serves_and_reconciles_on_the_new_active_after_failover() {
    let _serial = SERIAL.lock().await;
    let rounds = env_count("CRESCENT_HA_COLD_OWNER_ROUNDS", 2) as usize;
    let mut s = setup().await;
    let dir = s.pair.dir.path().to_path_buf();
    let mut active = s.pair.wait_in_sync().await;
    wait_converged(s.pair.node(active), "start", 0);

    // 8 objects: 5 materialized, 3 of them cold-only; 3 hot only.
    let mut objects = put_objects(&mut s, active, "a", 8, 5, 3).await;
    check_usage(s.pair.node(active), &dir, &objects);

    for round in 0..rounds {
        settle(&s, s.pair.node(active)).await;
        let files_before = payload_files(&dir);
        let new_active = fail_over(&mut s, active).await;
        let node = s.pair.node(new_active);
        // Listed from the journal with its owner at once; healthy once the owner (whose poll
        // the new active answered NOT_FOUND) registered again and the device reconciled.
        let row = owner_row(node);
        assert_eq!(row["owner_id"], OWNER_ID, "round {round}: {row}");
        let live = objects.iter().filter(|o| o.materialized).count() as u64;
        wait_converged(node, &format!("round {round}"), live);
        check_usage(node, &dir, &objects);
        assert_eq!(payload_files(&dir), files_before, "round {round}");
        check_objects(&s.client, node, &objects).await;

        // New cold work on the new active: an offload (then cold-only), and a delete of a
        // cold-only object (reclaimed on the owner).
        let fresh = format!("round{round}/fresh");
        let data = payload(300_000 + round, 77 + round as u32);
        s.client.put(&fresh, &data).await.unwrap();
        s.puts += 1;
        let stat = json_ok(node, &["offload", &fresh]);
        assert_eq!(stat["cold"]["device_id"], DEVICE, "{stat}");
        evict_hot(node, &fresh);
        objects.push(Object {
            key: fresh,
            data,
            materialized: true,
            cold_only: true,
        });
        let gone = objects.remove(0);
        assert!(gone.cold_only, "{}", gone.key);
        remove(node, &gone.key);
        let (code, _, err) = crescent(&["--server", &node.addr.to_string()], &["get", &gone.key]);
        assert_ne!(code, 0, "{} was deleted: {err}", gone.key);
        let live = objects.iter().filter(|o| o.materialized).count() as u64;
        wait_converged(node, &format!("round {round}, after new work"), live);
        check_usage(node, &dir, &objects);
        check_objects(&s.client, node, &objects).await;

        // The killed node comes back as the standby; the next round kills the other one.
        s.pair.restart_as_standby(active);
        active = new_active;
    }
}

/// Starts `args` on `node` in the background while the owner is stopped (SIGSTOP), waits
/// until the device is busy with it on `node` (its ledger held, the IO queued for the owner)
/// and a little longer (so its first commands are journaled and replicated), then SIGKILLs
/// the active and lets the owner run again. Returns the new active's index.
async fn fail_over_during(s: &mut Setup, active: usize, args: &[&str]) -> usize {
    let owner_pid = s.owner.guard.pid() as libc::pid_t;
    // SAFETY: kill(2) on our own child process.
    #[allow(unsafe_code)]
    unsafe {
        assert_eq!(libc::kill(owner_pid, libc::SIGSTOP), 0);
    }
    let addr = s.pair.node(active).addr.to_string();
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let work = std::thread::spawn(move || {
        let mut full = vec!["--server", addr.as_str(), "--json"];
        full.extend(args.iter().map(String::as_str));
        crescent(&[], &full)
    });
    wait_for(
        s.pair.node(active),
        "the work to hold the device",
        Duration::from_secs(5),
        || owner_row(s.pair.node(active))["busy"] == true,
    );
    std::thread::sleep(Duration::from_millis(800));
    assert!(
        !work.is_finished(),
        "the work did not wait for the stopped owner"
    );
    let survivor = {
        s.pair.node_mut(active).guard.sigkill();
        #[allow(unsafe_code)]
        unsafe {
            assert_eq!(libc::kill(owner_pid, libc::SIGCONT), 0);
        }
        let survivor = 1 - active;
        wait_active(s.pair.node(survivor), Duration::from_secs(30)).await;
        wait_gate(s.pair.node(survivor), "SERVING", Duration::from_secs(60)).await;
        survivor
    };
    let (code, _, err) = work.join().unwrap();
    assert_ne!(code, 0, "the work was cut by the kill: {err}");
    survivor
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cold_work_cut_by_a_failover_converges_on_the_new_active() {
    let _serial = SERIAL.lock().await;
    let mut s = setup().await;
    let dir = s.pair.dir.path().to_path_buf();
    let active = s.pair.wait_in_sync().await;
    wait_converged(s.pair.node(active), "start", 0);
    // c0, c1 cold-only; h hot only.
    let mut objects = put_objects(&mut s, active, "w", 3, 2, 2).await;
    settle(&s, s.pair.node(active)).await;

    // An offload of `h` (planned and reserved; its write queued for the stopped owner).
    let h = objects[2].key.clone();
    let active = fail_over_during(&mut s, active, &["offload", &h]).await;
    let node = s.pair.node(active);
    wait_converged(node, "offload cut", 2);
    check_usage(node, &dir, &objects);
    check_objects(&s.client, node, &objects).await;
    // The offload runs on the new active.
    let stat = json_ok(node, &["offload", &h]);
    assert_eq!(stat["cold"]["op_state"], "usage_committed", "{stat}");
    objects[2].materialized = true;
    wait_converged(node, "offload again", 3);
    check_usage(node, &dir, &objects);

    // A delete of cold-only `c0`: its reclaim is planned (the route no longer references the
    // payload), its payload delete queued for the stopped owner.
    let killed = 1 - active;
    s.pair.restart_as_standby(killed);
    settle(&s, s.pair.node(active)).await;
    let c0 = objects.remove(0);
    let active = fail_over_during(&mut s, active, &["rm", &c0.key]).await;
    let node = s.pair.node(active);
    wait_converged(node, "reclaim cut", 2);
    let (code, _, err) = crescent(&["--server", &node.addr.to_string()], &["get", &c0.key]);
    assert_ne!(code, 0, "{} was deleted: {err}", c0.key);
    check_usage(node, &dir, &objects);
    check_objects(&s.client, node, &objects).await;

    // No failover: the owner stalls (SIGSTOP) past its silence limit during a delete, then
    // runs on under the same incarnation (so it never registers again). The reclaim whose
    // payload delete went unanswered is resumed once the owner polls again.
    let c1 = objects.remove(0);
    let owner_pid = s.owner.guard.pid() as libc::pid_t;
    #[allow(unsafe_code)]
    unsafe {
        assert_eq!(libc::kill(owner_pid, libc::SIGSTOP), 0);
    }
    let addr = node.addr.to_string();
    let key = c1.key.clone();
    // --force: a read lease of the checks above may still be held (its release is deferred).
    let rm = std::thread::spawn(move || {
        crescent(&["--server", &addr], &["--json", "rm", "--force", &key])
    });
    let started = Instant::now();
    while !rm.is_finished() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "rm did not return"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    #[allow(unsafe_code)]
    unsafe {
        assert_eq!(libc::kill(owner_pid, libc::SIGCONT), 0);
    }
    let (code, out, err) = rm.join().unwrap();
    assert_eq!(code, 0, "{} {err}", String::from_utf8_lossy(&out));
    assert!(
        started.elapsed() >= Duration::from_secs(5),
        "the delete waited for the stalled owner"
    );
    wait_converged(node, "owner stall", 1);
    let (code, _, err) = crescent(&["--server", &node.addr.to_string()], &["get", &c1.key]);
    assert_ne!(code, 0, "{} was deleted: {err}", c1.key);
    check_usage(node, &dir, &objects);
    check_objects(&s.client, node, &objects).await;
}
