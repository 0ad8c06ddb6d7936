//! An HA failover while the storage owner holding the cold device is DOWN, on a real etcd
//! (CRESCENT_TEST_ETCD, started by scripts/test.sh; helpers: `crescent_tests::ha_cold_owner`).
//!
//! The new active loads the owner device from the replicated journal with nobody to answer
//! for it: the device waits for its owner (not healthy, no placement), its cold-only objects
//! never yield a wrong byte, and the rebuild gate opens DEGRADED after its timeout (2 s here). Once the
//! owner is back the device is reconciled through it, and the cold-only objects read back
//! byte-identical and the device's usage converges to the live lengths. Twice: the owner
//! stopped (SIGSTOP) across the failover and resumed (same incarnation, its hot replicas
//! kept), then killed (SIGKILL) and restarted (a new incarnation with an empty segment: its
//! hot-only object is gone, and an object that had a hot replica there and a cold copy is
//! cold-only on the new active).

use std::time::Duration;

use crescent_client::CrescentClient;
use crescent_tests::auth::DEFAULT_TENANT;
use crescent_tests::crescentd::{log_tail, CrescentdProcess};
use crescent_tests::ha_cold_owner::{
    check_objects, check_usage, crescent, owner_row, payload_files, put_objects, settle,
    setup_with, start_owner, wait_converged, Object, Setup, OWNER_ID,
};
use crescent_tests::ha_pair::{wait_active, wait_gate};

/// Both nodes: object operations wait at most 2 s for the owners' replay after a failover
/// (then the gate opens DEGRADED), so the objects can be read while the owner is down.
const GATE_TIMEOUT: &str = "\n[store]\nrebuild_degraded_timeout_secs = 2\n";

/// SIGKILLs the active while the owner is down, waits for the other node to take over and
/// checks it there ([`check_owner_down`]); returns the new active's index.
async fn fail_over(s: &mut Setup, active: usize, objects: &[Object]) -> usize {
    s.pair.node_mut(active).guard.sigkill();
    let survivor = 1 - active;
    wait_active(s.pair.node(survivor), Duration::from_secs(30)).await;
    check_owner_down(&s.client, s.pair.node(survivor), objects).await;
    survivor
}

/// While the owner is down: the device is listed on `node` with its owner but is not
/// healthy, and every cold-only object either reads back byte-identical (a local restore
/// from the owner's directory, while the device is still only degraded) or is not served
/// (UNAVAILABLE once the device is unavailable: the client retries it, so a read still
/// retrying after [`READ_WAIT`] counts as not served); never a wrong byte.
async fn check_owner_down(client: &CrescentClient, node: &CrescentdProcess, objects: &[Object]) {
    wait_gate(node, "DEGRADED", Duration::from_secs(30)).await;
    let row = owner_row(node);
    assert_eq!(row["owner_id"], OWNER_ID, "{row}");
    assert_ne!(row["health"], "healthy", "{row}");
    for o in objects.iter().filter(|o| o.cold_only) {
        match tokio::time::timeout(READ_WAIT, client.get(&o.key)).await {
            Ok(Ok(got)) => assert!(got == o.data, "{}: wrong bytes, owner down", o.key),
            Ok(Err(e)) => assert!(
                e.to_string().contains("UNAVAILABLE"),
                "{}: {e}\n{}",
                o.key,
                log_tail(&node.log_path, 30)
            ),
            Err(_) => {}
        }
    }
}

/// How long a read is given while the owner is down.
const READ_WAIT: Duration = Duration::from_secs(2);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cold_only_objects_survive_a_failover_while_their_owner_is_down() {
    let mut s = setup_with(GATE_TIMEOUT).await;
    let dir = s.pair.dir.path().to_path_buf();
    let active = s.pair.wait_in_sync().await;
    wait_converged(s.pair.node(active), "start", 0);
    // 5 objects: 4 materialized, 3 of them cold-only; 1 hot only.
    let mut objects = put_objects(&mut s, active, "d", 5, 4, 3).await;
    settle(&s, s.pair.node(active)).await;
    let files_before = payload_files(&dir);

    // 1. The owner stopped across the failover, then resumed.
    s.owner.guard.signal(libc::SIGSTOP);
    let survivor = fail_over(&mut s, active, &objects).await;
    s.owner.guard.signal(libc::SIGCONT);
    // The gate opens SERVING when the owner's replay completes, or stays DEGRADED when the
    // new active expired the silent owner meanwhile (its replay after re-registering still
    // brings the hot replicas back): either serves, so the checks below do not depend on it.
    check_returned(&s, survivor, "owner resumed", &files_before, &objects).await;

    // 2. The owner killed before the failover, restarted after it.
    s.pair.restart_as_standby(active);
    let active = survivor;
    settle(&s, s.pair.node(active)).await;
    s.owner.guard.sigkill();
    let survivor = fail_over(&mut s, active, &objects).await;
    s.owner = start_owner(&s.pair);
    let node = s.pair.node(survivor);
    // The owner's memory died with it: the hot-only object is gone, and the materialized
    // object whose hot replica was there is now cold-only.
    let lost: Vec<String> = objects
        .iter()
        .filter(|o| !o.materialized)
        .map(|o| o.key.clone())
        .collect();
    objects.retain(|o| o.materialized);
    for o in &mut objects {
        o.cold_only = true;
    }
    check_returned(&s, survivor, "owner restarted", &files_before, &objects).await;
    let token = node.client_token(DEFAULT_TENANT);
    for key in &lost {
        let server = ["--server", &node.addr.to_string()];
        let (code, out, err) = crescent(&server, token.as_deref(), &["get", key]);
        assert_ne!(code, 0, "{key}: its only replica died with the owner");
        assert!(!err.contains("UNAUTHENTICATED"), "{key}: {err}");
        assert!(out.is_empty(), "{key}: {err}");
    }
}

/// Once the owner is back: the device on node `i` converges (the materialized objects' 4
/// operations live), its usage is the live lengths, the owner's payload files are those of
/// before the failover, and every object reads back byte-identical both ways.
async fn check_returned(
    s: &Setup,
    i: usize,
    label: &str,
    files_before: &[std::path::PathBuf],
    objects: &[Object],
) {
    let node = s.pair.node(i);
    let dir = s.pair.dir.path();
    wait_converged(node, label, 4);
    check_usage(node, dir, objects);
    assert_eq!(payload_files(dir), files_before, "{label}: payload files");
    check_objects(&s.client, node, objects).await;
}
