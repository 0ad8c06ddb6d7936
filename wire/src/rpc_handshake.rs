//! The RPC handshake (docs/api.md, "RPC fast path"): the first bytes of a connection, in both
//! directions, before any frame. Version 2 carries the client's credential.
//!
//! **Client -> server.** 8 bytes, then (version 2) the token:
//!
//! ```text
//! +---------+-------------+---------------+---------------------------+
//! | "CRPC"  | version u16 | token_len u16 | token (token_len bytes)   |   version 2
//! +---------+-------------+---------------+---------------------------+
//! | "CRPC"  | version u16 | reserved u16  |                                version 1 (= 0)
//! +---------+-------------+---------------+
//! ```
//!
//! The token is the bearer token as `crescent token issue` prints it (UTF-8, no `Bearer `
//! prefix); `token_len` 0 means none. Version 1 has no token (its last field is reserved).
//!
//! **Server -> client.** 8 bytes: `"CRPC" | version u16 | status u16`. On [`HANDSHAKE_OK`]
//! `version` is the version the client sent (the connection speaks it); otherwise it is the
//! highest version the server speaks. Statuses: [`HANDSHAKE_OK`] (0),
//! [`HANDSHAKE_UNSUPPORTED_VERSION`] (1: unknown version, or version 1 to a server with
//! `[auth]` on, which needs a token), [`HANDSHAKE_BUSY`] (2: at the connection limit, retry
//! later; may be sent before the client's bytes arrive) and [`HANDSHAKE_UNAUTHENTICATED`] (3:
//! version 2 only, the token is missing, malformed, expired, revoked or signed by an unknown
//! key). Status 3 is followed by one error response frame (request id
//! [`HANDSHAKE_ERROR_REQUEST_ID`], body an [`crate::ApiError`] with code `UNAUTHENTICATED`
//! and the reason). On any status but 0 the server closes the connection.

use crate::rpc::RpcError;

/// The handshake's first four bytes.
pub const RPC_MAGIC: [u8; 4] = *b"CRPC";
/// The first RPC protocol version: no credential in the handshake.
pub const RPC_VERSION_1: u16 = 1;
/// The RPC protocol version this build speaks (the highest it accepts); it also accepts
/// [`RPC_VERSION_1`] when it runs without `[auth]`.
pub const RPC_VERSION: u16 = 2;
/// Handshake length, both directions (a version 2 client's token follows it).
pub const HANDSHAKE_LEN: usize = 8;
/// Handshake answer status: accepted.
pub const HANDSHAKE_OK: u16 = 0;
/// Handshake answer status: the client's version is not spoken here (the connection closes).
pub const HANDSHAKE_UNSUPPORTED_VERSION: u16 = 1;
/// Handshake answer status: the listener is at its connection limit (the connection closes;
/// a later attempt may be accepted).
pub const HANDSHAKE_BUSY: u16 = 2;
/// Handshake answer status: the credential was refused (an error frame follows, then the
/// connection closes).
pub const HANDSHAKE_UNAUTHENTICATED: u16 = 3;
/// The request id of the error frame that follows [`HANDSHAKE_UNAUTHENTICATED`].
pub const HANDSHAKE_ERROR_REQUEST_ID: u64 = 0;
/// The longest token a handshake carries (its length is a u16).
pub const MAX_HANDSHAKE_TOKEN_BYTES: usize = u16::MAX as usize;

/// What a client's handshake asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientHello {
    pub version: u16,
    /// Bytes of token that follow the 8 bytes (always 0 for version 1).
    pub token_len: u16,
}

/// What a handshake answer status means (for error messages).
pub fn handshake_status_name(status: u16) -> &'static str {
    match status {
        HANDSHAKE_OK => "accepted",
        HANDSHAKE_UNSUPPORTED_VERSION => "unsupported version",
        HANDSHAKE_BUSY => "too many connections, retry later",
        HANDSHAKE_UNAUTHENTICATED => "credential refused",
        _ => "unknown status",
    }
}

/// A version 1 handshake (no credential), for a server that runs open or speaks only
/// version 1 (its `GET /v1/rpc` says `version: 1`).
pub fn client_hello() -> [u8; HANDSHAKE_LEN] {
    hello(RPC_VERSION_1, 0)
}

/// A version 2 handshake carrying `token` (none: an empty one). Fails without writing
/// anything when the token is longer than [`MAX_HANDSHAKE_TOKEN_BYTES`].
pub fn client_hello_v2(token: Option<&str>, out: &mut Vec<u8>) -> Result<(), RpcError> {
    let token = token.unwrap_or_default().as_bytes();
    let len = u16::try_from(token.len()).map_err(|_| {
        RpcError::Encode(format!(
            "a {}-byte token does not fit the handshake (at most {MAX_HANDSHAKE_TOKEN_BYTES})",
            token.len()
        ))
    })?;
    out.extend_from_slice(&hello(RPC_VERSION, len));
    out.extend_from_slice(token);
    Ok(())
}

/// The server's answer to a handshake: `version` is the client's on [`HANDSHAKE_OK`], else
/// [`RPC_VERSION`].
pub fn server_hello(version: u16, status: u16) -> [u8; HANDSHAKE_LEN] {
    hello(version, status)
}

fn hello(version: u16, last: u16) -> [u8; HANDSHAKE_LEN] {
    let mut b = [0u8; HANDSHAKE_LEN];
    b[..4].copy_from_slice(&RPC_MAGIC);
    b[4..6].copy_from_slice(&version.to_le_bytes());
    b[6..8].copy_from_slice(&last.to_le_bytes());
    b
}

fn parse_hello(b: &[u8; HANDSHAKE_LEN]) -> Result<(u16, u16), RpcError> {
    let magic: [u8; 4] = b[..4].try_into().expect("4 bytes");
    if magic != RPC_MAGIC {
        return Err(RpcError::BadMagic(magic));
    }
    Ok((
        u16::from_le_bytes([b[4], b[5]]),
        u16::from_le_bytes([b[6], b[7]]),
    ))
}

/// Server side: checks a client's handshake (versions 1 and 2). An `UnsupportedVersion` error
/// should be answered with `server_hello(RPC_VERSION, HANDSHAKE_UNSUPPORTED_VERSION)` before
/// closing. For version 2, `token_len` bytes of token follow.
pub fn check_client_hello(b: &[u8; HANDSHAKE_LEN]) -> Result<ClientHello, RpcError> {
    let (version, last) = parse_hello(b)?;
    match version {
        RPC_VERSION_1 => Ok(ClientHello {
            version,
            token_len: 0,
        }),
        RPC_VERSION => Ok(ClientHello {
            version,
            token_len: last,
        }),
        other => Err(RpcError::UnsupportedVersion(other)),
    }
}

/// Client side: checks the server's answer to a handshake of version `sent`.
pub fn check_server_hello_for(b: &[u8; HANDSHAKE_LEN], sent: u16) -> Result<(), RpcError> {
    let (version, status) = parse_hello(b)?;
    if status != HANDSHAKE_OK {
        return Err(RpcError::HandshakeRefused(status));
    }
    if version != sent {
        return Err(RpcError::UnsupportedVersion(version));
    }
    Ok(())
}

/// Client side: checks the server's answer to a version 1 handshake ([`client_hello`]).
pub fn check_server_hello(b: &[u8; HANDSHAKE_LEN]) -> Result<(), RpcError> {
    check_server_hello_for(b, RPC_VERSION_1)
}

#[cfg(test)]
#[path = "rpc_handshake_tests.rs"]
mod tests;
