//! The compact batch ops of the RPC fast path (`compact_batch_v1`) in-process: advertised in
//! `GET /v1/rpc`, answering like the classic ops (per-item errors, one bad item failing alone,
//! the same replicas), refusing unknown body versions without closing the connection, and,
//! when turned off, treated as unknown ops (the connection closes, as on an older server).

mod common;

use std::net::SocketAddr;

use common::*;
use crescent_wire::rpc::{
    check_server_hello, client_hello, decode_body, encode_request, FrameHeader, RpcOp, RpcStatus,
    HANDSHAKE_LEN, HEADER_LEN,
};
use crescent_wire::rpc_compact::{
    CompactGetReply, CompactKeysRequest, CompactPutItem, CompactPutOptions, CompactPutStartReply,
    CompactPutStartRequest, COMPACT_VERSION, FEATURE_COMPACT_BATCH,
};
use crescent_wire::store::{
    BatchReply, BatchRequest, DataType, GetReply, ItemResult, ObjectId, ObjectRequest, Placement,
    PutEndRequest,
};
use crescent_wire::{ApiError, ErrorCode};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const MAX_BODY: usize = 1 << 20;

struct Rpc {
    stream: TcpStream,
    next_id: u64,
}

impl Rpc {
    async fn connect(addr: SocketAddr) -> Rpc {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(&client_hello()).await.unwrap();
        let mut hello = [0u8; HANDSHAKE_LEN];
        stream.read_exact(&mut hello).await.unwrap();
        check_server_hello(&hello).unwrap();
        Rpc { stream, next_id: 1 }
    }

    async fn call<B: Serialize, T: DeserializeOwned>(
        &mut self,
        op: RpcOp,
        body: &B,
    ) -> Result<T, ApiError> {
        let id = self.next_id;
        self.next_id += 1;
        let mut buf = Vec::new();
        encode_request(&mut buf, op, id, body).unwrap();
        self.stream.write_all(&buf).await.unwrap();
        let mut h = [0u8; HEADER_LEN];
        self.stream.read_exact(&mut h).await.unwrap();
        let h = FrameHeader::parse(&h, MAX_BODY).unwrap();
        let mut body = vec![0u8; h.body_len];
        self.stream.read_exact(&mut body).await.unwrap();
        assert_eq!(h.request_id, id);
        match RpcStatus::from_u8(h.tag).unwrap() {
            RpcStatus::Ok => Ok(decode_body(&body).unwrap()),
            RpcStatus::Error => Err(decode_body(&body).unwrap()),
        }
    }

    async fn closed_by_server(&mut self) -> bool {
        let mut b = [0u8; 1];
        matches!(
            tokio::time::timeout(std::time::Duration::from_secs(1), self.stream.read(&mut b)).await,
            Ok(Ok(0)) | Ok(Err(_))
        )
    }
}

fn put_request(keys: &[&str], size: u64) -> CompactPutStartRequest {
    CompactPutStartRequest {
        v: COMPACT_VERSION,
        tenant: Some("acme".into()),
        domain: None,
        options: CompactPutOptions {
            replicas: 1,
            placement: Placement::Random,
            preferred_segment: None,
            data_type: DataType::Kvcache,
            upsert: false,
            soft_pin_secs: None,
            hard_pin: false,
        },
        items: keys
            .iter()
            .map(|k| CompactPutItem(k.to_string(), size, Some(7)))
            .collect(),
    }
}

#[actix_web::test]
async fn compact_ops_answer_like_the_classic_ones() {
    let t = tempfile::tempdir().unwrap();
    let state = start(&config(t.path()));
    let app = app!(state);
    owner_with_segment(&app, "o1", "s1", 1 << 20).await;
    let addr = state
        .start_rpc("127.0.0.1:0".parse().unwrap(), MAX_BODY)
        .unwrap();
    let info = get_json(&app, "/v1/rpc").await;
    assert_eq!(info["features"], json!([FEATURE_COMPACT_BATCH]));
    let mut rpc = Rpc::connect(addr).await;

    // One bad item (an empty key) fails alone.
    let started: CompactPutStartReply = rpc
        .call(
            RpcOp::BatchPutStartCompact,
            &put_request(&["a", "", "b"], 100),
        )
        .await
        .unwrap();
    assert_eq!(started.v, COMPACT_VERSION);
    assert_eq!(started.segments.len(), 1, "one segment listed once");
    assert_eq!(started.segments[0].segment_id, "s1");
    assert_eq!(started.segments[0].owner_id, "o1");
    assert!(
        matches!(
            &started.items[1],
            ItemResult::Err {
                code: ErrorCode::InvalidArgument,
                ..
            }
        ),
        "{:?}",
        started.items[1]
    );
    let mut ends = Vec::new();
    for (key, item) in [("a", &started.items[0]), ("b", &started.items[2])] {
        let ItemResult::Ok(s) = item else {
            panic!("{item:?}")
        };
        assert!(!s.1, "a new key");
        assert_eq!(s.2.len(), 1);
        assert_eq!(s.2[0].0, 0, "refers to the listed segment");
        ends.push(PutEndRequest {
            id: ObjectId::scoped(Some("acme"), None, key),
            put_id: s.0,
        });
    }
    let _: BatchReply<serde::de::IgnoredAny> = rpc
        .call(RpcOp::BatchPutEnd, &BatchRequest { items: ends })
        .await
        .unwrap();

    // The same content again: already exists, nothing allocated.
    let again: CompactPutStartReply = rpc
        .call(RpcOp::BatchPutStartCompact, &put_request(&["a"], 100))
        .await
        .unwrap();
    assert!(matches!(&again.items[0], ItemResult::Ok(s) if s.1 && s.2.is_empty()));

    // Compact and classic batch get find the same replicas; a missing key fails alone.
    let keys = CompactKeysRequest {
        v: COMPACT_VERSION,
        tenant: Some("acme".into()),
        domain: None,
        keys: vec!["a".into(), "missing".into(), "b".into()],
    };
    let compact: CompactGetReply = rpc.call(RpcOp::BatchGetCompact, &keys).await.unwrap();
    let classic: BatchReply<GetReply> = rpc
        .call(
            RpcOp::BatchGet,
            &BatchRequest {
                items: keys
                    .keys
                    .iter()
                    .map(|k| ObjectRequest { id: keys.id(k) })
                    .collect(),
            },
        )
        .await
        .unwrap();
    assert!(matches!(
        &compact.items[1],
        ItemResult::Err {
            code: ErrorCode::NotFound,
            ..
        }
    ));
    for i in [0, 2] {
        let (ItemResult::Ok(c), ItemResult::Ok(g)) = (&compact.items[i], &classic.items[i]) else {
            panic!("{:?} {:?}", compact.items[i], classic.items[i])
        };
        assert_eq!(
            (c.size(), c.put_id(), c.checksum()),
            (g.size, g.put_id, g.checksum)
        );
        let r = c.replicas()[0];
        let seg = &compact.segments[r.0 as usize];
        assert_eq!(
            (seg.segment_id.as_str(), r.1),
            (g.replicas[0].segment_id.as_str(), g.replicas[0].offset)
        );
        assert!(c.lease_until_ms() > 0);
    }

    // An unknown body version is refused; the connection stays open.
    let newer = CompactKeysRequest {
        v: 99,
        ..keys.clone()
    };
    let e = rpc
        .call::<_, CompactGetReply>(RpcOp::BatchGetCompact, &newer)
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidArgument);
    // Over the batch limit: refused whole.
    let huge = CompactKeysRequest {
        keys: (0..1025).map(|i| format!("k{i}")).collect(),
        ..keys.clone()
    };
    let e = rpc
        .call::<_, CompactGetReply>(RpcOp::BatchGetCompact, &huge)
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidArgument);
    let still: CompactGetReply = rpc.call(RpcOp::BatchGetCompact, &keys).await.unwrap();
    assert_eq!(still.items.len(), 3);
    crescent_server::Node::stop(&state);
}

#[actix_web::test]
async fn turned_off_the_compact_ops_are_unknown_as_on_an_older_server() {
    let t = tempfile::tempdir().unwrap();
    let mut c = config(t.path());
    c.store.rpc_compact_batch = false;
    let state = start(&c);
    let app = app!(state);
    let addr = state
        .start_rpc("127.0.0.1:0".parse().unwrap(), MAX_BODY)
        .unwrap();
    let info = get_json(&app, "/v1/rpc").await;
    assert!(info.get("features").is_none(), "{info}");
    // The classic batch get still works (an old client against this server).
    let mut rpc = Rpc::connect(addr).await;
    let classic: BatchReply<GetReply> = rpc
        .call(
            RpcOp::BatchGet,
            &BatchRequest {
                items: vec![ObjectRequest {
                    id: ObjectId::new("x"),
                }],
            },
        )
        .await
        .unwrap();
    assert!(matches!(
        &classic.items[0],
        ItemResult::Err {
            code: ErrorCode::NotFound,
            ..
        }
    ));
    let keys = CompactKeysRequest {
        v: COMPACT_VERSION,
        tenant: None,
        domain: None,
        keys: vec!["x".into()],
    };
    let mut buf = Vec::new();
    encode_request(&mut buf, RpcOp::BatchGetCompact, 9, &keys).unwrap();
    rpc.stream.write_all(&buf).await.unwrap();
    assert!(rpc.closed_by_server().await);
    crescent_server::Node::stop(&state);
}
