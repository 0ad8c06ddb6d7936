//! Reseeding a standby from the active's snapshot (docs/ha.md, "Reseeding"), with real
//! crescentd processes on a real etcd (CRESCENT_TEST_ETCD, started by scripts/test.sh).
//!
//! Both nodes run with 64 KiB journal segments, a snapshot every 150 events and one snapshot
//! kept, so the active truncates its journal behind the standby within a few hundred mounts;
//! the active sends its snapshot in 4 KiB chunks, so a transfer has many chunks to be cut in.
//! Each test ends with both nodes at the same commit seq and `crescent-replay verify` and
//! `diff` clean on the two data dirs. The standby left behind and the wiped standby run in the
//! default suite; the kill -9 tests take longer (several restarts, a failover wait) and are
//! `#[ignore]`d, listed in the README's heavy tests.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crescent_tests::binaries::ensure_workspace_binary;
use crescent_tests::crescentd::{log_tail, Auth, CrescentdProcess, Launch};
use crescent_tests::ha_pair::{etcd, health, pair_key, HaPair, NODE_NAMES};
use crescent_tests::mount_load::MountLoad;
use crescent_tests::process::killed_by_sigkill;

const EXTRA: &str = "reseed_chunk_bytes = 4096\n\
                     [journal]\nsegment_bytes = 65536\n\
                     [snapshot]\nevery_events = 150\nretain = 1\n";

/// The first seq of `data_dir`'s journal (its oldest segment file's name).
fn first_seq(data_dir: &Path) -> u64 {
    std::fs::read_dir(data_dir.join("journal"))
        .unwrap()
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            name.strip_suffix(".seg")?.parse().ok()
        })
        .min()
        .unwrap_or(1)
}

/// Starts node `name` of `pair` on its data dir, with `crash` armed when given.
fn launch(pair: &HaPair, name: &str, crash: Option<&str>) -> Result<CrescentdProcess, String> {
    let dir = pair.dir.path();
    let bin = ensure_workspace_binary("crescent-server", "crescentd");
    let config = dir.join(format!("{name}.toml"));
    let args: Vec<String> = [
        "--config",
        config.to_str().unwrap(),
        "--etcd",
        &etcd(),
        "--cluster",
        &pair.cluster,
        "--advertise",
        "{listen}",
        "--rpc-listen",
        "off",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut l = Launch::new(&bin, &dir.join(name), &dir.join(format!("{name}.log")))
        .with_args(&args)
        .with_auth(Auth::Key(pair_key(dir)));
    if let Some(point) = crash {
        l = l.crashing_at(point);
    }
    CrescentdProcess::launch(&l)
}

/// The seq of `data_dir`'s newest snapshot (0: none).
fn newest_snapshot(data_dir: &Path) -> u64 {
    std::fs::read_dir(data_dir.join("snapshots"))
        .unwrap()
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            name.strip_prefix("snap-")?
                .strip_suffix(".crsnap")?
                .parse()
                .ok()
        })
        .max()
        .unwrap_or(0)
}

/// Writes through the active until its journal starts past `seq`; returns every acked mount.
/// `physically`: until the segment files holding `seq + 1` are gone (so a restart of the active
/// still lacks it); otherwise until a snapshot past `seq` truncated the journal behind it (one
/// snapshot is kept).
async fn write_past(
    pair: &HaPair,
    active: usize,
    seq: u64,
    prefix: &str,
    physically: bool,
) -> Vec<String> {
    let data = pair.dir.path().join(NODE_NAMES[active]);
    let load = MountLoad::start(
        &pair.segments_client(active, Duration::from_secs(10)),
        8,
        prefix,
    );
    let started = Instant::now();
    let past = |data: &Path| match physically {
        true => first_seq(data) > seq + 1,
        false => newest_snapshot(data) > seq,
    };
    while !past(&data) {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the active's journal still starts at {} after {} mounts; log:\n{}",
            first_seq(&data),
            load.acked_count(),
            log_tail(&pair.node(active).log_path, 20)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    load.stop().await
}

/// The standby's durable seq as its status says.
async fn durable_seq(node: &CrescentdProcess) -> u64 {
    health(node.addr).await.expect("status")["durable_seq"]
        .as_u64()
        .expect("durable_seq")
}

/// Waits until both nodes are in sync at the same commit seq; returns it.
async fn converge(pair: &HaPair) -> u64 {
    let active = pair.wait_in_sync().await;
    let started = Instant::now();
    loop {
        let a = health(pair.node(active).addr).await.unwrap_or_default();
        let s = health(pair.node(1 - active).addr).await.unwrap_or_default();
        if a["commit_seq"].is_u64() && a["commit_seq"] == s["commit_seq"] {
            return a["commit_seq"].as_u64().unwrap();
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "commit seqs differ: active {} standby {}",
            a["commit_seq"],
            s["commit_seq"]
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `crescent_ha_reseeds_total{outcome}` on `node` (0 when absent).
async fn reseeds(node: &CrescentdProcess, outcome: &str) -> u64 {
    let url = format!("http://{}/metrics", node.addr);
    let body = match reqwest::get(url).await {
        Ok(r) => r.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    };
    let line = format!("crescent_ha_reseeds_total{{outcome=\"{outcome}\"}} ");
    body.lines()
        .find_map(|l| l.strip_prefix(&line)?.trim().parse().ok())
        .unwrap_or(0)
}

/// Stops both nodes and checks their data dirs with `crescent-replay verify` and `diff`.
fn stop_and_diff(mut pair: HaPair) {
    for n in pair.nodes.iter_mut().flatten() {
        n.guard.signal(libc::SIGTERM);
        n.guard.wait();
    }
    let replay = ensure_workspace_binary("crescent-replay-tools", "crescent-replay");
    let dirs: Vec<PathBuf> = NODE_NAMES.iter().map(|n| pair.dir.path().join(n)).collect();
    for d in &dirs {
        let out = std::process::Command::new(&replay)
            .arg("verify")
            .arg(d)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "verify {}: {text}", d.display());
    }
    let out = std::process::Command::new(&replay)
        .args(["diff", "--json"])
        .args(&dirs)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "diff: {text}");
}

/// Waits until `node` exits; asserts it was SIGKILLed (a crash point).
fn wait_crashed(node: &mut CrescentdProcess, point: &str) {
    let started = Instant::now();
    let status = loop {
        if let Some(s) = node.guard.try_exit_status() {
            break s;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "never reached {point}; log:\n{}",
            log_tail(&node.log_path, 30)
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(killed_by_sigkill(&status), "{point}: {status}");
}

/// A pair whose standby is down while the active writes and truncates past it: returns the
/// pair (standby slot empty), the active's index and every acknowledged mount.
async fn standby_left_behind(wipe: bool, physically: bool) -> (HaPair, usize, Vec<String>) {
    let mut pair = HaPair::start_with(false, EXTRA).await;
    let active = pair.wait_in_sync().await;
    let standby = 1 - active;
    let behind = durable_seq(pair.node(standby)).await;
    pair.nodes[standby] = None; // SIGKILL
    if wipe {
        std::fs::remove_dir_all(pair.dir.path().join(NODE_NAMES[standby])).unwrap();
    }
    let acked = write_past(&pair, active, behind, "x", physically).await;
    (pair, active, acked)
}

async fn reseeds_and_converges(wipe: bool) {
    let started = Instant::now();
    let (mut pair, active, acked) = standby_left_behind(wipe, false).await;
    let left_behind = started.elapsed();
    let standby = 1 - active;
    pair.nodes[standby] = Some(launch(&pair, NODE_NAMES[standby], None).unwrap());
    let seq = converge(&pair).await;
    eprintln!(
        "pair up and left behind in {left_behind:?}; restarted, reseeded and in sync {:?} later",
        started.elapsed() - left_behind
    );
    let node = pair.node(standby);
    let installed = reseeds(node, "installed").await;
    assert_eq!(installed, 1, "{}", log_tail(&node.log_path, 30));
    let listing = pair.segments_client(active, Duration::from_secs(10));
    listing.assert_listed(&acked, "after the reseed").await;
    eprintln!(
        "converged at seq {seq} with {} acknowledged mounts",
        acked.len()
    );
    stop_and_diff(pair);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_standby_left_behind_the_actives_journal_reseeds_and_converges() {
    reseeds_and_converges(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_standby_wiped_while_the_active_writes_reseeds_and_converges() {
    reseeds_and_converges(true).await;
}

/// kill -9 of the standby in each reseed phase: mid-transfer, once the reseed dir is complete,
/// and at the next start right after the swap. Each restart finishes what is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "heavy: run with --ignored (README, heavy tests)"]
async fn a_reseed_cut_by_kill_9_of_the_standby_in_each_phase_completes_on_restart() {
    let (mut pair, active, acked) = standby_left_behind(false, false).await;
    let standby = 1 - active;
    let name = NODE_NAMES[standby];
    let data = pair.dir.path().join(name);
    let stage = pair.dir.path().join(format!("{name}.reseed"));
    let old_first = first_seq(&data);

    let mut node = launch(&pair, name, Some("reseed.after_chunk")).unwrap();
    wait_crashed(&mut node, "reseed.after_chunk");
    assert!(stage.exists() && !stage.join("RESEED_COMPLETE").exists());
    assert_eq!(first_seq(&data), old_first, "the data dir was touched");

    let mut node = launch(&pair, name, Some("reseed.after_stage")).unwrap();
    wait_crashed(&mut node, "reseed.after_stage");
    assert!(stage.join("RESEED_COMPLETE").exists());
    assert_eq!(first_seq(&data), old_first, "the data dir was touched");

    // Dies at start, before serving: the launch reports the early exit.
    let early = launch(&pair, name, Some("reseed.after_exchange"));
    assert!(
        early.is_err(),
        "the start should have crashed after the swap"
    );
    assert!(
        first_seq(&data) > old_first,
        "the reseed was not swapped in"
    );
    assert!(
        stage.exists(),
        "the old data dir should wait at the stage path"
    );

    pair.nodes[standby] = Some(launch(&pair, name, None).unwrap());
    converge(&pair).await;
    assert!(!stage.exists(), "the old data dir was not removed");
    let listing = pair.segments_client(active, Duration::from_secs(10));
    listing.assert_listed(&acked, "after the reseed").await;
    stop_and_diff(pair);
}

/// kill -9 of the active mid-transfer: the standby installs nothing, keeps its data dir, and
/// once the active is back (it was the last leader, the only node allowed to lead) the standby
/// reseeds from it; no acknowledged mount is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "heavy: run with --ignored (README, heavy tests)"]
async fn kill_9_of_the_active_mid_transfer_installs_nothing_and_the_pair_recovers() {
    // Physically: the active is restarted before the transfer, and must still lack the tail.
    let (mut pair, active, acked) = standby_left_behind(false, true).await;
    let standby = 1 - active;
    let (a_name, s_name) = (NODE_NAMES[active], NODE_NAMES[standby]);
    let data = pair.dir.path().join(s_name);
    let stage = pair.dir.path().join(format!("{s_name}.reseed"));
    let old_first = first_seq(&data);
    // The active again, armed: a restart on its data dir; it leads again (last leader).
    pair.nodes[active] = None;
    pair.nodes[active] = Some(launch(&pair, a_name, Some("reseed.serve_after_chunk")).unwrap());
    crescent_tests::ha_pair::wait_active(pair.node(active), Duration::from_secs(30)).await;
    pair.nodes[standby] = Some(launch(&pair, s_name, None).unwrap());
    wait_crashed(pair.node_mut(active), "reseed.serve_after_chunk");
    // The transfer was cut: the standby records the failure and installs nothing.
    let started = Instant::now();
    loop {
        let h = health(pair.node(standby).addr).await.unwrap_or_default();
        if h["replication"]["reseed"]["phase"] == "failed" {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "{h}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!stage.join("RESEED_COMPLETE").exists());
    assert_eq!(first_seq(&data), old_first, "the data dir was touched");
    assert!(reseeds(pair.node(standby), "failed").await >= 1);

    pair.nodes[active] = Some(launch(&pair, a_name, None).unwrap());
    converge(&pair).await;
    let listing = pair.segments_client(active, Duration::from_secs(10));
    listing
        .assert_listed(&acked, "after the active's restart")
        .await;
    stop_and_diff(pair);
}
