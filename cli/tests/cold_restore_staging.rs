//! Remote restore through crescentd's staging pool, end to end (docs/cold-tier.md,
//! "Restore on read"): the server reads and verifies the payload into a slot of its staging region,
//! the client pulls it over the data plane, checks it and acks it with its lease release;
//! expiry fences an unacked token; a saturated pool answers inline; a restart forgets every
//! slot and the object is still read byte-identical.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::cold::{cold_only, payload, read_staged, runtime, start, write_config, Node};
use common::DirNode;
use crescent_client::CrescentClient;
use serde_json::{json, Value};

/// A bare HTTP call (a reader that holds what it got: no read, no ack).
fn post(rt: &tokio::runtime::Runtime, server: &str, path: &str, body: Value) -> Value {
    rt.block_on(async {
        let req = reqwest::Client::new().post(format!("http://{server}{path}"));
        let response = common::as_client(req, server)
            .json(&body)
            .send()
            .await
            .unwrap();
        response.json().await.unwrap()
    })
}

/// A get that accepts a staged answer and never reads or acks it.
fn staged_get(rt: &tokio::runtime::Runtime, server: &str, key: &str) -> Value {
    let reply = post(
        rt,
        server,
        "/v1/objects/get",
        json!({"id": {"key": key}, "accept_staged": true}),
    );
    assert!(reply["staged"].is_object(), "{reply}");
    reply
}

fn settle_and_wait_drained(rt: &tokio::runtime::Runtime, client: &CrescentClient, node: &Node) {
    rt.block_on(client.settle());
    node.wait_for("every staged slot acked", || {
        node.metric("crescent_cold_staging_used_bytes") == 0.0
    });
}

#[test]
fn a_remote_restore_reads_the_staged_payload_byte_identical_and_acks_it() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "[cold]\npromote_on_read = false\n");
    let node = start(dir.path(), &[("CRESCENT_CONFIG", &config)]);
    let big = payload(4 << 20, 1);
    let mid = payload((1 << 20) + 17, 2);
    let small = payload(100_000, 3);
    cold_only(dir.path(), &node, "big", &big);
    cold_only(dir.path(), &node, "mid", &mid);
    cold_only(dir.path(), &node, "small", &small);
    let rt = runtime();
    let client = common::client_of(&node.s());
    client.set_local_cold_restore(false);
    assert_eq!(rt.block_on(client.get("big")).unwrap(), big);
    assert_eq!(rt.block_on(client.get("mid")).unwrap(), mid);
    // Straight into a registered buffer, at an offset.
    let buffer = rt
        .block_on(client.register_buffer(vec![0u8; (4 << 20) + 8]))
        .unwrap();
    assert_eq!(
        rt.block_on(client.get_into("big", &buffer, 8)).unwrap(),
        4 << 20
    );
    let mut copied = vec![0u8; 4 << 20];
    rt.block_on(buffer.read(8, &mut copied)).unwrap();
    assert_eq!(copied, big);
    // Below staging_min_bytes: inline.
    assert_eq!(rt.block_on(client.get("small")).unwrap(), small);
    let restore = client.local_cold_restore();
    assert_eq!(
        (
            restore.staged_count("staged"),
            restore.staged_count("fallback")
        ),
        (3, 0)
    );
    // The second read of "big" shares the first one's slot when that one's ack (riding a
    // deferred lease release) has not arrived yet.
    assert_eq!(
        node.metric("crescent_cold_staging_total{outcome=\"staged\"}")
            + node.metric("crescent_cold_staging_total{outcome=\"shared\"}"),
        3.0
    );
    assert_eq!(
        node.metric("crescent_cold_staging_total{outcome=\"small\"}"),
        1.0
    );
    assert_eq!(
        node.metric("crescent_cold_restores_total{outcome=\"ok\"}"),
        4.0
    );
    // The acks ride the lease releases; then every slot is recycled.
    settle_and_wait_drained(&rt, &client, &node);
    assert_eq!(
        node.metric("crescent_cold_staging_acks_total{outcome=\"released\"}"),
        3.0
    );
    assert_eq!(node.metric("crescent_cold_staging_tokens"), 0.0);
    assert!(node.metric("crescent_cold_staging_capacity_bytes") >= (4 << 20) as f64);
}

#[test]
fn a_flipped_byte_fails_with_a_checksum_error_and_is_never_staged() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path(), &[]);
    let data = payload(1 << 20, 4);
    let file = cold_only(dir.path(), &node, "bad", &data);
    let mut bytes = std::fs::read(&file).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x01;
    std::fs::write(&file, &bytes).unwrap();
    let rt = runtime();
    let client = common::client_of(&node.s());
    client.set_local_cold_restore(false);
    let e = rt.block_on(client.get("bad")).unwrap_err();
    assert!(
        e.code_str() == "INTERNAL" && e.to_string().contains("checksum"),
        "{e}"
    );
    assert_eq!(
        node.metric("crescent_cold_staging_total{outcome=\"failed\"}"),
        1.0
    );
    assert_eq!(node.metric("crescent_cold_staging_used_bytes"), 0.0);
    assert_eq!(client.local_cold_restore().staged_count("staged"), 0);
}

#[test]
fn an_expired_token_is_fenced_and_its_late_read_and_late_ack_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        "[cold]\npromote_on_read = false\nstaging_ttl_ms = 100\n",
    );
    let node = start(dir.path(), &[("CRESCENT_CONFIG", &config)]);
    let a = payload(1 << 20, 5);
    let b = payload(1 << 20, 6);
    cold_only(dir.path(), &node, "a", &a);
    cold_only(dir.path(), &node, "b", &b);
    let rt = runtime();
    let first = staged_get(&rt, &node.s(), "a");
    let staged_a = first["staged"].clone();
    // Read in time: the bytes are a's.
    assert_eq!(read_staged(&rt, &staged_a).unwrap(), a);
    std::thread::sleep(Duration::from_millis(300));
    // The next staging fences a's token (never acked) and reuses its units for b.
    let second = staged_get(&rt, &node.s(), "b");
    assert_eq!(node.metric("crescent_cold_staging_expired_total"), 1.0);
    assert_eq!(second["staged"]["offset"], staged_a["offset"]);
    // A late read of a's token gets b's bytes: its checksum check refuses them.
    let late = read_staged(&rt, &staged_a).unwrap();
    assert_ne!(
        crescent_checksum::crc32c(&late),
        staged_a["checksum"].as_u64().unwrap() as u32
    );
    // A late ack (with the lease release) changes nothing and fails nothing.
    let release = post(
        &rt,
        &node.s(),
        "/v1/objects/release",
        json!({"id": {"key": "a"}, "put_id": first["put_id"], "lease_until_ms":
            first["lease_until_ms"], "staged_token": staged_a["token"]}),
    );
    assert!(release.get("error").is_none(), "{release}");
    assert_eq!(
        node.metric("crescent_cold_staging_acks_total{outcome=\"unknown\"}"),
        1.0
    );
    assert_eq!(node.metric("crescent_cold_staging_tokens"), 1.0, "b's only");
    // A client still reads a byte-identical (staged again).
    let client = common::client_of(&node.s());
    client.set_local_cold_restore(false);
    assert_eq!(rt.block_on(client.get("a")).unwrap(), a);
    assert_eq!(client.local_cold_restore().staged_count("staged"), 1);
}

#[test]
fn a_saturated_pool_answers_inline_with_backpressure_counted() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        "[cold]\npromote_on_read = false\nstaging_bytes = 1048576\n",
    );
    let node = start(dir.path(), &[("CRESCENT_CONFIG", &config)]);
    let a = payload(1 << 20, 7);
    let b = payload(600_000, 8);
    cold_only(dir.path(), &node, "a", &a);
    cold_only(dir.path(), &node, "b", &b);
    let rt = runtime();
    // A reader holds the whole pool.
    let held = staged_get(&rt, &node.s(), "a");
    assert_eq!(node.metric("crescent_cold_staging_used_bytes"), 1048576.0);
    let client = common::client_of(&node.s());
    client.set_local_cold_restore(false);
    assert_eq!(rt.block_on(client.get("b")).unwrap(), b);
    assert_eq!(
        node.metric("crescent_cold_staging_total{outcome=\"busy\"}"),
        1.0
    );
    assert_eq!(
        node.metric("crescent_cold_backpressure_total{queue=\"restore_staging\"}"),
        1.0
    );
    assert_eq!(client.local_cold_restore().staged_count("staged"), 0);
    // The holder acks; the pool is free again and the next read is staged.
    let release = post(
        &rt,
        &node.s(),
        "/v1/objects/release",
        json!({"id": {"key": "a"}, "put_id": held["put_id"], "lease_until_ms":
            held["lease_until_ms"], "staged_token": held["staged"]["token"]}),
    );
    assert_eq!(release["released"], true, "{release}");
    assert_eq!(node.metric("crescent_cold_staging_used_bytes"), 0.0);
    assert_eq!(rt.block_on(client.get("b")).unwrap(), b);
    assert_eq!(client.local_cold_restore().staged_count("staged"), 1);
}

#[test]
fn a_restart_while_a_slot_is_held_forgets_it_and_the_object_still_reads() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path(), &[]);
    let data = payload(2 << 20, 9);
    cold_only(dir.path(), &node, "held", &data);
    let rt = runtime();
    let held = staged_get(&rt, &node.s(), "held");
    let addr: SocketAddr = node.s().parse().unwrap();
    node.kill();
    let node = Node {
        inner: DirNode::start_at(dir.path(), None, &[], Some(addr)),
    };
    // The old run's staging region is gone with its process: the held read fails.
    assert!(read_staged(&rt, &held["staged"]).is_err());
    // Its ack reaches a run that never issued the token: no effect, no error.
    let release = post(
        &rt,
        &node.s(),
        "/v1/objects/release",
        json!({"id": {"key": "held"}, "put_id": held["put_id"], "lease_until_ms":
            held["lease_until_ms"], "staged_token": held["staged"]["token"]}),
    );
    assert!(release.get("error").is_none(), "{release}");
    assert_eq!(
        node.metric("crescent_cold_staging_acks_total{outcome=\"unknown\"}"),
        1.0
    );
    // The cold-only route is journaled: read byte-identical, staged by the new run.
    let client = common::client_of(&node.s());
    client.set_local_cold_restore(false);
    assert_eq!(rt.block_on(client.get("held")).unwrap(), data);
    assert_eq!(client.local_cold_restore().staged_count("staged"), 1);
}
