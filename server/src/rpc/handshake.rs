//! The server side of the RPC handshake (`crescent_wire::rpc_handshake`): reads the client's
//! 8 bytes and token, and answers. Without `[auth]` versions 1 and 2 are accepted and a token
//! is ignored (as an `Authorization` header is on HTTP). With it, version 1 (no token) is
//! answered "unsupported version", and a version 2 token is verified ([`Session::open`]): a
//! refused one is answered status UNAUTHENTICATED and an error frame saying why.

use std::net::SocketAddr;

use crescent_wire::rpc::{
    check_client_hello, encode_response, server_hello, RpcError, RpcStatus,
    HANDSHAKE_ERROR_REQUEST_ID, HANDSHAKE_LEN, HANDSHAKE_OK, HANDSHAKE_UNAUTHENTICATED,
    HANDSHAKE_UNSUPPORTED_VERSION, RPC_VERSION, RPC_VERSION_1,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::connection::{within, ConnectionEnd};
use super::session::{Session, HANDSHAKE_CLASS};
use crate::config::net::RpcLimits;
use crate::node::NodeState;

/// Runs the handshake: `Ok(None)` for an accepted connection of a node without `[auth]`,
/// `Ok(Some(session))` for an accepted credential.
pub(super) async fn accept<S: AsyncRead + AsyncWrite + Unpin>(
    state: &NodeState,
    stream: &mut S,
    peer: SocketAddr,
    limits: &RpcLimits,
) -> Result<Option<Session>, ConnectionEnd> {
    let (version, token) = within(limits.handshake_timeout, "handshake", read(stream)).await?;
    if !state.auth.enabled() {
        send(stream, &server_hello(version, HANDSHAKE_OK)).await?;
        return Ok(None);
    }
    if version == RPC_VERSION_1 {
        state.auth.refused(
            HANDSHAKE_CLASS,
            "missing",
            Some(peer.ip()),
            "RPC version 1 carries no credential",
        );
        send(
            stream,
            &server_hello(RPC_VERSION, HANDSHAKE_UNSUPPORTED_VERSION),
        )
        .await?;
        return Err(ConnectionEnd::Refused);
    }
    let token = (!token.is_empty()).then(|| String::from_utf8_lossy(&token));
    match Session::open(state, token.as_deref(), peer.ip()) {
        Ok(session) => {
            send(stream, &server_hello(version, HANDSHAKE_OK)).await?;
            Ok(Some(session))
        }
        Err(error) => {
            let mut answer = server_hello(version, HANDSHAKE_UNAUTHENTICATED).to_vec();
            encode_response(
                &mut answer,
                RpcStatus::Error,
                HANDSHAKE_ERROR_REQUEST_ID,
                &error,
            )
            .expect("an ApiError always encodes");
            send(stream, &answer).await?;
            Err(ConnectionEnd::Refused)
        }
    }
}

/// The client's version and token (empty: none); an unknown version is answered before the
/// error returns.
async fn read<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
) -> Result<(u16, Vec<u8>), ConnectionEnd> {
    let mut hello = [0u8; HANDSHAKE_LEN];
    stream.read_exact(&mut hello).await?;
    let asked = match check_client_hello(&hello) {
        Ok(asked) => asked,
        Err(e @ RpcError::UnsupportedVersion(_)) => {
            send(
                stream,
                &server_hello(RPC_VERSION, HANDSHAKE_UNSUPPORTED_VERSION),
            )
            .await?;
            return Err(e.into());
        }
        Err(e) => return Err(e.into()),
    };
    let mut token = vec![0u8; usize::from(asked.token_len)];
    stream.read_exact(&mut token).await?;
    Ok((asked.version, token))
}

/// Writes `bytes` and flushes them (a TLS stream holds written records until flushed; a TCP
/// stream's flush does nothing).
async fn send<S: AsyncWrite + Unpin>(stream: &mut S, bytes: &[u8]) -> std::io::Result<()> {
    stream.write_all(bytes).await?;
    stream.flush().await
}
