//! The RPC fast path with `[auth]` on (docs/security.md, "The RPC fast path"), with real
//! binaries: a token opens RPC connections and a client's object operations go over them in
//! its tenant only; a missing, bad, expired or revoked credential is UNAUTHENTICATED, at the
//! handshake and on a connection already open.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use common::auth::AuthKey;
use common::{crescent, Server};
use crescent_client::{BearerToken, ClientOptions, CrescentClient};
use crescent_wire::rpc::{
    client_hello, client_hello_v2, decode_body, encode_request, FrameHeader, RpcOp, RpcStatus,
    HANDSHAKE_LEN, HANDSHAKE_OK, HANDSHAKE_UNAUTHENTICATED, HANDSHAKE_UNSUPPORTED_VERSION,
    HEADER_LEN,
};
use crescent_wire::store::{HeartbeatRequest, ObjectId, ObjectRequest};
use crescent_wire::ApiError;
use serde_json::Value;

fn start(key: &AuthKey) -> Server {
    let args = key.server_args();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Server::start_with(&args)
}

/// `GET path` with an optional token: (status, body).
fn get(server: &Server, path: &str, token: Option<&str>) -> (u16, String) {
    common::cold::runtime().block_on(async {
        let mut req = reqwest::Client::new().get(format!("http://{}{path}", server.addr));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let resp = req.send().await.expect("http request");
        let status = resp.status().as_u16();
        (status, resp.text().await.unwrap_or_default())
    })
}

/// The sum of the samples of `family` whose labels contain every one of `filters`.
fn counted(server: &Server, family: &str, filters: &[&str]) -> u64 {
    let (_, text) = get(server, "/metrics", None);
    text.lines()
        .filter(|l| l.starts_with(family) && filters.iter().all(|f| l.contains(f)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

fn rpc_requests(server: &Server, op: &str, code: &str) -> u64 {
    let (op, code) = (format!("op=\"{op}\""), format!("code=\"{code}\""));
    counted(server, "crescent_rpc_requests_total", &[&op, &code])
}

fn refusals(server: &Server, class: &str, reason: &str) -> u64 {
    let (class, reason) = (format!("class=\"{class}\""), format!("reason=\"{reason}\""));
    counted(server, "crescent_auth_refusals_total", &[&class, &reason])
}

/// Object operations that went over HTTP.
fn http_object_requests(server: &Server) -> u64 {
    counted(server, "crescent_http_requests_total", &["/objects/"])
}

/// The RPC listener's address, from `GET /v1/rpc` (with a token).
fn rpc_addr(server: &Server, token: &str) -> SocketAddr {
    let (status, body) = get(server, "/v1/rpc", Some(token));
    assert_eq!(status, 200, "{body}");
    let info: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(info["version"], 2, "{info}");
    info["address"].as_str().unwrap().parse().unwrap()
}

/// Sends `hello` on a new connection: the stream, the answer's status and, after a refused
/// credential, the error frame.
fn open(addr: SocketAddr, hello: &[u8]) -> (TcpStream, u16, Option<ApiError>) {
    open_on(TcpStream::connect(addr).unwrap(), hello)
}

/// [`open`] on a connected stream (TCP or the local socket).
fn open_on<S: Read + Write>(mut s: S, hello: &[u8]) -> (S, u16, Option<ApiError>) {
    s.write_all(hello).unwrap();
    let mut answer = [0u8; HANDSHAKE_LEN];
    s.read_exact(&mut answer).unwrap();
    assert_eq!(&answer[..4], b"CRPC");
    let status = u16::from_le_bytes([answer[6], answer[7]]);
    let error = (status == HANDSHAKE_UNAUTHENTICATED).then(|| {
        let (tag, id, body) = read_frame(&mut s);
        assert_eq!((tag, id), (RpcStatus::Error as u8, 0));
        decode_body::<ApiError>(&body).unwrap()
    });
    (s, status, error)
}

fn open_v2(addr: SocketAddr, token: Option<&str>) -> (TcpStream, u16, Option<ApiError>) {
    let mut hello = Vec::new();
    client_hello_v2(token, &mut hello).unwrap();
    open(addr, &hello)
}

fn read_frame(s: &mut impl Read) -> (u8, u64, Vec<u8>) {
    let mut header = [0u8; HEADER_LEN];
    s.read_exact(&mut header).unwrap();
    let h = FrameHeader::parse(&header, 1 << 20).unwrap();
    let mut body = vec![0u8; h.body_len];
    s.read_exact(&mut body).unwrap();
    (h.tag, h.request_id, body)
}

/// One request on an open connection: `Ok(reply body)` or the error answer.
fn call<B: serde::Serialize>(
    s: &mut (impl Read + Write),
    op: RpcOp,
    body: &B,
) -> Result<Vec<u8>, ApiError> {
    let mut frame = Vec::new();
    encode_request(&mut frame, op, 7, body).unwrap();
    s.write_all(&frame).unwrap();
    let (tag, id, body) = read_frame(s);
    assert_eq!(id, 7);
    match RpcStatus::from_u8(tag).unwrap() {
        RpcStatus::Ok => Ok(body),
        RpcStatus::Error => Err(decode_body(&body).unwrap()),
    }
}

fn exist(key: &str, tenant: Option<&str>) -> ObjectRequest {
    ObjectRequest {
        id: ObjectId::scoped(tenant, None, key),
    }
}

/// The connection was closed by the server (a read returns end of stream).
fn closed(s: &mut impl Read) -> bool {
    let mut b = [0u8; 1];
    matches!(s.read(&mut b), Ok(0))
}

fn client(rt: &tokio::runtime::Runtime, server: &Server, token: &str) -> CrescentClient {
    let options = ClientOptions::servers(&server.server()).with_token(BearerToken::new(token));
    rt.block_on(CrescentClient::connect(options)).unwrap()
}

#[test]
fn a_client_token_reads_and_writes_over_rpc_in_its_tenant() {
    let key = AuthKey::new();
    let server = start(&key);
    let a = key.token("client", Some("a"), None);
    let admin = key.token("admin", None, None);

    // The CLI: no --tenant, so the put acts in the token's tenant.
    let (code, _, err) = crescent(
        &server.server(),
        &["--token", &a, "put", "k1", "-"],
        Some(b"v1"),
    );
    assert_eq!(code, 0, "{err}\n{}", server.log());
    let (code, out, err) = crescent(&server.server(), &["--token", &a, "get", "k1"], None);
    assert_eq!((code, out.as_slice()), (0, &b"v1"[..]), "{err}");

    // The library, single and batch operations (the batch get as the compact op).
    let rt = common::cold::runtime();
    let c = client(&rt, &server, &a);
    rt.block_on(async {
        c.put("r1", b"hello").await.unwrap();
        assert_eq!(c.get("r1").await.unwrap(), b"hello");
        let keys = ["b0", "b1", "b2"];
        let values = [b"x".to_vec(), b"y".to_vec(), b"z".to_vec()];
        for r in c.put_batch(&keys, &values).await.unwrap() {
            r.unwrap();
        }
        let got = c.get_batch(&keys).await.unwrap();
        for (g, v) in got.into_iter().zip(&values) {
            assert_eq!(&g.unwrap(), v);
        }
        assert!(c.is_exist("b1").await.unwrap());
        c.settle().await;
    });

    assert!(rpc_requests(&server, "put_start", "OK") >= 2);
    assert!(rpc_requests(&server, "get", "OK") >= 2);
    assert!(rpc_requests(&server, "batch_get_compact", "OK") >= 1);
    assert!(rpc_requests(&server, "exist", "OK") >= 1);
    assert_eq!(http_object_requests(&server), 0, "no HTTP fallback");

    // What the RPC puts stored is in tenant a, not in the default tenant.
    let exists = |args: &[&str]| crescent(&server.server(), args, None).0;
    assert_eq!(
        exists(&["--token", &admin, "--tenant", "a", "exist", "r1"]),
        0
    );
    assert_eq!(
        exists(&["--token", &admin, "--tenant", "a", "exist", "b2"]),
        0
    );
    assert_eq!(exists(&["--token", &admin, "exist", "r1"]), 1);

    // The listener's address is only told to a credential.
    assert_eq!(get(&server, "/v1/rpc", None).0, 401);
    let (status, health) = get(&server, "/healthz", None);
    assert_eq!(status, 200);
    let health: Value = serde_json::from_str(&health).unwrap();
    assert!(health.get("rpc").is_none(), "{health}");
    assert!(!server.log().contains(&a), "a token must never be logged");
}

#[test]
fn another_tenant_or_owner_over_rpc_is_permission_denied() {
    let key = AuthKey::new();
    let server = start(&key);
    let a = key.token("client", Some("a"), None);
    let rt = common::cold::runtime();
    let c = client(&rt, &server, &a)
        .with_scope(Some("b"), None)
        .unwrap();
    rt.block_on(async {
        let e = c.get("x").await.unwrap_err();
        assert_eq!(e.code_str(), "PERMISSION_DENIED", "{e}");
        let e = c.put("x", b"v").await.unwrap_err();
        assert_eq!(e.code_str(), "PERMISSION_DENIED", "{e}");
        match c.get_batch(&["x", "y"]).await {
            Err(e) => assert_eq!(e.code_str(), "PERMISSION_DENIED", "{e}"),
            Ok(items) => {
                for i in items {
                    assert_eq!(i.unwrap_err().code_str(), "PERMISSION_DENIED");
                }
            }
        }
    });
    assert_eq!(rpc_requests(&server, "get", "PERMISSION_DENIED"), 1);
    assert_eq!(rpc_requests(&server, "put_start", "PERMISSION_DENIED"), 1);
    assert_eq!(
        rpc_requests(&server, "batch_get_compact", "PERMISSION_DENIED"),
        1
    );
    assert_eq!(refusals(&server, "object_read", "tenant"), 2);
    assert_eq!(refusals(&server, "object_write", "tenant"), 1);
    assert_eq!(http_object_requests(&server), 0);

    // Raw frames: a client may not heartbeat, an owner only for its own id.
    let addr = rpc_addr(&server, &a);
    let hb = |owner: &str| HeartbeatRequest {
        owner_id: owner.into(),
        incarnation: 1,
        releases_applied: None,
    };
    let (mut s, status, _) = open_v2(addr, Some(&a));
    assert_eq!(status, HANDSHAKE_OK);
    let e = call(&mut s, RpcOp::Heartbeat, &hb("o1")).unwrap_err();
    assert_eq!(e.code.as_str(), "PERMISSION_DENIED");
    assert!(
        call(&mut s, RpcOp::Exist, &exist("k", None)).is_ok(),
        "still open"
    );
    let o1 = key.token("owner", None, Some("o1"));
    let (mut s, status, _) = open_v2(addr, Some(&o1));
    assert_eq!(status, HANDSHAKE_OK);
    let e = call(&mut s, RpcOp::Heartbeat, &hb("o2")).unwrap_err();
    assert_eq!(e.code.as_str(), "PERMISSION_DENIED");
    let e = call(&mut s, RpcOp::Exist, &exist("k", Some("a"))).unwrap_err();
    assert_eq!(
        e.code.as_str(),
        "PERMISSION_DENIED",
        "objects are not an owner's"
    );
    assert_eq!(refusals(&server, "owner_heartbeat", "role"), 1);
    assert_eq!(refusals(&server, "owner_heartbeat", "owner"), 1);
}

#[test]
fn handshakes_without_a_valid_token_are_unauthenticated() {
    let key = AuthKey::new();
    let server = start(&key);
    let a = key.token("client", Some("a"), None);
    let addr = rpc_addr(&server, &a);
    let other = AuthKey::new();
    std::fs::write(&other.path, [9u8; 32]).unwrap();
    let foreign = other.token("admin", None, None);
    let (expiring, _) = key.issue_for("client", Some("a"), None, Some(1));

    for (token, reason) in [
        (None, "missing"),
        (Some("not-a-token"), "invalid"),
        (Some(foreign.as_str()), "invalid"),
    ] {
        let (mut s, status, error) = open_v2(addr, token);
        assert_eq!(status, HANDSHAKE_UNAUTHENTICATED, "{reason}");
        let error = error.unwrap();
        assert_eq!(error.code.as_str(), "UNAUTHENTICATED", "{error:?}");
        assert!(closed(&mut s), "{reason}: the connection closes");
    }
    // Version 1 carries no token: not spoken with [auth] on; nor is an unknown version.
    let (_, status, _) = open(addr, &client_hello());
    assert_eq!(status, HANDSHAKE_UNSUPPORTED_VERSION);
    let mut future = client_hello();
    future[4..6].copy_from_slice(&9u16.to_le_bytes());
    assert_eq!(open(addr, &future).1, HANDSHAKE_UNSUPPORTED_VERSION);

    std::thread::sleep(Duration::from_millis(2100));
    let (_, status, error) = open_v2(addr, Some(&expiring));
    assert_eq!(status, HANDSHAKE_UNAUTHENTICATED);
    assert!(error.unwrap().message.contains("expired"));

    let (mut s, status, _) = open_v2(addr, Some(&a));
    assert_eq!(status, HANDSHAKE_OK);
    call(&mut s, RpcOp::Exist, &exist("k", None)).unwrap();

    assert_eq!(refusals(&server, "rpc_handshake", "missing"), 2);
    assert_eq!(refusals(&server, "rpc_handshake", "invalid"), 2);
    assert_eq!(refusals(&server, "rpc_handshake", "expired"), 1);
}

#[test]
fn a_revoked_or_expired_token_stops_working_on_an_open_connection() {
    let key = AuthKey::new();
    let server = start(&key);
    let (a, id) = key.issue("client", Some("a"), None);
    let admin = key.token("admin", None, None);
    let rt = common::cold::runtime();
    let c = client(&rt, &server, &a);
    rt.block_on(async {
        c.put("k", b"v").await.unwrap();
        assert!(c.is_exist("k").await.unwrap());
    });
    assert_eq!(rpc_requests(&server, "exist", "OK"), 1);

    let (code, out, err) = crescent(
        &server.server(),
        &["--token", &admin, "token", "revoke", &id],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert!(String::from_utf8_lossy(&out).contains("revoked"));
    // The bound: the first request after the revocation, on the connection already open.
    rt.block_on(async {
        let e = c.is_exist("k").await.unwrap_err();
        assert_eq!(e.code_str(), "UNAUTHENTICATED", "{e}");
    });
    assert_eq!(rpc_requests(&server, "exist", "UNAUTHENTICATED"), 1);
    assert_eq!(refusals(&server, "object_read", "revoked"), 1);
    // The server closed that connection; a new one is refused at its handshake.
    std::thread::sleep(Duration::from_millis(100));
    rt.block_on(async {
        let e = c.is_exist("k").await.unwrap_err();
        assert_eq!(e.code_str(), "UNAUTHENTICATED", "{e}");
    });
    assert_eq!(refusals(&server, "rpc_handshake", "revoked"), 1);
    assert_eq!(http_object_requests(&server), 0);

    // Expiry: checked at every request of an open connection.
    // Valid for 2 to 3 s from now (expiry is in whole seconds): time for the handshake.
    let (short, _) = key.issue_for("client", Some("a"), None, Some(3));
    let addr = rpc_addr(&server, &admin);
    let (mut s, status, _) = open_v2(addr, Some(&short));
    assert_eq!(status, HANDSHAKE_OK);
    call(&mut s, RpcOp::Exist, &exist("k", None)).unwrap();
    std::thread::sleep(Duration::from_millis(4100));
    let e = call(&mut s, RpcOp::Exist, &exist("k", None)).unwrap_err();
    assert_eq!(e.code.as_str(), "UNAUTHENTICATED");
    assert!(e.message.contains("expired"), "{e:?}");
    assert!(closed(&mut s), "an expired credential's connection closes");
    assert_eq!(refusals(&server, "object_read", "expired"), 1);
}

#[test]
fn the_local_socket_asks_for_the_same_credential() {
    use std::os::unix::net::UnixStream;
    let key = AuthKey::new();
    let server = start(&key);
    let a = key.token("client", Some("a"), None);
    let (status, body) = get(&server, "/v1/rpc", Some(&a));
    assert_eq!(status, 200, "{body}");
    let info: Value = serde_json::from_str(&body).unwrap();
    let path = info["local"]
        .as_str()
        .expect("a local socket is advertised")
        .to_string();
    let connect = || {
        let s = UnixStream::connect(&path).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    };
    let mut hello = Vec::new();
    client_hello_v2(None, &mut hello).unwrap();
    let (mut s, status, error) = open_on(connect(), &hello);
    assert_eq!(status, HANDSHAKE_UNAUTHENTICATED);
    assert_eq!(error.unwrap().code.as_str(), "UNAUTHENTICATED");
    assert!(closed(&mut s));
    let mut hello = Vec::new();
    client_hello_v2(Some(&a), &mut hello).unwrap();
    let (mut s, status, _) = open_on(connect(), &hello);
    assert_eq!(status, HANDSHAKE_OK);
    call(&mut s, RpcOp::Exist, &exist("k", None)).unwrap();
    let e = call(&mut s, RpcOp::Exist, &exist("k", Some("b"))).unwrap_err();
    assert_eq!(e.code.as_str(), "PERMISSION_DENIED", "{e:?}");
    assert_eq!(refusals(&server, "rpc_handshake", "missing"), 1);
}
