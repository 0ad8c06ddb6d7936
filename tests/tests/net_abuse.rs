//! A hostile or broken network against a real crescentd (docs/configuration.md, `[net]`),
//! loopback only, a few seconds each:
//!
//! - `abuse_while_clients_put_and_get`: lying RPC frame headers (16 MiB claimed, 10 bytes
//!   sent), partial handshakes, slow and oversized HTTP bodies, a msgpack batch claiming a
//!   million items, idle connection floods and garbage on the HTTP, RPC and transfer ports,
//!   while a well-behaved client keeps putting and getting. The client succeeds, crescentd's
//!   resident memory stays within [`RSS_GROWTH_BOUND`] of where it started, every answer is
//!   the documented one (413, 408, busy handshake, INVALID_ARGUMENT with the count), and
//!   every acknowledged put reads back.
//! - `descriptor_exhaustion_spares_the_journal`: crescentd under a 256-descriptor limit,
//!   flooded with idle connections past it while journal segments rotate (1 MiB segments):
//!   it stays alive and serving, snapshots still succeed afterwards, every put reads back.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crescent_tests::auth::DEFAULT_TENANT;
use crescent_tests::binaries::ensure_workspace_binary;
use crescent_tests::crescentd::{CrescentdProcess, Outcome};
use crescent_tests::process::resident_bytes;
use crescent_tests::store_e2e::start_crescentd;

/// How much crescentd's VmRSS may grow during the abuse (the old frame reader grew by
/// 16 MiB per lying connection: 640 MiB for the 40 here).
const RSS_GROWTH_BOUND: u64 = 160 << 20;

/// Lying RPC connections, each claiming a 16 MiB frame.
const LIARS: usize = 40;

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Reads until the peer closes (or `limit` passes); returns what arrived and whether it closed.
fn read_until_close(s: &mut TcpStream, limit: Duration) -> (Vec<u8>, bool) {
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

/// A version 2 handshake with `token`: the abuse comes from a client holding a valid
/// credential, past the authentication an anonymous one is refused at.
fn rpc_hello(token: Option<&str>) -> Vec<u8> {
    let mut out = Vec::new();
    crescent_wire::rpc::client_hello_v2(token, &mut out).unwrap();
    out
}

/// `Authorization` header line of a raw HTTP request (none in open mode).
fn auth_line(token: Option<&str>) -> String {
    token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"))
}

/// Handshakes, then sends a header claiming a body just under 16 MiB and 10 bytes of it.
fn lying_frame(rpc: SocketAddr, token: Option<&str>) -> TcpStream {
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

fn http_raw(addr: SocketAddr, request: &[u8]) -> TcpStream {
    let mut s = connect(addr);
    s.write_all(request).unwrap();
    s
}

fn status_of(response: &[u8]) -> u16 {
    let text = String::from_utf8_lossy(response);
    text.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0)
}

/// `GET base+path` as an operator (the admin token), as JSON.
async fn json_get(node: &CrescentdProcess, path: &str) -> serde_json::Value {
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

fn key_of(i: usize) -> String {
    format!("k/{i}")
}

fn value(i: usize) -> Vec<u8> {
    (0..4096).map(|b| (b as usize * 31 + i) as u8).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abuse_while_clients_put_and_get() {
    let tmp = tempfile::tempdir().unwrap();
    let crescentd = start_crescentd(
        tmp.path(),
        "embedded_segment_bytes = 67108864\n\
         [net]\nrpc_frame_timeout_ms = 1500\nrpc_handshake_timeout_ms = 1500\n\
         http_body_timeout_ms = 1500\nhttp_head_timeout_ms = 1500\n\
         rpc_max_connections = 128\n",
    );
    let pid = crescentd.guard.pid();
    let rpc: SocketAddr = json_get(&crescentd, "/v1/rpc").await["address"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let segments = json_get(&crescentd, "/v1/segments").await;
    let transfer: SocketAddr = segments
        .to_string()
        .split("\"endpoint\":\"")
        .nth(1)
        .unwrap()[..]
        .split('"')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let http = crescentd.addr;
    let token = crescentd.client_token(DEFAULT_TENANT);
    let client = crescentd.client().await;
    client.put(&key_of(0), &value(0)).await.unwrap();
    let rss_before = resident_bytes(pid);

    // The abuse, on plain threads beside the well-behaved client.
    let abuse_token = token.clone();
    let abuse = std::thread::spawn(move || {
        let token = abuse_token.as_deref();
        let mut held = Vec::new();
        for _ in 0..LIARS {
            held.push(lying_frame(rpc, token));
        }
        // Partial handshake, idle floods, garbage on every port.
        let mut partial = connect(rpc);
        partial.write_all(b"CRP").unwrap();
        held.push(partial);
        for _ in 0..60 {
            held.push(connect(http));
            held.push(connect(transfer));
        }
        for port in [http, rpc, transfer] {
            let mut g = connect(port);
            let _ = g.write_all(&[0xA5; 4096]);
            held.push(g);
        }
        // A slow body: Content-Length 100, 10 bytes, silence.
        let request = format!(
            "POST /v1/objects/get HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
             {}Content-Length: 100\r\n\r\n{{\"id\":{{\"k",
            auth_line(token)
        );
        let mut slow = http_raw(http, request.as_bytes());
        let started = Instant::now();
        let (answer, closed) = read_until_close(&mut slow, Duration::from_secs(8));
        let slow = (
            String::from_utf8_lossy(&answer).into_owned(),
            closed,
            started.elapsed(),
        );
        // A lying frame is dropped at the frame timeout.
        let (_, liar_closed) = read_until_close(&mut held[0], Duration::from_secs(8));
        (held, slow, liar_closed)
    });

    // Meanwhile: puts and gets that must all succeed.
    let mut acked = vec![0usize];
    let t = Instant::now();
    let mut i = 1;
    let mut peak = rss_before;
    while t.elapsed() < Duration::from_secs(4) {
        client
            .put(&key_of(i), &value(i))
            .await
            .unwrap_or_else(|e| panic!("put {i} under abuse: {e}"));
        acked.push(i);
        let back = client.get(&key_of(i / 2)).await.unwrap();
        assert_eq!(back, value(i / 2));
        peak = peak.max(resident_bytes(pid));
        i += 1;
    }
    let (held, slow, liar_closed) = abuse.join().unwrap();
    peak = peak.max(resident_bytes(pid));
    eprintln!(
        "VmRSS before {} MiB, peak under abuse {} MiB, {} puts acknowledged",
        rss_before >> 20,
        peak >> 20,
        acked.len()
    );
    assert!(
        peak < rss_before + RSS_GROWTH_BOUND,
        "VmRSS grew from {} MiB to {} MiB",
        rss_before >> 20,
        peak >> 20
    );
    drop(held);
    let (answer, closed, after) = slow;
    assert_eq!(status_of(answer.as_bytes()), 408, "slow body: {answer}");
    assert!(answer.contains("REQUEST_TIMEOUT"), "{answer}");
    assert!(
        closed && after < Duration::from_secs(6),
        "slow body closed {closed} after {after:?}"
    );
    assert!(
        liar_closed,
        "a lying RPC frame was not dropped at the frame timeout"
    );
    check_oversized_answers(http, rpc, token.as_deref());
    for &i in &acked {
        assert_eq!(client.get(&key_of(i)).await.unwrap(), value(i), "{i}");
    }
    assert!(crescentd_serving(http));
}

/// 413 PAYLOAD_TOO_LARGE for a declared 2 GB body, the batch count refused from the msgpack
/// header, and PAYLOAD_TOO_LARGE under its request id for an RPC frame over the limit.
fn check_oversized_answers(http: SocketAddr, rpc: SocketAddr, token: Option<&str>) {
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

/// Over `net.rpc_max_connections`, the handshake is answered busy (status 2) and closed; a
/// slot freed is taken again.
#[tokio::test]
async fn rpc_connections_over_the_limit_are_answered_busy() {
    let tmp = tempfile::tempdir().unwrap();
    let crescentd = start_crescentd(tmp.path(), "[net]\nrpc_max_connections = 4\n");
    let info = json_get(&crescentd, "/v1/rpc").await;
    let rpc: SocketAddr = info["address"].as_str().unwrap().parse().unwrap();
    let token = crescentd.client_token(DEFAULT_TENANT);
    let handshake = |s: &mut TcpStream| {
        s.write_all(&rpc_hello(token.as_deref())).unwrap();
        let mut answer = [0u8; 8];
        s.read_exact(&mut answer).unwrap();
        u16::from_le_bytes([answer[6], answer[7]])
    };
    let mut held: Vec<TcpStream> = (0..4).map(|_| connect(rpc)).collect();
    for s in &mut held {
        assert_eq!(handshake(s), crescent_wire::rpc::HANDSHAKE_OK);
    }
    let mut over = connect(rpc);
    assert_eq!(handshake(&mut over), crescent_wire::rpc::HANDSHAKE_BUSY);
    assert!(read_until_close(&mut over, Duration::from_secs(3)).1);
    drop(held.pop());
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut again = connect(rpc);
        match handshake(&mut again) {
            crescent_wire::rpc::HANDSHAKE_OK => break,
            status => assert!(Instant::now() < deadline, "still status {status}"),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn crescentd_serving(http: SocketAddr) -> bool {
    crescent_tests::crescentd::http_status(http, "/healthz").ok() == Some(200)
}

/// Under a 256-descriptor limit, 400 idle connections exhaust crescentd's descriptors while
/// puts rotate 1 MiB journal segments: the journal opens its segments from the reserve,
/// crescentd stays up, and once the flood ends it serves and snapshots again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn descriptor_exhaustion_spares_the_journal() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("crescentd.toml");
    std::fs::write(
        &config,
        "[journal]\nsegment_bytes = 1048576\n[snapshot]\nevery_events = 500\n\
         [store]\nembedded_segment_bytes = 67108864\nclient_ttl_secs = 600\n\
         [net]\nhttp_max_connections = 4096\nrpc_max_connections = 4096\n",
    )
    .unwrap();
    let bin = ensure_workspace_binary("crescent-server", "crescentd");
    let args = vec!["--config".to_string(), config.display().to_string()];
    let mut crescentd = CrescentdProcess::start_limited(
        &bin,
        &tmp.path().join("data"),
        &tmp.path().join("crescentd.log"),
        &args,
        Some(256),
    )
    .unwrap();
    let http = crescentd.addr;
    let client = crescentd.client().await;
    let long_key = |i: usize| format!("{}/{i}", "x".repeat(400));
    client.put(&long_key(0), &value(0)).await.unwrap();

    // Segment mounts (journaled) over a keep-alive HTTP connection opened before the flood.
    let segments = crescentd.segments_client(Duration::from_secs(10));
    // Four pooled connections, so four mounts at a time share the journal's group commits.
    let warm = futures::future::join_all((0..4).map(|_| segments.list())).await;
    assert!(warm.iter().all(|r| r.is_ok()));
    let flood: Vec<TcpStream> = (0..400).map(|_| connect(http)).collect();
    let journal_dir = tmp.path().join("data");
    let newest_before = newest_segment(&journal_dir);
    let segment_id = |i: usize| format!("{}-{i}", "s".repeat(240));
    let owner_id = "o".repeat(240);
    let mut mounted = 0;
    let started = Instant::now();
    while newest_segment(&journal_dir) == newest_before {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the journal did not rotate within 60 s ({mounted} mounts)"
        );
        for _ in 0..10 {
            let round = (mounted..mounted + 4).map(|n| {
                let (segments, id, owner_id) = (&segments, segment_id(n), &owner_id);
                async move { segments.mount(owner_id, &id, 4096).await }
            });
            for outcome in futures::future::join_all(round).await {
                match outcome {
                    Outcome::Acked => mounted += 1,
                    other => panic!(
                        "mount {mounted} during the flood: {other:?}\n{}",
                        log_tail(&crescentd)
                    ),
                }
            }
        }
        assert!(
            crescentd.guard.try_exit_status().is_none(),
            "crescentd exited during the flood:\n{}",
            log_tail(&crescentd)
        );
    }
    let acked = [0usize];
    drop(flood);

    // Serving again: health, a snapshot, every acknowledged put.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !crescentd_serving(http) {
        assert!(Instant::now() < deadline, "not serving after the flood");
        std::thread::sleep(Duration::from_millis(50));
    }
    let health = json_get(&crescentd, "/healthz").await;
    assert!(
        health["descriptors"]["exhaustions"].as_u64().unwrap() > 0,
        "the flood never exhausted descriptors (test too small): {health}"
    );
    let snap = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .post(format!("{}/v1/admin/snapshot", crescentd.base_url()))
        .bearer_auth(crescentd.admin_token().expect("auth is on"))
        .send()
        .await
        .unwrap();
    assert!(
        snap.status().is_success(),
        "snapshot after the flood: {:?}",
        snap.text().await
    );
    for &i in &acked {
        assert_eq!(client.get(&long_key(i)).await.unwrap(), value(i), "key {i}");
    }
    let listed = segments.list().await.unwrap();
    let listed: std::collections::HashSet<String> =
        listed.segments.into_iter().map(|s| s.segment_id).collect();
    for i in 0..mounted {
        assert!(
            listed.contains(&segment_id(i)),
            "acknowledged mount {i} lost"
        );
    }
    eprintln!("{mounted} mounts acknowledged during the flood, all listed");
}

/// The name of the newest journal segment (snapshots truncate the older ones).
fn newest_segment(data_dir: &std::path::Path) -> Option<std::ffi::OsString> {
    walk(data_dir)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .filter_map(|p| p.file_name().map(|n| n.to_owned()))
        .max()
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = entry.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

fn log_tail(p: &CrescentdProcess) -> String {
    crescent_tests::crescentd::log_tail(&p.log_path, 30)
}
