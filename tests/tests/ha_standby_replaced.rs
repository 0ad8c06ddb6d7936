//! A standby replaced under load, then kill -9 of the active (docs/ha.md, "Which acks count"),
//! on a real etcd (CRESCENT_TEST_ETCD, started by scripts/test.sh).
//!
//! The in-sync standby is paused (SIGSTOP) and a third node with an empty journal connects in
//! its place while 16 clients keep mounting segments. The new standby's acks may count only
//! once the etcd marker names it, which also takes the paused one's right to take over away.
//! Then the active is killed and the paused node resumed: the winner must hold every
//! acknowledged mount. (When the marker kept naming the paused node while the new one's acks
//! counted, the paused node won without the writes acknowledged on the other's word.)

use std::time::{Duration, Instant};

use crescent_tests::crescentd::{log_tail, CrescentdProcess, Outcome};
use crescent_tests::ha_pair::{cluster_name, health, start_node, wait_pair_in_sync};
use crescent_tests::mount_load::MountLoad;

/// Waits until `active` reports a standby other than `old` connected and in sync.
async fn wait_new_standby_in_sync(active: &CrescentdProcess, old: &str) -> String {
    let started = Instant::now();
    let mut last = serde_json::Value::Null;
    loop {
        if let Some(h) = health(active.addr).await {
            last = h["ha"].clone();
            let ha = &h["ha"];
            if ha["standby"].as_str().is_some_and(|s| s != old)
                && ha["standby_connected"] == true
                && ha["standby_in_sync"] == true
            {
                assert_eq!(ha["marker_standby"], ha["standby"], "{ha}");
                return ha["standby"].as_str().unwrap().to_string();
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the new standby never got in sync: {last}; active log:\n{}",
            ha_lines(&active.log_path)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The log lines of `path` about replication and the marker (not the load's mounts).
fn ha_lines(path: &std::path::Path) -> String {
    let log = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("standby") || l.contains("marker") || l.contains("replication"))
        .collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// Waits until one of `nodes` is active; returns its index.
async fn wait_any_active(nodes: &[&CrescentdProcess]) -> usize {
    let started = Instant::now();
    loop {
        for (i, n) in nodes.iter().enumerate() {
            if health(n.addr).await.is_some_and(|h| h["role"] == "active") {
                return i;
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no node took over; logs:\n{}\n---\n{}",
            log_tail(&nodes[0].log_path, 30),
            log_tail(&nodes[1].log_path, 30)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_standby_replaced_under_load_then_kill_9_of_the_active_loses_no_acknowledged_command() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = cluster_name();
    let mut nodes = vec![
        start_node(dir.path(), "a", &cluster, false),
        start_node(dir.path(), "b", &cluster, false),
    ];
    let active = wait_pair_in_sync(&[&nodes[0], &nodes[1]]).await;
    let old_standby = 1 - active;
    let old_name = health(nodes[active].addr).await.unwrap()["ha"]["standby"]
        .as_str()
        .expect("a standby name")
        .to_string();
    let client = nodes[active].segments_client(Duration::from_secs(5));

    // 16 clients mount fresh segments until the kill; every acknowledged one must survive.
    let load = MountLoad::start(&client, 16, "seg");
    tokio::time::sleep(Duration::from_millis(500)).await;

    // The in-sync standby stops answering; a new node connects in its place under load.
    nodes[old_standby].guard.signal(libc::SIGSTOP);
    nodes.push(start_node(dir.path(), "c", &cluster, false));
    let new_name = wait_new_standby_in_sync(&nodes[active], &old_name).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before_kill = load.acked_count();

    nodes[active].guard.sigkill();
    let acked = load.stop().await;
    nodes[old_standby].guard.signal(libc::SIGCONT);
    assert!(
        before_kill > 20,
        "too little load before the kill: {before_kill}"
    );

    let candidates = [&nodes[old_standby], &nodes[2]];
    let winner = candidates[wait_any_active(&candidates).await];
    let winner_name = health(winner.addr).await.unwrap()["ha"]["node"].clone();
    assert_eq!(
        winner_name, new_name,
        "only the standby the marker names in sync may take over"
    );
    let new_client = winner.segments_client(Duration::from_secs(5));
    // The first successful write on the new active (it serves once its gate opens).
    let started = Instant::now();
    while !matches!(
        new_client.mount("owner-x", "after-failover", 1 << 20).await,
        Outcome::Acked
    ) {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no write accepted"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    new_client.assert_listed(&acked, "after failover").await;
}
