//! Remote restore of objects on a STORAGE OWNER's cold device through the OWNER's staging
//! region (docs/cold-tier.md, "Restore on read"): crescentd asks the owner to read and verify
//! the payload into its region (work `stage`), answers the reader with a staged payload
//! naming the owner's endpoint, the reader pulls the bytes from the owner and checks them,
//! and its ack is forwarded to the owner (work `release_staged`). Larger than crescentd's
//! body limit (40 MiB), a damaged payload, a saturated region, an expired slot and an owner
//! restarted while a slot is held.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::cold::{payload, read_staged, runtime, Node};
use common::cold_owner::{cold_on_owner, owner_device, owner_io, start_owner_with, OWNER_ID};
use common::{DirNode, Proc};
use serde_json::{json, Value};

/// crescentd's own device takes no offload (placement picks the owner's); no promotion, so
/// every get of a cold-only object is a restore.
const CONFIG: &str = "[cold]\nschedulable = false\nhealth_probe_interval_ms = 200\n\
                      promote_on_read = false\n";

const BIG: usize = 40 << 20;

fn start_node(dir: &Path) -> Node {
    Node {
        inner: DirNode::start_at(dir, Some(CONFIG), &[], None),
    }
}

/// `crescent owner` with the device `ob` (128 MiB) and `extra` owner options (staging size
/// and ttl); returns once registered.
fn start_owner(node: &Node, dir: &Path, extra: &[&str]) -> Proc {
    start_owner_with(node, dir, ("96M", "128M"), extra, &[])
}

fn wait_healthy(node: &Node) {
    node.wait_for("the owner device to be healthy", || {
        owner_device(node)["health"] == "healthy"
    });
}

fn post(rt: &tokio::runtime::Runtime, server: &str, path: &str, body: Value) -> Value {
    rt.block_on(async {
        let req = reqwest::Client::new().post(format!("http://{server}{path}"));
        common::as_client(req, server)
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    })
}

/// A get that accepts a staged answer, as a reader that holds it (no read, no ack).
fn raw_staged_get(rt: &tokio::runtime::Runtime, server: &str, key: &str) -> Value {
    post(
        rt,
        server,
        "/v1/objects/get",
        json!({"id": {"key": key}, "accept_staged": true}),
    )
}

/// The reader's ack: the lease release naming the staged token.
fn release(rt: &tokio::runtime::Runtime, server: &str, key: &str, got: &Value) -> Value {
    post(
        rt,
        server,
        "/v1/objects/release",
        json!({"id": {"key": key}, "put_id": got["put_id"], "lease_until_ms":
            got["lease_until_ms"], "staged_token": got["staged"]["token"]}),
    )
}

fn remote_get(node: &Node, key: &str) -> (i32, Vec<u8>, String) {
    common::crescent(&node.s(), &["--no-local-cold-restore", "get", key], None)
}

#[test]
fn a_40_mib_object_on_an_owner_device_restores_remotely_through_the_owners_staging() {
    let dir = tempfile::tempdir().unwrap();
    let node = start_node(dir.path());
    let mut owner = start_owner(&node, dir.path(), &[]);
    wait_healthy(&node);
    let data = payload(BIG, 3);
    let small = payload(100_000, 4);
    cold_on_owner(&node, dir.path(), "big", &data);
    cold_on_owner(&node, dir.path(), "small", &small);

    // Larger than crescentd's 16 MiB body limit: staged on the owner, read from the owner.
    let (code, out, err) = remote_get(&node, "big");
    assert_eq!(code, 0, "{err}");
    assert!(out == data, "byte-identical");
    assert_eq!(owner_io(&node, "stage", "ok"), 1.0);
    assert_eq!(
        owner_io(&node, "read", "ok"),
        0.0,
        "no payload through crescentd"
    );
    // The reader's ack (its lease release) is forwarded to the owner.
    node.wait_for("the ack forwarded to the owner", || {
        owner_io(&node, "release_staged", "posted") == 1.0
    });
    // The staged answer names the owner's endpoint and staging segment.
    let rt = runtime();
    let got = raw_staged_get(&rt, &node.s(), "big");
    let staged = &got["staged"];
    assert_eq!(
        staged["segment_id"],
        format!("{OWNER_ID}/staging0"),
        "{got}"
    );
    assert_eq!(staged["length"].as_u64(), Some(BIG as u64));
    assert!(read_staged(&rt, staged).unwrap() == data);
    assert_eq!(release(&rt, &node.s(), "big", &got)["released"], true);
    // Below staging_min_bytes: inline through the owner's poll, as before.
    let (code, out, err) = remote_get(&node, "small");
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, small);
    assert_eq!(owner_io(&node, "read", "ok"), 1.0);

    // The owner without a staging region (an older owner, or 0): the inline path refuses
    // the 40 MiB payload clearly, naming its size; the small one still restores.
    owner.signal(libc::SIGKILL);
    let _ = owner.0.wait();
    let _owner = start_owner(&node, dir.path(), &["--cold-staging-bytes", "0"]);
    wait_healthy(&node);
    let (code, out, err) = remote_get(&node, "big");
    assert_ne!(code, 0);
    assert!(out.is_empty());
    assert!(err.contains("POLICY_UNSATISFIABLE"), "{err}");
    assert!(err.contains(&format!("{BIG} bytes")), "{err}");
    let (code, out, err) = remote_get(&node, "small");
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, small);
}

#[test]
fn a_flipped_byte_on_the_owner_fails_with_a_checksum_error_and_is_never_staged() {
    let dir = tempfile::tempdir().unwrap();
    let node = start_node(dir.path());
    let _owner = start_owner(&node, dir.path(), &[]);
    wait_healthy(&node);
    let data = payload(5 << 20, 6);
    let file = cold_on_owner(&node, dir.path(), "k", &data);
    let mut bytes = std::fs::read(&file).unwrap();
    let at = bytes.len() - 1000;
    bytes[at] ^= 0x10;
    std::fs::write(&file, bytes).unwrap();
    let (code, out, err) = remote_get(&node, "k");
    assert_ne!(code, 0);
    assert!(out.is_empty(), "never a wrong byte");
    assert!(err.contains("checksum mismatch"), "{err}");
    assert_eq!(owner_io(&node, "stage", "failed"), 1.0);
    // Asked directly: the same error, no staged answer.
    let rt = runtime();
    let got = raw_staged_get(&rt, &node.s(), "k");
    assert!(got["staged"].is_null(), "{got}");
    assert_eq!(got["code"], "INTERNAL", "{got}");
}

#[test]
fn a_saturated_owner_region_is_busy_until_its_holder_releases() {
    let dir = tempfile::tempdir().unwrap();
    let node = start_node(dir.path());
    let _owner = start_owner(
        &node,
        dir.path(),
        &[
            "--cold-staging-bytes",
            "48M",
            "--cold-staging-ttl-ms",
            "60000",
        ],
    );
    wait_healthy(&node);
    let a = payload(BIG, 7);
    let b = payload(30 << 20, 8);
    cold_on_owner(&node, dir.path(), "a", &a);
    cold_on_owner(&node, dir.path(), "b", &b);
    let rt = runtime();
    // A reader holds 40 of the 48 MiB.
    let held = raw_staged_get(&rt, &node.s(), "a");
    assert!(held["staged"].is_object(), "{held}");
    // b (30 MiB, too large to carry inline) cannot be staged now: explicit BUSY.
    let busy = raw_staged_get(&rt, &node.s(), "b");
    assert_eq!(busy["code"], "BUSY", "{busy}");
    assert_eq!(
        node.metric("crescent_cold_backpressure_total{queue=\"owner_restore_staging\"}"),
        1.0
    );
    // The holder reads and acks; the ack reaches the owner and b is staged again.
    assert!(read_staged(&rt, &held["staged"]).unwrap() == a);
    assert_eq!(release(&rt, &node.s(), "a", &held)["released"], true);
    let started = Instant::now();
    let staged = loop {
        let got = raw_staged_get(&rt, &node.s(), "b");
        if got["staged"].is_object() {
            break got;
        }
        assert_eq!(got["code"], "BUSY", "{got}");
        assert!(started.elapsed() < Duration::from_secs(10), "still busy");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(read_staged(&rt, &staged["staged"]).unwrap() == b);
    assert_eq!(release(&rt, &node.s(), "b", &staged)["released"], true);
    // And through the client (which acks with its release).
    let (code, out, err) = remote_get(&node, "b");
    assert_eq!(code, 0, "{err}");
    assert!(out == b);
}

#[test]
fn an_expired_owner_slot_refuses_a_late_read() {
    let dir = tempfile::tempdir().unwrap();
    let node = start_node(dir.path());
    let _owner = start_owner(
        &node,
        dir.path(),
        &[
            "--cold-staging-bytes",
            "24M",
            "--cold-staging-ttl-ms",
            "300",
        ],
    );
    wait_healthy(&node);
    let a = payload(20 << 20, 9);
    let b = payload(20 << 20, 10);
    cold_on_owner(&node, dir.path(), "a", &a);
    cold_on_owner(&node, dir.path(), "b", &b);
    let rt = runtime();
    let first = raw_staged_get(&rt, &node.s(), "a");
    let staged_a = first["staged"].clone();
    assert!(staged_a.is_object(), "{first}");
    std::thread::sleep(Duration::from_millis(600));
    // a's token is fenced (never acked); the owner reuses its units for b.
    let second = raw_staged_get(&rt, &node.s(), "b");
    assert_eq!(second["staged"]["offset"], staged_a["offset"], "{second}");
    // A late read of a's token gets b's bytes: the checksum check refuses them.
    let late = read_staged(&rt, &staged_a).unwrap();
    assert_ne!(
        crescent_checksum::crc32c(&late),
        staged_a["checksum"].as_u64().unwrap() as u32
    );
    // The late ack is forwarded and changes nothing; the release itself works.
    let acked = release(&rt, &node.s(), "a", &first);
    assert!(acked.get("error").is_none(), "{acked}");
    assert_eq!(release(&rt, &node.s(), "b", &second)["released"], true);
    let (code, out, err) = remote_get(&node, "a");
    assert_eq!(code, 0, "{err}");
    assert!(out == a);
}

#[test]
fn an_owner_restarted_while_a_slot_is_held_never_serves_garbage() {
    let dir = tempfile::tempdir().unwrap();
    let node = start_node(dir.path());
    let mut owner = start_owner(&node, dir.path(), &[]);
    wait_healthy(&node);
    let data = payload(BIG, 11);
    cold_on_owner(&node, dir.path(), "k", &data);
    let rt = runtime();
    let held = raw_staged_get(&rt, &node.s(), "k");
    assert!(held["staged"].is_object(), "{held}");
    owner.signal(libc::SIGKILL);
    let _ = owner.0.wait();
    let _owner = start_owner(&node, dir.path(), &[]);
    wait_healthy(&node);
    // The old region died with its process: the held read fails, or reads bytes its
    // checksum refuses; never the payload's claimed content from someone else's memory.
    match read_staged(&rt, &held["staged"]) {
        Err(_) => {}
        Ok(bytes) => assert_ne!(
            crescent_checksum::crc32c(&bytes),
            held["staged"]["checksum"].as_u64().unwrap() as u32
        ),
    }
    // Its ack reaches a crescentd that forgot the old incarnation's tokens: no error.
    let acked = release(&rt, &node.s(), "k", &held);
    assert!(acked.get("error").is_none(), "{acked}");
    // The object reads byte-identical, staged by the restarted owner.
    let before = owner_io(&node, "stage", "ok");
    let (code, out, err) = remote_get(&node, "k");
    assert_eq!(code, 0, "{err}");
    assert!(out == data);
    assert_eq!(owner_io(&node, "stage", "ok"), before + 1.0);
}
