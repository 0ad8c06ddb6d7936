//! Helpers shared by the in-process API tests: a node whose HTTP app is the one crescentd
//! serves (`crescent_server::api::app`, auth guard included), with `[auth]` on unless a test's
//! subject is open mode, and JSON / msgpack calls carrying the token a real caller would send
//! (docs/security.md): a client's of the tenant the body names on object routes, the owner's
//! of the `owner_id` it names on owner routes, an admin's elsewhere, none on public routes.
#![allow(dead_code)]

pub mod rpc;

use std::ops::Deref;
use std::path::Path;
use std::sync::Arc;

use actix_web::dev::{Service, ServiceResponse};
use actix_web::{test, web};
use crescent_auth::Operation;
use crescent_server::api::auth_target::Body;
use crescent_server::api::wire::BodyLimits;
use crescent_server::auth::routes::{operation_of, PUBLIC};
use crescent_server::node::{Node, NodeState};
use crescent_server::Config;
use crescent_tests::auth::{AuthKey, DEFAULT_TENANT};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

/// A config for a test in `dir`: data in `dir/data`, `[auth]` on with the signing key
/// `dir/auth.key` (outside the data dir, 32 random bytes, mode 0600; made on the first call and
/// kept, so a restart on `dir` keeps its key), no embedded segment unless asked for.
pub fn config(dir: &Path) -> Config {
    let mut c = open_config(dir);
    c.auth.secret_file = Some(AuthKey::at(&dir.join("auth.key")).path);
    c
}

/// [`config`] without `[auth]`: only for tests whose subject is open mode.
pub fn open_config(dir: &Path) -> Config {
    let mut c = Config {
        data_dir: dir.join("data"),
        ..Config::default()
    };
    c.store.embedded_segment_bytes = 0;
    c
}

/// A started node, the config it started with and, with `[auth]` on, the key the harness
/// issues its tokens from. Derefs to the node's state.
pub struct TestNode {
    pub state: Arc<NodeState>,
    pub config: Config,
    pub key: Option<AuthKey>,
}

impl Deref for TestNode {
    type Target = Arc<NodeState>;

    fn deref(&self) -> &Arc<NodeState> {
        &self.state
    }
}

impl TestNode {
    /// An `admin` token; `None` in open mode.
    pub fn admin_token(&self) -> Option<String> {
        self.key.as_ref().map(AuthKey::admin)
    }

    /// A `client` token of `tenant`; `None` in open mode.
    pub fn client_token(&self, tenant: &str) -> Option<String> {
        self.key.as_ref().map(|k| k.client(tenant))
    }

    /// An `owner` token for owner id `owner`; `None` in open mode.
    pub fn owner_token(&self, owner: &str) -> Option<String> {
        self.key.as_ref().map(|k| k.owner(owner))
    }
}

pub fn start(config: &Config) -> TestNode {
    let state = Node::start(config).expect("node starts");
    let key = config.auth.secret_file.as_deref().map(AuthKey::at);
    TestNode {
        state,
        config: config.clone(),
        key,
    }
}

pub trait TestService:
    Service<actix_http::Request, Response = ServiceResponse, Error = actix_web::Error>
{
}
impl<S> TestService for S where
    S: Service<actix_http::Request, Response = ServiceResponse, Error = actix_web::Error>
{
}

/// A node's HTTP app in-process, and the key the tokens of its requests are issued from.
pub struct TestApp<S> {
    pub service: S,
    key: Option<AuthKey>,
}

/// `node`'s HTTP app as crescentd's workers serve it, with `node`'s body bounds.
pub async fn app_for(node: &TestNode) -> TestApp<impl TestService> {
    let app = crescent_server::api::app(
        web::Data::new(node.state.clone()),
        BodyLimits::of(&node.config),
    );
    TestApp {
        service: test::init_service(app).await,
        key: node.key.clone(),
    }
}

impl<S: TestService> TestApp<S> {
    /// The token the harness sends with `body` on `path` (module docs); `None` in open mode.
    pub fn token_for(&self, path: &str, body: &Value) -> Option<String> {
        use Operation::*;
        let key = self.key.as_ref()?;
        if PUBLIC.contains(&path) {
            return None;
        }
        let token = match operation_of(path) {
            Some(ObjectRead | ObjectWrite | WeightRead) => {
                let named = Body::Json(body.clone()).named_tenants();
                let tenant = named.iter().find(|t| !t.is_empty());
                key.client(tenant.map_or(DEFAULT_TENANT, String::as_str))
            }
            Some(
                OwnerRegister | OwnerHeartbeat | SegmentMount | SegmentUnmount | RebuildReplay
                | RebuildComplete,
            ) => match body["owner_id"].as_str().filter(|o| !o.is_empty()) {
                Some(owner) => key.owner(owner),
                None => key.admin(),
            },
            _ => key.admin(),
        };
        Some(token)
    }

    /// An `admin` token; `None` in open mode.
    pub fn admin_token(&self) -> Option<String> {
        self.key.as_ref().map(AuthKey::admin)
    }

    /// A `client` token of `tenant`; `None` in open mode.
    pub fn client_token(&self, tenant: &str) -> Option<String> {
        self.key.as_ref().map(|k| k.client(tenant))
    }

    /// Sends `req` with `token` as its bearer credential (`None`: no `Authorization`).
    pub async fn call(&self, req: test::TestRequest, token: Option<String>) -> ServiceResponse {
        let req = match token {
            Some(t) => req.insert_header((
                actix_web::http::header::AUTHORIZATION,
                format!("{}{t}", crescent_wire::auth::AUTHORIZATION_SCHEME),
            )),
            None => req,
        };
        test::call_service(&self.service, req.to_request()).await
    }
}

/// POST a JSON body with the harness's token; (status, JSON answer).
pub async fn post(app: &TestApp<impl TestService>, path: &str, body: Value) -> (u16, Value) {
    let token = app.token_for(path, &body);
    post_as(app, path, body, token).await
}

/// POST a JSON body with `token`; (status, JSON answer).
pub async fn post_as(
    app: &TestApp<impl TestService>,
    path: &str,
    body: Value,
    token: Option<String>,
) -> (u16, Value) {
    let req = test::TestRequest::post().uri(path).set_json(body);
    let resp = app.call(req, token).await;
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
    app: &TestApp<impl TestService>,
    path: &str,
    body: &Req,
) -> Result<Rep, (u16, Value)> {
    let token = app.token_for(path, &serde_json::to_value(body).unwrap());
    let req = test::TestRequest::post()
        .uri(path)
        .insert_header(("content-type", "application/msgpack"))
        .insert_header(("accept", "application/msgpack"))
        .set_payload(rmp_serde::to_vec_named(body).unwrap());
    let resp = app.call(req, token).await;
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

/// GET with the harness's token; the body as text (asserting 200).
pub async fn get_text(app: &TestApp<impl TestService>, path: &str) -> String {
    let token = app.token_for(path, &Value::Null);
    let resp = app.call(test::TestRequest::get().uri(path), token).await;
    assert_eq!(resp.status().as_u16(), 200, "{path}");
    String::from_utf8(test::read_body(resp).await.to_vec()).unwrap()
}

pub async fn get_json(app: &TestApp<impl TestService>, path: &str) -> Value {
    serde_json::from_str(&get_text(app, path).await).unwrap()
}

/// Registers an owner at a fake endpoint and mounts one segment of `size` bytes.
pub async fn owner_with_segment(
    app: &TestApp<impl TestService>,
    owner: &str,
    segment: &str,
    size: u64,
) {
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
pub async fn put(app: &TestApp<impl TestService>, id: Value, size: u64) -> u64 {
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
