//! Objects across an HA failover, on a real etcd (CRESCENT_TEST_ETCD, started by
//! scripts/test.sh): two crescentd processes and two `crescent owner` processes that follow the
//! leader through etcd (`--etcd --cluster`).
//!
//! Each round a client that follows the leader through etcd puts objects (they land on both
//! owners' segments), the active is killed with SIGKILL, and then:
//! - the same client reads at once, without being told anything: its requests follow the
//!   failover (connection refused, NOT_LEADER, the rebuild gate) within the failover deadline;
//! - the new active's gate is SERVING (not DEGRADED) with both owners' replays complete;
//! - every object of every round reads byte-identical through that client, through a client
//!   that only knows the static list [dead node, survivor], and (a sample) through the
//!   `crescent` CLI both ways.
//!
//! A second test kills the active under 32 concurrent writers and checks every acknowledged
//! object.
//!
//! The tenant has a quota policy: after each failover its limits (journaled, replicated) and
//! its usage (rebuilt from the owners' replays) are the same on the new active.
//!
//! The killed node comes back as a standby, so rounds alternate the active.
//! `CRESCENT_HA_OBJECT_ROUNDS` (default 2) and `CRESCENT_HA_OBJECTS` (objects per round,
//! default 120) make it longer.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crescent_client::{ClientOptions, CrescentClient, LeaderSource};
use crescent_owner::{Owner, OwnerConfig};
use crescent_tests::auth::{with_token, DEFAULT_TENANT};
use crescent_tests::binaries::crescent_command;
use crescent_tests::crescentd::log_tail;
use crescent_tests::env_count;
use crescent_tests::ha_pair::{assert_owners_recorded, health, wait_active, wait_gate, HaPair};
use crescent_tests::store_e2e::{check_value, object_sizes, object_value};

/// The HA tests each run two crescentd processes: one at a time, so a 2-core machine gives
/// each the timing it is about.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Objects are kept small so a round stays quick; the content check is what matters here.
const MAX_OBJECT: usize = 256 << 10;
const OWNER_SEGMENT: u64 = 64 << 20;
/// `crescent put` processes per failover round.
const CLI_PUTS_PER_ROUND: usize = 8;

/// One object written by the test: its key, content index and length.
struct Written {
    key: String,
    index: u64,
    len: usize,
}

/// Runs `crescent GLOBALS get KEY -o FILE` and returns the bytes it wrote.
fn cli_get(globals: &[&str], key: &str, dir: &Path) -> Vec<u8> {
    let out_file = dir.join(format!("cli-{}", key.replace('/', "_")));
    let out = crescent_command(globals)
        .args(["get", key, "-o"])
        .arg(&out_file)
        .output()
        .expect("running crescent get");
    assert!(
        out.status.success(),
        "crescent {globals:?} get {key}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let bytes = std::fs::read(&out_file).expect("reading the CLI's output");
    std::fs::remove_file(&out_file).ok();
    bytes
}

/// Runs `crescent GLOBALS put KEY FILE`: a writer process that exits as soon as its put is
/// acknowledged (the owner recorded it before that: docs/rebuild.md).
fn cli_put(globals: &[&str], key: &str, value: &[u8], dir: &Path) {
    let in_file = dir.join(format!("put-{}", key.replace('/', "_")));
    std::fs::write(&in_file, value).expect("writing the value file");
    let out = crescent_command(globals)
        .args(["put", key])
        .arg(&in_file)
        .output()
        .expect("running crescent put");
    assert!(
        out.status.success(),
        "crescent {globals:?} put {key}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::remove_file(&in_file).ok();
}

fn wall_clock_ms() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    since.expect("clock after 1970").as_millis() as i64
}

/// Waits until the journal recorded `usage` (bytes, objects) for the default tenant.
async fn wait_recorded(admin: &CrescentClient, usage: (u64, u64)) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let quota = admin.tenant_quota(DEFAULT_TENANT).await.unwrap();
        let recorded = quota.recorded.map(|r| (r.used_bytes, r.used_objects));
        if recorded == Some(usage) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "usage {usage:?} not recorded: {recorded:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The default tenant's reconciliation made after `after_ms`: the new active's first
/// housekeeping pass once its gate opened (docs/tenants.md, "Journaled usage and
/// reconciliation").
async fn reconciled_after(
    admin: &CrescentClient,
    after_ms: i64,
) -> crescent_wire::tenants::UsageReconciliation {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let quota = admin.tenant_quota(DEFAULT_TENANT).await.unwrap();
        match quota.reconciliation {
            Some(r) if r.at_ms >= after_ms => return r,
            other => assert!(
                Instant::now() < deadline,
                "no reconciliation after the failover: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn check_all(what: &str, written: &[Written], read: &[Vec<u8>]) {
    for (w, got) in written.iter().zip(read) {
        if let Err(e) = check_value(&w.key, w.index, w.len, got) {
            panic!("{what}: {e}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn owners_follow_a_failover_and_every_object_reads_back_byte_identical() {
    let _serial = SERIAL.lock().await;
    let rounds = env_count("CRESCENT_HA_OBJECT_ROUNDS", 2) as usize;
    let per_round = env_count("CRESCENT_HA_OBJECTS", 120) as usize;
    let mut pair = HaPair::start(true).await;

    let (etcd, cluster) = (pair.etcd.clone(), pair.cluster.clone());
    let token = pair.client_token(DEFAULT_TENANT);
    let globals = [
        "--etcd",
        etcd.as_str(),
        "--cluster",
        cluster.as_str(),
        "--token",
        token.as_str(),
    ];
    let mut owners = [
        pair.start_owner("ha-owner-1", OWNER_SEGMENT),
        pair.start_owner("ha-owner-2", OWNER_SEGMENT),
    ];
    let writer = CrescentClient::connect(pair.client_options(DEFAULT_TENANT))
        .await
        .expect("a client following the leader through etcd");
    let admin = CrescentClient::connect(with_token(
        ClientOptions::etcd(&etcd, &cluster),
        Some(pair.admin_token()),
    ))
    .await
    .unwrap();
    let policy = admin
        .set_tenant_quota(DEFAULT_TENANT, Some(1 << 30), Some(100_000))
        .await
        .expect("a quota policy")
        .quota;

    let mut written: Vec<Written> = Vec::new();
    // Of `written`, the puts of CLI processes (counted in their own metrics, not the writer's).
    let mut by_cli = 0usize;
    for round in 0..rounds {
        let active = pair.wait_in_sync().await;
        let survivor = 1 - active;
        let sizes = object_sizes(per_round, round as u64 + 1);
        for (i, len) in sizes.into_iter().enumerate() {
            let len = len.min(MAX_OBJECT);
            let index = (round * per_round + i) as u64;
            let key = format!("r{round}/obj-{i}");
            let out = writer
                .put(&key, &object_value(index, len))
                .await
                .unwrap_or_else(|e| panic!("round {round}: put {key}: {e}"));
            assert!(!out.already_existed && out.replicas == 1, "{key}: {out:?}");
            written.push(Written { key, index, len });
        }
        assert_owners_recorded(&writer, (written.len() - by_cli) as u64);
        // Puts by CLI processes that exit right after their ack: only the owners hold them.
        for i in 0..CLI_PUTS_PER_ROUND {
            let index = (1 << 32) + (round * CLI_PUTS_PER_ROUND + i) as u64;
            let (key, len) = (format!("r{round}/cli-{i}"), 1000 + i * 7919);
            cli_put(&globals, &key, &object_value(index, len), pair.dir.path());
            written.push(Written { key, index, len });
            by_cli += 1;
        }

        // The usage reaches the journal written behind: wait for it, so that the new active
        // has this round's record to reconcile.
        let used_now: usize = written.iter().map(|w| w.len).sum();
        wait_recorded(&admin, (used_now as u64, written.len() as u64)).await;
        let dead_addr = pair.node(active).addr;
        let killed_ms = wall_clock_ms();
        let killed_at = Instant::now();
        pair.node_mut(active).guard.sigkill();

        // The writer was told nothing: its next read follows the failover by itself.
        let first = &written[0];
        let value = writer
            .get(&first.key)
            .await
            .unwrap_or_else(|e| panic!("round {round}: first read after the kill: {e}"));
        check_value(&first.key, first.index, first.len, &value).unwrap();
        eprintln!(
            "round {round}: first object read {:?} after kill -9 of the active",
            killed_at.elapsed()
        );

        let node = pair.node(survivor);
        wait_active(node, Duration::from_secs(15)).await;
        // The first object's owner replayed; the other owner may still be replaying.
        let h = wait_gate(node, "SERVING", Duration::from_secs(20)).await;
        assert_eq!(
            (
                h["gate"].as_str(),
                h["rebuild"]["owners_completed"].as_u64()
            ),
            (Some("SERVING"), Some(2)),
            "round {round}: the gate opens once both owners replayed: {h}; log:\n{}",
            log_tail(&node.log_path, 30)
        );
        assert_eq!(h["rebuild"]["owners_expected"].as_u64(), Some(2), "{h}");
        assert!(
            h["rebuild"]["entries"]["replayed"].as_u64().unwrap_or(0) >= written.len() as u64,
            "round {round}: every object replayed: {h}"
        );

        let mut read = Vec::with_capacity(written.len());
        for w in &written {
            read.push(
                writer
                    .get(&w.key)
                    .await
                    .unwrap_or_else(|e| panic!("round {round}: etcd client get {}: {e}", w.key)),
            );
        }
        check_all("client following etcd", &written, &read);
        let quota = admin.tenant_quota(DEFAULT_TENANT).await.unwrap();
        let used_bytes: usize = written.iter().map(|w| w.len).sum();
        assert_eq!(
            (
                quota.max_bytes,
                quota.policy_version,
                quota.used_objects,
                quota.used_bytes
            ),
            (
                policy.max_bytes,
                policy.policy_version,
                written.len() as u64,
                used_bytes as u64
            ),
            "round {round}: the quota after the failover"
        );
        let r = reconciled_after(&admin, killed_ms).await;
        assert_eq!(
            (r.rebuilt_bytes, r.rebuilt_objects),
            (used_bytes as u64, written.len() as u64),
            "round {round}: everything came back: {r:?}"
        );
        assert_eq!(
            (r.recorded_bytes, r.recorded_objects),
            (r.rebuilt_bytes, r.rebuilt_objects),
            "round {round}: the recorded usage converges with what came back"
        );

        let static_list = format!("{dead_addr},{}", node.addr);
        let fallback = CrescentClient::connect(with_token(
            ClientOptions::servers(&static_list),
            Some(token.clone()),
        ))
        .await
        .unwrap();
        let mut read = Vec::with_capacity(written.len());
        for w in &written {
            read.push(
                fallback
                    .get(&w.key)
                    .await
                    .unwrap_or_else(|e| panic!("round {round}: static-list get {}: {e}", w.key)),
            );
        }
        check_all("client with a static list", &written, &read);
        assert_eq!(fallback.server(), node.addr.to_string());
        assert_eq!(
            fallback
                .metrics()
                .failover()
                .leader_changes(LeaderSource::Static),
            1,
            "the static client moved past the dead node once"
        );

        for w in [&written[0], written.last().unwrap()] {
            let by_etcd = cli_get(&globals, &w.key, pair.dir.path());
            check_value(&w.key, w.index, w.len, &by_etcd).unwrap();
            let by_list = cli_get(
                &["--server", &static_list, "--token", &token],
                &w.key,
                pair.dir.path(),
            );
            check_value(&w.key, w.index, w.len, &by_list).unwrap();
        }
        for o in owners.iter_mut() {
            assert!(
                o.guard.try_exit_status().is_none(),
                "owner {} exited during the failover",
                o.owner_id
            );
        }

        // Spawned from the test's own thread: a child dies with the thread that spawned it
        // (PR_SET_PDEATHSIG), and a blocking-pool thread exits when idle.
        pair.restart_as_standby(active);
    }
    assert!(
        writer
            .metrics()
            .failover()
            .leader_changes(LeaderSource::Etcd)
            >= rounds as u64,
        "the writer followed every failover through etcd"
    );
    eprintln!(
        "{rounds} failover round(s): {} objects on 2 owners read back byte-identical each time",
        written.len()
    );
}

/// One writer of the load test: puts `r{round}/w{writer}/{i}` until `stop`, recording what was
/// acknowledged and counting failures by code.
async fn write_until_stopped(
    client: CrescentClient,
    round: usize,
    writer: usize,
    stop: Arc<AtomicBool>,
) -> (Vec<Written>, BTreeMap<&'static str, u64>) {
    let mut acked = Vec::new();
    let mut failures: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut i = 0u64;
    while !stop.load(Ordering::Acquire) {
        let index = ((round as u64) << 40) | ((writer as u64) << 28) | i;
        let len = 64 + (index.wrapping_mul(2_654_435_761) % 4032) as usize;
        let key = format!("r{round}/w{writer}/{i}");
        i += 1;
        match client.put(&key, &object_value(index, len)).await {
            Ok(_) => acked.push(Written { key, index, len }),
            Err(e) => *failures.entry(e.code_str()).or_default() += 1,
        }
    }
    (acked, failures)
}

/// The first acceptance bullet's objects half: kill -9 of the active under 32 concurrent
/// writers (16 on each of two clients of the default tenant following etcd; two library storage
/// owners, each on a client with its owner token, serve the segments and record every put
/// before it is acknowledged: docs/rebuild.md). The writers keep
/// going through the failover; every put acknowledged before, during or after it reads back
/// byte-identical once the gate opened. `CRESCENT_HA_LOAD_ROUNDS` (default 2; the acceptance
/// run uses 20) alternates the active.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_9_under_32_writers_loses_no_acknowledged_object() {
    let _serial = SERIAL.lock().await;
    let rounds = env_count("CRESCENT_HA_LOAD_ROUNDS", 2) as usize;
    let mut pair = HaPair::start(true).await;
    // Each library owner runs on a client of its own with its owner token; the writers use
    // clients of the default tenant.
    let mut owners = Vec::new();
    let mut writers = Vec::new();
    for id in ["load-owner-1", "load-owner-2"] {
        let options = ClientOptions::etcd(&pair.etcd, &pair.cluster);
        let client = CrescentClient::connect(with_token(options, Some(pair.owner_token(id))))
            .await
            .unwrap();
        let config = OwnerConfig {
            owner_id: Some(id.to_string()),
            size: 256 << 20,
            ..OwnerConfig::default()
        };
        let owner = Owner::start(&client, config).await.unwrap();
        owners.push((client, owner));
        let writer = CrescentClient::connect(pair.client_options(DEFAULT_TENANT));
        writers.push(writer.await.unwrap());
    }
    let token = pair.client_token(DEFAULT_TENANT);

    let mut acked_all: Vec<Written> = Vec::new();
    let mut failures_all: BTreeMap<&'static str, u64> = BTreeMap::new();
    for round in 0..rounds {
        let active = pair.wait_in_sync().await;
        let survivor = 1 - active;
        let stop = Arc::new(AtomicBool::new(false));
        let tasks: Vec<_> = (0..32)
            .map(|w| {
                let client = writers[w % 2].clone();
                tokio::spawn(write_until_stopped(client, round, w, stop.clone()))
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(600)).await;
        let dead_addr = pair.node(active).addr;
        let killed_at = Instant::now();
        pair.node_mut(active).guard.sigkill();
        let node = pair.node(survivor);
        wait_active(node, Duration::from_secs(15)).await;
        // Let the writers run into the gate and through it before stopping them.
        let list = ClientOptions::servers(&format!("{dead_addr},{}", node.addr));
        let reader = CrescentClient::connect(with_token(list, Some(token.clone())))
            .await
            .unwrap();
        let h = wait_gate(node, "SERVING", Duration::from_secs(30)).await;
        assert_eq!(h["rebuild"]["owners_completed"].as_u64(), Some(2), "{h}");
        let opened = killed_at.elapsed();
        tokio::time::sleep(Duration::from_millis(500)).await;
        stop.store(true, Ordering::Release);
        for t in tasks {
            let (acked, failures) = t.await.unwrap();
            acked_all.extend(acked);
            for (code, n) in failures {
                *failures_all.entry(code).or_default() += n;
            }
        }
        let mut read = Vec::with_capacity(acked_all.len());
        for w in &acked_all {
            match reader.get(&w.key).await {
                Ok(v) => read.push(v),
                Err(e) => panic!(
                    "round {round}: get {}: {e}\nsurvivor {} health {:?}; log:\n{}",
                    w.key,
                    node.addr,
                    health(node.addr).await,
                    log_tail(&node.log_path, 40)
                ),
            }
        }
        check_all("acknowledged under load", &acked_all, &read);
        eprintln!(
            "round {round}: gate SERVING {opened:?} after kill -9; {} acknowledged objects \
             verified; failures so far {failures_all:?}",
            acked_all.len()
        );

        // Spawned from the test's own thread: a child dies with the thread that spawned it
        // (PR_SET_PDEATHSIG), and a blocking-pool thread exits when idle.
        pair.restart_as_standby(active);
    }
    // Only failover outcomes: a put interrupted between its put_start and put_end, or one that
    // hit the deadline. Nothing else (no CONFLICT, no checksum or transfer error).
    for code in failures_all.keys() {
        assert!(
            matches!(*code, "FAILOVER_INTERRUPTED" | "UNAVAILABLE" | "NOT_LEADER"),
            "unexpected put failures: {failures_all:?}"
        );
    }
    assert!(acked_all.len() > 100 * rounds, "too little load");
    for (_, owner) in owners.drain(..) {
        owner.shutdown().await.unwrap();
    }
}
