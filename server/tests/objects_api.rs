//! The object API in-process: every route in both body formats, batch forms, the error codes
//! of bad input, and tenant/domain isolation.

mod common;

use common::*;
use crescent_server::node::Node;
use crescent_wire::store::{
    Ack, BatchReply, BatchRequest, ExistReply, GetReply, ItemResult, ListReply, ListRequest,
    ObjectId, ObjectRequest, PutEndRequest, PutStartReply, PutStartRequest, SizeReply,
};
use serde_json::{json, Value};

fn put_start_req(key: &str, size: u64) -> PutStartRequest {
    serde_json::from_value(json!({"id": {"key": key}, "size": size})).unwrap()
}

#[actix_web::test]
async fn single_operations_round_trip_in_json() {
    let t = tempfile::tempdir().unwrap();
    let state = start(&config(t.path()));
    let app = app_for(&state).await;
    owner_with_segment(&app, "o1", "seg1", 1 << 20).await;

    let (s, b) = post(
        &app,
        "/v1/objects/put_start",
        json!({"id": {"key": "k1"}, "size": 100}),
    )
    .await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["already_exists"], false);
    let replicas = b["replicas"].as_array().unwrap();
    assert_eq!(replicas.len(), 1);
    assert_eq!(replicas[0]["segment_id"], "seg1");
    assert_eq!(replicas[0]["owner_id"], "o1");
    assert_eq!(replicas[0]["endpoint"], "127.0.0.1:9");
    assert_eq!(replicas[0]["length"], 100);
    assert_eq!(replicas[0]["state"], "PROCESSING");
    let put_id = b["put_id"].as_u64().unwrap();

    // A put in progress: not readable yet, but listed as incomplete.
    refused(
        post(&app, "/v1/objects/get", json!({"id": {"key": "k1"}})).await,
        409,
        "NOT_READY",
    );
    let (_, b) = post(&app, "/v1/objects/list", json!({})).await;
    assert_eq!(
        b["keys"],
        json!([{"key": "k1", "size": 100, "complete": false}])
    );

    let (s, b) = post(
        &app,
        "/v1/objects/put_end",
        json!({"id": {"key": "k1"}, "put_id": put_id}),
    )
    .await;
    assert_eq!((s, b.clone()), (200, json!({})));
    refused(
        post(
            &app,
            "/v1/objects/put_end",
            json!({"id": {"key": "k1"}, "put_id": put_id}),
        )
        .await,
        409,
        "CONFLICT",
    );
    refused(
        post(
            &app,
            "/v1/objects/put_end",
            json!({"id": {"key": "k1"}, "put_id": 999_999}),
        )
        .await,
        404,
        "NOT_FOUND",
    );

    // Same content again: an idempotent success.
    let (s, b) = post(
        &app,
        "/v1/objects/put_start",
        json!({"id": {"key": "k1"}, "size": 100}),
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(b["already_exists"], true);
    assert_eq!(b["replicas"], json!([]));

    let before = state.now_ms();
    let (s, b) = post(&app, "/v1/objects/get", json!({"id": {"key": "k1"}})).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["size"], 100);
    assert_eq!(b["replicas"][0]["state"], "COMPLETE");
    assert!(
        b["lease_until_ms"].as_i64().unwrap() >= before + 9_000,
        "{b}"
    );

    let (_, b) = post(&app, "/v1/objects/exist", json!({"id": {"key": "k1"}})).await;
    assert_eq!(b, json!({"exists": true}));
    let (_, b) = post(&app, "/v1/objects/exist", json!({"id": {"key": "nope"}})).await;
    assert_eq!(b, json!({"exists": false}));
    let (_, b) = post(&app, "/v1/objects/size", json!({"id": {"key": "k1"}})).await;
    assert_eq!(b, json!({"size": 100}));
    refused(
        post(&app, "/v1/objects/size", json!({"id": {"key": "nope"}})).await,
        404,
        "NOT_FOUND",
    );

    // Read-leased: remove refuses unless forced.
    refused(
        post(&app, "/v1/objects/remove", json!({"id": {"key": "k1"}})).await,
        429,
        "BUSY",
    );
    let (s, _) = post(
        &app,
        "/v1/objects/remove",
        json!({"id": {"key": "k1"}, "force": true}),
    )
    .await;
    assert_eq!(s, 200);
    refused(
        post(&app, "/v1/objects/remove", json!({"id": {"key": "k1"}})).await,
        404,
        "NOT_FOUND",
    );

    // Revoke frees the space of an abandoned put (k1's slot stays until its lease is over).
    let used = state.directory.stats().bytes_used;
    let (_, b) = post(
        &app,
        "/v1/objects/put_start",
        json!({"id": {"key": "gone"}, "size": 4096}),
    )
    .await;
    let put_id = b["put_id"].as_u64().unwrap();
    let (s, _) = post(
        &app,
        "/v1/objects/put_revoke",
        json!({"id": {"key": "gone"}, "put_id": put_id}),
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(state.directory.stats().bytes_used, used);

    // Listing pages and prefix removal.
    for i in 0..5 {
        put(&app, json!({"key": format!("p/{i}")}), 10).await;
    }
    put(&app, json!({"key": "q/0"}), 10).await;
    let (_, b) = post(
        &app,
        "/v1/objects/list",
        json!({"prefix": "p/", "limit": 2}),
    )
    .await;
    assert_eq!(b["keys"].as_array().unwrap().len(), 2);
    let next = b["next"].as_str().unwrap().to_string();
    let (_, b) = post(
        &app,
        "/v1/objects/list",
        json!({"prefix": "p/", "after": next, "limit": 10}),
    )
    .await;
    assert_eq!(b["keys"].as_array().unwrap().len(), 3);
    assert!(b.get("next").is_none(), "{b}");
    refused(
        post(&app, "/v1/objects/list", json!({"limit": 5000})).await,
        400,
        "INVALID_ARGUMENT",
    );
    let (s, b) = post(&app, "/v1/objects/remove_prefix", json!({"prefix": "p/"})).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b, json!({"removed": 5, "skipped": 0}));
    let (_, b) = post(&app, "/v1/objects/list", json!({})).await;
    assert_eq!(
        b["keys"],
        json!([{"key": "q/0", "size": 10, "complete": true}])
    );

    // Object operations journal nothing but what removes took from the owner's segment
    // (docs/rebuild.md, "Removes are journaled"): the start's incarnation, register and mount,
    // then one puts_removed for the remove and one for the remove_prefix.
    assert_eq!(state.journal.last_seq(), 5);
    let stats = get_json(&app, "/stats").await;
    assert_eq!(stats["store"]["objects"], 1);
    assert_eq!(stats["store"]["segments"], 1);
    assert_eq!(stats["store"]["bytes_capacity"], 1 << 20);
    Node::stop(&state);
}

#[actix_web::test]
async fn msgpack_bodies_and_batch_forms() {
    let t = tempfile::tempdir().unwrap();
    let state = start(&config(t.path()));
    let app = app_for(&state).await;
    owner_with_segment(&app, "o1", "seg1", 1 << 20).await;

    let started: PutStartReply =
        post_msgpack(&app, "/v1/objects/put_start", &put_start_req("m", 64))
            .await
            .unwrap();
    let _: Ack = post_msgpack(
        &app,
        "/v1/objects/put_end",
        &PutEndRequest {
            id: ObjectId::new("m"),
            put_id: started.put_id,
        },
    )
    .await
    .unwrap();
    let got: GetReply = post_msgpack(
        &app,
        "/v1/objects/get",
        &ObjectRequest {
            id: ObjectId::new("m"),
        },
    )
    .await
    .unwrap();
    assert_eq!(got.size, 64);
    let size: SizeReply = post_msgpack(
        &app,
        "/v1/objects/size",
        &ObjectRequest {
            id: ObjectId::new("m"),
        },
    )
    .await
    .unwrap();
    assert_eq!(size.size, 64);
    let list: ListReply = post_msgpack(
        &app,
        "/v1/objects/list",
        &ListRequest {
            tenant: None,
            domain: None,
            prefix: String::new(),
            after: None,
            limit: None,
        },
    )
    .await
    .unwrap();
    assert_eq!(list.keys.len(), 1);
    // Errors stay JSON with a stable code, whatever the request format.
    let err = post_msgpack::<_, GetReply>(
        &app,
        "/v1/objects/get",
        &ObjectRequest {
            id: ObjectId::new(""),
        },
    )
    .await
    .unwrap_err();
    assert_eq!(
        (err.0, err.1["code"].as_str()),
        (400, Some("INVALID_ARGUMENT"))
    );

    // Batch put: one bad item fails alone.
    let items = vec![
        put_start_req("b0", 10),
        put_start_req("", 10),
        put_start_req("b2", 20),
    ];
    let reply: BatchReply<PutStartReply> =
        post_msgpack(&app, "/v1/objects/batch/put_start", &BatchRequest { items })
            .await
            .unwrap();
    assert_eq!(reply.items.len(), 3);
    let ItemResult::Err { code, .. } = &reply.items[1] else {
        panic!("{:?}", reply.items[1])
    };
    assert_eq!(code.as_str(), "INVALID_ARGUMENT");
    let ends: Vec<PutEndRequest> = [0usize, 2]
        .iter()
        .map(|&i| match &reply.items[i] {
            ItemResult::Ok(r) => PutEndRequest {
                id: ObjectId::new(format!("b{i}")),
                put_id: r.put_id,
            },
            other => panic!("{other:?}"),
        })
        .chain([PutEndRequest {
            id: ObjectId::new("nope"),
            put_id: 1,
        }])
        .collect();
    let ended: BatchReply<Ack> = post_msgpack(
        &app,
        "/v1/objects/batch/put_end",
        &BatchRequest { items: ends },
    )
    .await
    .unwrap();
    assert!(matches!(ended.items[0], ItemResult::Ok(_)));
    assert!(matches!(ended.items[1], ItemResult::Ok(_)));
    assert!(
        matches!(&ended.items[2], ItemResult::Err { code, .. } if code.as_str() == "NOT_FOUND")
    );

    let ids: Vec<ObjectRequest> = ["b0", "b1", "b2"]
        .iter()
        .map(|k| ObjectRequest {
            id: ObjectId::new(*k),
        })
        .collect();
    let exist: BatchReply<ExistReply> = post_msgpack(
        &app,
        "/v1/objects/batch/exist",
        &BatchRequest { items: ids.clone() },
    )
    .await
    .unwrap();
    let flags: Vec<bool> = exist
        .items
        .iter()
        .map(|r| match r {
            ItemResult::Ok(e) => e.exists,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(flags, [true, false, true]);
    let got: BatchReply<GetReply> =
        post_msgpack(&app, "/v1/objects/batch/get", &BatchRequest { items: ids })
            .await
            .unwrap();
    assert!(matches!(&got.items[0], ItemResult::Ok(g) if g.size == 10));
    assert!(matches!(&got.items[1], ItemResult::Err { code, .. } if code.as_str() == "NOT_FOUND"));
    assert!(matches!(&got.items[2], ItemResult::Ok(g) if g.size == 20));

    // Batch forms in JSON too; remove honours per-item force (b0, b2 are leased by the get).
    let (s, b) = post(
        &app,
        "/v1/objects/batch/remove",
        json!({"items": [{"id": {"key": "b0"}}, {"id": {"key": "b2"}, "force": true}]}),
    )
    .await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["items"][0]["err"]["code"], "BUSY", "{b}");
    assert_eq!(b["items"][1], json!({"ok": {}}));
    let (_, b) = post(
        &app,
        "/v1/objects/batch/exist",
        json!({"items": [{"id": {"key": "b2"}}]}),
    )
    .await;
    assert_eq!(b["items"][0], json!({"ok": {"exists": false}}));
    let (_, b) = post(
        &app,
        "/v1/objects/batch/put_start",
        json!({"items": [{"id": {"key": "r"}, "size": 5}]}),
    )
    .await;
    let put_id = b["items"][0]["ok"]["put_id"].as_u64().unwrap();
    let (_, b) = post(
        &app,
        "/v1/objects/batch/put_revoke",
        json!({"items": [{"id": {"key": "r"}, "put_id": put_id}]}),
    )
    .await;
    assert_eq!(b["items"][0], json!({"ok": {}}));

    // Over the batch limit: refused whole, for every batch route.
    let too_many: Vec<Value> = (0..1025)
        .map(|i| json!({"id": {"key": format!("x{i}")}}))
        .collect();
    for route in [
        "/v1/objects/batch/get",
        "/v1/objects/batch/exist",
        "/v1/objects/batch/remove",
    ] {
        refused(
            post(&app, route, json!({"items": too_many})).await,
            400,
            "INVALID_ARGUMENT",
        );
    }
    let too_many: Vec<Value> = (0..1025)
        .map(|i| json!({"id": {"key": format!("x{i}")}, "size": 1}))
        .collect();
    refused(
        post(
            &app,
            "/v1/objects/batch/put_start",
            json!({"items": too_many}),
        )
        .await,
        400,
        "INVALID_ARGUMENT",
    );
    assert!(!state
        .directory
        .exist(&ObjectId::new("x0"), state.now_ms())
        .unwrap());
    Node::stop(&state);
}

#[actix_web::test]
async fn bad_input_has_stable_codes_and_loses_nothing() {
    let t = tempfile::tempdir().unwrap();
    let mut c = config(t.path());
    c.store.max_object_bytes = 1 << 20;
    let state = start(&c);
    let app = app_for(&state).await;

    // Nothing mounted yet: nowhere to place.
    refused(
        post(
            &app,
            "/v1/objects/put_start",
            json!({"id": {"key": "a"}, "size": 1}),
        )
        .await,
        503,
        "UNAVAILABLE",
    );
    owner_with_segment(&app, "o1", "seg1", 4 << 20).await;
    put(&app, json!({"key": "keep"}), 100).await;

    let long_key = "k".repeat(4097);
    for body in [
        json!({"id": {"key": ""}, "size": 1}),
        json!({"id": {"key": long_key}, "size": 1}),
        json!({"id": {"key": "a"}, "size": (1 << 20) + 1}),
        json!({"id": {"key": "a", "tenant": "bad tenant!"}, "size": 1}),
        json!({"id": {"key": "a", "domain": ""}, "size": 1}),
        json!({"id": {"key": "a"}}),
        json!({"id": {"key": "a"}, "size": 1, "placement": "nearest"}),
    ] {
        refused(
            post(&app, "/v1/objects/put_start", body).await,
            400,
            "INVALID_ARGUMENT",
        );
    }
    refused(
        post(
            &app,
            "/v1/objects/get",
            json!({"id": {"key": "a", "tenant": "x/y"}}),
        )
        .await,
        400,
        "INVALID_ARGUMENT",
    );
    refused(
        post(&app, "/v1/objects/list", json!({"tenant": "no spaces"})).await,
        400,
        "INVALID_ARGUMENT",
    );
    refused(
        post(&app, "/v1/objects/remove_prefix", json!({"prefix": ""})).await,
        400,
        "INVALID_ARGUMENT",
    );
    // An empty value is valid (docs/api.md "Empty values").
    put(&app, json!({"key": "empty"}), 0).await;
    let (s, b) = post(&app, "/v1/objects/size", json!({"id": {"key": "empty"}})).await;
    assert_eq!((s, b["size"].as_u64()), (200, Some(0)), "{b}");
    // A put in progress: NOT_READY for get, BUSY for a second put of the key.
    let (_, b) = post(
        &app,
        "/v1/objects/put_start",
        json!({"id": {"key": "w"}, "size": 10}),
    )
    .await;
    let put_id = b["put_id"].as_u64().unwrap();
    refused(
        post(&app, "/v1/objects/get", json!({"id": {"key": "w"}})).await,
        409,
        "NOT_READY",
    );
    refused(
        post(
            &app,
            "/v1/objects/put_start",
            json!({"id": {"key": "w"}, "size": 10}),
        )
        .await,
        429,
        "BUSY",
    );
    refused(
        post(
            &app,
            "/v1/objects/put_end",
            json!({"id": {"key": "w"}, "put_id": put_id + 100}),
        )
        .await,
        404,
        "NOT_FOUND",
    );
    // Different content for an existing key without upsert.
    refused(
        post(
            &app,
            "/v1/objects/put_start",
            json!({"id": {"key": "keep"}, "size": 7}),
        )
        .await,
        409,
        "CONFLICT",
    );

    // Unmount while a replica is read-leased: BUSY and nothing journaled.
    let seq = state.journal.last_seq();
    let (s, _) = post(&app, "/v1/objects/get", json!({"id": {"key": "keep"}})).await;
    assert_eq!(s, 200);
    refused(
        post(&app, "/v1/segments/unmount", json!({"segment_id": "seg1"})).await,
        429,
        "BUSY",
    );
    assert_eq!(state.journal.last_seq(), seq);
    let segs = get_json(&app, "/v1/segments").await;
    assert_eq!(segs["segments"][0]["segment_id"], "seg1");
    let (_, b) = post(&app, "/v1/objects/size", json!({"id": {"key": "keep"}})).await;
    assert_eq!(b["size"], 100);

    // The refusal came from the read lease: once it is over, the directory lets go.
    let later = state.now_ms() + 11_000;
    let report = state
        .directory
        .unmount_segment("seg1", false, later)
        .unwrap();
    assert_eq!(report.objects_dropped, 3, "keep, empty and the pending w");
    Node::stop(&state);
}
