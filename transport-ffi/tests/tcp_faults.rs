//! Faults on the TCP data plane: malformed frames close only their connection, and a peer
//! that dies, stalls or is unreachable gives a clear error, never a hang.

mod common;

use std::time::{Duration, Instant};

use common::*;
use crescent_transport::tcp::protocol::{self, Op, RequestHeader};
use crescent_transport::tcp::{TcpConfig, TcpTransport};
use crescent_transport::{RemoteSegment, TransferOp, Transport, TransportError, TransportMetrics};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

async fn handshaken(endpoint: &str) -> TcpStream {
    let mut s = TcpStream::connect(endpoint).await.unwrap();
    s.write_all(&protocol::encode_hello()).await.unwrap();
    let mut ack = [0u8; protocol::HELLO_ACK_LEN];
    s.read_exact(&mut ack).await.unwrap();
    protocol::decode_hello_ack(endpoint, &ack).unwrap();
    s
}

/// Reads until the server closes the connection (EOF or reset), failing after 5 s.
async fn expect_closed(mut s: TcpStream) {
    let mut buf = [0u8; 256];
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return,
            Ok(Ok(_)) => continue, // e.g. a version-refusal ack
            Err(_) => panic!("server kept a malformed connection open"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_frames_close_only_their_connection() {
    let (_owner, remote) = owner("target", MIB).await;
    let endpoint = remote.endpoint.to_string();
    let c = client().await;
    let (src, _) = buffer(&c, random_bytes(1, 4096));
    // A healthy client connection opened before the garbage arrives.
    assert!(c
        .submit(&[desc(TransferOp::Write, &remote, 0, src, 0, 4096)])
        .await
        .unwrap()
        .all_ok());

    // 1. Garbage instead of a handshake.
    let mut s = TcpStream::connect(&endpoint).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    expect_closed(s).await;
    // 2. A future protocol version.
    let mut s = TcpStream::connect(&endpoint).await.unwrap();
    let mut hello = protocol::encode_hello();
    hello[4] = 9;
    s.write_all(&hello).await.unwrap();
    expect_closed(s).await;
    // 3. Unknown op after a good handshake.
    let mut s = handshaken(&endpoint).await;
    let mut frame = RequestHeader {
        op: Op::Read,
        grant: false,
        handle: 1,
        request_id: 1,
        offset: 0,
        length: 8,
    }
    .encode();
    frame[0] = 0x7f;
    s.write_all(&frame).await.unwrap();
    expect_closed(s).await;
    // 4. An absurd length.
    let mut s = handshaken(&endpoint).await;
    let frame = RequestHeader {
        op: Op::Write,
        grant: false,
        handle: 1,
        request_id: 1,
        offset: 0,
        length: u64::MAX / 2,
    }
    .encode();
    s.write_all(&frame).await.unwrap();
    expect_closed(s).await;
    // 5. Random bytes after a good handshake.
    let mut s = handshaken(&endpoint).await;
    s.write_all(&random_bytes(7, 4096)).await.unwrap();
    expect_closed(s).await;

    // The listener and the earlier connection still serve.
    let (dst, dst_mem) = buffer(&c, vec![0u8; 4096]);
    assert!(c
        .submit(&[desc(TransferOp::Read, &remote, 0, dst, 0, 4096)])
        .await
        .unwrap()
        .all_ok());
    assert_eq!(contents(&dst_mem, 0, 4096).await, random_bytes(1, 4096));
    let fresh = client().await;
    let (dst2, _) = buffer(&fresh, vec![0u8; 16]);
    assert!(fresh
        .submit(&[desc(TransferOp::Read, &remote, 0, dst2, 0, 16)])
        .await
        .unwrap()
        .all_ok());
}

/// Reads one OPEN request (header and segment id) as a fake listener.
async fn read_open(s: &mut TcpStream) -> RequestHeader {
    let mut head = [0u8; protocol::REQUEST_HEADER_LEN];
    s.read_exact(&mut head).await.unwrap();
    let open = RequestHeader::decode(&head, 1 << 30).unwrap();
    let mut name = vec![0u8; open.length as usize];
    s.read_exact(&mut name).await.unwrap();
    open
}

/// A fake owner that handshakes, answers OPEN, then misbehaves per `mode`.
async fn fake_owner(mode: &'static str) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut hello = [0u8; protocol::HELLO_LEN];
        s.read_exact(&mut hello).await.unwrap();
        s.write_all(&protocol::encode_hello_ack(protocol::VERSION, 0, 1))
            .await
            .unwrap();
        let open = read_open(&mut s).await;
        let answer = protocol::ResponseHeader {
            request_id: open.request_id,
            status: 0,
            handle: 1,
            payload_len: 8,
        };
        s.write_all(&answer.encode()).await.unwrap();
        s.write_all(&(1u64 << 30).to_le_bytes()).await.unwrap();
        // Take the first request of the batch, then die (or stall).
        let mut head = [0u8; protocol::REQUEST_HEADER_LEN];
        s.read_exact(&mut head).await.unwrap();
        if mode == "stall" {
            tokio::time::sleep(Duration::from_secs(60)).await;
        }
        drop(s);
    });
    endpoint
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_dying_mid_batch_is_a_clear_error_not_a_hang() {
    let endpoint = fake_owner("die").await;
    let c = client().await;
    let remote = RemoteSegment::new(endpoint.as_str(), "seg");
    let (dst, _) = buffer(&c, vec![0u8; 64 * 1024]);
    let batch: Vec<_> = (0..16)
        .map(|i| desc(TransferOp::Read, &remote, i * 4096, dst, i * 4096, 4096))
        .collect();
    let started = Instant::now();
    let done = c.submit(&batch).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    for s in &done.statuses {
        let e = s.as_ref().unwrap_err();
        assert_eq!(e.code().as_str(), "UNAVAILABLE", "{e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_peer_hits_the_batch_timeout() {
    let endpoint = fake_owner("stall").await;
    let c = TcpTransport::start(
        TcpConfig {
            batch_timeout_ms: 300,
            ..config(false)
        },
        TransportMetrics::unregistered(),
    )
    .await
    .unwrap();
    let remote = RemoteSegment::new(endpoint.as_str(), "seg");
    let (dst, _) = buffer(&c, vec![0u8; 4096]);
    let started = Instant::now();
    let done = c
        .submit(&[desc(TransferOp::Read, &remote, 0, dst, 0, 4096)])
        .await
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(matches!(
        done.statuses[0],
        Err(TransportError::Timeout { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_endpoint_is_unavailable() {
    // Bind then drop, so the port is (very likely) closed.
    let port = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let c = client().await;
    let (dst, _) = buffer(&c, vec![0u8; 8]);
    let remote = RemoteSegment::new(format!("127.0.0.1:{port}"), "seg");
    let done = c
        .submit(&[desc(TransferOp::Read, &remote, 0, dst, 0, 8)])
        .await
        .unwrap();
    assert_eq!(
        done.statuses[0].as_ref().unwrap_err().code().as_str(),
        "UNAVAILABLE"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_restarted_on_the_same_port_is_reached_again() {
    let (first, remote) = owner("seg", 1 << 16).await;
    let c = client().await;
    let (buf, buf_mem) = buffer(&c, random_bytes(5, 1024));
    let write = desc(TransferOp::Write, &remote, 0, buf, 0, 1024);
    assert!(c
        .submit(std::slice::from_ref(&write))
        .await
        .unwrap()
        .all_ok());
    // Restart: the pooled connection and the cached segment handle are now stale.
    drop(first);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let second = TcpTransport::start(
        TcpConfig {
            listen: Some(remote.endpoint.to_string()),
            ..config(true)
        },
        TransportMetrics::unregistered(),
    )
    .await
    .unwrap();
    let segment =
        std::sync::Arc::new(crescent_transport::SegmentMemory::allocate(1 << 16).unwrap());
    second.serve_segment("seg", segment.clone()).unwrap();
    let done = c.submit(std::slice::from_ref(&write)).await.unwrap();
    assert!(done.all_ok(), "{:?}", done.statuses);
    let mut back = vec![0u8; 1024];
    segment.read_at(0, &mut back).await.unwrap();
    let mut sent = vec![0u8; 1024];
    buf_mem.read_at(0, &mut sent).await.unwrap();
    assert_eq!(back, sent);
}

/// A version-1 listener (an owner of an older build) refuses the version-2 HELLO; the client
/// handshakes again in version 1 and goes on (without grants, which such a listener never
/// checks).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_1_listener_is_reached_in_version_1() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = listener.local_addr().unwrap().to_string();
    let server = tokio::spawn(async move {
        let mut offered = Vec::new();
        for _ in 0..2 {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut hello = [0u8; protocol::HELLO_LEN];
            s.read_exact(&mut hello).await.unwrap();
            let version = u16::from_le_bytes([hello[4], hello[5]]);
            offered.push(version);
            if version != 1 {
                let refusal = protocol::encode_hello_ack(1, protocol::HELLO_VERSION_UNSUPPORTED, 1);
                s.write_all(&refusal).await.unwrap();
                continue;
            }
            s.write_all(&protocol::encode_hello_ack(1, protocol::HELLO_ACCEPTED, 1))
                .await
                .unwrap();
            let open = read_open(&mut s).await;
            let answer = protocol::ResponseHeader {
                request_id: open.request_id,
                status: protocol::Status::NotFound as u16,
                handle: 0,
                payload_len: 0,
            };
            s.write_all(&answer.encode()).await.unwrap();
            let _ = s.read(&mut [0u8; 1]).await;
        }
        offered
    });
    let c = client().await;
    let (local, _m) = buffer(&c, vec![0u8; 16]);
    let remote = RemoteSegment::new(endpoint.as_str(), "seg");
    let done = c
        .submit(&[desc(TransferOp::Read, &remote, 0, local, 0, 16)])
        .await
        .unwrap();
    let e = done.into_result().unwrap_err();
    assert!(matches!(e, TransportError::SegmentNotFound { .. }), "{e}");
    drop(c);
    assert_eq!(server.await.unwrap(), vec![protocol::VERSION, 1]);
}
