//! NOTIFY over the TCP transport: a handler's answer comes back, a listener without one says
//! so, a refusal is an error, both over loopback and through the same-process fast path.

mod common;

use std::sync::Arc;

use common::*;
use crescent_transport::tcp::TcpTransport;
use crescent_transport::{Transport, TransportError, TransportMetrics};

fn echo_upper() -> crescent_transport::tcp::NotifyHandler {
    Arc::new(|payload: &[u8]| {
        if payload == b"refuse" {
            return Err("told to".into());
        }
        Ok(payload.to_ascii_uppercase())
    })
}

async fn check(listener: &TcpTransport, sender: &TcpTransport) {
    let endpoint = listener.local_endpoint().unwrap();
    let e = sender.notify(&endpoint, b"hello").await.unwrap_err();
    assert!(matches!(e, TransportError::SegmentNotFound { .. }), "{e}");
    listener.set_notify_handler(Some(echo_upper()));
    assert_eq!(sender.notify(&endpoint, b"hello").await.unwrap(), b"HELLO");
    assert_eq!(sender.notify(&endpoint, b"").await.unwrap(), b"");
    let e = sender.notify(&endpoint, b"refuse").await.unwrap_err();
    assert!(matches!(e, TransportError::InvalidArgument(_)), "{e}");
    // The connection survives a refusal.
    assert_eq!(sender.notify(&endpoint, b"again").await.unwrap(), b"AGAIN");
    let too_long = vec![0u8; (4 << 20) + 1];
    assert!(sender.notify(&endpoint, &too_long).await.is_err());
    listener.set_notify_handler(None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notify_over_loopback() {
    let (listener, _) = owner("seg-n", MIB).await;
    // `client()` turns the fast path off, so this goes over the wire.
    let sender = client().await;
    check(&listener, &sender).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notify_through_the_same_process_fast_path() {
    let (listener, _) = owner("seg-m", MIB).await;
    let mut cfg = config(false);
    cfg.same_process_fast_path = true;
    let sender = TcpTransport::start(cfg, TransportMetrics::unregistered())
        .await
        .unwrap();
    check(&listener, &sender).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notify_to_a_dead_endpoint_is_unavailable() {
    let sender = client().await;
    let e = sender.notify("127.0.0.1:1", b"x").await.unwrap_err();
    assert!(
        matches!(
            e,
            TransportError::Unavailable { .. } | TransportError::Timeout { .. }
        ),
        "{e}"
    );
}
