//! The binary RPC fast path (`crescent_wire::rpc`): a TCP listener beside the HTTP API that
//! carries the object operations with a few bytes of framing instead of an HTTP exchange.
//!
//! It runs on its own few threads (so it neither competes with nor depends on the actix
//! workers), each a single-threaded tokio runtime; connections are dealt round-robin to them
//! and each is one task. Single-threaded runtimes keep a request's wake-up on the thread that
//! owns the socket: a work-stealing runtime would wake a second thread per request, which on
//! loopback costs more than the request itself. Requests on a connection are handled inline, in
//! order: the store calls are short and synchronous, so spawning per request would only add a
//! hop. Each request calls the same operation as its HTTP route ([`crate::api::ops`]), with
//! `[auth]` after the same authorization as that route (`session`, docs/security.md), and a
//! store request first takes a slot of the node's admission gate ([`crate::sched`]): at once
//! when nobody waits, else by its tenant's turn (docs/tenants.md, "Soft isolation").

mod compact;
mod connection;
mod dispatch;
mod handshake;
mod local;
pub(crate) mod scoped;
mod session;
mod wire;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Handle;
use tokio::sync::oneshot;

use crate::config::net::RpcLimits;
use crate::config::StoreSettings;
use crate::error::ServerError;
use crate::node::NodeState;

/// The optional RPC features this server serves (listed in `GET /v1/rpc`).
pub fn features(settings: &StoreSettings) -> Vec<String> {
    let mut features = Vec::new();
    if settings.rpc_compact_batch {
        features.push(crescent_wire::rpc_compact::FEATURE_COMPACT_BATCH.to_string());
    }
    if settings.rpc_compact_batch && settings.rpc_compact_put_end {
        features.push(crescent_wire::rpc_compact::FEATURE_COMPACT_PUT_END.to_string());
    }
    features
}

/// Whether `op` is served with these settings: an op of a feature that is off is as unknown
/// as it is to a server that predates it.
pub(crate) fn serves(settings: &StoreSettings, op: crescent_wire::rpc::RpcOp) -> bool {
    use crescent_wire::rpc::RpcOp;
    match op {
        RpcOp::BatchGetCompact | RpcOp::BatchPutStartCompact => settings.rpc_compact_batch,
        RpcOp::BatchPutEndCompact => settings.rpc_compact_batch && settings.rpc_compact_put_end,
        _ => true,
    }
}

/// A running RPC listener. Stopping it (or dropping it) closes the listener and every
/// connection.
pub struct RpcServer {
    local_addr: SocketAddr,
    /// The local socket, when it listens (its file is removed when the server stops).
    local: Option<local::LocalSocket>,
    /// Dropping a sender ends its thread's runtime (and the tasks on it).
    stops: Vec<oneshot::Sender<()>>,
}

impl std::fmt::Debug for RpcServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RpcServer")
            .field("local_addr", &self.local_addr)
            .field("local", &self.local.as_ref().map(local::LocalSocket::path))
            .field("threads", &self.stops.len())
            .finish()
    }
}

/// One serving thread: a single-threaded runtime living until its stop signal.
fn spawn_thread(index: usize) -> std::io::Result<(Handle, oneshot::Sender<()>)> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()?;
    let handle = runtime.handle().clone();
    let (stop, stopped) = oneshot::channel::<()>();
    std::thread::Builder::new()
        .name(format!("crescent-rpc-{index}"))
        .spawn(move || {
            // Returns when the sender is sent to or dropped; dropping the runtime then cancels
            // every connection task on it.
            let _ = runtime.block_on(stopped);
        })?;
    Ok((handle, stop))
}

impl RpcServer {
    /// Binds `addr` (and the local socket at `local_path`, if given) and starts serving within
    /// `limits` (frame size, connections, timeouts; one connection budget for both). With
    /// `[tls]` (`state.tls`) the TCP listener speaks TLS only (docs/security.md, "TLS"); the
    /// local socket never leaves the host and speaks the plain protocol.
    pub fn start(
        state: Arc<NodeState>,
        addr: SocketAddr,
        limits: RpcLimits,
        local_path: Option<&std::path::Path>,
    ) -> Result<RpcServer, ServerError> {
        let tls = state
            .tls
            .as_ref()
            .map(|t| crescent_tls::TlsAcceptor::from(t.server.clone()));
        let listen_err = |source| ServerError::Listen { addr, source };
        let threads = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2)
            .clamp(1, 8);
        let std_listener = std::net::TcpListener::bind(addr).map_err(listen_err)?;
        std_listener.set_nonblocking(true).map_err(listen_err)?;
        let local_addr = std_listener.local_addr().map_err(listen_err)?;
        let mut handles = Vec::with_capacity(threads);
        let mut stops = Vec::with_capacity(threads);
        for i in 0..threads {
            let (handle, stop) = spawn_thread(i).map_err(listen_err)?;
            handles.push(handle);
            stops.push(stop);
        }
        let listener = {
            let _guard = handles[0].enter();
            TcpListener::from_std(std_listener).map_err(listen_err)?
        };
        let open = Arc::new(AtomicUsize::new(0));
        let local = match local_path {
            Some(path) => local::start(&state, path, &handles, limits, open.clone()),
            None => None,
        };
        handles[0].clone().spawn(accept_loop(
            listener,
            handles,
            state,
            limits,
            tls.clone(),
            open,
        ));
        tracing::info!(rpc_listen = %local_addr, threads, tls = tls.is_some(), "RPC fast path listening");
        Ok(RpcServer {
            local_addr,
            local,
            stops,
        })
    }

    /// The bound address (the real port when configured with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The local socket's path, when it listens.
    pub fn local_path(&self) -> Option<&std::path::Path> {
        self.local.as_ref().map(local::LocalSocket::path)
    }

    /// Closes the listener and every connection (in-flight requests are dropped; clients see
    /// the connection close and may retry).
    pub fn stop(mut self) {
        self.stops.clear();
    }
}

/// Open connections of one listener; a slot is freed when its connection task ends.
pub(super) struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

pub(super) fn take_slot(open: &Arc<AtomicUsize>, max: usize) -> Option<Slot> {
    open.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
        (n < max).then_some(n + 1)
    })
    .ok()
    .map(|_| Slot(open.clone()))
}

async fn accept_loop(
    listener: TcpListener,
    threads: Vec<Handle>,
    state: Arc<NodeState>,
    limits: RpcLimits,
    tls: Option<crescent_tls::TlsAcceptor>,
    open: Arc<AtomicUsize>,
) {
    let mut next = 0usize;
    let mut backoff = ACCEPT_BACKOFF_MIN;
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                backoff = ACCEPT_BACKOFF_MIN;
                let Some(slot) = take_slot(&open, limits.max_connections) else {
                    connection::refuse_busy(&state, stream, peer, tls.is_some());
                    continue;
                };
                // Re-register the socket with the reactor of the thread that will serve it.
                let std_stream = match stream.into_std() {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::warn!(%peer, error = %e, "RPC connection dropped at accept");
                        continue;
                    }
                };
                let state = state.clone();
                let tls = tls.clone();
                threads[next % threads.len()].spawn(async move {
                    let _slot = slot;
                    match TcpStream::from_std(std_stream) {
                        Ok(stream) => connection::serve(state, stream, peer, limits, tls).await,
                        Err(e) => tracing::warn!(%peer, error = %e, "RPC connection dropped"),
                    }
                });
                next = next.wrapping_add(1);
            }
            Err(e) => backoff = accept_failed(&state, &e, backoff).await,
        }
    }
}

/// After a failed accept (out of descriptors and the like): counts it and waits `backoff`
/// rather than spin; returns the next, doubled wait. The journal's reserved descriptors are
/// not touched (docs/configuration.md).
pub(super) async fn accept_failed(
    state: &NodeState,
    e: &std::io::Error,
    backoff: Duration,
) -> Duration {
    state
        .metrics
        .accept_failures
        .with_label_values(&["rpc"])
        .inc();
    tracing::warn!(error = %e, backoff_ms = backoff.as_millis() as u64, "RPC accept failed");
    tokio::time::sleep(backoff).await;
    (backoff * 2).min(ACCEPT_BACKOFF_MAX)
}

/// First and longest wait after a failed accept (EMFILE and the like).
pub(super) const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);
