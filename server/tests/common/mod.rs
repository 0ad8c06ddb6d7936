//! Helpers shared by the object API tests: an in-process node and JSON / msgpack calls.
#![allow(dead_code)]

use std::sync::Arc;

use actix_web::dev::{Service, ServiceResponse};
use actix_web::test;
use crescent_server::node::{Node, NodeState};
use crescent_server::Config;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

/// A config for tests: the given data dir, no embedded segment unless asked for.
pub fn config(dir: &std::path::Path) -> Config {
    let mut c = Config {
        data_dir: dir.to_path_buf(),
        ..Config::default()
    };
    c.store.embedded_segment_bytes = 0;
    c
}

pub fn start(config: &Config) -> Arc<NodeState> {
    Node::start(config).expect("node starts")
}

#[macro_export]
macro_rules! app {
    ($state:expr) => {
        actix_web::test::init_service(
            actix_web::App::new()
                .app_data(actix_web::web::Data::new($state.clone()))
                .wrap_fn(crescent_server::api::observe)
                .configure(crescent_server::api::configure),
        )
        .await
    };
}

pub trait TestApp:
    Service<actix_http::Request, Response = ServiceResponse, Error = actix_web::Error>
{
}
impl<S> TestApp for S where
    S: Service<actix_http::Request, Response = ServiceResponse, Error = actix_web::Error>
{
}

/// POST a JSON body; (status, JSON answer).
pub async fn post(app: &impl TestApp, path: &str, body: Value) -> (u16, Value) {
    let req = test::TestRequest::post()
        .uri(path)
        .set_json(body)
        .to_request();
    let resp = test::call_service(app, req).await;
    let status = resp.status().as_u16();
    let bytes = test::read_body(resp).await;
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|e| panic!("{path}: not JSON ({e}): {bytes:?}"))
    };
    (status, body)
}

/// POST a msgpack body asking for msgpack back; (status, decoded answer or the JSON error).
pub async fn post_msgpack<Req: Serialize, Rep: DeserializeOwned>(
    app: &impl TestApp,
    path: &str,
    body: &Req,
) -> Result<Rep, (u16, Value)> {
    let req = test::TestRequest::post()
        .uri(path)
        .insert_header(("content-type", "application/msgpack"))
        .insert_header(("accept", "application/msgpack"))
        .set_payload(rmp_serde::to_vec_named(body).unwrap())
        .to_request();
    let resp = test::call_service(app, req).await;
    let status = resp.status().as_u16();
    let ct = resp
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let bytes = test::read_body(resp).await;
    if status == 200 {
        assert_eq!(ct, "application/msgpack", "{path}");
        Ok(rmp_serde::from_slice(&bytes).unwrap())
    } else {
        Err((status, serde_json::from_slice(&bytes).unwrap()))
    }
}

pub async fn get_json(app: &impl TestApp, path: &str) -> Value {
    let resp = test::call_service(app, test::TestRequest::get().uri(path).to_request()).await;
    assert_eq!(resp.status().as_u16(), 200, "{path}");
    test::read_body_json(resp).await
}

/// Registers an owner at a fake endpoint and mounts one segment of `size` bytes.
pub async fn owner_with_segment(app: &impl TestApp, owner: &str, segment: &str, size: u64) {
    let (s, b) = post(
        app,
        "/v1/owners/register",
        json!({"owner_id": owner, "endpoint": "127.0.0.1:9", "incarnation": 1}),
    )
    .await;
    assert_eq!(s, 200, "{b}");
    let (s, b) = post(
        app,
        "/v1/segments/mount",
        json!({"owner_id": owner, "segment_id": segment, "size": size}),
    )
    .await;
    assert_eq!(s, 200, "{b}");
}

/// put_start + put_end of `key` (JSON); returns the put id.
pub async fn put(app: &impl TestApp, id: Value, size: u64) -> u64 {
    let (s, b) = post(
        app,
        "/v1/objects/put_start",
        json!({"id": id, "size": size}),
    )
    .await;
    assert_eq!(s, 200, "{b}");
    let put_id = b["put_id"].as_u64().unwrap();
    let (s, b) = post(
        app,
        "/v1/objects/put_end",
        json!({"id": id, "put_id": put_id}),
    )
    .await;
    assert_eq!(s, 200, "{b}");
    put_id
}

/// Asserts a refusal's status and code.
pub fn refused(answer: (u16, Value), status: u16, code: &str) {
    assert_eq!(answer.0, status, "{}", answer.1);
    assert_eq!(answer.1["code"], code, "{}", answer.1);
}
pub mod rpc;
