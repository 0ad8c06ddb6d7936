//! Raw probes of crescentd's listeners for the hostile-network tests (`net_abuse`, whose
//! reproductions also run against any crescentd binary, an older one included): connections
//! that lie, stall or send garbage, and the documented answers to oversized input
//! (docs/configuration.md, "Network bounds"). A `token` is a client's credential under
//! `[auth]`; `None` in open mode.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::crescentd::CrescentdProcess;

pub fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Reads until the peer closes (or `limit` passes); returns what arrived and whether it closed.
pub fn read_until_close(s: &mut TcpStream, limit: Duration) -> (Vec<u8>, bool) {
    let deadline = Instant::now() + limit;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        match s.read(&mut buf) {
            Ok(0) => return (got, true),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return (got, true),
            Err(_) => {}
        }
    }
    (got, false)
}

/// An RPC handshake: version 2 with `token`, so the abuse comes from a client holding a valid
/// credential, past the authentication an anonymous one is refused at; without one, version
/// 1, which any build accepts in open mode (an older one included).
pub fn rpc_hello(token: Option<&str>) -> Vec<u8> {
    match token {
        Some(t) => {
            let mut out = Vec::new();
            crescent_wire::rpc::client_hello_v2(Some(t), &mut out).unwrap();
            out
        }
        None => crescent_wire::rpc::client_hello().to_vec(),
    }
}

/// `Authorization` header line of a raw HTTP request (none in open mode).
pub fn auth_line(token: Option<&str>) -> String {
    token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"))
}

/// Handshakes, then sends a header claiming a body just under 16 MiB and 10 bytes of it.
pub fn lying_frame(rpc: SocketAddr, token: Option<&str>) -> TcpStream {
    let mut s = connect(rpc);
    s.write_all(&rpc_hello(token)).unwrap();
    let mut answer = [0u8; 8];
    s.read_exact(&mut answer).unwrap();
    let mut frame = Vec::new();
    frame.extend_from_slice(&((16u32 << 20) - 64).to_le_bytes());
    frame.push(crescent_wire::rpc::RpcOp::Get as u8);
    frame.extend_from_slice(&7u64.to_le_bytes());
    frame.extend_from_slice(&[0x80; 10]);
    s.write_all(&frame).unwrap();
    s
}

pub fn http_raw(addr: SocketAddr, request: &[u8]) -> TcpStream {
    let mut s = connect(addr);
    s.write_all(request).unwrap();
    s
}

pub fn status_of(response: &[u8]) -> u16 {
    let text = String::from_utf8_lossy(response);
    text.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0)
}

/// `GET base+path` as an operator (the admin token), as JSON.
pub async fn json_get(node: &CrescentdProcess, path: &str) -> serde_json::Value {
    let req = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .get(format!("{}{path}", node.base_url()));
    match node.admin_token() {
        Some(t) => req.bearer_auth(t),
        None => req,
    }
    .send()
    .await
    .unwrap()
    .json()
    .await
    .unwrap()
}

/// The RPC fast path's address, as crescentd tells an operator.
pub async fn rpc_address(node: &CrescentdProcess) -> SocketAddr {
    json_get(node, "/v1/rpc").await["address"]
        .as_str()
        .expect("the RPC address")
        .parse()
        .expect("a socket address")
}

/// 413 PAYLOAD_TOO_LARGE for a declared 2 GB body, the batch count refused from the msgpack
/// header, and PAYLOAD_TOO_LARGE under its request id for an RPC frame over the limit.
pub fn assert_oversized_answers(http: SocketAddr, rpc: SocketAddr, token: Option<&str>) {
    let request = format!(
        "POST /v1/objects/get HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         {}Content-Length: 2000000000\r\n\r\n{{}}",
        auth_line(token)
    );
    let mut huge = http_raw(http, request.as_bytes());
    let (answer, _) = read_until_close(&mut huge, Duration::from_secs(3));
    let answer = String::from_utf8_lossy(&answer);
    assert_eq!(status_of(answer.as_bytes()), 413, "{answer}");
    assert!(answer.contains("PAYLOAD_TOO_LARGE"), "{answer}");

    // {"items": <array32 of 1,000,000>} followed by two items only: refused by its count.
    let mut body = vec![0x81, 0xa5];
    body.extend_from_slice(b"items");
    body.push(0xdd);
    body.extend_from_slice(&1_000_000u32.to_be_bytes());
    for _ in 0..2 {
        body.extend_from_slice(&[
            0x81, 0xa2, b'i', b'd', 0x81, 0xa3, b'k', b'e', b'y', 0xa1, b'k',
        ]);
    }
    let mut request = format!(
        "POST /v1/objects/batch/get HTTP/1.1\r\nHost: x\r\nContent-Type: application/msgpack\r\n\
         Accept: application/json\r\nConnection: close\r\n{}Content-Length: {}\r\n\r\n",
        auth_line(token),
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(&body);
    let mut batch = http_raw(http, &request);
    let (answer, _) = read_until_close(&mut batch, Duration::from_secs(3));
    let answer = String::from_utf8_lossy(&answer);
    assert_eq!(status_of(answer.as_bytes()), 400, "{answer}");
    assert!(answer.contains("1000000 items"), "{answer}");

    let mut s = connect(rpc);
    s.write_all(&rpc_hello(token)).unwrap();
    let mut hello = [0u8; 8];
    s.read_exact(&mut hello).unwrap();
    let mut frame = Vec::new();
    frame.extend_from_slice(&(64u32 << 20).to_le_bytes());
    frame.push(crescent_wire::rpc::RpcOp::Get as u8);
    frame.extend_from_slice(&99u64.to_le_bytes());
    s.write_all(&frame).unwrap();
    let (answer, closed) = read_until_close(&mut s, Duration::from_secs(3));
    assert!(closed, "the connection stays open after an oversized frame");
    let header: [u8; 13] = answer[..13].try_into().expect("an error frame");
    let header = crescent_wire::rpc::FrameHeader::parse(&header, 1 << 20).unwrap();
    assert_eq!(header.tag, crescent_wire::rpc::RpcStatus::Error as u8);
    assert_eq!(header.request_id, 99);
    let error: crescent_wire::ApiError = crescent_wire::rpc::decode_body(&answer[13..]).unwrap();
    assert_eq!(
        error.code,
        crescent_wire::ErrorCode::PayloadTooLarge,
        "{error}"
    );
}
