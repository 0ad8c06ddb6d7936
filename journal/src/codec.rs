//! Frame encoding and decoding: how one [`Record`] is laid out in bytes, for every backend.
//!
//! # Frame layout (format version 1)
//!
//! ```text
//! offset  size  field
//! 0       4     body_len   u32 little-endian, length of `body` in bytes (1..=MAX_FRAME_BODY)
//! 4       4     body_crc   u32 little-endian, CRC32C (Castagnoli) of `body`
//! 8       N     body       msgpack (rmp-serde compact form: a 10-element array)
//! ```
//!
//! The body is a msgpack array, in this order:
//!
//! | # | field          | msgpack type       | meaning                                        |
//! |---|----------------|--------------------|------------------------------------------------|
//! | 0 | format_version | uint (u8)          | frame format version, currently `1`            |
//! | 1 | seq            | uint (u64)         | sequence number                                |
//! | 2 | term           | uint (u64)         | writer's term                                  |
//! | 3 | timestamp_ms   | int (i64)          | ms since the Unix epoch (caller's clock)       |
//! | 4 | stream_kind    | str                | aggregate kind                                 |
//! | 5 | stream_id      | str                | aggregate instance id                          |
//! | 6 | event_kind     | str                | event kind                                     |
//! | 7 | event_version  | uint (u16)         | event schema version                           |
//! | 8 | payload        | bin                | the event bytes (opaque to the journal)        |
//! | 9 | digest         | bin, exactly 32 B  | SHA-256 chain digest up to and including this record |
//!
//! A body length word of `0` never starts a frame: the file backend preallocates segments with
//! zeros, so a zero word marks the end of written data.
//!
//! # Decoding rules
//!
//! [`decode_frame`] checks, in order: enough bytes for the 8-byte prefix and the body (else
//! [`FrameError::Torn`]), `body_len` within `1..=MAX_FRAME_BODY` ([`FrameError::BadLength`]), the
//! CRC ([`FrameError::CrcMismatch`]), the body's format version (a newer one is
//! [`FrameError::UnsupportedVersion`], never mistaken for damage), the msgpack structure
//! ([`FrameError::BadBody`]) and that the digest is exactly 32 bytes ([`FrameError::BadDigest`]).
//!
//! [`decode_body_ref`] borrows strings and bytes straight from the input buffer (the replay
//! path); [`decode_body`] copies each field exactly once, into an owned [`Record`].

mod body_v1;

use std::ops::Range;

use serde::Serialize;

use crate::record::{Digest, EventData, Record, RecordRef, StreamId};

/// The frame format version this binary writes and the newest it reads.
pub const FRAME_FORMAT_VERSION: u8 = 1;
/// Bytes before the body: length word + CRC word.
pub const FRAME_PREFIX_LEN: usize = 8;
/// Largest body a decoder accepts (1 GiB): anything above is a damaged length word.
pub const MAX_FRAME_BODY: usize = 1 << 30;

/// Why bytes are not a valid frame. Backends turn this into a [`crate::JournalError`] with the
/// location and seq they know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The buffer ends inside the frame (a torn write, or the end of a file).
    #[error("torn frame: need {needed} bytes, only {available} present")]
    Torn { needed: usize, available: usize },
    /// The length word is zero or implausibly large.
    #[error("bad frame length {0}")]
    BadLength(u32),
    #[error("frame CRC mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    CrcMismatch { stored: u32, computed: u32 },
    /// The frame was written by a newer binary.
    #[error("frame format version {0} is newer than supported {FRAME_FORMAT_VERSION}")]
    UnsupportedVersion(u8),
    #[error("frame body is not a valid record: {0}")]
    BadBody(String),
    #[error("frame digest has {0} bytes, expected 32")]
    BadDigest(usize),
}

/// Body as written: borrowed fields, serialized as a msgpack array (compact form).
#[derive(Serialize)]
struct FrameBodyRef<'a> {
    format_version: u8,
    seq: u64,
    term: u64,
    timestamp_ms: i64,
    stream_kind: &'a str,
    stream_id: &'a str,
    event_kind: &'a str,
    event_version: u16,
    payload: &'a serde_bytes::Bytes,
    digest: &'a serde_bytes::Bytes,
}

/// Frames ready for a backend: one contiguous buffer plus where each record's frame sits.
#[derive(Debug, Default, Clone)]
pub struct EncodedBatch {
    pub bytes: Vec<u8>,
    /// (seq, byte range of that record's whole frame within `bytes`)
    pub frames: Vec<(u64, Range<usize>)>,
    /// The chain digest after each frame, parallel to `frames` (backends that record the digest
    /// before a seq, like the file backend's segment headers, need it without decoding).
    pub digests: Vec<Digest>,
    /// The term of each frame, parallel to `frames`.
    pub terms: Vec<u64>,
}

impl EncodedBatch {
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of frames.
    pub fn len(&self) -> usize {
        self.frames.len()
    }

    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// Seq of the first frame.
    pub fn first_seq(&self) -> Option<u64> {
        self.frames.first().map(|(s, _)| *s)
    }

    /// Seq of the last frame.
    pub fn last_seq(&self) -> Option<u64> {
        self.frames.last().map(|(s, _)| *s)
    }

    /// Empties the batch, keeping its allocations for reuse.
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.frames.clear();
        self.digests.clear();
        self.terms.clear();
    }

    /// Appends the frame of `record` (whose `digest` must already be computed); returns the
    /// frame's length in bytes.
    pub fn push(&mut self, record: &Record) -> usize {
        self.push_parts(
            record.seq,
            record.term,
            record.timestamp_ms,
            &record.stream,
            &record.event,
            &record.digest,
        )
    }

    /// Appends a frame from its parts without building a [`Record`] first.
    pub fn push_parts(
        &mut self,
        seq: u64,
        term: u64,
        timestamp_ms: i64,
        stream: &StreamId,
        event: &EventData,
        digest: &Digest,
    ) -> usize {
        let start = self.bytes.len();
        encode_frame_into(
            &mut self.bytes,
            seq,
            term,
            timestamp_ms,
            stream,
            event,
            digest,
        );
        let end = self.bytes.len();
        self.frames.push((seq, start..end));
        self.digests.push(*digest);
        self.terms.push(term);
        end - start
    }

    /// Appends the frame of a borrowed record (a replicated one: seq, term and digest given).
    pub fn push_ref(&mut self, r: &RecordRef<'_>) -> usize {
        let start = self.bytes.len();
        encode_ref_into(&mut self.bytes, r);
        let end = self.bytes.len();
        self.frames.push((r.seq, start..end));
        self.digests.push(*r.digest);
        self.terms.push(r.term);
        end - start
    }

    /// Drops every frame from index `frames` on (used to undo a partly encoded submission).
    pub fn truncate(&mut self, frames: usize) {
        if frames >= self.frames.len() {
            return;
        }
        let cut = self.frames[frames].1.start;
        self.bytes.truncate(cut);
        self.frames.truncate(frames);
        self.digests.truncate(frames);
        self.terms.truncate(frames);
    }

    /// The bytes of frame `index`.
    pub fn frame_bytes(&self, index: usize) -> &[u8] {
        &self.bytes[self.frames[index].1.clone()]
    }
}

/// Encodes one frame onto the end of `out`.
pub fn encode_frame_into(
    out: &mut Vec<u8>,
    seq: u64,
    term: u64,
    timestamp_ms: i64,
    stream: &StreamId,
    event: &EventData,
    digest: &Digest,
) {
    encode_ref_into(
        out,
        &RecordRef {
            seq,
            term,
            timestamp_ms,
            stream_kind: &stream.kind,
            stream_id: &stream.id,
            event_kind: &event.kind,
            event_version: event.version,
            payload: &event.payload,
            digest,
        },
    );
}

/// Encodes the frame of a borrowed record onto the end of `out`.
pub fn encode_ref_into(out: &mut Vec<u8>, r: &RecordRef<'_>) {
    let start = out.len();
    out.extend_from_slice(&[0u8; FRAME_PREFIX_LEN]);
    let body = FrameBodyRef {
        format_version: FRAME_FORMAT_VERSION,
        seq: r.seq,
        term: r.term,
        timestamp_ms: r.timestamp_ms,
        stream_kind: r.stream_kind,
        stream_id: r.stream_id,
        event_kind: r.event_kind,
        event_version: r.event_version,
        payload: serde_bytes::Bytes::new(r.payload),
        digest: serde_bytes::Bytes::new(r.digest),
    };
    // Writing msgpack into a Vec cannot fail: every field type is serializable and a Vec grows.
    rmp_serde::encode::write(out, &body).expect("msgpack encoding into a Vec cannot fail");
    let body_len = out.len() - start - FRAME_PREFIX_LEN;
    let crc = crescent_checksum::crc32c(&out[start + FRAME_PREFIX_LEN..]);
    out[start..start + 4].copy_from_slice(&(body_len as u32).to_le_bytes());
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

/// Encodes one record as a standalone frame.
pub fn encode_record(record: &Record) -> Vec<u8> {
    let mut out = Vec::new();
    encode_frame_into(
        &mut out,
        record.seq,
        record.term,
        record.timestamp_ms,
        &record.stream,
        &record.event,
        &record.digest,
    );
    out
}

/// What sits at a position in a buffer of frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FramePrefix {
    /// A zero length word, or fewer than 4 bytes left: no more frames here.
    End,
    /// A frame with a valid length and CRC of `len` total bytes (prefix included).
    Valid { len: usize },
}

/// Checks the length word and CRC of the frame at the start of `buf` without decoding the body.
pub fn check_frame(buf: &[u8]) -> Result<FramePrefix, FrameError> {
    if buf.len() < 4 {
        return Ok(FramePrefix::End);
    }
    let body_len = u32::from_le_bytes(buf[0..4].try_into().expect("4 bytes"));
    if body_len == 0 {
        return Ok(FramePrefix::End);
    }
    if body_len as usize > MAX_FRAME_BODY {
        return Err(FrameError::BadLength(body_len));
    }
    let total = FRAME_PREFIX_LEN + body_len as usize;
    if buf.len() < total {
        return Err(FrameError::Torn {
            needed: total,
            available: buf.len(),
        });
    }
    let stored = u32::from_le_bytes(buf[4..8].try_into().expect("4 bytes"));
    let computed = crescent_checksum::crc32c(&buf[FRAME_PREFIX_LEN..total]);
    if stored != computed {
        return Err(FrameError::CrcMismatch { stored, computed });
    }
    Ok(FramePrefix::Valid { len: total })
}

/// Decodes the frame at the start of `buf`. `Ok(None)` means the end of frames (zero length word
/// or fewer than 4 bytes); `Ok(Some((record, frame_len)))` otherwise.
pub fn decode_frame(buf: &[u8]) -> Result<Option<(Record, usize)>, FrameError> {
    match check_frame(buf)? {
        FramePrefix::End => Ok(None),
        FramePrefix::Valid { len } => {
            let record = decode_body(&buf[FRAME_PREFIX_LEN..len])?;
            Ok(Some((record, len)))
        }
    }
}

/// Decodes exactly one whole frame (a record-keyed backend's value): trailing bytes are an error.
pub fn decode_exact(buf: &[u8]) -> Result<Record, FrameError> {
    match decode_frame(buf)? {
        Some((record, len)) if len == buf.len() => Ok(record),
        Some((_, len)) => Err(FrameError::BadBody(format!(
            "{} trailing bytes after the frame",
            buf.len() - len
        ))),
        None => Err(FrameError::BadLength(0)),
    }
}

/// Decodes a frame body (the bytes after the 8-byte prefix; the CRC is assumed checked).
pub fn decode_body(body: &[u8]) -> Result<Record, FrameError> {
    decode_body_ref(body).map(|r| r.to_record())
}

/// Decodes a frame body into a view borrowing from `body` (no allocation).
pub fn decode_body_ref(body: &[u8]) -> Result<RecordRef<'_>, FrameError> {
    match peek_version(body) {
        Some(FRAME_FORMAT_VERSION) => {}
        Some(v) if v > FRAME_FORMAT_VERSION => return Err(FrameError::UnsupportedVersion(v)),
        Some(v) => return Err(FrameError::BadBody(format!("unknown format version {v}"))),
        None => {
            return Err(FrameError::BadBody(
                "body does not start with an array and a version".into(),
            ))
        }
    }
    body_v1::parse(body)
}

/// Reads the seq of a version-1 body (its second array element) without decoding the rest: lets
/// readers skip records below the seq they start from cheaply.
pub fn peek_seq(body: &[u8]) -> Option<u64> {
    let rest = match body.first()? {
        0x91..=0x9f => &body[1..],
        0xdc => body.get(3..)?,
        0xdd => body.get(5..)?,
        _ => return None,
    };
    let rest = match rest.first()? {
        0x00..=0x7f => &rest[1..],
        0xcc => rest.get(2..)?,
        _ => return None,
    };
    let be = |n: usize| -> Option<u64> {
        let b = rest.get(1..1 + n)?;
        Some(b.iter().fold(0u64, |acc, &x| (acc << 8) | x as u64))
    };
    match rest.first()? {
        v @ 0x00..=0x7f => Some(*v as u64),
        0xcc => be(1),
        0xcd => be(2),
        0xce => be(4),
        0xcf => be(8),
        _ => None,
    }
}

/// Reads the format version (the first array element) without decoding the rest, so a body of a
/// newer version is reported as such even if its shape changed.
fn peek_version(body: &[u8]) -> Option<u8> {
    let (&marker, rest) = body.split_first()?;
    let rest = match marker {
        0x91..=0x9f => rest,                   // fixarray with >= 1 element
        0xdc if rest.len() >= 2 => &rest[2..], // array 16
        0xdd if rest.len() >= 4 => &rest[4..], // array 32
        _ => return None,
    };
    match rest {
        [v @ 0x00..=0x7f, ..] => Some(*v), // positive fixint
        [0xcc, v, ..] => Some(*v),         // uint 8
        _ => None,
    }
}

#[cfg(test)]
mod tests;
