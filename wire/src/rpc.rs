//! The binary RPC fast path (RPC protocol version 2): the object operations over one persistent
//! TCP connection, beside the HTTP API (which keeps every route). Bodies are the SAME types as
//! the HTTP routes ([`crate::store`]), msgpack-encoded with field names, so the two transports
//! can never disagree on what a request means.
//!
//! # Byte layout
//!
//! All integers are little-endian.
//!
//! **Handshake.** The client opens the connection with 8 bytes (`"CRPC" | version u16 | ...`),
//! version 2 followed by its token; the server answers with 8 bytes carrying a status. See
//! [`crate::rpc_handshake`], whose items are re-exported here.
//!
//! **Request frame.**
//!
//! ```text
//! +------------+-------+---------------+----------------------+
//! | length u32 | op u8 | request id u64| msgpack body         |
//! +------------+-------+---------------+----------------------+
//! ```
//!
//! `length` counts the bytes after itself (`9 + body length`) and is at most the server's
//! maximum body size plus [`HEADER_LEN`] - 4. `op` is an [`RpcOp`]; the body is that op's request
//! type (e.g. [`crate::store::PutStartRequest`]).
//!
//! **Response frame.**
//!
//! ```text
//! +------------+-----------+---------------+----------------------+
//! | length u32 | status u8 | request id u64| msgpack body         |
//! +------------+-----------+---------------+----------------------+
//! ```
//!
//! `status` 0 ([`RpcStatus::Ok`]): the body is the op's reply type (e.g.
//! [`crate::store::PutStartReply`]); 1 ([`RpcStatus::Error`]): the body is an
//! [`crate::ApiError`] with the same code the HTTP route would report.
//!
//! Requests may be pipelined; the server answers each one with the request's id (in order, but
//! clients match by id). A frame that cannot be parsed (unknown op, length out of range, bad
//! handshake) closes that connection only; a body that does not decode as the op's request type
//! is an ordinary INVALID_ARGUMENT error response, and the connection stays open.
//!
//! Bodies must use msgpack *maps* (`rmp_serde::to_vec_named`): the request types skip absent
//! optional fields, which positional (array) encoding cannot express.

use crescent_error_class::ErrorClass;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

pub use crate::rpc_handshake::*;

/// Bytes before a frame's body: length (4), op or status (1), request id (8).
pub const HEADER_LEN: usize = 13;
/// The largest reply frame a client accepts (part of the protocol: a server never sends a
/// bigger one, it answers the items that do not fit BUSY instead).
pub const MAX_REPLY_FRAME_BYTES: usize = 64 << 20;
/// The part of the header that `length` counts (op or status, and request id).
const LENGTH_COUNTED: usize = HEADER_LEN - 4;

/// What can go wrong framing or unframing. Every variant but [`RpcError::Encode`] means the
/// byte stream cannot be trusted any more: the connection must be closed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RpcError {
    #[error("bad handshake: expected magic {RPC_MAGIC:?}, got {0:?}")]
    BadMagic([u8; 4]),
    #[error("RPC protocol version {0} is not supported (this side speaks {RPC_VERSION})")]
    UnsupportedVersion(u16),
    #[error("the server refused the handshake with status {0} ({name})", name = handshake_status_name(*.0))]
    HandshakeRefused(u16),
    #[error("frame length {length} is outside {min}..={max}")]
    FrameLength { length: u64, min: u64, max: u64 },
    #[error("unknown RPC op {0}")]
    UnknownOp(u8),
    #[error("unknown RPC response status {0}")]
    UnknownStatus(u8),
    #[error("cannot encode a frame body: {0}")]
    Encode(String),
    #[error("cannot decode a frame body: {0}")]
    Decode(String),
}

impl RpcError {
    /// The caller's value could not be encoded (User: nothing was sent); otherwise the peer
    /// speaks something else or the stream is corrupt (Fatal: close the connection; a fresh
    /// connection, or the HTTP API, may work).
    pub fn class(&self) -> ErrorClass {
        match self {
            RpcError::Encode(_) => ErrorClass::User,
            _ => ErrorClass::Fatal,
        }
    }
}

/// The operations the RPC fast path carries. The number is the frame's `op` byte (stable; new
/// ops are only added).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum RpcOp {
    PutStart = 1,
    PutEnd = 2,
    PutRevoke = 3,
    Get = 4,
    Exist = 5,
    Size = 6,
    Remove = 7,
    BatchPutStart = 8,
    BatchPutEnd = 9,
    BatchPutRevoke = 10,
    BatchGet = 11,
    BatchExist = 12,
    BatchRemove = 13,
    Heartbeat = 14,
    Release = 15,
    BatchRelease = 16,
    /// Batch get with a compact body ([`crate::rpc_compact`]); only sent to servers that list
    /// [`crate::rpc_compact::FEATURE_COMPACT_BATCH`] (an older server closes the connection on
    /// an op it does not know).
    BatchGetCompact = 17,
    /// Batch put_start with a compact body, negotiated like [`RpcOp::BatchGetCompact`].
    BatchPutStartCompact = 18,
    /// Batch put_end with a compact body; only sent to servers that list
    /// [`crate::rpc_compact::FEATURE_COMPACT_PUT_END`] (a server that lists only
    /// `compact_batch_v1` predates it and closes the connection on it).
    BatchPutEndCompact = 19,
}

impl RpcOp {
    pub const ALL: [RpcOp; 19] = [
        RpcOp::PutStart,
        RpcOp::PutEnd,
        RpcOp::PutRevoke,
        RpcOp::Get,
        RpcOp::Exist,
        RpcOp::Size,
        RpcOp::Remove,
        RpcOp::BatchPutStart,
        RpcOp::BatchPutEnd,
        RpcOp::BatchPutRevoke,
        RpcOp::BatchGet,
        RpcOp::BatchExist,
        RpcOp::BatchRemove,
        RpcOp::Heartbeat,
        RpcOp::Release,
        RpcOp::BatchRelease,
        RpcOp::BatchGetCompact,
        RpcOp::BatchPutStartCompact,
        RpcOp::BatchPutEndCompact,
    ];

    pub fn from_u8(b: u8) -> Result<RpcOp, RpcError> {
        RpcOp::ALL
            .into_iter()
            .find(|op| *op as u8 == b)
            .ok_or(RpcError::UnknownOp(b))
    }

    /// A short stable name (metric label, span field).
    pub fn as_str(self) -> &'static str {
        match self {
            RpcOp::PutStart => "put_start",
            RpcOp::PutEnd => "put_end",
            RpcOp::PutRevoke => "put_revoke",
            RpcOp::Get => "get",
            RpcOp::Exist => "exist",
            RpcOp::Size => "size",
            RpcOp::Remove => "remove",
            RpcOp::BatchPutStart => "batch_put_start",
            RpcOp::BatchPutEnd => "batch_put_end",
            RpcOp::BatchPutRevoke => "batch_put_revoke",
            RpcOp::BatchGet => "batch_get",
            RpcOp::BatchExist => "batch_exist",
            RpcOp::BatchRemove => "batch_remove",
            RpcOp::Heartbeat => "heartbeat",
            RpcOp::Release => "release",
            RpcOp::BatchRelease => "batch_release",
            RpcOp::BatchGetCompact => "batch_get_compact",
            RpcOp::BatchPutStartCompact => "batch_put_start_compact",
            RpcOp::BatchPutEndCompact => "batch_put_end_compact",
        }
    }

    /// Whether the op only reads objects: a read lease still held (or already released) cannot
    /// change its answer. A lease release directly in front of such a request may run after
    /// it is answered (docs/api.md, "Read leases").
    pub fn only_reads(self) -> bool {
        matches!(
            self,
            RpcOp::Get
                | RpcOp::Exist
                | RpcOp::Size
                | RpcOp::BatchGet
                | RpcOp::BatchGetCompact
                | RpcOp::BatchExist
        )
    }

    /// Whether the op releases read leases.
    pub fn releases_leases(self) -> bool {
        matches!(self, RpcOp::Release | RpcOp::BatchRelease)
    }

    /// The HTTP route of the same operation (a compact op: the classic batch op it shortens).
    /// crescentd authorizes an RPC request as a request to this route (docs/security.md).
    pub fn http_route(self) -> &'static str {
        use crate::store::routes as r;
        match self {
            RpcOp::PutStart => r::PUT_START,
            RpcOp::PutEnd => r::PUT_END,
            RpcOp::PutRevoke => r::PUT_REVOKE,
            RpcOp::Get => r::GET,
            RpcOp::Exist => r::EXIST,
            RpcOp::Size => r::SIZE,
            RpcOp::Remove => r::REMOVE,
            RpcOp::BatchPutStart | RpcOp::BatchPutStartCompact => r::BATCH_PUT_START,
            RpcOp::BatchPutEnd | RpcOp::BatchPutEndCompact => r::BATCH_PUT_END,
            RpcOp::BatchPutRevoke => r::BATCH_PUT_REVOKE,
            RpcOp::BatchGet | RpcOp::BatchGetCompact => r::BATCH_GET,
            RpcOp::BatchExist => r::BATCH_EXIST,
            RpcOp::BatchRemove => r::BATCH_REMOVE,
            RpcOp::Heartbeat => r::HEARTBEAT,
            RpcOp::Release => r::RELEASE,
            RpcOp::BatchRelease => r::BATCH_RELEASE,
        }
    }
}

/// A response frame's status byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum RpcStatus {
    /// The body is the op's reply type.
    Ok = 0,
    /// The body is an [`crate::ApiError`].
    Error = 1,
}

impl RpcStatus {
    pub fn from_u8(b: u8) -> Result<RpcStatus, RpcError> {
        match b {
            0 => Ok(RpcStatus::Ok),
            1 => Ok(RpcStatus::Error),
            other => Err(RpcError::UnknownStatus(other)),
        }
    }
}

/// A parsed frame header: `tag` is the op byte (requests) or the status byte (responses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    pub body_len: usize,
    pub tag: u8,
    pub request_id: u64,
}

impl FrameHeader {
    /// Parses a header, refusing bodies longer than `max_body`.
    pub fn parse(b: &[u8; HEADER_LEN], max_body: usize) -> Result<FrameHeader, RpcError> {
        let length = u32::from_le_bytes(b[..4].try_into().expect("4 bytes")) as u64;
        let min = LENGTH_COUNTED as u64;
        let max = (max_body as u64).saturating_add(min).min(u32::MAX as u64);
        if !(min..=max).contains(&length) {
            return Err(RpcError::FrameLength { length, min, max });
        }
        Ok(FrameHeader {
            body_len: (length - min) as usize,
            tag: b[4],
            request_id: u64::from_le_bytes(b[5..13].try_into().expect("8 bytes")),
        })
    }
}

/// Appends one frame (header and msgpack body) to `out`. On error `out` is left as it was.
pub fn encode_frame<T: Serialize + ?Sized>(
    out: &mut Vec<u8>,
    tag: u8,
    request_id: u64,
    body: &T,
) -> Result<(), RpcError> {
    let start = out.len();
    out.extend_from_slice(&[0u8; HEADER_LEN]);
    if let Err(e) = rmp_serde::encode::write_named(out, body) {
        out.truncate(start);
        return Err(RpcError::Encode(e.to_string()));
    }
    let length = out.len() - start - 4;
    let Ok(length32) = u32::try_from(length) else {
        out.truncate(start);
        return Err(RpcError::Encode(format!(
            "a {length}-byte frame does not fit the u32 length"
        )));
    };
    out[start..start + 4].copy_from_slice(&length32.to_le_bytes());
    out[start + 4] = tag;
    out[start + 5..start + HEADER_LEN].copy_from_slice(&request_id.to_le_bytes());
    Ok(())
}

/// Appends a request frame.
pub fn encode_request<T: Serialize + ?Sized>(
    out: &mut Vec<u8>,
    op: RpcOp,
    request_id: u64,
    body: &T,
) -> Result<(), RpcError> {
    encode_frame(out, op as u8, request_id, body)
}

/// Appends a response frame.
pub fn encode_response<T: Serialize + ?Sized>(
    out: &mut Vec<u8>,
    status: RpcStatus,
    request_id: u64,
    body: &T,
) -> Result<(), RpcError> {
    encode_frame(out, status as u8, request_id, body)
}

/// Decodes a frame body (either msgpack form).
pub fn decode_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, RpcError> {
    rmp_serde::from_slice(body).map_err(|e| RpcError::Decode(e.to_string()))
}

/// `GET /v1/rpc`: where the RPC fast path listens (also in `/healthz` as `rpc`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RpcInfo {
    /// `HOST:PORT` of the RPC listener. An unspecified host (`0.0.0.0`, `[::]`) means "the host
    /// you reached the HTTP API on".
    pub address: String,
    /// The highest RPC protocol version spoken there (a client sends the lower of it and its
    /// own: a server saying 1 predates the token in the handshake).
    pub version: u16,
    /// Optional features of that version the server serves (wire v1 addition: absent from
    /// older servers, which serve none). A client uses an op of a feature only when the
    /// feature is listed here: an older server closes the connection on an op it does not know.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub features: Vec<String>,
    /// The listener speaks TLS only (crescentd `[tls]`, docs/security.md "TLS"): the client
    /// opens a TLS session before the handshake. Wire v1 addition: absent means plain TCP.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tls: bool,
    /// Path of the local socket serving the same protocol to clients on the server's host
    /// (docs/api.md, "Local socket"); a client that reached the HTTP API on a loopback address
    /// connects there when it can, else to `address`. Wire v1 addition: absent means none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local: Option<String>,
}

impl RpcInfo {
    /// Whether the server lists `feature`.
    pub fn has_feature(&self, feature: &str) -> bool {
        self.features.iter().any(|f| f == feature)
    }
}

/// The discovery route.
pub const RPC_INFO_ROUTE: &str = "/v1/rpc";

#[cfg(test)]
#[path = "rpc_tests.rs"]
mod tests;
