//! What happens when a journal is opened over a damaged tail.

use serde::{Deserialize, Serialize};

/// How to treat a torn or corrupt tail found when opening a journal for writing.
///
/// A bad frame followed by valid frames is never a tail: it is corruption of acknowledged data,
/// and opening fails in every mode, naming the seq.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecoveryMode {
    /// Truncate the damaged tail (a write that was never acknowledged) and log what was dropped.
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
}
