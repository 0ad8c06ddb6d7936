//! How one record is shown: a text line or a JSON object.

use chrono::{DateTime, SecondsFormat};
use crescent_journal::Record;
use serde_json::{json, Value};

/// Hex characters of the digest shown in text output.
pub const DIGEST_PREFIX_LEN: usize = 16;

/// `timestamp_ms` as RFC 3339 (UTC, milliseconds), or the raw number when out of range.
pub fn rfc3339(ms: i64) -> String {
    DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(SecondsFormat::Millis, true))
        .unwrap_or_else(|| format!("<invalid time {ms} ms>"))
}

/// One text line: seq, term, time, stream, event kind and version, payload size, digest prefix.
pub fn text_line(rec: &Record) -> String {
    let digest = hex::encode(rec.digest);
    format!(
        "seq={} term={} time={} stream={} event={} v{} bytes={} digest={}",
        rec.seq,
        rec.term,
        rfc3339(rec.timestamp_ms),
        rec.stream,
        rec.event.kind,
        rec.event.version,
        rec.event.payload.len(),
        &digest[..DIGEST_PREFIX_LEN]
    )
}

/// The same as a JSON object (full digest).
pub fn json_object(rec: &Record) -> Value {
    json!({
        "seq": rec.seq,
        "term": rec.term,
        "timestamp_ms": rec.timestamp_ms,
        "time": rfc3339(rec.timestamp_ms),
        "stream": { "kind": rec.stream.kind, "id": rec.stream.id },
        "event": {
            "kind": rec.event.kind,
            "version": rec.event.version,
            "payload_bytes": rec.event.payload.len(),
        },
        "digest": hex::encode(rec.digest),
    })
}
