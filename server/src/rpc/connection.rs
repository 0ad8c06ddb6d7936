//! One RPC connection: handshake, then frames until the peer closes or breaks the protocol.
//!
//! Frames are read with a short busy-poll first (`crescent_transport::frame_input`). Responses are collected in one buffer and written when no further request is already
//! buffered, so a pipelining client gets its answers in few writes and a lock-step client gets
//! each answer at once.

use std::net::SocketAddr;
use std::sync::Arc;

use crescent_wire::rpc::{
    check_client_hello, server_hello, RpcError, RpcOp, HANDSHAKE_LEN, HANDSHAKE_OK,
    HANDSHAKE_UNSUPPORTED_VERSION,
};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tracing::Instrument;

use super::dispatch;
use crate::node::NodeState;
use crescent_transport::frame_input::{FrameInput, ReadFailure};

/// Initial answer buffer per connection.
const READ_BUFFER: usize = 64 << 10;
/// Buffers grown past this by one huge frame are not kept.
const KEEP_BUFFER: usize = 1 << 20;
/// Answers buffered beyond this are written even while more requests wait.
const FLUSH_AT: usize = 256 << 10;

/// Why a connection ended before the peer closed it (not an error of the server: the other
/// side broke the protocol or went away).
#[derive(Debug)]
enum ConnectionEnd {
    Protocol(RpcError),
    Io(std::io::Error),
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
    max_body: usize,
) {
    let span = tracing::debug_span!("rpc.connection", %peer);
    let metrics = state.metrics.clone();
    metrics.rpc_connections.inc();
    match run(&state, stream, max_body).instrument(span).await {
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
    }
    metrics.rpc_connections.dec();
}

async fn run(
    state: &NodeState,
    mut stream: TcpStream,
    max_body: usize,
) -> Result<(), ConnectionEnd> {
    stream.set_nodelay(true)?;
    let mut hello = [0u8; HANDSHAKE_LEN];
    stream.read_exact(&mut hello).await?;
    match check_client_hello(&hello) {
        Ok(_) => stream.write_all(&server_hello(HANDSHAKE_OK)).await?,
        Err(e @ RpcError::UnsupportedVersion(_)) => {
            stream
                .write_all(&server_hello(HANDSHAKE_UNSUPPORTED_VERSION))
                .await?;
            return Err(e.into());
        }
        Err(e) => return Err(e.into()),
    }

    let spin = Duration::from_micros(state.store_settings.rpc_busy_poll_us);
    let mut input = FrameInput::new(&stream)?;
    let mut out = Vec::with_capacity(READ_BUFFER);
    loop {
        if !out.is_empty() && (!input.has_buffered() || out.len() >= FLUSH_AT) {
            stream.write_all(&out).await?;
            out.clear();
            if out.capacity() > KEEP_BUFFER {
                out = Vec::with_capacity(READ_BUFFER);
            }
        }
        if !input.next_frame_starts(&stream, spin).await? {
            return Ok(()); // closed between frames
        }
        let header = input.read_frame(&stream, max_body, spin).await?;
        let body = input.take_body(header.body_len);
        let op = RpcOp::from_u8(header.tag)?;
        if !super::serves(&state.store_settings, op) {
            return Err(RpcError::UnknownOp(header.tag).into());
        }
        dispatch::handle(state, op, header.request_id, body, &mut out);
        input.shrink(KEEP_BUFFER);
    }
}
