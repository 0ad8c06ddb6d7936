//! The chaos soak (README, "Extra commands"; not in CI's default run): the object promise
//! (docs/architecture.md, "The object promise") under writers of both kinds and crashes of
//! crescentd, round after round.
//!
//! Writers (tests/src/chaos.rs) put, upsert and remove objects on two `crescent owner`
//! processes (crescentd has no embedded segment, so every object lands in an owner's
//! segment): `crescent` processes that exit right after their answer, and library writer
//! children SIGKILLed right after an acknowledgement. Each round:
//! - standalone: crescentd is killed mid-traffic (SIGKILL, one round in four SIGTERM) and
//!   restarted on the same data dir and address;
//! - HA (a pair on a real etcd): the active is SIGKILLed mid-traffic, the standby takes over,
//!   and the killed node comes back as the standby.
//!
//! Once the rebuild gate is open and the writers stopped, every key is read back through a
//! fresh `crescent get` process and through the library, and must be in one of its acceptable
//! states (tests/src/chaos_model.rs): an acknowledged value byte-identical, an acknowledged
//! remove still removed. The same once more after a last crash at the end. A loss or
//! resurrection fails the test, naming the key and what was expected; the scratch dir with
//! every log is then kept.
//!
//! `CRESCENT_CHAOS_ROUNDS` (default 2) sets the rounds, `CRESCENT_CHAOS_SEED` the seed. The HA
//! kind uses `CRESCENT_TEST_ETCD`, or starts its own etcd on loopback when unset.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crescent_client::CrescentClient;
use crescent_tests::auth::DEFAULT_TENANT;
use crescent_tests::binaries::ensure_workspace_binary;
use crescent_tests::chaos::{keep_on_failure, read_error, subdir, Soak};
use crescent_tests::chaos_model::ReadBack;
use crescent_tests::crescentd::{log_tail, CrescentdProcess};
use crescent_tests::env_count;
use crescent_tests::etcd::ensure_test_etcd;
use crescent_tests::ha_pair::{wait_active, wait_gate, HaPair};
use crescent_tests::store_e2e::OwnerProcess;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// One soak at a time: each runs crescentd, two owners and four writers on a small machine.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

const OWNER_SEGMENT: u64 = 64 << 20;
/// No embedded segment: every object lands in an owner's segment. A long client TTL: a remove
/// cannot reach the owner by a heartbeat before the crash right after it.
const STORE_TOML: &str = "[store]\nembedded_segment_bytes = 0\n\
                          rebuild_degraded_timeout_secs = 120\nclient_ttl_secs = 60\n";
const GATE_WITHIN: Duration = Duration::from_secs(60);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

fn seed() -> u64 {
    let seed = match std::env::var("CRESCENT_CHAOS_SEED") {
        Ok(s) => s.parse().expect("CRESCENT_CHAOS_SEED is a number"),
        Err(_) => rand::random(),
    };
    eprintln!("chaos soak seed {seed} (CRESCENT_CHAOS_SEED={seed} repeats the choices)");
    seed
}

fn soak(globals: Vec<String>, token: Option<String>, dir: &Path, seed: u64) -> Soak {
    Soak {
        shared: Arc::default(),
        globals,
        token,
        child_bin: env!("CARGO_BIN_EXE_chaos-writer").into(),
        dir: subdir(dir, "scratch"),
        seed,
    }
}

/// A read through the library.
fn lib_get(
    rt: &tokio::runtime::Runtime,
    client: &CrescentClient,
    key: &str,
) -> Result<ReadBack, String> {
    match rt.block_on(client.get(key)) {
        Ok(v) => Ok(ReadBack::Value(v)),
        Err(e) => read_error(e.code_str(), &format!("{}: {e}", e.code_str())),
    }
}

/// Reads every key back (CLI and library), prints the round's line, returns the violations.
fn check(
    soak: &Soak,
    rt: &tokio::runtime::Runtime,
    lib: &CrescentClient,
    what: &str,
) -> Vec<String> {
    let found = soak.verify(what, |key| lib_get(rt, lib, key));
    // Release the reads' leases, so the next round's removes are not refused.
    rt.block_on(lib.settle());
    let s = soak.lock();
    eprintln!(
        "{what}: {} keys checked, {} violations; so far {} objects and {} removes acknowledged",
        soak_keys(),
        found.len(),
        s.model.objects_acked,
        s.model.removes_acked
    );
    found
}

fn soak_keys() -> u32 {
    crescent_tests::chaos::WRITERS * crescent_tests::chaos::KEYS_PER_WRITER
}

fn pause(rng: &mut StdRng, ms: std::ops::Range<u64>) {
    std::thread::sleep(Duration::from_millis(rng.gen_range(ms)));
}

/// Prints the summary, and fails naming every violation (keeping the scratch dir).
fn finish(soak: &Soak, kind: &str, rounds: u32, found: Vec<String>, dir: tempfile::TempDir) {
    eprintln!("{}", soak.summary(kind, rounds, found.len()));
    let kept = keep_on_failure(dir, !found.is_empty());
    assert!(
        found.is_empty(),
        "chaos soak {kind}: {} violation(s) of the object promise (logs kept in {:?}):\n{}",
        found.len(),
        kept,
        found.join("\n")
    );
}

/// Stops crescentd (SIGTERM and a clean exit, else SIGKILL) and starts it again on the same
/// data dir and address; waits until its rebuild gate is open.
fn crash_and_restart(
    rt: &tokio::runtime::Runtime,
    node: CrescentdProcess,
    args: &[String],
    data: &Path,
    sigterm: bool,
) -> CrescentdProcess {
    let mut node = node;
    if sigterm {
        node.guard.signal(libc::SIGTERM);
        let status = node.guard.wait();
        assert!(
            status.success(),
            "crescentd stopped with {status} on SIGTERM; log:\n{}",
            log_tail(&node.log_path, 40)
        );
    } else {
        node.guard.sigkill();
    }
    let (addr, log): (SocketAddr, _) = (node.addr, node.log_path.clone());
    drop(node);
    let bin = ensure_workspace_binary("crescent-server", "crescentd");
    let node = CrescentdProcess::start_at(&bin, data, &log, args, addr)
        .unwrap_or_else(|e| panic!("restarting crescentd: {e}"));
    rt.block_on(wait_gate(&node, "SERVING", GATE_WITHIN));
    node
}

#[test]
#[ignore = "chaos soak: cargo test -p crescent-tests --test chaos_soak -- --ignored"]
fn chaos_soak_standalone() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let rounds = env_count("CRESCENT_CHAOS_ROUNDS", 2);
    let seed = seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().expect("temp dir");
    let rt = runtime();
    let config = dir.path().join("crescentd.toml");
    std::fs::write(&config, STORE_TOML).expect("writing crescentd.toml");
    let args = vec!["--config".to_string(), config.display().to_string()];
    let data = dir.path().join("data");
    let bin = ensure_workspace_binary("crescent-server", "crescentd");
    let mut node = CrescentdProcess::start(&bin, &data, &dir.path().join("crescentd.log"), &args)
        .unwrap_or_else(|e| panic!("starting crescentd: {e}"));
    let server = node.addr.to_string();
    let mut owners = [
        OwnerProcess::start(&node, "chaos-owner-1", OWNER_SEGMENT),
        OwnerProcess::start(&node, "chaos-owner-2", OWNER_SEGMENT),
    ];
    let token = node.client_token(DEFAULT_TENANT);
    let soak = soak(vec!["--server".into(), server], token, dir.path(), seed);
    let lib = rt.block_on(node.client());

    let mut found = Vec::new();
    let mut done = 0;
    for round in 0..rounds {
        let writers = soak.start_writers(round);
        pause(&mut rng, 300..1500);
        let sigterm = rng.gen_ratio(1, 4);
        node = crash_and_restart(&rt, node, &args, &data, sigterm);
        pause(&mut rng, 200..800);
        writers.stop();
        let how = if sigterm { "SIGTERM" } else { "SIGKILL" };
        found = check(
            &soak,
            &rt,
            &lib,
            &format!("round {round} ({how} of crescentd)"),
        );
        done = round + 1;
        if !found.is_empty() {
            break;
        }
    }
    if found.is_empty() {
        node = crash_and_restart(&rt, node, &args, &data, false);
        found = check(&soak, &rt, &lib, "after a last SIGKILL of crescentd");
    }
    for o in owners.iter_mut() {
        assert!(
            o.guard.try_exit_status().is_none(),
            "owner {} exited during the soak",
            o.owner_id
        );
    }
    drop(node);
    finish(&soak, "standalone", done, found, dir);
}

/// Kills the active of `pair` with SIGKILL and waits until the other node is active with its
/// gate open; returns the survivor's index.
fn fail_over(rt: &tokio::runtime::Runtime, pair: &mut HaPair, active: usize) -> usize {
    pair.node_mut(active).guard.sigkill();
    let survivor = 1 - active;
    let node = pair.node(survivor);
    rt.block_on(wait_active(node, Duration::from_secs(20)));
    rt.block_on(wait_gate(node, "SERVING", GATE_WITHIN));
    survivor
}

#[test]
#[ignore = "chaos soak: cargo test -p crescent-tests --test chaos_soak -- --ignored"]
fn chaos_soak_ha() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let rounds = env_count("CRESCENT_CHAOS_ROUNDS", 2);
    let seed = seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().expect("temp dir");
    let _etcd = ensure_test_etcd(dir.path()).unwrap_or_else(|e| panic!("{e}"));
    let rt = runtime();
    let mut pair = rt.block_on(HaPair::start_with(true, STORE_TOML));
    let (etcd, cluster) = (pair.etcd.clone(), pair.cluster.clone());
    let globals = ["--etcd", etcd.as_str(), "--cluster", cluster.as_str()];
    let mut owners = [
        pair.start_owner("chaos-owner-1", OWNER_SEGMENT),
        pair.start_owner("chaos-owner-2", OWNER_SEGMENT),
    ];
    let token = Some(pair.client_token(DEFAULT_TENANT));
    let soak = soak(globals.map(String::from).to_vec(), token, dir.path(), seed);
    let lib = rt
        .block_on(CrescentClient::connect(pair.client_options(DEFAULT_TENANT)))
        .expect("library reader following etcd");

    let mut found = Vec::new();
    let mut done = 0;
    for round in 0..rounds {
        let active = rt.block_on(pair.wait_in_sync());
        let writers = soak.start_writers(round);
        pause(&mut rng, 300..1500);
        fail_over(&rt, &mut pair, active);
        pause(&mut rng, 200..800);
        writers.stop();
        let what = format!("round {round} (SIGKILL of active {})", ["a", "b"][active]);
        found = check(&soak, &rt, &lib, &what);
        done = round + 1;
        if !found.is_empty() {
            break;
        }
        // From the test's own thread: the node dies with the thread that spawned it.
        pair.restart_as_standby(active);
    }
    if found.is_empty() {
        let active = rt.block_on(pair.wait_in_sync());
        fail_over(&rt, &mut pair, active);
        found = check(&soak, &rt, &lib, "after a last SIGKILL of the active");
    }
    for o in owners.iter_mut() {
        assert!(
            o.guard.try_exit_status().is_none(),
            "owner {} exited during the soak",
            o.owner_id
        );
    }
    if !found.is_empty() {
        // The nodes' logs live in the pair's dir: keep it with the scratch dir.
        let logs = std::mem::replace(&mut pair.dir, tempfile::tempdir().expect("temp dir"));
        eprintln!("HA node logs kept in {:?}", logs.keep());
    }
    drop(pair);
    finish(&soak, "HA", done, found, dir);
}
