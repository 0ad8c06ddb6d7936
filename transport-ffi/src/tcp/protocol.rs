//! The transfer frame protocol, version 2 (a listener also serves version 1 peers).
//!
//! All integers are little-endian. A connection starts with a handshake, then carries any
//! number of pipelined requests; the server answers each with one response carrying the same
//! request id. (The server answers in order today, but clients match by id.)
//!
//! ```text
//! HELLO      client -> server, 8 bytes
//!   0  4  magic   "CRTP" (0x43 0x52 0x54 0x50)
//!   4  2  version u16 = 2 (1: a peer that never attaches grants)
//!   6  2  flags   u16 = 0
//!
//! HELLO_ACK  server -> client, 16 bytes
//!   0  4  magic   "CRTP"
//!   4  2  version u16: the version of the HELLO it accepts (or, refusing, its own)
//!   6  2  status  u16: 0 = accepted, 1 = version unsupported, 2 = busy (the listener
//!                 holds its max_connections; sent without reading the HELLO);
//!                 otherwise the server closes after sending it
//!   8  8  epoch   u64: random per listener start; segment handles are valid within one epoch
//!
//! REQUEST    client -> server, 32-byte header + payload
//!   0  1  op      u8: 1 = OPEN, 2 = WRITE, 3 = READ, 4 = NOTIFY
//!   1  1  flags   u8: bit 0 = a grant follows the header (READ and WRITE, version 2);
//!                 other bits 0
//!   2  2  reserved u16 = 0
//!   4  4  handle  u32: segment handle from OPEN (0 for OPEN itself)
//!   8  8  request id u64 (client-chosen, echoed in the response)
//!  16  8  offset  u64: byte offset in the segment (0 for OPEN)
//!  24  8  length  u64: bytes to transfer (OPEN: length of the segment id)
//!  32 80  grant   (only with flags bit 0) the data-plane grant of this transfer, layout in
//!                 [`crate::grant`]
//!   -  -  payload: WRITE: `length` data bytes; OPEN: the UTF-8 segment id; READ: none;
//!                  NOTIFY: `length` bytes for the listener's notification handler
//!
//! RESPONSE   server -> client, 24-byte header + payload
//!   0  8  request id u64
//!   8  2  status  u16: 0 OK, 1 NOT_FOUND (segment id or handle; NOTIFY: no handler),
//!                      2 OUT_OF_RANGE, 3 INVALID (e.g. bad segment id; NOTIFY: refused),
//!                      4 PERMISSION_DENIED (the listener requires grants and this
//!                        transfer's is missing, forged, expired or for another range)
//!  10  2  reserved u16 = 0
//!  12  4  handle  u32: OPEN ok: the segment's handle; else 0
//!  16  8  payload length u64
//!  24  -  payload: READ ok: the data (exactly the requested length); OPEN ok: u64 segment size;
//!                  NOTIFY ok: the handler's answer (at most MAX_NOTIFY_LEN); errors: none
//! ```
//!
//! A listener that holds grant keys (a storage owner of a crescentd with `[auth]`,
//! docs/security.md "The data plane") refuses a READ or WRITE without a valid grant: the
//! segment id alone opens nothing. One without keys serves every transfer, as in version 1.
//!
//! Segment ids are strings of up to 256 bytes; to keep the hot path fixed-size, a client OPENs
//! each segment once per listener epoch and then uses the u32 handle. Handles are never reused
//! within an epoch, so a withdrawn segment's handle stays NOT_FOUND even if the id is mounted
//! again (the client then re-opens it).
//!
//! NOTIFY carries small control messages between processes that already talk over this
//! connection (a writer telling a storage owner which replicas it committed in the owner's
//! segments, docs/rebuild.md). Its payload is opaque here and at most [`MAX_NOTIFY_LEN`] bytes;
//! `handle` and `offset` are 0.
//!
//! A frame that breaks the protocol (bad magic or version, a length above the server's limit,
//! an unknown op, a non-zero reserved field) makes the server close that connection only. A
//! WRITE that names an unknown segment or an out-of-range span is not a protocol violation: the
//! server consumes its payload and answers with an error status, keeping the connection.

use crate::error::TransportError;

pub const MAGIC: [u8; 4] = *b"CRTP";
pub const VERSION: u16 = 2;
/// The oldest HELLO version a listener accepts.
pub const MIN_VERSION: u16 = 1;
/// Request flag: a grant follows the header.
pub const FLAG_GRANT: u8 = 0x01;
pub const HELLO_LEN: usize = 8;
pub const HELLO_ACK_LEN: usize = 16;
pub const REQUEST_HEADER_LEN: usize = 32;
pub const RESPONSE_HEADER_LEN: usize = 24;

/// Handshake statuses.
pub const HELLO_ACCEPTED: u16 = 0;
pub const HELLO_VERSION_UNSUPPORTED: u16 = 1;
/// The listener holds its maximum number of connections (it closes this one; retry later).
/// A listener at its limit may send this without reading the HELLO.
pub const HELLO_BUSY: u16 = 2;

/// Request operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Op {
    Open = 1,
    Write = 2,
    Read = 3,
    Notify = 4,
}

/// Longest NOTIFY payload, each way.
pub const MAX_NOTIFY_LEN: u64 = 4 << 20;

impl Op {
    pub fn from_u8(v: u8) -> Option<Op> {
        match v {
            1 => Some(Op::Open),
            2 => Some(Op::Write),
            3 => Some(Op::Read),
            4 => Some(Op::Notify),
            _ => None,
        }
    }
}

/// Response statuses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub enum Status {
    Ok = 0,
    NotFound = 1,
    OutOfRange = 2,
    Invalid = 3,
    Denied = 4,
}

impl Status {
    pub fn from_u16(v: u16) -> Option<Status> {
        match v {
            0 => Some(Status::Ok),
            1 => Some(Status::NotFound),
            2 => Some(Status::OutOfRange),
            3 => Some(Status::Invalid),
            4 => Some(Status::Denied),
            _ => None,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::NotFound => "not_found",
            Status::OutOfRange => "out_of_range",
            Status::Invalid => "invalid_argument",
            Status::Denied => "permission_denied",
        }
    }
}

pub fn encode_hello() -> [u8; HELLO_LEN] {
    encode_hello_version(VERSION)
}

/// A HELLO offering `version` (a client retries with [`MIN_VERSION`] when an older listener
/// refuses [`VERSION`]).
pub fn encode_hello_version(version: u16) -> [u8; HELLO_LEN] {
    let mut b = [0u8; HELLO_LEN];
    b[0..4].copy_from_slice(&MAGIC);
    b[4..6].copy_from_slice(&version.to_le_bytes());
    b
}

/// Checks a HELLO: the peer's version, or what is wrong (the server then answers and closes).
pub fn decode_hello(b: &[u8; HELLO_LEN]) -> Result<u16, HelloError> {
    if b[0..4] != MAGIC {
        return Err(HelloError::BadMagic);
    }
    let version = u16::from_le_bytes([b[4], b[5]]);
    if !(MIN_VERSION..=VERSION).contains(&version) {
        return Err(HelloError::Version(version));
    }
    Ok(version)
}

/// Why a HELLO was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HelloError {
    BadMagic,
    Version(u16),
}

pub fn encode_hello_ack(version: u16, status: u16, epoch: u64) -> [u8; HELLO_ACK_LEN] {
    let mut b = [0u8; HELLO_ACK_LEN];
    b[0..4].copy_from_slice(&MAGIC);
    b[4..6].copy_from_slice(&version.to_le_bytes());
    b[6..8].copy_from_slice(&status.to_le_bytes());
    b[8..16].copy_from_slice(&epoch.to_le_bytes());
    b
}

/// Decodes a HELLO_ACK into the listener epoch, or the reason the handshake failed.
pub fn decode_hello_ack(endpoint: &str, b: &[u8; HELLO_ACK_LEN]) -> Result<u64, TransportError> {
    decode_hello_ack_for(endpoint, VERSION, b)
}

/// [`decode_hello_ack`] for a HELLO that offered `offered`.
pub fn decode_hello_ack_for(
    endpoint: &str,
    offered: u16,
    b: &[u8; HELLO_ACK_LEN],
) -> Result<u64, TransportError> {
    if b[0..4] != MAGIC {
        return Err(TransportError::Protocol {
            endpoint: endpoint.to_owned(),
            reason: "handshake answer has a bad magic (not a Crescent transfer listener?)".into(),
        });
    }
    let version = u16::from_le_bytes([b[4], b[5]]);
    let status = u16::from_le_bytes([b[6], b[7]]);
    if status == HELLO_BUSY {
        return Err(TransportError::Unavailable {
            endpoint: endpoint.to_owned(),
            reason: "the transfer listener is at its connection limit; retry later".into(),
        });
    }
    if version != offered || status != HELLO_ACCEPTED {
        return Err(TransportError::UnsupportedVersion {
            endpoint: endpoint.to_owned(),
            theirs: version,
            ours: offered,
        });
    }
    Ok(u64::from_le_bytes(b[8..16].try_into().expect("8 bytes")))
}

/// A decoded request header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestHeader {
    pub op: Op,
    /// A grant follows the header ([`FLAG_GRANT`]).
    pub grant: bool,
    pub handle: u32,
    pub request_id: u64,
    pub offset: u64,
    pub length: u64,
}

impl RequestHeader {
    pub fn encode(&self) -> [u8; REQUEST_HEADER_LEN] {
        let mut b = [0u8; REQUEST_HEADER_LEN];
        b[0] = self.op as u8;
        b[1] = if self.grant { FLAG_GRANT } else { 0 };
        b[4..8].copy_from_slice(&self.handle.to_le_bytes());
        b[8..16].copy_from_slice(&self.request_id.to_le_bytes());
        b[16..24].copy_from_slice(&self.offset.to_le_bytes());
        b[24..32].copy_from_slice(&self.length.to_le_bytes());
        b
    }

    /// Decodes and validates a header against the server's length limit.
    pub fn decode(b: &[u8; REQUEST_HEADER_LEN], max_length: u64) -> Result<Self, FrameError> {
        let op = Op::from_u8(b[0]).ok_or(FrameError::UnknownOp)?;
        let grant = b[1] == FLAG_GRANT && matches!(op, Op::Read | Op::Write);
        if (b[1] != 0 && !grant) || b[2] != 0 || b[3] != 0 {
            return Err(FrameError::ReservedBits);
        }
        let header = RequestHeader {
            op,
            grant,
            handle: u32::from_le_bytes(b[4..8].try_into().expect("4 bytes")),
            request_id: u64::from_le_bytes(b[8..16].try_into().expect("8 bytes")),
            offset: u64::from_le_bytes(b[16..24].try_into().expect("8 bytes")),
            length: u64::from_le_bytes(b[24..32].try_into().expect("8 bytes")),
        };
        let limit = match op {
            Op::Open => crate::transport::MAX_SEGMENT_ID_LEN as u64,
            Op::Read | Op::Write => max_length,
            Op::Notify => MAX_NOTIFY_LEN,
        };
        if header.length > limit {
            return Err(FrameError::LengthTooLarge);
        }
        Ok(header)
    }
}

/// Why a request frame broke the protocol (a bounded metric label each).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameError {
    UnknownOp,
    ReservedBits,
    LengthTooLarge,
}

impl FrameError {
    pub fn label(self) -> &'static str {
        match self {
            FrameError::UnknownOp => "unknown_op",
            FrameError::ReservedBits => "reserved_bits",
            FrameError::LengthTooLarge => "length_too_large",
        }
    }
}

/// A decoded response header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResponseHeader {
    pub request_id: u64,
    pub status: u16,
    pub handle: u32,
    pub payload_len: u64,
}

impl ResponseHeader {
    pub fn encode(&self) -> [u8; RESPONSE_HEADER_LEN] {
        let mut b = [0u8; RESPONSE_HEADER_LEN];
        b[0..8].copy_from_slice(&self.request_id.to_le_bytes());
        b[8..10].copy_from_slice(&self.status.to_le_bytes());
        b[12..16].copy_from_slice(&self.handle.to_le_bytes());
        b[16..24].copy_from_slice(&self.payload_len.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8; RESPONSE_HEADER_LEN]) -> Self {
        ResponseHeader {
            request_id: u64::from_le_bytes(b[0..8].try_into().expect("8 bytes")),
            status: u16::from_le_bytes([b[8], b[9]]),
            handle: u32::from_le_bytes(b[12..16].try_into().expect("4 bytes")),
            payload_len: u64::from_le_bytes(b[16..24].try_into().expect("8 bytes")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip() {
        let h = RequestHeader {
            op: Op::Write,
            grant: true,
            handle: 7,
            request_id: 1 << 40,
            offset: 12345,
            length: 4096,
        };
        assert_eq!(RequestHeader::decode(&h.encode(), 1 << 20), Ok(h));
        let r = ResponseHeader {
            request_id: 9,
            status: Status::OutOfRange as u16,
            handle: 3,
            payload_len: 0,
        };
        assert_eq!(ResponseHeader::decode(&r.encode()), r);
        assert_eq!(decode_hello(&encode_hello()), Ok(VERSION));
        assert_eq!(
            decode_hello_ack("x", &encode_hello_ack(VERSION, 0, 42)),
            Ok(42)
        );
    }

    #[test]
    fn malformed_headers_are_rejected() {
        let mut b = RequestHeader {
            op: Op::Read,
            grant: false,
            handle: 1,
            request_id: 1,
            offset: 0,
            length: 10,
        }
        .encode();
        assert_eq!(
            RequestHeader::decode(&b, 5),
            Err(FrameError::LengthTooLarge)
        );
        b[0] = 99;
        assert_eq!(RequestHeader::decode(&b, 100), Err(FrameError::UnknownOp));
        b[0] = Op::Read as u8;
        b[2] = 1;
        assert_eq!(
            RequestHeader::decode(&b, 100),
            Err(FrameError::ReservedBits)
        );
        b[2] = 0;
        b[1] = FLAG_GRANT;
        assert!(RequestHeader::decode(&b, 100).is_ok_and(|h| h.grant));
        b[0] = Op::Open as u8;
        assert_eq!(
            RequestHeader::decode(&b, 100),
            Err(FrameError::ReservedBits)
        );
        let mut hello = encode_hello();
        hello[4] = 1;
        assert_eq!(decode_hello(&hello), Ok(1));
        hello[4] = 3;
        assert_eq!(decode_hello(&hello), Err(HelloError::Version(3)));
        hello[0] = b'X';
        assert_eq!(decode_hello(&hello), Err(HelloError::BadMagic));
    }
}
