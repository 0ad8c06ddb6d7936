//! The standby's side of a reseed transfer (docs/ha.md, "Reseeding"): a Hello with
//! `reseed: true` on its own connection, the active's offer, then the snapshot's bytes one
//! bounded chunk at a time. Nothing here writes to disk: the caller stores each chunk as it
//! comes (crescentd writes them aside and installs only a verified, complete copy).

use std::net::{SocketAddr, TcpStream};

use super::follower::FollowerConfig;
use super::protocol::{
    digest_from, read_message, read_message_within, write_message, Credential, Message,
    ProtocolError, MAX_SNAPSHOT_CHUNK, PROTOCOL_VERSION,
};

/// Largest chunk message accepted: a full chunk and its few bytes of framing, so an active
/// cannot make the standby buffer more than one chunk.
const MAX_CHUNK_MESSAGE: usize = MAX_SNAPSHOT_CHUNK + 1024;
use crate::record::Digest;

/// What the active offered: the snapshot's journal position (the digest as the active's own
/// journal holds it at `seq`) and its length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotOfferInfo {
    /// The active's term.
    pub term: u64,
    pub seq: u64,
    pub snap_term: u64,
    pub digest: Digest,
    pub bytes: u64,
}

/// One reseed transfer in progress.
#[derive(Debug)]
pub struct SnapshotReceiver {
    stream: TcpStream,
    offer: SnapshotOfferInfo,
    received: u64,
}

impl SnapshotReceiver {
    /// Connects to the active's replication endpoint at `addr`, asks for a snapshot and reads
    /// the offer (a refusal is [`ProtocolError::Refused`] with its stable code).
    pub fn request(addr: SocketAddr, config: &FollowerConfig) -> Result<Self, ProtocolError> {
        let mut stream = TcpStream::connect_timeout(&addr, config.io_timeout)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(config.io_timeout))?;
        stream.set_write_timeout(Some(config.io_timeout))?;
        write_message(
            &mut stream,
            &Message::Hello {
                version: PROTOCOL_VERSION,
                node: config.node.clone(),
                last_seq: 0,
                last_term: 0,
                last_digest: vec![0; 32],
                capabilities: config.capabilities.clone(),
                token: config.token.as_ref().and_then(|t| (t.0)()).map(Credential),
                reseed: true,
            },
        )?;
        let offer = match read_message(&mut stream)? {
            Message::SnapshotOffer {
                term,
                seq,
                snap_term,
                digest,
                bytes,
            } => SnapshotOfferInfo {
                term,
                seq,
                snap_term,
                digest: digest_from(&digest)?,
                bytes,
            },
            Message::Refused { code, message, .. } => {
                return Err(ProtocolError::Refused { code, message })
            }
            other => return Err(ProtocolError::Unexpected(other.kind())),
        };
        Ok(Self {
            stream,
            offer,
            received: 0,
        })
    }

    pub fn offer(&self) -> &SnapshotOfferInfo {
        &self.offer
    }

    /// Bytes received so far.
    pub fn received(&self) -> u64 {
        self.received
    }

    /// The next chunk (at most [`MAX_SNAPSHOT_CHUNK`] bytes), or `None` once the
    /// offered length was received. A connection that ends first is an error: the caller must
    /// not use what it has.
    pub fn next_chunk(&mut self) -> Result<Option<Vec<u8>>, ProtocolError> {
        if self.received == self.offer.bytes {
            return Ok(None);
        }
        match read_message_within(&mut self.stream, MAX_CHUNK_MESSAGE)? {
            Message::SnapshotChunk { data } => {
                let left = self.offer.bytes - self.received;
                if data.is_empty() || data.len() as u64 > left {
                    return Err(ProtocolError::SnapshotMismatch(format!(
                        "a chunk of {} bytes with {left} bytes left to receive",
                        data.len()
                    )));
                }
                self.received += data.len() as u64;
                Ok(Some(data))
            }
            Message::Refused { code, message, .. } => Err(ProtocolError::Refused { code, message }),
            other => Err(ProtocolError::Unexpected(other.kind())),
        }
    }
}
