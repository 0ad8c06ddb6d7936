//! Reaching the RPC listener: its address from `GET /v1/rpc` ([`resolve`]), and the client side
//! of the handshake (`crescent_wire::rpc_handshake`): version 2 with the client's token to a
//! server whose `GET /v1/rpc` says 2 or more, version 1 (no token) to an older one (which
//! serves the fast path only when it runs open).

use std::net::SocketAddr;

use crescent_wire::rpc::{
    check_server_hello_for, client_hello, client_hello_v2, decode_body, FrameHeader, RpcError,
    RpcInfo, HANDSHAKE_LEN, HANDSHAKE_UNAUTHENTICATED, HEADER_LEN, RPC_VERSION, RPC_VERSION_1,
};
use crescent_wire::{ApiError, ErrorCode};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::client_options::BearerToken;
use crate::http::HttpConn;

/// The largest error frame read after a refused credential (a code and a short message).
const MAX_REFUSAL_BODY: usize = 16 << 10;

/// Why a handshake did not open the connection.
#[derive(Debug)]
pub(crate) enum HandshakeFailure {
    /// The connection broke, or the server refused it for a reason another attempt or HTTP
    /// may not meet (busy, unsupported version).
    Io(std::io::Error),
    /// The server refused the credential (UNAUTHENTICATED, with the server's reason).
    Refused(ApiError),
    /// The TLS handshake failed (an untrusted certificate, another name): in a user's words.
    Tls(String),
}

/// A failed TLS connect: the certificate problem, or the network failure under it.
pub(crate) fn tls_connect_failure(e: std::io::Error) -> HandshakeFailure {
    match crescent_tls::tls_cause(&e) {
        Some(tls) => HandshakeFailure::Tls(crate::error::tls_words(tls)),
        None => HandshakeFailure::Io(e),
    }
}

impl From<std::io::Error> for HandshakeFailure {
    fn from(e: std::io::Error) -> Self {
        HandshakeFailure::Io(e)
    }
}

/// The version to speak to a server whose `GET /v1/rpc` said `advertised`.
pub(crate) fn version_for(advertised: u16) -> u16 {
    if advertised >= RPC_VERSION {
        RPC_VERSION
    } else {
        RPC_VERSION_1
    }
}

/// Runs the handshake of `version` on a fresh connection, presenting `token` (version 2).
pub(crate) async fn handshake<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    version: u16,
    token: Option<&BearerToken>,
) -> Result<(), HandshakeFailure> {
    let mut hello = Vec::with_capacity(HANDSHAKE_LEN + 512);
    if version >= RPC_VERSION {
        client_hello_v2(token.map(BearerToken::secret), &mut hello)
            .map_err(std::io::Error::other)?;
    } else {
        hello.extend_from_slice(&client_hello());
    }
    stream.write_all(&hello).await?;
    stream.flush().await?;
    let mut answer = [0u8; HANDSHAKE_LEN];
    stream.read_exact(&mut answer).await?;
    match check_server_hello_for(&answer, version) {
        Ok(()) => Ok(()),
        Err(RpcError::HandshakeRefused(HANDSHAKE_UNAUTHENTICATED)) => {
            Err(HandshakeFailure::Refused(read_refusal(stream).await))
        }
        Err(e) => Err(HandshakeFailure::Io(std::io::Error::other(e))),
    }
}

/// The error frame that follows a refused credential; without a readable one the refusal is
/// still UNAUTHENTICATED.
async fn read_refusal<S: AsyncRead + Unpin>(stream: &mut S) -> ApiError {
    let fallback = || {
        ApiError::new(
            ErrorCode::Unauthenticated,
            "the RPC listener refused the credential",
        )
    };
    let mut header = [0u8; HEADER_LEN];
    if stream.read_exact(&mut header).await.is_err() {
        return fallback();
    }
    let Ok(h) = FrameHeader::parse(&header, MAX_REFUSAL_BODY) else {
        return fallback();
    };
    let mut body = vec![0u8; h.body_len];
    if stream.read_exact(&mut body).await.is_err() {
        return fallback();
    }
    decode_body::<ApiError>(&body).unwrap_or_else(|_| fallback())
}

/// The listener's socket address; an unspecified host means the host the HTTP API was reached
/// on.
pub(crate) async fn resolve(http: &HttpConn, info: &RpcInfo) -> Option<SocketAddr> {
    let advertised: SocketAddr = match info.address.parse() {
        Ok(a) => a,
        Err(e) => {
            tracing::warn!(address = %info.address, error = %e, "unusable RPC address; using HTTP");
            return None;
        }
    };
    if !advertised.ip().is_unspecified() {
        return Some(advertised);
    }
    let host = http.routes.healthz.host_str()?.to_string();
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let mut found = tokio::net::lookup_host((host.as_str(), advertised.port()))
        .await
        .ok()?;
    found.next()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn older_servers_get_version_1() {
        assert_eq!(version_for(1), RPC_VERSION_1);
        assert_eq!(version_for(RPC_VERSION), RPC_VERSION);
        assert_eq!(version_for(RPC_VERSION + 1), RPC_VERSION);
    }
}
