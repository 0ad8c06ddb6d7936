//! One RPC connection: handshake, then frames until the peer closes or breaks the protocol.
//!
//! Frames are read with a short busy-poll first (`crescent_transport::frame_input`). Responses are collected in one buffer and written when no further request is already
//! buffered, so a pipelining client gets its answers in few writes and a lock-step client gets
//! each answer at once.

use std::net::SocketAddr;
use std::sync::Arc;

use crescent_wire::rpc::{
    encode_response, server_hello, RpcError, RpcOp, RpcStatus, HANDSHAKE_BUSY, RPC_VERSION,
};
use crescent_wire::{ApiError, ErrorCode};
use std::time::Duration;

use tokio::net::TcpStream;
use tracing::Instrument;

use super::dispatch;
use super::session::Session;
use super::wire::{Plain, Tls, Wire};
use crate::config::net::RpcLimits;
use crate::node::NodeState;
use crescent_transport::frame_input::{FrameInput, ReadFailure};

/// Initial answer buffer per connection.
const READ_BUFFER: usize = 64 << 10;
/// Buffers grown past this by one huge frame are not kept.
const KEEP_BUFFER: usize = 1 << 20;
/// Answers buffered beyond this are written even while more requests wait.
const FLUSH_AT: usize = 256 << 10;

/// Why a connection ended before the peer closed it (not an error of the server: the other
/// side broke the protocol, went away, or holds no valid credential).
#[derive(Debug)]
pub(super) enum ConnectionEnd {
    Protocol(RpcError),
    Io(std::io::Error),
    /// A bound of `[net]` ran out (the label names which).
    Timeout(&'static str),
    /// The handshake's credential was refused, or it expired or was revoked since (counted in
    /// the refusal metric where it was refused).
    Refused,
}

impl From<RpcError> for ConnectionEnd {
    fn from(e: RpcError) -> Self {
        ConnectionEnd::Protocol(e)
    }
}

impl From<ReadFailure> for ConnectionEnd {
    fn from(e: ReadFailure) -> Self {
        match e {
            ReadFailure::Io(e) => ConnectionEnd::Io(e),
            ReadFailure::Frame(e) => ConnectionEnd::Protocol(e),
        }
    }
}

impl From<std::io::Error> for ConnectionEnd {
    fn from(e: std::io::Error) -> Self {
        ConnectionEnd::Io(e)
    }
}

pub(super) async fn serve(
    state: Arc<NodeState>,
    stream: TcpStream,
    peer: SocketAddr,
    limits: RpcLimits,
    tls: Option<crescent_tls::TlsAcceptor>,
) {
    let span = tracing::debug_span!("rpc.connection", %peer, tls = tls.is_some());
    let metrics = state.metrics.clone();
    metrics.rpc_accepted.with_label_values(&["tcp"]).inc();
    metrics.rpc_connections.inc();
    let end = run(&state, stream, peer, limits, tls)
        .instrument(span)
        .await;
    log_end(&state, peer, end);
    metrics.rpc_connections.dec();
}

/// A client on the local socket (docs/api.md, "Local socket"): its peer is this host, so
/// refusals and logs name the loopback address.
pub(super) const LOCAL_PEER: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 0);

/// Serves one connection of the local socket: the handshake and the frames of a TCP one.
pub(super) async fn serve_local(
    state: Arc<NodeState>,
    stream: tokio::net::UnixStream,
    limits: RpcLimits,
) {
    let span = tracing::debug_span!("rpc.connection", peer = "local");
    let metrics = state.metrics.clone();
    metrics.rpc_accepted.with_label_values(&["local"]).inc();
    metrics.rpc_connections.inc();
    let end = async {
        let mut stream = stream;
        let session = super::handshake::accept(&state, &mut stream, LOCAL_PEER, &limits).await?;
        let input = FrameInput::new(&stream)?;
        frames(&state, Plain { stream, input }, session, limits).await
    }
    .instrument(span)
    .await;
    log_end(&state, LOCAL_PEER, end);
    metrics.rpc_connections.dec();
}

/// Counts and logs how a connection ended.
fn log_end(state: &NodeState, peer: SocketAddr, end: Result<(), ConnectionEnd>) {
    let metrics = &state.metrics;
    match end {
        Ok(()) => tracing::debug!(%peer, "RPC connection closed"),
        Err(ConnectionEnd::Protocol(e)) => {
            let reason = match e {
                RpcError::BadMagic(_) | RpcError::UnsupportedVersion(_) => "handshake",
                _ => "frame",
            };
            metrics
                .rpc_protocol_errors
                .with_label_values(&[reason])
                .inc();
            tracing::warn!(%peer, error = %e, "RPC connection closed: protocol violation");
        }
        Err(ConnectionEnd::Io(e)) => {
            tracing::debug!(%peer, error = %e, "RPC connection ended");
        }
        Err(ConnectionEnd::Refused) => {
            tracing::debug!(%peer, "RPC connection closed: credential refused");
        }
        Err(ConnectionEnd::Timeout(which)) => {
            metrics
                .connections_closed
                .with_label_values(&["rpc", which])
                .inc();
            tracing::debug!(%peer, which, "RPC connection closed: timeout");
        }
    }
}

/// Answers a connection over `net.rpc_max_connections` with handshake status busy and closes
/// it, without waiting for anything from the peer (docs/configuration.md, `[net]`). A TLS
/// listener just closes it (a status needs a session, which costs a handshake).
pub(super) fn refuse_busy(state: &NodeState, stream: TcpStream, peer: SocketAddr, tls: bool) {
    state
        .metrics
        .connections_closed
        .with_label_values(&["rpc", "over_limit"])
        .inc();
    // A fresh socket's send buffer takes 8 bytes at once; if not, the peer only sees a close.
    if !tls {
        let _ = stream.try_write(&server_hello(RPC_VERSION, HANDSHAKE_BUSY));
    }
    tracing::debug!(%peer, "RPC connection refused: at net.rpc_max_connections");
}

/// Runs `io`, or ends the connection as `which` after `limit`.
pub(super) async fn within<T, E: Into<ConnectionEnd>>(
    limit: Duration,
    which: &'static str,
    io: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, ConnectionEnd> {
    match tokio::time::timeout(limit, io).await {
        Ok(r) => r.map_err(Into::into),
        Err(_) => Err(ConnectionEnd::Timeout(which)),
    }
}

async fn run(
    state: &NodeState,
    mut stream: TcpStream,
    peer: SocketAddr,
    limits: RpcLimits,
    tls: Option<crescent_tls::TlsAcceptor>,
) -> Result<(), ConnectionEnd> {
    stream.set_nodelay(true)?;
    let Some(tls) = tls else {
        let session = super::handshake::accept(state, &mut stream, peer, &limits).await?;
        let input = FrameInput::new(&stream)?;
        return frames(state, Plain { stream, input }, session, limits).await;
    };
    let mut stream = match within(limits.handshake_timeout, "handshake", tls.accept(stream)).await {
        Ok(s) => s,
        Err(ConnectionEnd::Io(e)) => {
            crate::tls_metrics::handshake_failed(&state.metrics, "rpc", &e, peer);
            return Err(ConnectionEnd::Io(e));
        }
        Err(e) => {
            let timeout = std::io::Error::new(std::io::ErrorKind::TimedOut, "TLS handshake");
            crate::tls_metrics::handshake_failed(&state.metrics, "rpc", &timeout, peer);
            return Err(e);
        }
    };
    let session = super::handshake::accept(state, &mut stream, peer, &limits).await?;
    let input = crescent_tls::frames::StreamFrames::default();
    frames(state, Tls { stream, input }, session, limits).await
}

/// A lease release read directly in front of another request. When that request only reads
/// it is answered first and the release runs after (docs/api.md, "Read leases"): the reader
/// copies its values while the server counts it out, instead of waiting for it. Before any
/// other request it runs first, so a reader's own remove still finds its lease released.
struct HeldRelease {
    op: RpcOp,
    request_id: u64,
    body: Vec<u8>,
}

impl HeldRelease {
    /// Runs the release through the admission gate, like any store request, and appends its
    /// answer; true when the credential ended.
    async fn run(
        self,
        state: &NodeState,
        session: Option<&mut Session>,
        out: &mut Vec<u8>,
    ) -> bool {
        let _permit = admit(state, self.op, &self.body, session.as_deref()).await;
        dispatch::handle(state, self.op, self.request_id, &self.body, session, out)
    }
}

/// What one connection carries from frame to frame.
struct ConnectionState {
    session: Option<Session>,
    /// Set once the credential expired or was revoked: the requests already buffered are
    /// answered (refused), then the connection closes.
    credential_ended: bool,
    held: Option<HeldRelease>,
    turns: crate::sched::ConnectionTurns,
    out: Vec<u8>,
}

/// Serves frames until the peer closes or breaks the protocol.
async fn frames<W: Wire>(
    state: &NodeState,
    mut input: W,
    session: Option<Session>,
    limits: RpcLimits,
) -> Result<(), ConnectionEnd> {
    let mut conn = ConnectionState {
        session,
        credential_ended: false,
        held: None,
        turns: Default::default(),
        out: Vec::with_capacity(READ_BUFFER),
    };
    let spin = Duration::from_micros(state.store_settings.rpc_busy_poll_us);
    loop {
        flush_answers(&mut input, &mut conn.out).await?;
        if conn.credential_ended && !input.has_buffered() {
            return Err(ConnectionEnd::Refused);
        }
        let Some(header) = next_header(&mut input, &limits, spin).await? else {
            if let Some(release) = conn.held.take() {
                release
                    .run(state, conn.session.as_mut(), &mut conn.out)
                    .await;
            }
            return Ok(()); // closed between frames
        };
        let op = RpcOp::from_u8(header.tag)?;
        if !super::serves(&state.store_settings, op) {
            return Err(RpcError::UnknownOp(header.tag).into());
        }
        if op.releases_leases() && conn.held.is_none() {
            let release = HeldRelease {
                op,
                request_id: header.request_id,
                body: input.take_body(header.body_len).to_vec(),
            };
            if input.has_buffered() {
                conn.held = Some(release);
            } else {
                conn.credential_ended |= release
                    .run(state, conn.session.as_mut(), &mut conn.out)
                    .await;
            }
            input.shrink(KEEP_BUFFER);
            continue;
        }
        let body = input.take_body(header.body_len);
        answer(state, &mut conn, op, header.request_id, body).await;
        if let Some(release) = conn.held.take() {
            // The read is answered before its trailing release runs.
            input.write_all(&conn.out).await?;
            conn.out.clear();
            conn.credential_ended |= release
                .run(state, conn.session.as_mut(), &mut conn.out)
                .await;
        }
        input.shrink(KEEP_BUFFER);
    }
}

/// Writes the answers collected so far once no further request is buffered (or they grew
/// past [`FLUSH_AT`]).
async fn flush_answers<W: Wire>(input: &mut W, out: &mut Vec<u8>) -> Result<(), ConnectionEnd> {
    if !out.is_empty() && (!input.has_buffered() || out.len() >= FLUSH_AT) {
        input.write_all(out).await?;
        out.clear();
        if out.capacity() > KEEP_BUFFER {
            *out = Vec::with_capacity(READ_BUFFER);
        }
    }
    Ok(())
}

/// The next frame's header, within the idle and frame bounds of `[net]`; `None` when the peer
/// closed between frames.
async fn next_header<W: Wire>(
    input: &mut W,
    limits: &RpcLimits,
    spin: Duration,
) -> Result<Option<crescent_wire::rpc::FrameHeader>, ConnectionEnd> {
    let starts = input.next_frame_starts(spin);
    let started = match limits.idle_timeout {
        Some(idle) => within(idle, "idle", starts).await?,
        None => starts.await?,
    };
    if !started {
        return Ok(None);
    }
    let read = input.read_frame(limits.max_body, spin);
    match within(limits.frame_timeout, "frame", read).await {
        Err(ConnectionEnd::Protocol(e @ RpcError::FrameLength { .. })) => {
            refuse_oversized(input, &e).await;
            Err(e.into())
        }
        other => other.map(Some),
    }
}

/// Runs one request (after a held release, unless it only reads) in its tenant's turn of the
/// thread and a slot of the gate, and appends its answer.
async fn answer(
    state: &NodeState,
    conn: &mut ConnectionState,
    op: RpcOp,
    request_id: u64,
    body: &[u8],
) {
    if !op.only_reads() {
        if let Some(release) = conn.held.take() {
            conn.credential_ended |= release
                .run(state, conn.session.as_mut(), &mut conn.out)
                .await;
        }
    }
    if op != RpcOp::Heartbeat {
        let own = conn.session.as_ref().and_then(Session::own_tenant);
        conn.turns.take(&state.gate, op, body, own).await;
    }
    let answer_at = conn.out.len();
    let permit = admit(state, op, body, conn.session.as_ref()).await;
    conn.credential_ended |= dispatch::handle(
        state,
        op,
        request_id,
        body,
        conn.session.as_mut(),
        &mut conn.out,
    );
    drop(permit);
    if matches!(op, RpcOp::Remove | RpcOp::BatchRemove) {
        // Answered once what it removed is journaled (docs/rebuild.md); if that failed,
        // the answer becomes the failure.
        if let Err(e) = state.removals.wait_recorded().await {
            conn.out.truncate(answer_at);
            encode_response(&mut conn.out, RpcStatus::Error, request_id, &e)
                .expect("an ApiError always encodes");
        }
    }
}

/// A slot of the node's admission gate for a store request (docs/tenants.md, "Soft
/// isolation"); an owner's heartbeat is not a store request and never waits behind one.
async fn admit<'a>(
    state: &'a NodeState,
    op: RpcOp,
    body: &[u8],
    session: Option<&Session>,
) -> Option<crate::sched::Permit<'a>> {
    if op == RpcOp::Heartbeat {
        return None;
    }
    let own = session.and_then(Session::own_tenant);
    let ticket = || crate::sched::Ticket::of_rpc(op, body, own);
    Some(state.gate.admit(ticket).await)
}

/// Before closing on a frame over the limit, answers it PAYLOAD_TOO_LARGE under its request id
/// (the stream cannot be resynchronised: the body is never read).
async fn refuse_oversized<W: Wire>(input: &mut W, e: &RpcError) {
    let Some(request_id) = input.peek_request_id() else {
        return;
    };
    let error = ApiError::new(ErrorCode::PayloadTooLarge, e.to_string());
    let mut frame = Vec::new();
    if encode_response(&mut frame, RpcStatus::Error, request_id, &error).is_ok() {
        let _ = tokio::time::timeout(Duration::from_secs(1), input.write_all(&frame)).await;
    }
}
