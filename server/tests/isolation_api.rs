//! Tenant and domain isolation through the HTTP object API, and the credential checks in
//! front of it: with `[auth]` on, no token is UNAUTHENTICATED and a client naming another
//! tenant PERMISSION_DENIED, over HTTP and RPC; open mode asks for neither.

mod common;

use common::rpc::{Rpc, MAX_BODY};
use common::*;
use crescent_server::node::Node;
use crescent_wire::rpc::{RpcOp, HANDSHAKE_UNAUTHENTICATED};
use crescent_wire::store::{ExistReply, ObjectId, ObjectRequest};
use crescent_wire::ErrorCode;
use serde_json::json;

#[actix_web::test]
async fn tenants_and_domains_never_see_each_other() {
    let t = tempfile::tempdir().unwrap();
    let state = start(&config(t.path()));
    let app = app_for(&state).await;
    owner_with_segment(&app, "o1", "seg1", 1 << 20).await;
    let scopes = [
        json!({"key": "k"}),
        json!({"key": "k", "tenant": "acme"}),
        json!({"key": "k", "tenant": "acme", "domain": "d1"}),
        json!({"key": "k", "tenant": "acme", "domain": "d2"}),
    ];
    for (i, id) in scopes.iter().enumerate() {
        put(&app, id.clone(), 10 + i as u64).await;
    }
    for (i, id) in scopes.iter().enumerate() {
        let (_, b) = post(&app, "/v1/objects/size", json!({"id": id})).await;
        assert_eq!(b["size"], 10 + i as u64, "{id}");
    }
    let (_, b) = post(
        &app,
        "/v1/objects/list",
        json!({"tenant": "acme", "domain": "d1"}),
    )
    .await;
    assert_eq!(
        b["keys"],
        json!([{"key": "k", "size": 12, "complete": true}])
    );
    let (_, b) = post(&app, "/v1/objects/list", json!({"tenant": "other"})).await;
    assert_eq!(b["keys"], json!([]));
    let (_, b) = post(
        &app,
        "/v1/objects/exist",
        json!({"id": {"key": "k", "tenant": "other"}}),
    )
    .await;
    assert_eq!(b["exists"], false);

    // Removing in one domain leaves the others.
    let (s, _) = post(&app, "/v1/objects/remove", json!({"id": scopes[2]})).await;
    assert_eq!(s, 200);
    let (s, b) = post(
        &app,
        "/v1/objects/remove_prefix",
        json!({"tenant": "acme", "prefix": "k"}),
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(b["removed"], 1);
    let live: Vec<bool> = futures::future::join_all(scopes.iter().map(|id| {
        let app = &app;
        async move {
            post(app, "/v1/objects/exist", json!({"id": id})).await.1["exists"]
                .as_bool()
                .unwrap()
        }
    }))
    .await;
    assert_eq!(live, [true, false, false, true]);
    Node::stop(&state);
}

#[actix_web::test]
async fn no_token_is_unauthenticated_and_another_tenant_is_denied() {
    let t = tempfile::tempdir().unwrap();
    let state = start(&config(t.path()));
    let app = app_for(&state).await;
    let exist = "/v1/objects/exist";
    let other = json!({"id": {"key": "k", "tenant": "other"}});
    refused(
        post_as(&app, exist, other.clone(), None).await,
        401,
        "UNAUTHENTICATED",
    );
    refused(
        post_as(&app, exist, other.clone(), Some("not-a-token".into())).await,
        401,
        "UNAUTHENTICATED",
    );
    let acme = app.client_token("acme");
    refused(
        post_as(&app, exist, other.clone(), acme.clone()).await,
        403,
        "PERMISSION_DENIED",
    );
    let (s, b) = post_as(&app, exist, json!({"id": {"key": "k"}}), acme).await;
    assert_eq!((s, b["exists"].as_bool()), (200, Some(false)), "{b}");

    // The RPC fast path: the handshake wants a token; a connection's token binds its tenant.
    let addr = state
        .start_rpc("127.0.0.1:0".parse().unwrap(), MAX_BODY, None)
        .unwrap();
    let Err((status, Some(e))) = Rpc::try_connect(addr, None).await else {
        panic!("a handshake without a token is refused with its reason")
    };
    assert_eq!(
        (status, e.code),
        (HANDSHAKE_UNAUTHENTICATED, ErrorCode::Unauthenticated)
    );
    let mut rpc = Rpc::connect(addr, state.client_token("acme").as_deref()).await;
    let other = ObjectRequest {
        id: ObjectId::scoped(Some("other"), None, "k"),
    };
    let e = rpc
        .call::<_, ExistReply>(RpcOp::Exist, &other)
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::PermissionDenied, "{e}");
    Node::stop(&state);
}

#[actix_web::test]
async fn open_mode_asks_for_no_token() {
    let t = tempfile::tempdir().unwrap();
    let state = start(&open_config(t.path()));
    let app = app_for(&state).await;
    let (s, b) = post_as(
        &app,
        "/v1/objects/exist",
        json!({"id": {"key": "k", "tenant": "other"}}),
        None,
    )
    .await;
    assert_eq!((s, b["exists"].as_bool()), (200, Some(false)), "{b}");
    let addr = state
        .start_rpc("127.0.0.1:0".parse().unwrap(), MAX_BODY, None)
        .unwrap();
    let mut rpc = Rpc::connect(addr, None).await;
    let e: ExistReply = rpc
        .call(
            RpcOp::Exist,
            &ObjectRequest {
                id: ObjectId::new("k"),
            },
        )
        .await
        .unwrap();
    assert!(!e.exists);
    Node::stop(&state);
}

/// `POST /v1/objects/scan` lists every object of every tenant and domain for an admin, and
/// is refused to a client, even for its own tenant (docs/api.md, "Scanning every object").
#[actix_web::test]
async fn a_scan_sees_every_scope_and_is_for_admins_only() {
    let t = tempfile::tempdir().unwrap();
    let state = start(&config(t.path()));
    let app = app_for(&state).await;
    owner_with_segment(&app, "o1", "seg1", 1 << 20).await;
    let ids = [
        json!({"key": "a"}),
        json!({"key": "b", "tenant": "acme"}),
        json!({"key": "c", "tenant": "acme", "domain": "d1"}),
    ];
    for id in &ids {
        put(&app, id.clone(), 7).await;
    }
    let mut seen = Vec::new();
    let mut body = json!({"limit": 1});
    loop {
        let (s, b) = post(&app, "/v1/objects/scan", body.clone()).await;
        assert_eq!((s, &b["version"]), (200, &json!(1)), "{b}");
        for o in b["objects"].as_array().unwrap() {
            assert_eq!((&o["size"], &o["complete"]), (&json!(7), &json!(true)));
            seen.push((o["tenant"].clone(), o["domain"].clone(), o["key"].clone()));
        }
        match b.get("next") {
            Some(next) => body = json!({"limit": 1, "cursor": next}),
            None => break,
        }
    }
    seen.sort_by_key(|(_, _, k)| k.as_str().unwrap().to_string());
    let d1 = json!("d1");
    assert_eq!(
        seen,
        [
            (json!("default"), json!(null), json!("a")),
            (json!("acme"), json!(null), json!("b")),
            (json!("acme"), d1, json!("c")),
        ]
    );
    let acme = app.client_token("acme");
    refused(
        post_as(&app, "/v1/objects/scan", json!({}), acme).await,
        403,
        "PERMISSION_DENIED",
    );
    let (s, b) = post(&app, "/v1/objects/scan", json!({"version": 2})).await;
    assert_eq!((s, &b["code"]), (400, &json!("INVALID_ARGUMENT")), "{b}");
    Node::stop(&state);
}
