//! Tenant and domain isolation through the HTTP object API.

mod common;

use common::*;
use crescent_server::node::Node;
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
