//! Crash windows of a cold device on a storage owner: crescentd SIGKILLed at each of
//! its own crash points of an offload and a reclaim (`cold.<stage>_<command>`), and the owner
//! SIGKILLed right after its payload delete (`owner_cold.after_delete`; docs/testing.md).
//! After the restart the owner registers again, reconciliation converges (no operation or
//! reclaim left active, nothing reserved), the device's usage equals the sum of its live
//! materialized lengths and matches the payload files on the owner, and every object reads
//! back byte-identical.
//!
//! crescentd runs without an embedded segment, so every hot replica lives in the owner's
//! segment and survives a crescentd restart (the owner replays it): what a window may lose is
//! only what the cold tier itself is responsible for.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::cold::{payload, Node};
use common::cold_owner::{
    evict_hot, owner_device, payload_files, start_device_owner, usage, wait_healthy, OWNER_ID,
};
use common::{DirNode, Proc};

/// No embedded segment; crescentd's own device takes no offload, so placement picks the
/// owner's.
const CONFIG: &str = "[store]\nembedded_segment_bytes = 0\n\n\
                      [cold]\nschedulable = false\nhealth_probe_interval_ms = 200\n";

/// What the window interrupts.
#[derive(Debug, Clone, Copy)]
enum Interrupted {
    /// `crescent offload k`.
    Offload,
    /// `crescent rm --force k` of a materialized `k`.
    Reclaim,
}

/// Which process dies, and where.
#[derive(Debug, Clone, Copy)]
enum Victim {
    /// crescentd, at `CRESCENT_CRASH_AT=<point>`.
    Crescentd(&'static str),
    /// The owner, at `CRESCENT_CRASH_AT=<point>`.
    Owner(&'static str),
}

/// What `k` is once converged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyAfter {
    /// Hot only (the offload was undone).
    Hot,
    /// Materialized on the owner device.
    Materialized,
    /// Deleted (its reclaim finished).
    Deleted,
}

struct Window {
    victim: Victim,
    interrupted: Interrupted,
    expect: KeyAfter,
}

const WINDOWS: &[Window] = &[
    Window {
        victim: Victim::Crescentd("cold.after_reserve"),
        interrupted: Interrupted::Offload,
        expect: KeyAfter::Hot,
    },
    Window {
        victim: Victim::Crescentd("cold.before_record_payload_written"),
        interrupted: Interrupted::Offload,
        expect: KeyAfter::Hot,
    },
    Window {
        victim: Victim::Crescentd("cold.after_record_payload_written"),
        interrupted: Interrupted::Offload,
        expect: KeyAfter::Hot,
    },
    Window {
        victim: Victim::Crescentd("cold.after_commit_route"),
        interrupted: Interrupted::Offload,
        expect: KeyAfter::Materialized,
    },
    Window {
        victim: Victim::Crescentd("cold.after_commit_usage"),
        interrupted: Interrupted::Offload,
        expect: KeyAfter::Materialized,
    },
    // crescentd dies inside an unacknowledged remove: the directory's removal of `k` (in
    // memory) is lost and the release did not reach the owner yet, so the owner replays `k`
    // (hot, the same put); the journaled cold route was dropped with PlanReclaim, so
    // reconciliation finishes the reclaim. `k` stays readable, its cold copy is gone.
    Window {
        victim: Victim::Crescentd("cold.after_plan_reclaim"),
        interrupted: Interrupted::Reclaim,
        expect: KeyAfter::Hot,
    },
    Window {
        victim: Victim::Crescentd("cold.after_record_backend_deleted"),
        interrupted: Interrupted::Reclaim,
        expect: KeyAfter::Hot,
    },
    Window {
        victim: Victim::Owner("owner_cold.after_delete"),
        interrupted: Interrupted::Reclaim,
        expect: KeyAfter::Deleted,
    },
];

fn start_node(dir: &Path, env: &[(&str, &str)], addr: Option<std::net::SocketAddr>) -> Node {
    Node {
        inner: DirNode::start_at(dir, Some(CONFIG), env, addr),
    }
}

/// Puts `key` (into the owner's segment: crescentd has none) and waits until the owner
/// recorded the writer's notice of it, so the owner's replay brings the object back after a
/// crescentd restart (a put the owner has not recorded yet is not rebuilt: docs/rebuild.md).
fn put_noticed(node: &Node, key: &str, data: &[u8]) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = common::client_of(&node.s());
    rt.block_on(async {
        client.put(key, data).await.unwrap();
        let started = Instant::now();
        while client.metrics().rebuild().count("notices", "recorded") == 0 {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the owner did not record the notice of {key}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
}

/// Waits for `proc` to die of SIGKILL (its armed fault point).
fn wait_sigkilled(proc: &mut Proc, what: &str) {
    use std::os::unix::process::ExitStatusExt;
    let started = Instant::now();
    let status = loop {
        if let Some(status) = proc.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{what} did not reach its kill point"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{what}");
}

/// Waits until no re-promotion is queued and the owner acknowledged every release, before the
/// setup's deliberate crescentd kill, so that every window starts from the same state (`stay`
/// cold-only, not replayed back as a hot replica).
fn settle(node: &Node) {
    node.wait_for("promotions and releases to settle", || {
        node.metric("crescent_cold_promotion_queue_depth") == 0.0
            && node.metric("crescent_store_releases_pending") == 0.0
    });
}

/// Waits until the owner device is healthy with no reclaim or reservation left and exactly
/// `live_objects` operations still active: a materialized object's operation stays active
/// (`usage_committed`) until its reclaim releases it; [`check_converged`] checks their states.
fn wait_converged(node: &Node, label: &str, live_objects: u64) {
    node.wait_for(&format!("{label}: reconciliation to converge"), || {
        let d = owner_device(node);
        d["health"] == "healthy"
            && d["busy"].is_null()
            && d["active_operations"] == live_objects
            && d["active_reclaims"] == 0
            && d["reserved"] == 0
    });
}

/// A cold-only object `stay` on the owner device, made before the kill point is armed (it
/// fires at the first matching command); crescentd is then SIGKILLed and restarted with
/// `env` at the same address, and the owner (still running) registers again.
fn with_cold_only_object(dir: &Path, stay: &[u8], env: &[(&str, &str)]) -> (Node, Proc) {
    let node = start_node(dir, &[], None);
    let owner = start_device_owner(&node, dir, &[]);
    wait_healthy(&node);
    node.put("stay", stay);
    let stat = node.ok(&["offload", "stay"], None);
    assert_eq!(stat["cold"]["device_id"], "ob", "{stat}");
    evict_hot(&node, "stay");
    settle(&node);
    let addr = node.inner.addr;
    node.kill();
    let node = start_node(dir, env, Some(addr));
    wait_healthy(&node);
    (node, owner)
}

fn run(window: &Window) {
    let label = format!("{:?} during {:?}", window.victim, window.interrupted);
    let dir = tempfile::tempdir().unwrap();
    let stay = payload(150_000, 3);
    let data = payload(123_457, 9);
    let crescentd_env: Vec<(&str, &str)> = match window.victim {
        Victim::Crescentd(point) => vec![(crescent_crash::CRASH_AT_ENV, point)],
        Victim::Owner(_) => Vec::new(),
    };
    let (node, mut owner) = with_cold_only_object(dir.path(), &stay, &crescentd_env);
    if let Victim::Owner(point) = window.victim {
        drop(owner);
        owner = start_device_owner(&node, dir.path(), &[(crescent_crash::CRASH_AT_ENV, point)]);
        wait_healthy(&node);
    }
    put_noticed(&node, "k", &data);
    let failing: &[&str] = match window.interrupted {
        Interrupted::Offload => &["offload", "k"],
        Interrupted::Reclaim => {
            node.ok(&["offload", "k"], None);
            assert_eq!(usage(&node).0, (stay.len() + data.len()) as u64, "{label}");
            &["rm", "--force", "k"]
        }
    };
    let (code, v) = node.cli(failing, None);
    match window.victim {
        Victim::Crescentd(_) => assert_ne!(code, 0, "{label}: crescentd died: {v}"),
        // The remove is committed before the payload delete; the reclaim the silent owner
        // leaves unfinished waits for reconciliation (the remove itself succeeds).
        Victim::Owner(_) => assert!(
            code == 0 || v["error"]["code"] == "UNAVAILABLE",
            "{label}: {v}"
        ),
    }

    let addr = node.inner.addr;
    let node = match window.victim {
        Victim::Crescentd(_) => {
            node.wait_killed();
            start_node(dir.path(), &[], Some(addr))
        }
        Victim::Owner(point) => {
            wait_sigkilled(&mut owner, point);
            // The window itself: k's payload is deleted on the owner, crescentd has not heard
            // of it, so the reclaim is active and k's operation (still usage_committed until
            // the reclaim releases it) still counts as used.
            assert_eq!(payload_files(dir.path()).len(), 1, "{label}");
            let d = owner_device(&node);
            assert_eq!(d["active_reclaims"], 1, "{label}: {d}");
            let both = (stay.len() + data.len()) as u64;
            assert_eq!(usage(&node), (both, 0, both), "{label}");
            owner = start_device_owner(&node, dir.path(), &[]);
            node
        }
    };
    let live_objects = if window.expect == KeyAfter::Materialized {
        2
    } else {
        1
    };
    wait_healthy(&node);
    wait_converged(&node, &label, live_objects);
    check_converged(&node, dir.path(), &label, &stay, &data, window.expect);

    // A second crescentd restart changes nothing (reconciliation is idempotent).
    // No settling here: `check_converged` just evicted k and read `stay`, whose background
    // promotion may reuse k's freed range before the owner heard of the release. The owner's
    // replay must then drop k's stale entry (its bytes no longer match: docs/rebuild.md,
    // "Owners"), and k must read back from its cold copy.
    let before = usage(&node);
    node.kill();
    let node = start_node(dir.path(), &[], Some(addr));
    wait_converged(&node, &label, live_objects);
    assert_eq!(usage(&node), before, "{label}: after a second restart");
    check_converged(&node, dir.path(), &label, &stay, &data, window.expect);
    drop(owner);
}

/// Usage = live lengths = the payload files' content; `stay` and `k` read back.
fn check_converged(
    node: &Node,
    dir: &Path,
    label: &str,
    stay: &[u8],
    data: &[u8],
    expect: KeyAfter,
) {
    // The journaled owner, listed even across crescentd restarts.
    let row = owner_device(node);
    assert_eq!(row["owner_id"], OWNER_ID, "{label}: {row}");
    let (used, reserved, live) = usage(node);
    let k_cold = if expect == KeyAfter::Materialized {
        data.len() as u64
    } else {
        0
    };
    let log = node.log();
    assert_eq!(reserved, 0, "{label}");
    assert_eq!(used, live, "{label}: used vs live materialized\n{log}");
    assert_eq!(used, stay.len() as u64 + k_cold, "{label}\n{log}");
    let files = payload_files(dir);
    let expected_files = if k_cold > 0 { 2 } else { 1 };
    assert_eq!(files.len(), expected_files, "{label}: {files:?}");

    let stay_stat = node.ok(&["stat", "stay"], None);
    assert_eq!(
        stay_stat["cold"]["op_state"], "usage_committed",
        "{label}: {stay_stat}"
    );
    assert_eq!(node.get("stay").unwrap(), stay, "{label}: stay");
    let stat = node.cli(&["stat", "k"], None);
    match expect {
        KeyAfter::Deleted => {
            assert_ne!(stat.0, 0, "{label}: k deleted: {}", stat.1);
            assert!(node.get("k").is_err(), "{label}: k deleted");
        }
        KeyAfter::Hot => {
            assert_eq!(stat.0, 0, "{label}: {}\n{log}", stat.1);
            let cold = &stat.1["cold"];
            assert!(cold.is_null(), "{label}: k has no cold backing: {}", stat.1);
            assert_eq!(node.get("k").unwrap(), data, "{label}: k");
        }
        KeyAfter::Materialized => {
            assert_eq!(
                stat.1["cold"]["state"], "materialized",
                "{label}: {}",
                stat.1
            );
            assert_eq!(stat.1["cold"]["device_id"], "ob", "{label}");
            assert_eq!(stat.1["cold"]["op_state"], "usage_committed", "{label}");
            assert_eq!(node.get("k").unwrap(), data, "{label}: k");
            // The cold copy itself, read remotely through the owner.
            evict_hot(node, "k");
            let (code, out, err) =
                common::crescent(&node.s(), &["--no-local-cold-restore", "get", "k"], None);
            assert_eq!(code, 0, "{label}: {err}");
            assert_eq!(out, data, "{label}: k from the owner device");
        }
    }
}

#[test]
fn owner_device_crash_windows_converge() {
    let only = std::env::var("CRASH_WINDOW").ok();
    for window in WINDOWS {
        if let Some(only) = &only {
            if !format!("{:?}", window.victim).contains(only.as_str()) {
                continue;
            }
        }
        run(window);
    }
}
