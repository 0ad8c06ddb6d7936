//! The compact batch ops of the RPC fast path (`compact_batch_v1`) in-process: advertised in
//! `GET /v1/rpc`, answering like the classic ops (per-item errors, one bad item failing alone,
//! the same replicas), refusing unknown body versions without closing the connection, and,
//! when turned off, treated as unknown ops (the connection closes, as on an older server).

mod common;

use common::rpc::{Rpc, MAX_BODY};
use common::*;
use crescent_wire::rpc::{encode_request, RpcOp};
use crescent_wire::rpc_compact::{
    CompactAckReply, CompactGetReply, CompactKeysRequest, CompactPutEnd, CompactPutEndRequest,
    CompactPutItem, CompactPutOptions, CompactPutStartReply, CompactPutStartRequest,
    COMPACT_VERSION, FEATURE_COMPACT_BATCH, FEATURE_COMPACT_PUT_END,
};
use crescent_wire::store::{
    BatchReply, BatchRequest, DataType, GetReply, ItemResult, ObjectId, ObjectRequest, Placement,
    PutEndRequest, DEFAULT_TENANT,
};
use crescent_wire::ErrorCode;
use serde_json::json;
use tokio::io::AsyncWriteExt;

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
    let app = app_for(&state).await;
    owner_with_segment(&app, "o1", "s1", 1 << 20).await;
    state
        .start_rpc("127.0.0.1:0".parse().unwrap(), MAX_BODY, None)
        .unwrap();
    let info = get_json(&app, "/v1/rpc").await;
    assert_eq!(
        info["features"],
        json!([FEATURE_COMPACT_BATCH, FEATURE_COMPACT_PUT_END])
    );
    let mut rpc = Rpc::client(&state, "acme").await;

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

    // A put_start of an unknown body version, or over the batch limit, is refused whole
    // (nothing started) and the connection stays open.
    let over: Vec<String> = (0..1025).map(|i| format!("c{i}")).collect();
    let over: Vec<&str> = over.iter().map(String::as_str).collect();
    for refused in [
        CompactPutStartRequest {
            v: 99,
            ..put_request(&["c"], 100)
        },
        put_request(&over, 100),
    ] {
        let e = rpc
            .call::<_, CompactPutStartReply>(RpcOp::BatchPutStartCompact, &refused)
            .await
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidArgument);
    }
    let c = ObjectId::scoped(Some("acme"), None, "c");
    let e = rpc
        .call::<_, serde::de::IgnoredAny>(RpcOp::Get, &ObjectRequest { id: c })
        .await
        .unwrap_err();
    assert_eq!(
        e.code,
        ErrorCode::NotFound,
        "a refused batch starts nothing"
    );

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
        let r = &c.replicas()[0];
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
    let app = app_for(&state).await;
    state
        .start_rpc("127.0.0.1:0".parse().unwrap(), MAX_BODY, None)
        .unwrap();
    let info = get_json(&app, "/v1/rpc").await;
    assert!(info.get("features").is_none(), "{info}");
    // The classic batch get still works (an old client against this server).
    let mut rpc = Rpc::client(&state, DEFAULT_TENANT).await;
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

fn end_request(items: &[(&str, u64)]) -> CompactPutEndRequest {
    CompactPutEndRequest {
        v: COMPACT_VERSION,
        tenant: Some("acme".into()),
        domain: None,
        items: items
            .iter()
            .map(|(k, put_id)| CompactPutEnd(k.to_string(), *put_id))
            .collect(),
    }
}

/// Starts `keys` (100 bytes each) and returns their put ids.
async fn started(rpc: &mut Rpc, keys: &[&str]) -> Vec<u64> {
    let reply: CompactPutStartReply = rpc
        .call(RpcOp::BatchPutStartCompact, &put_request(keys, 100))
        .await
        .unwrap();
    reply
        .items
        .iter()
        .map(|item| match item {
            ItemResult::Ok(s) => s.0,
            other => panic!("{other:?}"),
        })
        .collect()
}

#[actix_web::test]
async fn compact_put_end_answers_like_the_classic_one() {
    let t = tempfile::tempdir().unwrap();
    let state = start(&config(t.path()));
    let app = app_for(&state).await;
    owner_with_segment(&app, "o1", "s1", 1 << 20).await;
    state
        .start_rpc("127.0.0.1:0".parse().unwrap(), MAX_BODY, None)
        .unwrap();
    let mut rpc = Rpc::client(&state, "acme").await;
    let ids = started(&mut rpc, &["a", "b", "c", "d"]).await;

    // One bad item (a put_id that is not the key's) fails alone, with the classic op's code.
    let ended: CompactAckReply = rpc
        .call(
            RpcOp::BatchPutEndCompact,
            &end_request(&[("a", ids[0]), ("b", ids[1] + 1000), ("c", ids[2])]),
        )
        .await
        .unwrap();
    assert_eq!(ended.v, COMPACT_VERSION);
    assert_eq!(ended.items.len(), 3, "one answer per item");
    assert!(
        ended.items[0].is_none() && ended.items[2].is_none(),
        "{ended:?}"
    );
    let compact_error = ended.items[1].clone().expect("the bad item fails");
    let classic: BatchReply<serde::de::IgnoredAny> = rpc
        .call(
            RpcOp::BatchPutEnd,
            &BatchRequest {
                items: vec![
                    PutEndRequest {
                        id: ObjectId::scoped(Some("acme"), None, "b"),
                        put_id: ids[1] + 1000,
                    },
                    PutEndRequest {
                        id: ObjectId::scoped(Some("acme"), None, "d"),
                        put_id: ids[3],
                    },
                ],
            },
        )
        .await
        .unwrap();
    let ItemResult::Err { code, .. } = &classic.items[0] else {
        panic!("{:?}", classic.items[0])
    };
    assert_eq!(compact_error.0, *code);
    assert!(matches!(classic.items[1], ItemResult::Ok(_)));

    // The ended puts are complete; the bad one is still open, and ends with its own put_id.
    let keys = CompactKeysRequest {
        v: COMPACT_VERSION,
        tenant: Some("acme".into()),
        domain: None,
        keys: vec!["a".into(), "c".into(), "d".into()],
    };
    let got: CompactGetReply = rpc.call(RpcOp::BatchGetCompact, &keys).await.unwrap();
    assert!(
        got.items.iter().all(|i| matches!(i, ItemResult::Ok(_))),
        "{got:?}"
    );
    let late: CompactAckReply = rpc
        .call(RpcOp::BatchPutEndCompact, &end_request(&[("b", ids[1])]))
        .await
        .unwrap();
    assert_eq!(late.items, vec![None]);

    // An unknown body version or an oversized batch is refused whole; the connection stays.
    let mut newer = end_request(&[("a", ids[0])]);
    newer.v = 2;
    let e = rpc
        .call::<_, CompactAckReply>(RpcOp::BatchPutEndCompact, &newer)
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidArgument);
    let huge: Vec<(String, u64)> = (0..1025).map(|i| (format!("k{i}"), 1)).collect();
    let huge: Vec<(&str, u64)> = huge.iter().map(|(k, p)| (k.as_str(), *p)).collect();
    let e = rpc
        .call::<_, CompactAckReply>(RpcOp::BatchPutEndCompact, &end_request(&huge))
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidArgument);
    let still: CompactAckReply = rpc
        .call(RpcOp::BatchPutEndCompact, &end_request(&[]))
        .await
        .unwrap();
    assert!(still.items.is_empty());
    crescent_server::Node::stop(&state);
}

#[actix_web::test]
async fn without_the_put_end_feature_op_19_is_unknown_and_ops_17_18_still_served() {
    let t = tempfile::tempdir().unwrap();
    let mut c = config(t.path());
    c.store.rpc_compact_put_end = false;
    let state = start(&c);
    let app = app_for(&state).await;
    owner_with_segment(&app, "o1", "s1", 1 << 20).await;
    state
        .start_rpc("127.0.0.1:0".parse().unwrap(), MAX_BODY, None)
        .unwrap();
    let info = get_json(&app, "/v1/rpc").await;
    assert_eq!(info["features"], json!([FEATURE_COMPACT_BATCH]));
    let mut rpc = Rpc::client(&state, "acme").await;
    let ids = started(&mut rpc, &["a"]).await;
    let mut buf = Vec::new();
    encode_request(
        &mut buf,
        RpcOp::BatchPutEndCompact,
        9,
        &end_request(&[("a", ids[0])]),
    )
    .unwrap();
    rpc.stream.write_all(&buf).await.unwrap();
    assert!(rpc.closed_by_server().await);
    crescent_server::Node::stop(&state);
}
