//! HA pair on a real etcd (CRESCENT_TEST_ETCD, started by scripts/test.sh): two crescentd
//! processes, one active and one standby.
//!
//! - kill -9 of the active under 32 concurrent clients issuing journaled commands: the
//!   standby takes over and holds every command acknowledged before the kill;
//! - SIGSTOP of the active until the standby takes over, then SIGCONT: the old active never
//!   acknowledges anything under its old term, restarts itself in place and rejoins as the
//!   in-sync standby of the new active.

use std::path::Path;
use std::time::{Duration, Instant};

use crescent_tests::binaries::optional_workspace_binary;
use crescent_tests::crescentd::{log_tail, CrescentdProcess, Outcome};
use crescent_tests::ha_pair::{
    cluster_name, health, restart_standby as restart_node, start_node as start_ha_node,
    wait_active, wait_pair_in_sync,
};
use crescent_tests::mount_load::MountLoad;

/// These tests drive journaled commands only: HTTP, no RPC fast path.
fn start_node(dir: &Path, name: &str, cluster: &str) -> CrescentdProcess {
    start_ha_node(dir, name, cluster, false)
}

fn restart_standby(dir: &Path, name: &str, cluster: &str) -> CrescentdProcess {
    restart_node(dir, name, cluster, false)
}

/// The HA tests each run two crescentd processes and dozens of clients: one at a time, so a
/// 2-core machine gives each the timing it is about.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_9_of_the_active_under_load_loses_no_acknowledged_command() {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let cluster = cluster_name();
    let mut nodes = [
        start_node(dir.path(), "a", &cluster),
        start_node(dir.path(), "b", &cluster),
    ];
    let active = wait_pair_in_sync(&[&nodes[0], &nodes[1]]).await;
    let standby = 1 - active;
    let client = nodes[active].segments_client(Duration::from_secs(5));

    // 32 clients mount fresh segments until the kill; every acknowledged one must survive.
    let load = MountLoad::start(&client, 32, "seg");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let before_kill = load.acked_count();
    let killed_at = Instant::now();
    nodes[active].guard.sigkill();
    let acked = load.stop().await;
    assert!(
        before_kill > 50,
        "too little load before the kill: {before_kill}"
    );

    wait_active(&nodes[standby], Duration::from_secs(15)).await;
    let new_client = nodes[standby].segments_client(Duration::from_secs(5));
    // the first successful write on the new active
    loop {
        match new_client.mount("owner-x", "after-failover", 1 << 20).await {
            Outcome::Acked => break,
            other => {
                assert!(killed_at.elapsed() < Duration::from_secs(20), "{other:?}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    eprintln!(
        "failover: first successful write {:?} after kill -9 ({} commands acknowledged before)",
        killed_at.elapsed(),
        acked.len()
    );
    let present = new_client.assert_listed(&acked, "after failover").await;
    assert!(present.contains("after-failover"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paused_active_is_deposed_and_acknowledges_nothing_under_its_old_term() {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let cluster = cluster_name();
    let mut nodes = [
        start_node(dir.path(), "a", &cluster),
        start_node(dir.path(), "b", &cluster),
    ];
    let active = wait_pair_in_sync(&[&nodes[0], &nodes[1]]).await;
    let standby = 1 - active;
    let old = nodes[active].segments_client(Duration::from_secs(3));
    assert!(matches!(
        old.mount("o", "before-pause", 1 << 20).await,
        Outcome::Acked
    ));

    nodes[active].guard.signal(libc::SIGSTOP);
    wait_active(&nodes[standby], Duration::from_secs(15)).await;
    let new = nodes[standby].segments_client(Duration::from_secs(3));
    assert!(matches!(
        new.mount("o", "on-new-active", 1 << 20).await,
        Outcome::Acked
    ));

    // Requests queued at the old active while it was stopped, and sent right after SIGCONT,
    // must never be acknowledged.
    let queued = {
        let old = old.clone();
        tokio::spawn(async move { old.mount("o", "stale-write", 1 << 20).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    nodes[active].guard.signal(libc::SIGCONT);
    let after = old.mount("o", "stale-write-2", 1 << 20).await;
    assert!(
        !matches!(after, Outcome::Acked),
        "the deposed active acknowledged a write"
    );
    assert!(
        !matches!(queued.await.unwrap(), Outcome::Acked),
        "the deposed active acknowledged a queued write"
    );
    // The deposed active re-executes itself in place (same pid, no supervisor) and rejoins as
    // the standby of the new active: it catches up (a tail it alone held is rewound, again in
    // place) until the new active marks it in sync.
    let rejoined = tokio::time::timeout(
        Duration::from_secs(30),
        wait_pair_in_sync(&[&nodes[0], &nodes[1]]),
    )
    .await
    .unwrap_or_else(|_| {
        panic!(
            "the deposed node did not rejoin as an in-sync standby; log:\n{}",
            log_tail(&nodes[active].log_path, 40)
        )
    });
    assert_eq!(rejoined, standby, "the new active stays active");
    assert!(
        nodes[active].guard.try_exit_status().is_none(),
        "the deposed node exited instead of restarting in place"
    );
    let log = std::fs::read_to_string(&nodes[active].log_path).unwrap();
    assert!(
        log.contains("restarting in place to rejoin as a standby"),
        "no in-place restart in the log:\n{}",
        log_tail(&nodes[active].log_path, 40)
    );
    let old_health = health(nodes[active].addr)
        .await
        .expect("the old active answers");
    assert_eq!(old_health["role"], "standby", "{old_health}");
    let listed = new.list().await.unwrap();
    let ids: Vec<_> = listed
        .segments
        .iter()
        .map(|s| s.segment_id.as_str())
        .collect();
    assert!(ids.contains(&"before-pause") && ids.contains(&"on-new-active"));
    assert!(!ids.iter().any(|s| s.starts_with("stale-write")), "{ids:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn alternating_kill_9_rounds_lose_no_acknowledged_command() {
    let _serial = SERIAL.lock().await;
    let rounds: usize = std::env::var("CRESCENT_HA_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let dir = tempfile::tempdir().unwrap();
    let cluster = cluster_name();
    let names = ["a", "b"];
    let mut nodes = [
        Some(start_node(dir.path(), "a", &cluster)),
        Some(start_node(dir.path(), "b", &cluster)),
    ];
    let mut acked_all: Vec<String> = Vec::new();
    let mut failovers = Vec::new();
    let mut last_active = None;
    for round in 0..rounds {
        let active = {
            let pair: Vec<&CrescentdProcess> = nodes.iter().map(|n| n.as_ref().unwrap()).collect();
            wait_pair_in_sync(&pair).await
        };
        if let Some(prev) = last_active {
            // the survivor of the last round is the active now: each round kills the other node
            assert_eq!(prev, active, "round {round}: the active alternates");
        }
        let standby = 1 - active;
        let client = nodes[active]
            .as_ref()
            .unwrap()
            .segments_client(Duration::from_secs(5));
        let load = MountLoad::start(&client, 32, &format!("r{round}"));
        tokio::time::sleep(Duration::from_millis(400)).await;
        let killed_at = Instant::now();
        nodes[active].as_mut().unwrap().guard.sigkill();
        acked_all.extend(load.stop().await);
        let survivor = nodes[standby].as_ref().unwrap();
        wait_active(survivor, Duration::from_secs(15)).await;
        let new_client = survivor.segments_client(Duration::from_secs(5));
        loop {
            match new_client
                .mount("owner-x", &format!("after-{round}"), 1 << 20)
                .await
            {
                Outcome::Acked => break,
                other => {
                    assert!(killed_at.elapsed() < Duration::from_secs(20), "{other:?}");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
        failovers.push(killed_at.elapsed());
        acked_all.push(format!("after-{round}"));
        new_client
            .assert_listed(&acked_all, &format!("round {round}"))
            .await;
        nodes[active] = None;
        // Spawned from the test's own thread: a child dies with the thread that spawned it
        // (PR_SET_PDEATHSIG), and a blocking-pool thread exits when idle.
        nodes[active] = Some(restart_standby(dir.path(), names[active], &cluster));
        last_active = Some(standby);
    }
    let mut sorted = failovers.clone();
    sorted.sort();
    eprintln!(
        "{rounds} rounds: failover (kill -9 to first successful write) median {:?}, max {:?}; {} acknowledged commands checked",
        sorted[sorted.len() / 2],
        sorted[sorted.len() - 1],
        acked_all.len()
    );
    // Both data dirs: every chain verifies, and one journal is a prefix of the other.
    let active = {
        let pair: Vec<&CrescentdProcess> = nodes.iter().map(|n| n.as_ref().unwrap()).collect();
        wait_pair_in_sync(&pair).await
    };
    for n in nodes.iter_mut() {
        let g = &mut n.as_mut().unwrap().guard;
        g.signal(libc::SIGTERM);
        g.wait();
    }
    let _ = active;
    if let Some(replay) = optional_workspace_binary("crescent-replay") {
        for name in names {
            let out = std::process::Command::new(&replay)
                .arg("verify")
                .arg(dir.path().join(name))
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "verify {name}: {}",
                String::from_utf8_lossy(&out.stdout)
            );
        }
        let out = std::process::Command::new(&replay)
            .args(["diff", "--json"])
            .arg(dir.path().join("a"))
            .arg(dir.path().join("b"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "diff: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
}
