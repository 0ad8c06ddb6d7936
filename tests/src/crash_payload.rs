//! The journal crash test's record scheme and acknowledgement lines.
//!
//! Every record the crash child appends is fully determined by a [`PayloadKey`] (round, thread,
//! per-thread submission counter, index within the submission): its stream, event kind, payload
//! length and payload bytes. The key is written at the front of the payload, so the parent can
//! regenerate and compare any record it reads back, acknowledged or not. After a submission is
//! durable the child prints one [`AckLine`] per record; the parent holds the reopened journal
//! against those lines.

use crescent_journal::{EventData, NewRecord, Record, StreamId};

/// Stream kind of every crash-test record.
pub const STREAM_KIND: &str = "crash_test";
/// Event kind of every crash-test record.
pub const EVENT_KIND: &str = "crash_record";
/// Event version of every crash-test record.
pub const EVENT_VERSION: u16 = 1;
/// The `thread` of records appended by the parent (after each reopen) rather than the child.
pub const PARENT_THREAD: u32 = u32::MAX;
/// Bytes of the key header at the front of every payload.
pub const HEADER_LEN: usize = 24;

/// What determines one record completely.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PayloadKey {
    pub round: u32,
    pub thread: u32,
    pub counter: u64,
    pub index: u32,
}

/// splitmix64: a tiny, well-mixed deterministic generator (payload bytes and sizes only).
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl PayloadKey {
    fn seed(&self) -> u64 {
        let mut s = (u64::from(self.round) << 32) ^ u64::from(self.thread);
        s ^= self.counter.rotate_left(17) ^ (u64::from(self.index) << 48);
        splitmix64(&mut s)
    }

    /// Payload length: mostly small, some medium, a few large enough that a 1 MiB segment
    /// rotates every handful of them.
    pub fn payload_len(&self) -> usize {
        let mut s = self.seed() ^ 0x5151_5151;
        let pick = splitmix64(&mut s);
        let r = splitmix64(&mut s) as usize;
        let body = match pick % 128 {
            0 => 64 * 1024 + r % (128 * 1024),
            1..=6 => 4096 + r % (28 * 1024),
            _ => r % 2048,
        };
        HEADER_LEN + body
    }

    /// The stream this record belongs to (one per appender thread).
    pub fn stream(&self) -> StreamId {
        if self.thread == PARENT_THREAD {
            StreamId::new(STREAM_KIND, "parent")
        } else {
            StreamId::new(STREAM_KIND, format!("t{}", self.thread))
        }
    }

    /// The full payload: the key header, then deterministic bytes.
    pub fn payload(&self) -> Vec<u8> {
        let len = self.payload_len();
        let mut out = Vec::with_capacity(len);
        out.extend_from_slice(&self.round.to_le_bytes());
        out.extend_from_slice(&self.thread.to_le_bytes());
        out.extend_from_slice(&self.counter.to_le_bytes());
        out.extend_from_slice(&self.index.to_le_bytes());
        out.extend_from_slice(&(len as u32).to_le_bytes());
        let mut s = self.seed();
        while out.len() < len {
            let word = splitmix64(&mut s).to_le_bytes();
            let take = (len - out.len()).min(8);
            out.extend_from_slice(&word[..take]);
        }
        out
    }

    /// The record to submit.
    pub fn new_record(&self, timestamp_ms: i64) -> NewRecord {
        NewRecord {
            stream: self.stream(),
            event: EventData {
                kind: EVENT_KIND.to_string(),
                version: EVENT_VERSION,
                payload: self.payload(),
            },
            timestamp_ms,
        }
    }

    /// Reads the key header of `payload`.
    pub fn decode(payload: &[u8]) -> Option<PayloadKey> {
        if payload.len() < HEADER_LEN {
            return None;
        }
        let u32_at = |at: usize| u32::from_le_bytes(payload[at..at + 4].try_into().unwrap());
        Some(PayloadKey {
            round: u32_at(0),
            thread: u32_at(4),
            counter: u64::from_le_bytes(payload[8..16].try_into().unwrap()),
            index: u32_at(16),
        })
    }
}

/// Checks that `record` is exactly what its payload key says it should be; returns the key.
pub fn check_record_self_consistent(record: &Record) -> Result<PayloadKey, String> {
    let seq = record.seq;
    let key = PayloadKey::decode(&record.event.payload).ok_or_else(|| {
        format!(
            "seq {seq}: payload of {} bytes has no key header",
            record.event.payload.len()
        )
    })?;
    if record.stream != key.stream() {
        return Err(format!(
            "seq {seq}: stream {} but key {key:?} says {}",
            record.stream,
            key.stream()
        ));
    }
    if record.event.kind != EVENT_KIND || record.event.version != EVENT_VERSION {
        return Err(format!(
            "seq {seq}: event {} v{} but expected {EVENT_KIND} v{EVENT_VERSION}",
            record.event.kind, record.event.version
        ));
    }
    let expected = key.payload();
    if record.event.payload != expected {
        let first_diff = record
            .event
            .payload
            .iter()
            .zip(&expected)
            .position(|(a, b)| a != b)
            .unwrap_or(expected.len().min(record.event.payload.len()));
        return Err(format!(
            "seq {seq}: payload of key {key:?} differs from the expected bytes (len {} vs {}, \
             first difference at byte {first_diff})",
            record.event.payload.len(),
            expected.len()
        ));
    }
    Ok(key)
}

/// One acknowledged (durable) record, as the child reports it on stdout:
/// `ACK <seq> <stream kind> <stream id> <event kind> <version> <payload len> <crc32c hex>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckLine {
    pub seq: u64,
    pub stream: StreamId,
    pub event_kind: String,
    pub version: u16,
    pub payload_len: usize,
    pub payload_crc: u32,
}

impl AckLine {
    /// The ack line of a record that was given seq `seq`.
    pub fn for_record(seq: u64, record: &NewRecord) -> AckLine {
        AckLine {
            seq,
            stream: record.stream.clone(),
            event_kind: record.event.kind.clone(),
            version: record.event.version,
            payload_len: record.event.payload.len(),
            payload_crc: crescent_checksum::crc32c(&record.event.payload),
        }
    }

    pub fn format(&self) -> String {
        format!(
            "ACK {} {} {} {} {} {} {:08x}",
            self.seq,
            self.stream.kind,
            self.stream.id,
            self.event_kind,
            self.version,
            self.payload_len,
            self.payload_crc
        )
    }

    /// Parses a line made by [`AckLine::format`] (without its newline).
    pub fn parse(line: &str) -> Result<AckLine, String> {
        let parts: Vec<&str> = line.split(' ').collect();
        let bad = |what: &str| format!("bad ack line {line:?}: {what}");
        if parts.len() != 8 || parts[0] != "ACK" {
            return Err(bad("expected 8 fields starting with ACK"));
        }
        Ok(AckLine {
            seq: parts[1].parse().map_err(|_| bad("seq"))?,
            stream: StreamId::new(parts[2], parts[3]),
            event_kind: parts[4].to_string(),
            version: parts[5].parse().map_err(|_| bad("version"))?,
            payload_len: parts[6].parse().map_err(|_| bad("payload len"))?,
            payload_crc: u32::from_str_radix(parts[7], 16).map_err(|_| bad("crc"))?,
        })
    }

    /// Checks that `record` is the one this line acknowledged.
    pub fn check(&self, record: &Record) -> Result<(), String> {
        let got = AckLine {
            seq: record.seq,
            stream: record.stream.clone(),
            event_kind: record.event.kind.clone(),
            version: record.event.version,
            payload_len: record.event.payload.len(),
            payload_crc: crescent_checksum::crc32c(&record.event.payload),
        };
        if &got != self {
            return Err(format!(
                "acknowledged record seq {} changed: acked {:?}, found {:?}",
                self.seq, self, got
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_are_deterministic_and_self_describing() {
        let key = PayloadKey {
            round: 3,
            thread: 1,
            counter: 77,
            index: 2,
        };
        let a = key.payload();
        assert_eq!(a, key.payload());
        assert_eq!(a.len(), key.payload_len());
        assert_eq!(PayloadKey::decode(&a), Some(key));
        let other = PayloadKey { index: 3, ..key };
        assert_ne!(a[HEADER_LEN..], other.payload()[HEADER_LEN..]);
    }

    #[test]
    fn ack_lines_round_trip_and_catch_changes() {
        let key = PayloadKey {
            round: 1,
            thread: 0,
            counter: 5,
            index: 0,
        };
        let rec = key.new_record(1000);
        let line = AckLine::for_record(9, &rec);
        assert_eq!(AckLine::parse(&line.format()), Ok(line.clone()));
        let mut stored = Record {
            seq: 9,
            term: 1,
            timestamp_ms: 1000,
            stream: rec.stream.clone(),
            event: rec.event.clone(),
            digest: [0; 32],
        };
        assert_eq!(line.check(&stored), Ok(()));
        assert_eq!(check_record_self_consistent(&stored), Ok(key));
        let last = stored.event.payload.len() - 1;
        stored.event.payload[last] ^= 1;
        assert!(line.check(&stored).is_err());
        assert!(check_record_self_consistent(&stored).is_err());
    }
}
