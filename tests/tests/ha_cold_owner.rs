//! A cold device on a storage owner across an HA failover, on a real etcd (CRESCENT_TEST_ETCD,
//! started by scripts/test.sh): two crescentd and one `crescent owner --etcd --cluster
//! --cold-device ob=DIR` that follows the leader. crescentd's own device takes no offload and
//! the nodes have no embedded segment, so every hot replica is in the owner's segment and
//! every cold payload in the owner's directory.
//!
//! (Helpers: `crescent_tests::ha_cold_owner`.) The device is journaled (`Configure`, `AssignOwner`): after a SIGKILL of the active, the
//! new active lists it with its owner, the owner's poll (answered NOT_FOUND there) makes it
//! register again, the device is reconciled and healthy, its usage is the live lengths, and
//! every object reads back byte-identical, cold-only ones both locally and through the owner.
//! A second test kills the active in the middle of cold work: an offload whose write the
//! (stopped) owner has not taken, and a reclaim whose payload delete has not reached it.

use std::time::{Duration, Instant};

use crescent_tests::auth::DEFAULT_TENANT;
use crescent_tests::env_count;
use crescent_tests::ha_cold_owner::{
    check_objects, check_usage, crescent, evict_hot, fail_over, json_ok, owner_row, payload,
    payload_files, put_objects, remove, settle, setup, wait_converged, wait_for, Object, Setup,
    DEVICE, OWNER_ID,
};
use crescent_tests::ha_pair::{wait_active, wait_gate};

/// The HA tests each run two crescentd processes: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

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
        let token = node.client_token(DEFAULT_TENANT);
        let server = ["--server", &node.addr.to_string()];
        let (code, _, err) = crescent(&server, token.as_deref(), &["get", &gone.key]);
        assert!(
            code != 0 && err.contains("NOT_FOUND"),
            "{} was deleted: {err}",
            gone.key
        );
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
async fn fail_over_during(s: &mut Setup, active: usize, token: String, args: &[&str]) -> usize {
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
        crescent(&[], Some(&token), &full)
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
    let admin = s.pair.admin_token();
    let active = fail_over_during(&mut s, active, admin, &["offload", &h]).await;
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
    let client = s.pair.client_token(DEFAULT_TENANT);
    let active = fail_over_during(&mut s, active, client, &["rm", &c0.key]).await;
    let node = s.pair.node(active);
    wait_converged(node, "reclaim cut", 2);
    let token = node.client_token(DEFAULT_TENANT);
    let server = ["--server", &node.addr.to_string()];
    let (code, _, err) = crescent(&server, token.as_deref(), &["get", &c0.key]);
    assert!(
        code != 0 && err.contains("NOT_FOUND"),
        "{} was deleted: {err}",
        c0.key
    );
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
        let force = ["--json", "rm", "--force", &key];
        crescent(&["--server", &addr], token.as_deref(), &force)
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
    let token = node.client_token(DEFAULT_TENANT);
    let (code, _, err) = crescent(&server, token.as_deref(), &["get", &c1.key]);
    assert!(
        code != 0 && err.contains("NOT_FOUND"),
        "{} was deleted: {err}",
        c1.key
    );
    check_usage(node, &dir, &objects);
    check_objects(&s.client, node, &objects).await;
}
