//! The journal's record model and its chain digest.

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

/// A SHA-256 chain digest: `digest_n = H(digest_{n-1} || canonical(record_n))`.
pub type Digest = [u8; 32];

/// The digest "before" the first record of a journal.
pub const GENESIS_DIGEST: Digest = [0u8; 32];

/// Which aggregate instance a record belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct StreamId {
    /// Aggregate kind, e.g. `segment_registry`.
    pub kind: String,
    /// Aggregate instance id within its kind.
    pub id: String,
}

impl StreamId {
    pub fn new(kind: impl Into<String>, id: impl Into<String>) -> Self {
        Self {
            kind: kind.into(),
            id: id.into(),
        }
    }
}

impl std::fmt::Display for StreamId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.kind, self.id)
    }
}

/// A versioned, already-encoded event. The journal never interprets the payload; the aggregate
/// that owns the stream decodes it (upcasting older versions on read).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventData {
    /// Event kind, e.g. `segment_mounted`; lets tools filter without decoding the payload.
    pub kind: String,
    /// Schema version of the payload for this kind.
    pub version: u16,
    /// The event itself (msgpack, produced by the owning aggregate).
    #[serde(with = "serde_bytes")]
    pub payload: Vec<u8>,
}

/// What a caller hands to [`crate::Journal::submit`]: the journal adds seq, term and digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewRecord {
    pub stream: StreamId,
    pub event: EventData,
    /// Milliseconds since the Unix epoch, taken by the caller (the actor shell's clock), so that
    /// the same time is recorded in the event's context and in the record.
    pub timestamp_ms: i64,
}

/// One durable journal record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub seq: u64,
    pub term: u64,
    pub timestamp_ms: i64,
    pub stream: StreamId,
    pub event: EventData,
    /// The chain digest up to and including this record.
    pub digest: Digest,
}

impl Record {
    /// Recomputes this record's digest from the previous one.
    pub fn expected_digest(&self, prev: &Digest) -> Digest {
        chain_digest(
            prev,
            self.seq,
            self.term,
            self.timestamp_ms,
            &self.stream,
            &self.event,
        )
    }
}

/// A durable record borrowed from the bytes it was decoded from: the replay path's view, which
/// allocates nothing per record (startup recovery, the snapshotter and standby catch-up replay
/// millions of these).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordRef<'a> {
    pub seq: u64,
    pub term: u64,
    pub timestamp_ms: i64,
    pub stream_kind: &'a str,
    pub stream_id: &'a str,
    pub event_kind: &'a str,
    pub event_version: u16,
    pub payload: &'a [u8],
    pub digest: &'a Digest,
}

impl RecordRef<'_> {
    /// The owned record.
    pub fn to_record(&self) -> Record {
        Record {
            seq: self.seq,
            term: self.term,
            timestamp_ms: self.timestamp_ms,
            stream: StreamId::new(self.stream_kind, self.stream_id),
            event: EventData {
                kind: self.event_kind.to_owned(),
                version: self.event_version,
                payload: self.payload.to_vec(),
            },
            digest: *self.digest,
        }
    }

    /// Recomputes this record's digest from the previous one.
    pub fn expected_digest(&self, prev: &Digest) -> Digest {
        chain_digest_parts(
            prev,
            self.seq,
            self.term,
            self.timestamp_ms,
            [self.stream_kind, self.stream_id, self.event_kind],
            self.event_version,
            self.payload,
        )
    }
}

impl Record {
    /// This record borrowed as the replay path's view.
    pub fn as_ref(&self) -> RecordRef<'_> {
        RecordRef {
            seq: self.seq,
            term: self.term,
            timestamp_ms: self.timestamp_ms,
            stream_kind: &self.stream.kind,
            stream_id: &self.stream.id,
            event_kind: &self.event.kind,
            event_version: self.event.version,
            payload: &self.event.payload,
            digest: &self.digest,
        }
    }
}

/// The chain digest of a record, over a canonical byte layout that does not depend on the frame
/// encoding (see docs/journal-format.md): every integer little-endian, every string and byte
/// string prefixed by its u32 length.
pub fn chain_digest(
    prev: &Digest,
    seq: u64,
    term: u64,
    timestamp_ms: i64,
    stream: &StreamId,
    event: &EventData,
) -> Digest {
    chain_digest_parts(
        prev,
        seq,
        term,
        timestamp_ms,
        [&stream.kind, &stream.id, &event.kind],
        event.version,
        &event.payload,
    )
}

/// [`chain_digest`] over borrowed parts: `strings` are stream kind, stream id and event kind.
pub fn chain_digest_parts(
    prev: &Digest,
    seq: u64,
    term: u64,
    timestamp_ms: i64,
    strings: [&str; 3],
    event_version: u16,
    payload: &[u8],
) -> Digest {
    let mut h = Sha256::new();
    h.update(prev);
    h.update(seq.to_le_bytes());
    h.update(term.to_le_bytes());
    h.update(timestamp_ms.to_le_bytes());
    for s in strings {
        h.update((s.len() as u32).to_le_bytes());
        h.update(s.as_bytes());
    }
    h.update(event_version.to_le_bytes());
    h.update((payload.len() as u32).to_le_bytes());
    h.update(payload);
    h.finalize().into()
}

/// The first 8 bytes of a digest in hex, for messages.
pub fn short_hex(digest: &Digest) -> String {
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}
