//! TLS on the HA replication connection, through an in-process relay on each node
//! (docs/security.md, "TLS"). The replication protocol runs on blocking sockets shared by
//! several threads (the journal writer sends on the active's socket without blocking, the ack
//! reader reads it beside), which a TLS session cannot be split across. So with `[tls]` the
//! journal's source listens on a loopback port of its own and the follower dials one:
//!
//! - active: [`AcceptRelay`] owns the published replication address, completes each TLS
//!   handshake (within `net.replication_handshake_timeout_ms`) and copies the bytes to a new
//!   connection to the source's loopback port;
//! - standby: the follower connects to [`DialRelay`]'s loopback port, which dials the active's
//!   published address with TLS, verifying it with `tls.ca_file` against the active's
//!   advertised host, and copies the bytes.
//!
//! The protocol, the peer proof and every check are unchanged; only the bytes between the
//! nodes are encrypted. Without `[tls]` none of this runs.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

use super::standby::ReplicationPeer;
use crate::metrics::ServerMetrics;

/// Bytes copied per read in each direction (journal messages run to a few hundred KiB).
const COPY_BUFFER: usize = 64 << 10;
/// Connect and handshake bound of the standby's dial.
const DIAL_TIMEOUT: Duration = Duration::from_secs(5);

/// A thread running one current-thread runtime until the relay is dropped (so the copies
/// compete neither with the actix thread nor with the RPC threads).
fn relay_runtime(
    name: &str,
    listener: std::net::TcpListener,
    serve: impl FnOnce(TcpListener) -> futures::future::BoxFuture<'static, ()> + Send + 'static,
) -> std::io::Result<oneshot::Sender<()>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()?;
    let (stop, stopped) = oneshot::channel::<()>();
    listener.set_nonblocking(true)?;
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            runtime.block_on(async move {
                let listener = match TcpListener::from_std(listener) {
                    Ok(l) => l,
                    Err(e) => {
                        tracing::error!(error = %e, "TLS relay listener");
                        return;
                    }
                };
                tokio::select! {
                    () = serve(listener) => {}
                    _ = stopped => {}
                }
            });
        })?;
    Ok(stop)
}

/// Copies both ways until either side closes.
async fn pipe<A, B>(mut a: A, mut b: B)
where
    A: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    B: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let _ =
        tokio::io::copy_bidirectional_with_sizes(&mut a, &mut b, COPY_BUFFER, COPY_BUFFER).await;
}

/// The active's TLS front of its replication listener. Dropping it closes the listener and
/// every relayed connection.
pub struct AcceptRelay {
    local_addr: SocketAddr,
    _stop: oneshot::Sender<()>,
}

/// What the active's relay needs.
pub struct AcceptConfig {
    /// The published replication address to bind (port 0: the OS picks).
    pub listen: SocketAddr,
    /// The journal source's loopback address.
    pub inner: SocketAddr,
    pub acceptor: crescent_tls::TlsAcceptor,
    /// `net.replication_max_connections`: more are closed at once (`over_limit`).
    pub max_connections: usize,
    /// `net.replication_handshake_timeout_ms`, for the TLS handshake.
    pub handshake_timeout: Duration,
    pub metrics: ServerMetrics,
}

impl AcceptRelay {
    pub fn start(c: AcceptConfig) -> std::io::Result<AcceptRelay> {
        let listener = std::net::TcpListener::bind(c.listen)?;
        let local_addr = listener.local_addr()?;
        let stop = relay_runtime("crescent-repl-tls", listener, move |l| {
            Box::pin(accept_loop(l, c))
        })?;
        Ok(AcceptRelay {
            local_addr,
            _stop: stop,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }
}

async fn accept_loop(listener: TcpListener, c: AcceptConfig) {
    let open = Arc::new(AtomicUsize::new(0));
    let c = Arc::new(c);
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(a) => a,
            Err(e) => {
                c.metrics
                    .accept_failures
                    .with_label_values(&["replication"])
                    .inc();
                tracing::warn!(error = %e, "replication TLS accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        if open.fetch_add(1, Ordering::AcqRel) >= c.max_connections {
            open.fetch_sub(1, Ordering::AcqRel);
            c.metrics
                .connections_closed
                .with_label_values(&["replication", "over_limit"])
                .inc();
            continue;
        }
        let (c, open) = (c.clone(), open.clone());
        tokio::spawn(async move {
            relay_accepted(&c, stream, peer).await;
            open.fetch_sub(1, Ordering::AcqRel);
        });
    }
}

async fn relay_accepted(c: &AcceptConfig, stream: TcpStream, peer: SocketAddr) {
    let _ = stream.set_nodelay(true);
    let tls = match tokio::time::timeout(c.handshake_timeout, c.acceptor.accept(stream)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => {
            crate::tls_metrics::handshake_failed(&c.metrics, "replication", &e, peer);
            return;
        }
        Err(_) => {
            let e = std::io::Error::new(std::io::ErrorKind::TimedOut, "TLS handshake timed out");
            crate::tls_metrics::handshake_failed(&c.metrics, "replication", &e, peer);
            return;
        }
    };
    let inner = match TcpStream::connect(c.inner).await {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "replication TLS relay: the journal source is gone");
            return;
        }
    };
    let _ = inner.set_nodelay(true);
    tracing::debug!(%peer, "replication connection relayed over TLS");
    pipe(tls, inner).await;
}

/// The standby's TLS side: the follower connects here, the relay dials the active.
pub struct DialRelay {
    local_addr: SocketAddr,
    _stop: oneshot::Sender<()>,
}

impl DialRelay {
    /// `peer` is read at each connection (the active may move); `connector` verifies it.
    pub fn start(
        peer: Arc<Mutex<Option<ReplicationPeer>>>,
        connector: crescent_tls::TlsConnector,
        metrics: ServerMetrics,
    ) -> std::io::Result<DialRelay> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        let local_addr = listener.local_addr()?;
        let stop = relay_runtime("crescent-repl-tls", listener, move |l| {
            Box::pin(dial_loop(l, peer, connector, metrics))
        })?;
        Ok(DialRelay {
            local_addr,
            _stop: stop,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }
}

async fn dial_loop(
    listener: TcpListener,
    peer: Arc<Mutex<Option<ReplicationPeer>>>,
    connector: crescent_tls::TlsConnector,
    metrics: ServerMetrics,
) {
    loop {
        let Ok((local, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let target = peer.lock().expect("leader mutex").clone();
        let Some(target) = target else {
            continue; // no active known: the follower sees a close and retries
        };
        let (connector, metrics) = (connector.clone(), metrics.clone());
        tokio::spawn(async move {
            let _ = local.set_nodelay(true);
            match tokio::time::timeout(DIAL_TIMEOUT, dial(&connector, &target)).await {
                Ok(Ok(remote)) => pipe(local, remote).await,
                Ok(Err(e)) => {
                    let reason = crescent_tls::failure_reason(&e);
                    if crescent_tls::is_handshake_failure(&e) {
                        metrics
                            .tls_handshake_failures
                            .with_label_values(&["replication_dial", reason])
                            .inc();
                    }
                    tracing::warn!(active = %target.addr, host = %target.host, reason, error = %e,
                        "cannot reach the active's replication listener over TLS");
                }
                Err(_) => tracing::warn!(active = %target.addr, "replication TLS dial timed out"),
            }
        });
    }
}

async fn dial(
    connector: &crescent_tls::TlsConnector,
    target: &ReplicationPeer,
) -> std::io::Result<crescent_tls::client::TlsStream<TcpStream>> {
    let name = crescent_tls::server_name(&target.host).map_err(std::io::Error::other)?;
    let tcp = TcpStream::connect(target.addr).await?;
    tcp.set_nodelay(true)?;
    connector.connect(name, tcp).await
}
