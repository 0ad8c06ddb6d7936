//! A cold device on a storage owner (`crescent owner --cold-device ID=DIR`): crescentd places
//! and drives the offload, the owner performs the IO in its own directory; restores read it
//! (locally on this host, or remotely through the owner); a reclaim deletes there; and an
//! owner SIGKILLed right after its payload write is reconciled when it comes back.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::cold::{payload, Node};
use common::cold_owner::{
    device_dir, evict_hot, owner_device, payload_files, start_device_owner, usage, wait_healthy,
};
use common::DirNode;

/// crescentd's own device takes no offload, so placement picks the owner's.
const CONFIG: &str = "[cold]\nschedulable = false\nhealth_probe_interval_ms = 200\n";

fn start_node(dir: &Path) -> Node {
    Node {
        inner: DirNode::start_at(dir, Some(CONFIG), &[], None),
    }
}

#[test]
fn an_owner_device_offloads_restores_and_reclaims_through_its_owner() {
    let dir = tempfile::tempdir().unwrap();
    let node = start_node(dir.path());
    // Put before the owner exists, so the hot replica is in crescentd's own segment.
    let data = payload(300_000, 5);
    node.put("k", &data);
    let _owner = start_device_owner(&node, dir.path(), &[]);
    wait_healthy(&node);
    let d = owner_device(&node);
    assert_eq!(d["capacity"].as_u64(), Some(16 << 20));
    assert_eq!(d["owner_id"], "node-b", "{d}");
    let list = node.ok(&["cold", "ls"], None);
    let own = list["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["id"] == "local0");
    assert!(own.is_some_and(|d| d.get("owner_id").is_none()), "{list}");
    assert!(device_dir(dir.path()).join("DEVICE").exists());

    let stat = node.ok(&["offload", "k"], None);
    assert_eq!(stat["cold"]["device_id"], "ob", "{stat}");
    assert_eq!(stat["cold"]["op_state"], "usage_committed", "{stat}");
    let file = device_dir(dir.path()).join(stat["cold"]["locator"].as_str().unwrap());
    assert!(file.exists(), "the owner wrote {}", file.display());
    assert_eq!(usage(&node), (data.len() as u64, 0, data.len() as u64));

    evict_hot(&node, "k");
    // Local restore: this host sees the owner's directory, so the reader is named the backing
    // and reads it itself (checked by the client's own counters: no fallback).
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = common::client_of(&node.s());
    assert_eq!(rt.block_on(client.get("k")).unwrap(), data);
    let restore = client.local_cold_restore();
    assert_eq!((restore.count("local"), restore.count("fallback")), (1, 0));
    assert_eq!(node.metric("crescent_cold_backing_refs_total"), 1.0);
    drop(client);
    // Remote: once cold-only again, crescentd asks the owner to read and verify: into the
    // owner's staging region, which the reader reads from (`cold_owner_restore.rs`), or
    // inline (checked again on arrival).
    node.wait_for("the promotion", || node.replicas("k") == 1);
    evict_hot(&node, "k");
    let reads = |node: &Node| {
        node.metric("crescent_cold_owner_io_total{outcome=\"ok\",work=\"read\"}")
            + node.metric("crescent_cold_owner_io_total{outcome=\"ok\",work=\"stage\"}")
    };
    let before = reads(&node);
    let (code, out, err) =
        common::crescent(&node.s(), &["--no-local-cold-restore", "get", "k"], None);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, data, "remote restore through the owner");
    assert!(reads(&node) > before, "the owner read it");
    assert_eq!(
        node.metric("crescent_cold_owner_io_total{outcome=\"ok\",work=\"write\"}"),
        1.0
    );

    // Delete: the owner deletes the payload, usage is released once.
    node.wait_for("the promotion", || node.replicas("k") == 1);
    node.ok(&["rm", "k"], None);
    assert!(!file.exists(), "reclaimed on the owner");
    assert_eq!(usage(&node), (0, 0, 0));
}

#[test]
fn an_owner_killed_after_its_payload_write_is_reconciled_when_it_returns() {
    let dir = tempfile::tempdir().unwrap();
    let node = start_node(dir.path());
    let data = payload(200_000, 8);
    node.put("k", &data);
    let mut owner = start_device_owner(
        &node,
        dir.path(),
        &[(crescent_crash::CRASH_AT_ENV, "owner_cold.after_write")],
    );
    wait_healthy(&node);

    // The owner writes the payload and dies before reporting: the offload fails clearly.
    let (code, v) = node.cli(&["offload", "k"], None);
    assert_ne!(code, 0, "{v}");
    // UNAVAILABLE from crescentd; the client's failover layer reports it on this
    // non-idempotent call as FAILOVER_INTERRUPTED carrying the cause.
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("UNAVAILABLE") || v["error"]["code"] == "UNAVAILABLE",
        "{v}"
    );
    assert!(message.contains("\"node-b\" did not answer"), "{v}");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = owner.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "owner still running"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    assert_eq!(payload_files(dir.path()).len(), 1, "the orphan payload");
    node.wait_for("the silent owner's device to be unavailable", || {
        owner_device(&node)["health"] == "unavailable"
    });
    assert_eq!(usage(&node), (0, 0, 0));

    // It returns: reconciliation deletes the orphan; offloads work again.
    let _owner = start_device_owner(&node, dir.path(), &[]);
    wait_healthy(&node);
    node.wait_for("the orphan to be deleted", || {
        payload_files(dir.path()).is_empty()
    });
    assert_eq!(usage(&node), (0, 0, 0));
    let stat = node.ok(&["offload", "k"], None);
    assert_eq!(stat["cold"]["device_id"], "ob", "{stat}");
    assert_eq!(usage(&node), (data.len() as u64, 0, data.len() as u64));
    evict_hot(&node, "k");
    assert_eq!(node.get("k").unwrap(), data);

    // crescentd SIGKILLed and restarted: the owner device comes back from the journal,
    // waits for its owner (which registers again), and serves the cold-only object.
    let addr = node.inner.addr;
    node.kill();
    let node = Node {
        inner: DirNode::start_at(dir.path(), Some(CONFIG), &[], Some(addr)),
    };
    wait_healthy(&node);
    assert_eq!(usage(&node), (data.len() as u64, 0, data.len() as u64));
    let (code, out, err) =
        common::crescent(&node.s(), &["--no-local-cold-restore", "get", "k"], None);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, data);
}

/// `cold ls` never waits for a device: while an offload holds the owner device's ledger,
/// waiting for an owner that stopped answering (SIGSTOP), the row is answered at once,
/// marked busy; once the owner runs again the device serves offloads as before.
#[test]
fn cold_ls_answers_while_an_offload_waits_for_a_stopped_owner() {
    let dir = tempfile::tempdir().unwrap();
    let node = start_node(dir.path());
    let data = payload(100_000, 2);
    node.put("k", &data);
    let owner = start_device_owner(&node, dir.path(), &[]);
    wait_healthy(&node);
    // A committed offload: the busy row shows its bytes in every figure, one ledger state.
    let before = payload(50_000, 3);
    node.put("before", &before);
    node.ok(&["offload", "before"], None);
    let pid = owner.0.id() as libc::pid_t;
    // SAFETY: kill(2) on our own child process.
    #[allow(unsafe_code)]
    unsafe {
        assert_eq!(libc::kill(pid, libc::SIGSTOP), 0);
    }
    let server = node.s();
    let offload =
        std::thread::spawn(move || common::crescent(&server, &["--json", "offload", "k"], None));
    let mut busy_row = None;
    while !offload.is_finished() {
        let row = owner_device(&node);
        if row["busy"] == true {
            busy_row = Some(row);
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let row = busy_row.expect("cold ls answered while the offload held the device");
    assert_eq!(row["owner_id"], "node-b", "{row}");
    assert_eq!(row["capacity"].as_u64(), Some(16 << 20), "{row}");
    let len = before.len() as u64;
    let figures = ["used", "reserved", "live_materialized_bytes"].map(|f| row[f].as_u64());
    assert_eq!(figures, [Some(len), Some(0), Some(len)], "{row}");
    // The stopped owner never answers: the offload fails once it counts as silent.
    let (code, _, err) = offload.join().unwrap();
    assert_ne!(code, 0, "{err}");
    #[allow(unsafe_code)]
    unsafe {
        assert_eq!(libc::kill(pid, libc::SIGCONT), 0);
    }
    wait_healthy(&node);
    node.wait_for("the device to settle", || {
        owner_device(&node)["busy"].is_null()
    });
    // The row may still say healthy from before the stall: the probe, which waited for the
    // ledger the offload held, counts its failures only now, and may mark the device
    // degraded or unavailable before the resumed owner polls again. Until the owner is back
    // and probed healthy, an offload is refused UNAVAILABLE (not connected, or not eligible
    // for its health); then it goes through. The client cannot tell that UNAVAILABLE from a
    // server's own (an offload is not idempotent, and one cut by "not connected" has
    // journaled its planned operation), so it may report it as FAILOVER_INTERRUPTED with
    // the server's error inside, never retrying it.
    let mut stat = serde_json::Value::Null;
    node.wait_for("an offload once the owner polls again", || {
        let (code, v) = node.cli(&["offload", "k"], None);
        if code == 0 {
            stat = v;
            return true;
        }
        let refused = ["UNAVAILABLE", "FAILOVER_INTERRUPTED"];
        assert!(
            refused.contains(&v["error"]["code"].as_str().unwrap_or_default()),
            "{v}"
        );
        let message = v["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("not connected") || message.contains("health is"),
            "{v}"
        );
        false
    });
    assert_eq!(stat["cold"]["device_id"], "ob", "{stat}");
    evict_hot(&node, "k");
    assert_eq!(node.get("k").unwrap(), data);
    drop(owner);
}
