//! What happens when a journal is opened over a damaged tail.

use serde::{Deserialize, Serialize};

pub mod rule;

pub use rule::{judge, CorruptCause, FaultClass, Seen, Verdict};

/// How to treat a torn or corrupt tail found when opening a journal for writing.
///
/// A bad frame followed by valid frames is never a tail: it is corruption of acknowledged data,
/// and opening fails in every mode, naming the seq.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecoveryMode {
    /// Cut the damaged tail and report it. The file backend first copies the cut bytes into
    /// the journal's quarantine directory (fsynced), so nothing that may have been acknowledged
    /// is destroyed (docs/journal-format.md, "Quarantine").
    #[default]
    TolerateTailCorruption,
    /// Refuse to open if the tail is damaged in any way.
    AbsoluteConsistency,
}

impl std::str::FromStr for RecoveryMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "tolerate_tail_corruption" | "tolerate-tail-corruption" => {
                Ok(Self::TolerateTailCorruption)
            }
            "absolute_consistency" | "absolute-consistency" => Ok(Self::AbsoluteConsistency),
            other => Err(format!(
                "unknown recovery mode {other:?} (expected tolerate_tail_corruption or absolute_consistency)"
            )),
        }
    }
}

/// What a tolerant recovery cut off the end of the journal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TruncationReport {
    /// The last intact record kept (0 when none).
    pub last_good_seq: u64,
    /// Bytes (or, for record-keyed backends, entries' bytes) dropped.
    pub dropped_bytes: u64,
    /// Why the tail was judged damaged (torn frame, CRC mismatch, ...).
    pub reason: String,
    /// Where the cut bytes were copied (file backend), and whether they were a complete frame
    /// that failed its check or an incomplete write.
    #[serde(default)]
    pub quarantine: Option<crate::quarantine::QuarantineEntry>,
}

/// Logs what a tolerant recovery cut, once, in words that claim no more than is known: an
/// incomplete frame is a write that did not finish; a complete frame that fails its check may
/// hold an acknowledged record (docs/journal-format.md, "Quarantine").
pub fn log_truncation(backend: &str, t: &TruncationReport) {
    use crate::quarantine::DamageKind;
    let seq = t.last_good_seq + 1;
    match &t.quarantine {
        Some(q) if q.kind == DamageKind::Damaged => tracing::error!(
            backend,
            seq,
            offset = q.offset,
            segment = %q.segment,
            quarantined = %q.data_file,
            reason = %t.reason,
            "journal recovery found a complete frame at seq {seq} that fails its check (it may \
             hold an acknowledged record): its bytes and the {} bytes after it were copied to \
             quarantine/{} and the journal now ends at seq {}; take the record from an HA peer \
             or backup, then clear the quarantine",
            q.bytes,
            q.data_file,
            t.last_good_seq
        ),
        Some(q) => tracing::warn!(
            backend,
            seq,
            offset = q.offset,
            segment = %q.segment,
            quarantined = %q.data_file,
            reason = %t.reason,
            "journal recovery dropped an incomplete frame at the tail (a write that did not \
             finish) after seq {}; its {} bytes were copied to quarantine/{}",
            t.last_good_seq,
            q.bytes,
            q.data_file
        ),
        None => tracing::warn!(
            backend,
            seq,
            dropped_bytes = t.dropped_bytes,
            reason = %t.reason,
            "journal recovery cut a damaged tail after seq {} ({} bytes): whatever it held is \
             gone from this journal",
            t.last_good_seq,
            t.dropped_bytes
        ),
    }
}
