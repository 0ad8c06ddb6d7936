//! Owner liveness (heartbeats, TTL expiry dropping an owner's objects) and the embedded segment
//! of a standalone crescentd (mounted on a fresh start, bytes through its transfer listener,
//! re-registered with a higher incarnation after a restart).

mod common;

use std::sync::Arc;

use common::*;
use crescent_server::embedded::{EMBEDDED_OWNER_ID, EMBEDDED_SEGMENT_ID};
use crescent_server::housekeeping::run_pass;
use crescent_server::node::Node;
use crescent_transport::grant::Grant;
use crescent_transport::tcp::{TcpConfig, TcpTransport};
use crescent_transport::{
    RemoteSegment, SegmentMemory, TransferDescriptor, TransferOp, Transport, TransportMetrics,
};
use crescent_wire::store::ReplicaDesc;
use serde_json::{json, Value};

#[actix_web::test]
async fn silent_owners_expire_and_take_their_objects_with_them() {
    let t = tempfile::tempdir().unwrap();
    let mut c = config(t.path());
    c.store.client_ttl_secs = 1;
    let state = start(&c);
    let app = app_for(&state).await;
    owner_with_segment(&app, "quiet", "s-quiet", 1 << 20).await;
    owner_with_segment(&app, "alive", "s-alive", 1 << 20).await;
    for i in 0..20 {
        put(&app, json!({"key": format!("k{i}")}), 1000).await;
    }
    assert_eq!(state.directory.stats().objects, 20);

    // Heartbeat answers: interval (a quarter of the TTL) and term; wrong incarnations refused.
    let (s, b) = post(
        &app,
        "/v1/owners/heartbeat",
        json!({"owner_id": "alive", "incarnation": 1}),
    )
    .await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["interval_ms"], 250);
    assert_eq!(b["term"], 1);
    for (body, status, code) in [
        (
            json!({"owner_id": "alive", "incarnation": 2}),
            404,
            "NOT_FOUND",
        ),
        (
            json!({"owner_id": "ghost", "incarnation": 1}),
            404,
            "NOT_FOUND",
        ),
        (
            json!({"owner_id": "alive", "incarnation": 0}),
            412,
            "STALE_GENERATION",
        ),
    ] {
        refused(post(&app, "/v1/owners/heartbeat", body).await, status, code);
    }

    // Within the TTL nothing expires.
    let r = run_pass(&state.housekeeping(), state.now_ms() + 500).await;
    assert!(r.owners_expired.is_empty(), "{r:?}");

    // "quiet" never heartbeats (its TTL runs from registration); "alive" does.
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    let (s, _) = post(
        &app,
        "/v1/owners/heartbeat",
        json!({"owner_id": "alive", "incarnation": 1}),
    )
    .await;
    assert_eq!(s, 200);
    let seq = state.journal.last_seq();
    let r = run_pass(&state.housekeeping(), state.now_ms() + 700).await;
    assert_eq!(r.owners_expired, vec!["quiet".to_string()]);

    // Journaled: the segment unmount, the owner removal, and the tenant's usage record (the
    // objects went with the owner: docs/tenants.md, "Journaled usage and reconciliation").
    assert_eq!(state.journal.last_seq(), seq + 3);
    let segs = get_json(&app, "/v1/segments").await;
    assert_eq!(segs["segments"].as_array().unwrap().len(), 1);
    assert_eq!(segs["segments"][0]["segment_id"], "s-alive");
    assert!(segs["owners"]
        .as_array()
        .unwrap()
        .iter()
        .all(|o| o["owner_id"] != "quiet"));

    // Objects with their only replica on the expired owner are gone; the others stay readable.
    let stats = state.directory.stats();
    assert_eq!(stats.segments, 1);
    let mut readable = 0;
    for i in 0..20 {
        let (s, b) = post(
            &app,
            "/v1/objects/get",
            json!({"id": {"key": format!("k{i}")}}),
        )
        .await;
        match s {
            200 => {
                assert_eq!(b["replicas"][0]["segment_id"], "s-alive");
                readable += 1;
            }
            404 => {}
            other => panic!("{other}: {b}"),
        }
    }
    assert_eq!(readable as u64, stats.objects);
    assert!(
        readable < 20,
        "random placement put some on the expired owner"
    );

    let metrics = get_text(&app, "/metrics").await;
    assert!(
        metrics.contains("crescent_owners_expired_total 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("crescent_store_dropped_objects_total"),
        "{metrics}"
    );

    // The expired owner comes back by registering again (what its heartbeat NOT_FOUND asks).
    refused(
        post(
            &app,
            "/v1/owners/heartbeat",
            json!({"owner_id": "quiet", "incarnation": 1}),
        )
        .await,
        404,
        "NOT_FOUND",
    );
    owner_with_segment(&app, "quiet", "s-quiet", 1 << 20).await;
    let (s, _) = post(
        &app,
        "/v1/owners/heartbeat",
        json!({"owner_id": "quiet", "incarnation": 1}),
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(state.directory.stats().segments, 2);
    Node::stop(&state);
}

/// Reads or writes `buf` at the replica `r` (a put_start or get reply's, in JSON) through its
/// segment's transfer listener, presenting the data-plane grant the reply carries.
async fn transfer(client: &TcpTransport, op: TransferOp, r: &Value, buf: Arc<SegmentMemory>) {
    let r: ReplicaDesc = serde_json::from_value(r.clone()).unwrap();
    let len = buf.len() as u64;
    assert_eq!(r.length, len);
    let local = client.register(buf).unwrap();
    let batch = [TransferDescriptor {
        op,
        remote: RemoteSegment::new(r.endpoint.expect("an endpoint"), r.segment_id),
        remote_offset: r.offset,
        local,
        local_offset: 0,
        length: len,
        grant: r
            .grant
            .as_deref()
            .map(|g| Grant::decode(g).expect("a grant")),
    }];
    client.submit(&batch).await.unwrap().into_result().unwrap();
    client.unregister(local).unwrap();
}

#[actix_web::test]
async fn embedded_segment_serves_a_fresh_start_and_survives_restarts() {
    let t = tempfile::tempdir().unwrap();
    let mut c = config(t.path());
    c.store.embedded_segment_bytes = 4 << 20;
    c.store.client_ttl_secs = 1;
    let first_endpoint;
    {
        let state = start(&c);
        state
            .mount_embedded()
            .await
            .expect("embedded segment mounted");
        let app = app_for(&state).await;
        let segs = get_json(&app, "/v1/segments").await;
        assert_eq!(segs["segments"][0]["segment_id"], EMBEDDED_SEGMENT_ID);
        assert_eq!(segs["segments"][0]["size"], 4 << 20);
        assert_eq!(segs["segments"][0]["transport"], "tcp");
        assert_eq!(segs["owners"][0]["owner_id"], EMBEDDED_OWNER_ID);
        assert_eq!(segs["owners"][0]["incarnation"], 1);
        first_endpoint = segs["owners"][0]["endpoint"].as_str().unwrap().to_string();
        assert!(first_endpoint.starts_with("127.0.0.1:"), "{first_endpoint}");
        let stats = get_json(&app, "/stats").await;
        assert_eq!(stats["store"]["segments"], 1);
        assert_eq!(stats["store"]["bytes_capacity"], 4 << 20);
        assert_eq!(stats["store"]["embedded"]["endpoint"], first_endpoint);

        // A put and get of real bytes through the embedded transfer listener.
        let (s, b) = post(
            &app,
            "/v1/objects/put_start",
            json!({"id": {"key": "hello"}, "size": 5000}),
        )
        .await;
        assert_eq!(s, 200, "{b}");
        let r = &b["replicas"][0];
        assert_eq!(r["endpoint"], first_endpoint);
        assert!(r["grant"].is_array(), "with [auth], a write grant: {r}");
        let client = TcpTransport::start(TcpConfig::default(), TransportMetrics::unregistered())
            .await
            .unwrap();
        let value: Vec<u8> = (0..5000u32).map(|i| (i * 7 % 251) as u8).collect();
        let src =
            Arc::new(SegmentMemory::from_boxed_slice(value.clone().into_boxed_slice()).unwrap());
        transfer(&client, TransferOp::Write, r, src).await;
        let put_id = b["put_id"].as_u64().unwrap();
        let (s, _) = post(
            &app,
            "/v1/objects/put_end",
            json!({"id": {"key": "hello"}, "put_id": put_id}),
        )
        .await;
        assert_eq!(s, 200);
        let (_, g) = post(&app, "/v1/objects/get", json!({"id": {"key": "hello"}})).await;
        let r = &g["replicas"][0];
        let dst =
            Arc::new(SegmentMemory::from_boxed_slice(vec![0u8; 5000].into_boxed_slice()).unwrap());
        transfer(&client, TransferOp::Read, r, dst.clone()).await;
        let mut back = vec![0u8; 5000];
        dst.read_at(0, &mut back).await.unwrap();
        assert_eq!(back, value);

        // The embedded owner never heartbeats and never expires.
        let r = run_pass(&state.housekeeping(), state.now_ms() + 3_600_000).await;
        assert!(r.owners_expired.is_empty());
        // An external owner, journaled before the restart.
        owner_with_segment(&app, "ext", "s-ext", 1 << 20).await;
        Node::stop(&state);
    }

    let state = start(&c);
    // Recovered segments are in the directory as soon as the node is up.
    assert_eq!(state.directory.stats().segments, 2);
    state
        .mount_embedded()
        .await
        .expect("embedded segment mounted again");
    let app = app_for(&state).await;
    let segs = get_json(&app, "/v1/segments").await;
    let owners = segs["owners"].as_array().unwrap();
    let embedded = owners
        .iter()
        .find(|o| o["owner_id"] == EMBEDDED_OWNER_ID)
        .unwrap();
    assert_eq!(embedded["incarnation"], 2, "new memory, new incarnation");
    assert_ne!(embedded["endpoint"], first_endpoint);
    let ids: Vec<&str> = segs["segments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["segment_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [EMBEDDED_SEGMENT_ID, "s-ext"]);
    assert_eq!(state.directory.stats().segments, 2);
    // Objects are not journaled: until the external owner "ext" (it has a mounted segment)
    // replays its table, object operations wait behind the rebuild gate; control-plane reads
    // are served.
    let health = get_json(&app, "/healthz").await;
    assert_eq!(health["gate"], "REBUILDING", "{health}");
    // Alive, not ready: /readyz is 503 until the gate is SERVING.
    let resp = app
        .call(actix_web::test::TestRequest::get().uri("/readyz"), None)
        .await;
    assert_eq!(resp.status().as_u16(), 503);
    let ready: serde_json::Value =
        serde_json::from_slice(&actix_web::test::read_body(resp).await).unwrap();
    assert_eq!(
        (ready["ready"].as_bool(), ready["gate"].as_str()),
        (Some(false), Some("REBUILDING")),
        "{ready}"
    );
    let (s, b) = post(&app, "/v1/objects/exist", json!({"id": {"key": "hello"}})).await;
    assert_eq!((s, b["code"].as_str()), (503, Some("UNAVAILABLE")), "{b}");
    assert!(b["message"].as_str().unwrap().contains("REBUILDING"), "{b}");
    let term = health["term"].as_u64().unwrap();
    let (s, b) = post(
        &app,
        "/v1/rebuild/complete",
        json!({"owner_id": "ext", "term": term, "counts": {"replayed": 0, "duplicate": 0, "stale": 0, "rejected": 0}}),
    )
    .await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["gate"]["state"], "SERVING", "{b}");
    assert_eq!(get_json(&app, "/readyz").await["ready"], true);
    // The embedded segment's objects do not survive a restart (its memory is new).
    let (_, b) = post(&app, "/v1/objects/exist", json!({"id": {"key": "hello"}})).await;
    assert_eq!(b["exists"], false);
    // The new embedded segment takes puts at its new endpoint.
    let (_, b) = post(&app, "/v1/objects/put_start", json!({"id": {"key": "again"}, "size": 10, "placement": "local_first", "preferred_segment": EMBEDDED_SEGMENT_ID})).await;
    assert_eq!(b["replicas"][0]["endpoint"], embedded["endpoint"]);
    // The recovered external owner gets a fresh TTL window from startup, then expires.
    let r = run_pass(&state.housekeeping(), state.now_ms() + 5_000).await;
    assert_eq!(r.owners_expired, vec!["ext".to_string()]);
    Node::stop(&state);
}

#[test]
fn the_embedded_segment_memory_is_lazy() {
    // 512 MiB of segment must not cost 512 MiB of RSS before it is used.
    fn rss_bytes() -> Option<u64> {
        let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
        let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
        Some(pages * 4096)
    }
    let Some(before) = rss_bytes() else { return };
    let settings = crescent_server::config::StoreSettings {
        embedded_segment_bytes: 512 << 20,
        ..Default::default()
    };
    let seg = crescent_server::embedded::EmbeddedSegment::start(
        &settings,
        TransportMetrics::unregistered(),
    )
    .unwrap();
    let after = rss_bytes().unwrap();
    assert!(
        after.saturating_sub(before) < 64 << 20,
        "RSS grew by {} bytes",
        after - before
    );
    seg.stop();
}
