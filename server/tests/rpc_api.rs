//! The RPC fast path in-process: discovery, every op with its error codes (the same as HTTP),
//! pipelining, and protocol violations closing only the offending connection.

mod common;

use common::rpc::{Rpc, MAX_BODY};
use common::*;
use crescent_wire::rpc::{
    check_server_hello, client_hello, encode_request, RpcOp, RpcStatus, HANDSHAKE_LEN, HEADER_LEN,
};
use crescent_wire::store::{
    Ack, BatchReply, BatchRequest, ExistReply, GetReply, HeartbeatReply, HeartbeatRequest,
    ItemResult, ObjectId, ObjectRequest, PutEndRequest, PutStartReply, ReleaseReply,
    ReleaseRequest, RemoveRequest, SizeReply, DEFAULT_TENANT,
};
use crescent_wire::{ApiError, ErrorCode};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn id(key: &str) -> ObjectId {
    ObjectId::new(key)
}

fn put_start_body(key: &str, size: u64) -> Value {
    json!({"id": {"key": key}, "size": size})
}

fn code(r: Result<impl std::fmt::Debug, ApiError>) -> ErrorCode {
    r.expect_err("refused").code
}

#[actix_web::test]
async fn discovery_routes_advertise_the_listener() {
    // The public /healthz names the listener only in open mode: with [auth], the
    // authenticated GET /v1/rpc does.
    for open in [false, true] {
        let t = tempfile::tempdir().unwrap();
        let c = if open {
            open_config(t.path())
        } else {
            config(t.path())
        };
        let state = start(&c);
        let app = app_for(&state).await;
        let (s, b) = post(&app, "/v1/rpc", json!({})).await;
        assert_eq!(s, 404, "POST is not a route: {b}");
        let resp = app
            .call(
                actix_web::test::TestRequest::get().uri("/v1/rpc"),
                state.admin_token(),
            )
            .await;
        assert_eq!(resp.status().as_u16(), 404, "off until started");
        assert!(get_json(&app, "/healthz").await.get("rpc").is_none());

        let addr = state
            .start_rpc("127.0.0.1:0".parse().unwrap(), MAX_BODY, None)
            .unwrap();
        assert_ne!(addr.port(), 0);
        let info = get_json(&app, "/v1/rpc").await;
        assert_eq!(info["address"], addr.to_string());
        assert_eq!(info["version"], crescent_wire::rpc::RPC_VERSION);
        let health = get_json(&app, "/healthz").await;
        let advertised = open.then(|| addr.to_string());
        assert_eq!(
            health["rpc"].as_str(),
            advertised.as_deref(),
            "open: {open}"
        );
        crescent_server::Node::stop(&state);
    }
}

#[actix_web::test]
async fn every_op_answers_like_its_http_route() {
    let t = tempfile::tempdir().unwrap();
    let state = start(&config(t.path()));
    let app = app_for(&state).await;
    owner_with_segment(&app, "o1", "seg1", 1 << 20).await;
    state
        .start_rpc("127.0.0.1:0".parse().unwrap(), MAX_BODY, None)
        .unwrap();
    let mut rpc = Rpc::client(&state, DEFAULT_TENANT).await;

    // put_start / put_end, then read back through RPC and HTTP alike.
    let started: PutStartReply = rpc
        .call(RpcOp::PutStart, &put_start_body("a", 100))
        .await
        .unwrap();
    assert!(!started.already_exists);
    assert_eq!(started.replicas.len(), 1);
    let end = PutEndRequest {
        id: id("a"),
        put_id: started.put_id,
    };
    let wrong = PutEndRequest {
        id: id("a"),
        put_id: started.put_id + 1000,
    };
    let rpc_code = code(rpc.call::<_, Ack>(RpcOp::PutEnd, &wrong).await);
    let (s, b) = post(
        &app,
        "/v1/objects/put_end",
        serde_json::to_value(&wrong).unwrap(),
    )
    .await;
    assert_eq!(s, rpc_code.http_status(), "{b}");
    assert_eq!(b["code"], rpc_code.as_str(), "the same refusal both ways");
    let _: Ack = rpc.call(RpcOp::PutEnd, &end).await.unwrap();
    let got: GetReply = rpc
        .call(RpcOp::Get, &ObjectRequest { id: id("a") })
        .await
        .unwrap();
    assert_eq!(got.size, 100);
    assert_eq!(got.replicas[0].segment_id, "seg1");
    let (s, b) = post(&app, "/v1/objects/size", json!({"id": {"key": "a"}})).await;
    assert_eq!((s, b["size"].clone()), (200, json!(100)));
    let e: ExistReply = rpc
        .call(RpcOp::Exist, &ObjectRequest { id: id("a") })
        .await
        .unwrap();
    assert!(e.exists);
    let sz: SizeReply = rpc
        .call(RpcOp::Size, &ObjectRequest { id: id("a") })
        .await
        .unwrap();
    assert_eq!(sz.size, 100);

    // Errors carry the HTTP route's codes.
    let missing = ObjectRequest { id: id("missing") };
    assert_eq!(
        code(rpc.call::<_, GetReply>(RpcOp::Get, &missing).await),
        ErrorCode::NotFound
    );
    assert_eq!(
        code(rpc.call::<_, SizeReply>(RpcOp::Size, &missing).await),
        ErrorCode::NotFound
    );
    let e: ExistReply = rpc.call(RpcOp::Exist, &missing).await.unwrap();
    assert!(!e.exists);
    let (s, b) = post(&app, "/v1/objects/get", json!({"id": {"key": "missing"}})).await;
    assert_eq!((s, b["code"].clone()), (404, json!("NOT_FOUND")));
    let empty_key = ObjectRequest { id: id("") };
    assert_eq!(
        code(rpc.call::<_, ExistReply>(RpcOp::Exist, &empty_key).await),
        ErrorCode::InvalidArgument
    );
    // A body of the wrong shape is INVALID_ARGUMENT and the connection stays usable.
    assert_eq!(
        code(
            rpc.call::<_, GetReply>(RpcOp::Get, &json!({"nope": 1}))
                .await
        ),
        ErrorCode::InvalidArgument
    );

    // put_revoke frees an unfinished put.
    let b_started: PutStartReply = rpc
        .call(RpcOp::PutStart, &put_start_body("b", 10))
        .await
        .unwrap();
    let b_end = PutEndRequest {
        id: id("b"),
        put_id: b_started.put_id,
    };
    let _: Ack = rpc.call(RpcOp::PutRevoke, &b_end).await.unwrap();
    assert_eq!(
        code(rpc.call::<_, Ack>(RpcOp::PutEnd, &b_end).await),
        ErrorCode::NotFound
    );

    // remove: refused while read-leased (the get above took a lease), forced it goes.
    let rm = RemoveRequest {
        id: id("a"),
        force: false,
    };
    assert_eq!(
        code(rpc.call::<_, Ack>(RpcOp::Remove, &rm).await),
        ErrorCode::Busy
    );
    let forced = RemoveRequest {
        id: id("a"),
        force: true,
    };
    let _: Ack = rpc.call(RpcOp::Remove, &forced).await.unwrap();
    assert_eq!(
        code(rpc.call::<_, Ack>(RpcOp::Remove, &forced).await),
        ErrorCode::NotFound
    );

    // Batches: per-item answers, in order.
    let items: Vec<Value> = ["x", "y", ""]
        .iter()
        .map(|k| put_start_body(k, 64))
        .collect();
    let started: BatchReply<PutStartReply> = rpc
        .call(RpcOp::BatchPutStart, &json!({"items": items}))
        .await
        .unwrap();
    assert_eq!(started.items.len(), 3);
    let mut ends = Vec::new();
    for (k, r) in ["x", "y"].iter().zip(&started.items) {
        let ItemResult::Ok(r) = r else {
            panic!("{r:?}")
        };
        ends.push(PutEndRequest {
            id: id(k),
            put_id: r.put_id,
        });
    }
    assert!(matches!(
        &started.items[2],
        ItemResult::Err {
            code: ErrorCode::InvalidArgument,
            ..
        }
    ));
    let done: BatchReply<Ack> = rpc
        .call(RpcOp::BatchPutEnd, &BatchRequest { items: ends })
        .await
        .unwrap();
    assert!(done.items.iter().all(|r| matches!(r, ItemResult::Ok(_))));
    let asked = BatchRequest {
        items: ["x", "nope", "y"]
            .iter()
            .map(|k| ObjectRequest { id: id(k) })
            .collect(),
    };
    let got: BatchReply<GetReply> = rpc.call(RpcOp::BatchGet, &asked).await.unwrap();
    assert!(matches!(&got.items[0], ItemResult::Ok(g) if g.size == 64));
    assert!(matches!(
        &got.items[1],
        ItemResult::Err {
            code: ErrorCode::NotFound,
            ..
        }
    ));
    let ex: BatchReply<ExistReply> = rpc.call(RpcOp::BatchExist, &asked).await.unwrap();
    let flags: Vec<bool> = ex
        .items
        .iter()
        .map(|r| matches!(r, ItemResult::Ok(ExistReply { exists: true })))
        .collect();
    assert_eq!(flags, vec![true, false, true]);
    let c_started: PutStartReply = rpc
        .call(RpcOp::PutStart, &put_start_body("c", 8))
        .await
        .unwrap();
    let revoke = BatchRequest {
        items: vec![PutEndRequest {
            id: id("c"),
            put_id: c_started.put_id,
        }],
    };
    let revoked: BatchReply<Ack> = rpc.call(RpcOp::BatchPutRevoke, &revoke).await.unwrap();
    assert!(matches!(&revoked.items[0], ItemResult::Ok(_)));
    let rm = BatchRequest {
        items: ["x", "nope"]
            .iter()
            .map(|k| RemoveRequest {
                id: id(k),
                force: true,
            })
            .collect(),
    };
    let removed: BatchReply<Ack> = rpc.call(RpcOp::BatchRemove, &rm).await.unwrap();
    assert!(matches!(&removed.items[0], ItemResult::Ok(_)));
    assert!(matches!(
        &removed.items[1],
        ItemResult::Err {
            code: ErrorCode::NotFound,
            ..
        }
    ));
    let too_many = BatchRequest {
        items: (0..1025)
            .map(|i| RemoveRequest {
                id: id(&format!("k{i}")),
                force: false,
            })
            .collect(),
    };
    assert_eq!(
        code(
            rpc.call::<_, BatchReply<Ack>>(RpcOp::BatchRemove, &too_many)
                .await
        ),
        ErrorCode::InvalidArgument
    );

    // Heartbeats: a registered owner, an unknown one, a stale incarnation.
    let hb = |owner: &str, incarnation| HeartbeatRequest {
        owner_id: owner.into(),
        incarnation,
        releases_applied: None,
    };
    // Each on a connection with its owner's token.
    let mut o1 = Rpc::owner(&state, "o1").await;
    let r: HeartbeatReply = o1.call(RpcOp::Heartbeat, &hb("o1", 1)).await.unwrap();
    assert!(r.interval_ms > 0);
    let mut ghost = Rpc::owner(&state, "ghost").await;
    assert_eq!(
        code(
            ghost
                .call::<_, HeartbeatReply>(RpcOp::Heartbeat, &hb("ghost", 1))
                .await
        ),
        ErrorCode::NotFound
    );
    assert_eq!(
        code(
            o1.call::<_, HeartbeatReply>(RpcOp::Heartbeat, &hb("o1", 0))
                .await
        ),
        ErrorCode::StaleGeneration
    );

    // Counted by op and outcome.
    let m = &state.metrics.rpc_requests;
    assert_eq!(m.with_label_values(&["get", "OK"]).get(), 1);
    assert_eq!(m.with_label_values(&["get", "NOT_FOUND"]).get(), 1);
    assert_eq!(m.with_label_values(&["get", "INVALID_ARGUMENT"]).get(), 1);
    assert!(state
        .metrics
        .render()
        .contains("crescent_rpc_request_seconds"));
    crescent_server::Node::stop(&state);
}

#[actix_web::test]
async fn released_leases_let_a_remove_through_over_rpc_and_http() {
    let t = tempfile::tempdir().unwrap();
    let state = start(&config(t.path()));
    let app = app_for(&state).await;
    owner_with_segment(&app, "o1", "seg1", 1 << 20).await;
    state
        .start_rpc("127.0.0.1:0".parse().unwrap(), MAX_BODY, None)
        .unwrap();
    let mut rpc = Rpc::client(&state, DEFAULT_TENANT).await;
    let mut releases = Vec::new();
    for key in ["r1", "r2", "r3"] {
        let started: PutStartReply = rpc
            .call(RpcOp::PutStart, &put_start_body(key, 10))
            .await
            .unwrap();
        let end = PutEndRequest {
            id: id(key),
            put_id: started.put_id,
        };
        let _: Ack = rpc.call(RpcOp::PutEnd, &end).await.unwrap();
        let got: GetReply = rpc
            .call(RpcOp::Get, &ObjectRequest { id: id(key) })
            .await
            .unwrap();
        assert_eq!(got.put_id, started.put_id);
        releases.push(ReleaseRequest {
            id: id(key),
            put_id: got.put_id,
            lease_until_ms: got.lease_until_ms,
            staged_token: None,
        });
    }
    let leased = RemoveRequest {
        id: id("r1"),
        force: false,
    };
    assert_eq!(
        code(rpc.call::<_, Ack>(RpcOp::Remove, &leased).await),
        ErrorCode::Busy
    );
    // One release over RPC, one over HTTP, one in a batch: each lets its remove through.
    let r: ReleaseReply = rpc.call(RpcOp::Release, &releases[0]).await.unwrap();
    assert!(r.released);
    let again: ReleaseReply = rpc.call(RpcOp::Release, &releases[0]).await.unwrap();
    assert!(!again.released, "a get is released once");
    let (s, b) = post(
        &app,
        "/v1/objects/release",
        serde_json::to_value(&releases[1]).unwrap(),
    )
    .await;
    assert_eq!((s, b["released"].clone()), (200, json!(true)), "{b}");
    let batch = BatchRequest {
        items: vec![releases[2].clone()],
    };
    let done: BatchReply<ReleaseReply> = rpc.call(RpcOp::BatchRelease, &batch).await.unwrap();
    assert_eq!(
        done.items,
        vec![ItemResult::Ok(ReleaseReply { released: true })]
    );
    for key in ["r1", "r2", "r3"] {
        let rm = RemoveRequest {
            id: id(key),
            force: false,
        };
        let _: Ack = rpc.call(RpcOp::Remove, &rm).await.unwrap();
    }
    // Unknown keys and bad input answer like every object op.
    assert_eq!(
        code(
            rpc.call::<_, ReleaseReply>(RpcOp::Release, &releases[0])
                .await
        ),
        ErrorCode::NotFound
    );
    let mut bad = releases[0].clone();
    bad.id = id("");
    assert_eq!(
        code(rpc.call::<_, ReleaseReply>(RpcOp::Release, &bad).await),
        ErrorCode::InvalidArgument
    );
    crescent_server::Node::stop(&state);
}

#[actix_web::test]
async fn pipelined_requests_are_answered_in_order_by_id() {
    let t = tempfile::tempdir().unwrap();
    let state = start(&config(t.path()));
    state
        .start_rpc("127.0.0.1:0".parse().unwrap(), MAX_BODY, None)
        .unwrap();
    let mut rpc = Rpc::client(&state, DEFAULT_TENANT).await;
    let mut buf = Vec::new();
    for (i, key) in ["p1", "", "p3"].iter().enumerate() {
        encode_request(
            &mut buf,
            RpcOp::Exist,
            100 + i as u64,
            &ObjectRequest { id: id(key) },
        )
        .unwrap();
    }
    rpc.stream.write_all(&buf).await.unwrap();
    let answers = [rpc.recv().await, rpc.recv().await, rpc.recv().await];
    let ids: Vec<u64> = answers.iter().map(|a| a.1).collect();
    assert_eq!(ids, vec![100, 101, 102]);
    let statuses: Vec<RpcStatus> = answers.iter().map(|a| a.0).collect();
    assert_eq!(
        statuses,
        vec![RpcStatus::Ok, RpcStatus::Error, RpcStatus::Ok]
    );
    crescent_server::Node::stop(&state);
}

#[actix_web::test]
async fn malformed_input_closes_only_that_connection() {
    let t = tempfile::tempdir().unwrap();
    let state = start(&config(t.path()));
    let addr = state
        .start_rpc("127.0.0.1:0".parse().unwrap(), 1024, None)
        .unwrap();
    let mut good = Rpc::client(&state, DEFAULT_TENANT).await;
    let probe = ObjectRequest { id: id("k") };
    let e: ExistReply = good.call(RpcOp::Exist, &probe).await.unwrap();
    assert!(!e.exists);

    // An unknown op.
    let mut bad = Rpc::client(&state, DEFAULT_TENANT).await;
    let mut buf = Vec::new();
    encode_request(&mut buf, RpcOp::Exist, 1, &probe).unwrap();
    buf[4] = 0xEE;
    bad.stream.write_all(&buf).await.unwrap();
    assert!(bad.closed_by_server().await);

    // A frame longer than the limit: answered PAYLOAD_TOO_LARGE under its id, then closed.
    let mut big = Rpc::client(&state, DEFAULT_TENANT).await;
    let mut header = [0u8; HEADER_LEN];
    header[..4].copy_from_slice(&(1024u32 + 100).to_le_bytes());
    header[4] = RpcOp::Exist as u8;
    header[5..13].copy_from_slice(&42u64.to_le_bytes());
    big.stream.write_all(&header).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(
        std::time::Duration::from_secs(2),
        big.stream.read_to_end(&mut answer),
    )
    .await
    .expect("closed promptly")
    .unwrap();
    let head =
        crescent_wire::rpc::FrameHeader::parse(&answer[..HEADER_LEN].try_into().unwrap(), 1 << 20)
            .unwrap();
    assert_eq!((head.tag, head.request_id), (RpcStatus::Error as u8, 42));
    let error: crescent_wire::ApiError =
        crescent_wire::rpc::decode_body(&answer[HEADER_LEN..]).unwrap();
    assert_eq!(error.code, ErrorCode::PayloadTooLarge, "{error}");

    // Not our protocol at all (an HTTP request on the RPC port).
    let mut http = TcpStream::connect(addr).await.unwrap();
    http.write_all(b"GET /healthz HTTP/1.1\r\n\r\n")
        .await
        .unwrap();
    let mut b = [0u8; 16];
    let n = tokio::time::timeout(std::time::Duration::from_secs(1), http.read(&mut b))
        .await
        .expect("closed promptly")
        .unwrap_or(0);
    assert_eq!(n, 0, "no answer, just a close");

    // A newer protocol version is told so, then closed.
    let mut newer = TcpStream::connect(addr).await.unwrap();
    let mut hello = client_hello();
    hello[4..6].copy_from_slice(&(crescent_wire::rpc::RPC_VERSION + 1).to_le_bytes());
    newer.write_all(&hello).await.unwrap();
    let mut answer = [0u8; HANDSHAKE_LEN];
    newer.read_exact(&mut answer).await.unwrap();
    assert!(check_server_hello(&answer).is_err());

    // The well-behaved connection is unaffected.
    let e: ExistReply = good.call(RpcOp::Exist, &probe).await.unwrap();
    assert!(!e.exists);
    // Each refusal is counted when its connection task ends, just after the close the client
    // saw: give the tasks a moment on a busy machine.
    let errors = &state.metrics.rpc_protocol_errors;
    let counted = || {
        (
            errors.with_label_values(&["frame"]).get(),
            errors.with_label_values(&["handshake"]).get(),
        )
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while counted() != (2, 2) && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(counted(), (2, 2), "(frame, handshake) protocol errors");
    crescent_server::Node::stop(&state);
}
