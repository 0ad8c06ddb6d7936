//! The replication wire protocol (version 3): length-prefixed msgpack messages over one TCP
//! connection that the standby opens to the active.
//!
//! ```text
//! standby -> active   Hello    {version, node, last_seq, last_term, last_digest, capabilities,
//!                               token, reseed}
//! active  -> standby  Welcome  {version, term, leader, from_seq}      or  Refused {code, ...}
//! active  -> standby  Records  {term, commit_seq, frames}   (journal frames, on-disk format)
//! active  -> standby  Heartbeat{term, commit_seq, durable_seq}        (when idle)
//! standby -> active   Ack      {durable_seq}
//! ```
//!
//! A Hello with `reseed: true` asks for the active's latest snapshot instead (docs/ha.md,
//! "Reseeding"); after the same checks up to the term, the connection carries
//!
//! ```text
//! active  -> standby  SnapshotOffer {term, seq, snap_term, digest, bytes}  or  Refused {...}
//! active  -> standby  SnapshotChunk {data}   (the snapshot file's bytes, in order, until
//!                                             `bytes` were sent; then the active closes)
//! ```
//!
//! Each message is `u32 LE body length` + body (msgpack, fields by name so later versions can
//! add fields). `frames` holds whole journal frames exactly as the file backend stores them
//! (each with its own CRC), so the standby checks every record's CRC and chain digest.
//!
//! Version 2 added the Hello's `token`: the standby's `peer` credential, checked before the
//! active sends anything but a refusal (docs/security.md, "Replication peers"). Version 3 added
//! the Hello's `reseed` and the two snapshot messages. Both sides refuse any other version
//! (`INCOMPATIBLE`); the Hello is read with [`MAX_HELLO`] as its
//! limit, before which the peer is unknown.

use std::io::{Read, Write};

use serde::{Deserialize, Serialize};

use crate::record::Digest;

/// The protocol version this binary speaks.
pub const PROTOCOL_VERSION: u16 = 3;
/// Most snapshot bytes per SnapshotChunk message (the active may send less).
pub const MAX_SNAPSHOT_CHUNK: usize = 4 << 20;
/// Largest message accepted (a Records message is cut well below this by the sender).
pub const MAX_MESSAGE: usize = 64 << 20;
/// Largest Hello accepted: its capabilities and token are a few KiB; an unproven peer must not
/// make the active hold more.
pub const MAX_HELLO: usize = 64 << 10;

/// Why the active refused a standby (stable codes: they appear in logs and status).
pub mod refusal {
    /// The standby's history is not a prefix of the active's.
    pub const DIVERGED: &str = "DIVERGED";
    /// The active no longer holds the records the standby needs (truncated behind a snapshot).
    pub const NEEDS_RESEED: &str = "NEEDS_RESEED";
    /// The node asked is not the active.
    pub const NOT_LEADER: &str = "NOT_LEADER";
    /// The standby cannot replay event versions the active writes, or speaks another protocol.
    pub const INCOMPATIBLE: &str = "INCOMPATIBLE";
    /// Another standby is already following.
    pub const BUSY: &str = "BUSY";
    /// With auth on: the Hello carries no peer credential, or a malformed, expired, revoked or
    /// unknown-key one.
    pub const UNAUTHENTICATED: &str = "UNAUTHENTICATED";
    /// With auth on: a valid credential whose role may not replicate (docs/security.md).
    pub const PERMISSION_DENIED: &str = "PERMISSION_DENIED";
    /// The active cannot check credentials yet (it is still starting); try again.
    pub const UNAVAILABLE: &str = "UNAVAILABLE";
    /// A reseed was asked for, but the active has no snapshot it can vouch for yet (none
    /// written, or its seq is no longer in the active's journal); try again later.
    pub const NO_SNAPSHOT: &str = "NO_SNAPSHOT";
}

/// One protocol message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Message {
    Hello {
        version: u16,
        node: String,
        last_seq: u64,
        last_term: u64,
        #[serde(with = "serde_bytes")]
        last_digest: Vec<u8>,
        /// (event kind, newest version this standby can replay).
        capabilities: Vec<(String, u16)>,
        /// The standby's `peer` token (version 2; `None`: the active runs without auth).
        #[serde(default)]
        token: Option<Credential>,
        /// Version 3: ask for the active's latest snapshot instead of following.
        #[serde(default)]
        reseed: bool,
    },
    Welcome {
        version: u16,
        term: u64,
        leader: String,
        from_seq: u64,
    },
    Refused {
        code: String,
        message: String,
        /// On `DIVERGED`: the newest record both sides should share (seq and its digest on the
        /// active): a standby whose record there matches may drop what follows (those records
        /// were never committed) and follow again.
        rewind_to: Option<RewindPoint>,
    },
    Records {
        term: u64,
        commit_seq: u64,
        #[serde(with = "serde_bytes")]
        frames: Vec<u8>,
    },
    Heartbeat {
        term: u64,
        commit_seq: u64,
        durable_seq: u64,
    },
    Ack {
        durable_seq: u64,
    },
    /// The snapshot the active is about to send: the journal position it reflects (`seq`,
    /// `snap_term` and the chain digest there, as the active's own journal holds it) and its
    /// length in bytes.
    SnapshotOffer {
        term: u64,
        seq: u64,
        snap_term: u64,
        #[serde(with = "serde_bytes")]
        digest: Vec<u8>,
        bytes: u64,
    },
    /// The next bytes of the offered snapshot file.
    SnapshotChunk {
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    },
}

/// A bearer token on the wire; its `Debug` never shows it (messages are logged with `{:?}`).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Credential(pub String);

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Credential(..)")
    }
}

/// The standby's source of the token its Hello carries ([`super::FollowerConfig::token`]),
/// called afresh for each connection (`None`: none to send).
#[derive(Clone)]
pub struct PeerToken(pub std::sync::Arc<dyn Fn() -> Option<String> + Send + Sync>);

impl PeerToken {
    pub fn new(f: impl Fn() -> Option<String> + Send + Sync + 'static) -> Self {
        Self(std::sync::Arc::new(f))
    }
}

// Never print a token.
impl std::fmt::Debug for PeerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PeerToken(..)")
    }
}

/// A record both journals should hold: its seq and (on the active) its digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RewindPoint {
    pub seq: u64,
    #[serde(with = "serde_bytes")]
    pub digest: Vec<u8>,
}

/// What went wrong on the connection.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    #[error("replication connection: {0}")]
    Io(#[from] std::io::Error),
    #[error("replication message of {0} bytes exceeds the maximum")]
    TooLarge(usize),
    #[error("malformed replication message: {0}")]
    Malformed(String),
    /// The standby acknowledged a seq this connection never sent it (docs/ha.md, "Which acks
    /// count"): the connection is dropped and the ack counts for nothing.
    #[error("standby acknowledged seq {acked} but this connection sent only up to {sent}")]
    AckBeyondSent { acked: u64, sent: u64 },
    /// The standby sent something other than an Ack after the handshake.
    #[error("unexpected replication message from the standby: {0}")]
    Unexpected(&'static str),
    /// The active refused a request (its stable code from [`refusal`] and message).
    #[error("refused by the active: {code}: {message}")]
    Refused { code: String, message: String },
    /// A snapshot offered for a reseed does not check out (its bytes, header or position).
    #[error("snapshot for a reseed: {0}")]
    SnapshotMismatch(String),
}

impl ProtocolError {
    /// A stable code for logs, status and the `code` label of
    /// `crescent_replication_protocol_errors_total` (a bounded set).
    pub fn code(&self) -> &'static str {
        match self {
            ProtocolError::Io(_) => "IO",
            ProtocolError::TooLarge(_) => "TOO_LARGE",
            ProtocolError::Malformed(_) => "MALFORMED",
            ProtocolError::AckBeyondSent { .. } => "ACK_BEYOND_SENT",
            ProtocolError::Unexpected(_) => "UNEXPECTED_MESSAGE",
            ProtocolError::Refused { .. } => "REFUSED",
            ProtocolError::SnapshotMismatch(_) => "SNAPSHOT_MISMATCH",
        }
    }
}

impl Message {
    /// The message's type as it appears on the wire (for logs and errors).
    pub fn kind(&self) -> &'static str {
        match self {
            Message::Hello { .. } => "hello",
            Message::Welcome { .. } => "welcome",
            Message::Refused { .. } => "refused",
            Message::Records { .. } => "records",
            Message::Heartbeat { .. } => "heartbeat",
            Message::Ack { .. } => "ack",
            Message::SnapshotOffer { .. } => "snapshot_offer",
            Message::SnapshotChunk { .. } => "snapshot_chunk",
        }
    }
}

/// Writes one message.
pub fn write_message(w: &mut impl Write, msg: &Message) -> Result<(), ProtocolError> {
    let body = rmp_serde::to_vec_named(msg).map_err(|e| ProtocolError::Malformed(e.to_string()))?;
    if body.len() > MAX_MESSAGE {
        return Err(ProtocolError::TooLarge(body.len()));
    }
    let mut out = Vec::with_capacity(4 + body.len());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&body);
    w.write_all(&out)?;
    w.flush()?;
    Ok(())
}

/// Appends one whole Records message (length prefix and body) to `out`, byte for byte what
/// [`write_message`] writes for it, without building a [`Message`] (no copy of `frames` into
/// an owned buffer, no allocation when `out` has room): the journal writer's tap sends these.
pub fn encode_records_into(out: &mut Vec<u8>, term: u64, commit_seq: u64, frames: &[u8]) {
    // Infallible: writing to a Vec cannot fail.
    fn ok<T, E: std::fmt::Debug>(r: Result<T, E>) {
        r.expect("encoding into a Vec");
    }
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    ok(rmp::encode::write_map_len(out, 4));
    ok(rmp::encode::write_str(out, "type"));
    ok(rmp::encode::write_str(out, "records"));
    ok(rmp::encode::write_str(out, "term"));
    ok(rmp::encode::write_uint(out, term));
    ok(rmp::encode::write_str(out, "commit_seq"));
    ok(rmp::encode::write_uint(out, commit_seq));
    ok(rmp::encode::write_str(out, "frames"));
    ok(rmp::encode::write_bin(out, frames));
    let len = (out.len() - start - 4) as u32;
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
}

/// Reads one message (blocking; honours the stream's read timeout).
pub fn read_message(r: &mut impl Read) -> Result<Message, ProtocolError> {
    read_message_within(r, MAX_MESSAGE)
}

/// Reads one message of at most `max` bytes (the Hello: [`MAX_HELLO`]).
pub fn read_message_within(r: &mut impl Read, max: usize) -> Result<Message, ProtocolError> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len) as usize;
    if len > max {
        return Err(ProtocolError::TooLarge(len));
    }
    // Grown as bytes arrive, never to the length a peer merely claims.
    let mut body = Vec::new();
    let got = r.take(len as u64).read_to_end(&mut body)?;
    if got < len {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            format!("message cut at {got} of {len} bytes"),
        )
        .into());
    }
    rmp_serde::from_slice(&body).map_err(|e| ProtocolError::Malformed(e.to_string()))
}

/// A digest carried as bytes, checked for length.
pub fn digest_from(bytes: &[u8]) -> Result<Digest, ProtocolError> {
    bytes
        .try_into()
        .map_err(|_| ProtocolError::Malformed(format!("digest of {} bytes", bytes.len())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_round_trips() {
        let msgs = vec![
            Message::Hello {
                version: PROTOCOL_VERSION,
                node: "b".into(),
                last_seq: 7,
                last_term: 2,
                last_digest: vec![1; 32],
                capabilities: vec![("segment_mounted".into(), 2)],
                token: Some(Credential("header.claims.signature".into())),
                reseed: true,
            },
            Message::Welcome {
                version: 1,
                term: 9,
                leader: "a".into(),
                from_seq: 8,
            },
            Message::Refused {
                code: refusal::DIVERGED.into(),
                message: "x".into(),
                rewind_to: Some(RewindPoint {
                    seq: 5,
                    digest: vec![2; 32],
                }),
            },
            Message::Records {
                term: 9,
                commit_seq: 3,
                frames: vec![0, 1, 2],
            },
            Message::Heartbeat {
                term: 9,
                commit_seq: 3,
                durable_seq: 4,
            },
            Message::Ack { durable_seq: 4 },
            Message::SnapshotOffer {
                term: 9,
                seq: 40,
                snap_term: 8,
                digest: vec![3; 32],
                bytes: 1234,
            },
            Message::SnapshotChunk { data: vec![4; 100] },
        ];
        let mut buf = Vec::new();
        for m in &msgs {
            write_message(&mut buf, m).unwrap();
        }
        let mut r = buf.as_slice();
        for m in &msgs {
            assert_eq!(&read_message(&mut r).unwrap(), m);
        }
        assert!(matches!(read_message(&mut r), Err(ProtocolError::Io(_))));
    }

    #[test]
    fn hand_encoded_records_match_the_generic_encoding() {
        for (term, commit_seq, len) in [
            (0, 0, 0),
            (1, 127, 1),
            (9, 128, 255),
            (300, 70_000, 256),
            (u64::MAX, 1 << 40, 70_000),
        ] {
            let frames: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let message = Message::Records {
                term,
                commit_seq,
                frames: frames.clone(),
            };
            let mut generic = Vec::new();
            write_message(&mut generic, &message).unwrap();
            let mut hand = vec![7u8]; // appends after what is there
            encode_records_into(&mut hand, term, commit_seq, &frames);
            assert_eq!(
                &hand[1..],
                &generic[..],
                "term {term} commit {commit_seq} len {len}"
            );
            assert_eq!(read_message(&mut &hand[1..]).unwrap(), message);
        }
    }

    #[test]
    fn oversized_and_garbage_messages_are_refused() {
        let mut buf = ((MAX_MESSAGE + 1) as u32).to_le_bytes().to_vec();
        buf.extend_from_slice(&[0; 16]);
        assert!(matches!(
            read_message(&mut buf.as_slice()),
            Err(ProtocolError::TooLarge(_))
        ));
        let mut buf = 3u32.to_le_bytes().to_vec();
        buf.extend_from_slice(&[0xc1, 0xc1, 0xc1]);
        assert!(matches!(
            read_message(&mut buf.as_slice()),
            Err(ProtocolError::Malformed(_))
        ));
    }

    #[test]
    fn a_version_1_hello_decodes_without_a_token_and_a_token_never_prints() {
        // The Hello exactly as version 1 wrote it (no `token` field): it decodes, so the
        // active can refuse it by its version with a clear message.
        #[derive(Serialize)]
        #[serde(tag = "type", rename_all = "snake_case")]
        enum V1 {
            Hello {
                version: u16,
                node: String,
                last_seq: u64,
                last_term: u64,
                #[serde(with = "serde_bytes")]
                last_digest: Vec<u8>,
                capabilities: Vec<(String, u16)>,
            },
        }
        let body = rmp_serde::to_vec_named(&V1::Hello {
            version: 1,
            node: "b".into(),
            last_seq: 3,
            last_term: 1,
            last_digest: vec![0; 32],
            capabilities: vec![],
        })
        .unwrap();
        let mut buf = (body.len() as u32).to_le_bytes().to_vec();
        buf.extend_from_slice(&body);
        match read_message_within(&mut buf.as_slice(), MAX_HELLO).unwrap() {
            Message::Hello { version, token, .. } => {
                assert_eq!(version, 1);
                assert_eq!(token, None);
            }
            other => panic!("{other:?}"),
        }
        let hello = Message::Hello {
            version: PROTOCOL_VERSION,
            node: "b".into(),
            last_seq: 0,
            last_term: 0,
            last_digest: vec![0; 32],
            capabilities: vec![],
            token: Some(Credential("secret-token-text".into())),
            reseed: false,
        };
        assert!(!format!("{hello:?}").contains("secret-token-text"));
    }

    #[test]
    fn a_hello_over_its_limit_is_refused_before_its_body_is_read() {
        let hello = Message::Hello {
            version: PROTOCOL_VERSION,
            node: "b".into(),
            last_seq: 0,
            last_term: 0,
            last_digest: vec![0; 32],
            capabilities: vec![("x".repeat(100), 1); 1000],
            token: None,
            reseed: false,
        };
        let mut buf = Vec::new();
        write_message(&mut buf, &hello).unwrap();
        assert!(buf.len() > MAX_HELLO);
        assert!(matches!(
            read_message_within(&mut buf.as_slice(), MAX_HELLO),
            Err(ProtocolError::TooLarge(_))
        ));
        // A length claim alone: refused from the 4 bytes, nothing else is waited for.
        let claim = ((MAX_HELLO + 1) as u32).to_le_bytes();
        assert!(matches!(
            read_message_within(&mut claim.as_slice(), MAX_HELLO),
            Err(ProtocolError::TooLarge(_))
        ));
        assert_eq!(read_message(&mut buf.as_slice()).unwrap(), hello);
    }

    #[test]
    fn error_codes_are_stable() {
        let cases = [
            (ProtocolError::TooLarge(1), "TOO_LARGE"),
            (ProtocolError::Malformed("x".into()), "MALFORMED"),
            (
                ProtocolError::AckBeyondSent { acked: 9, sent: 4 },
                "ACK_BEYOND_SENT",
            ),
            (ProtocolError::Unexpected("hello"), "UNEXPECTED_MESSAGE"),
            (
                ProtocolError::Refused {
                    code: "NO_SNAPSHOT".into(),
                    message: "x".into(),
                },
                "REFUSED",
            ),
            (
                ProtocolError::SnapshotMismatch("x".into()),
                "SNAPSHOT_MISMATCH",
            ),
            (
                ProtocolError::Io(std::io::ErrorKind::BrokenPipe.into()),
                "IO",
            ),
        ];
        for (e, code) in cases {
            assert_eq!(e.code(), code, "{e}");
        }
    }
}
