//! Faults as every command reports them: where, which seq, what kind, and the first bad seq.

use std::path::Path;

use crescent_journal::file::{FaultKind, ScanFault};
use serde::Serialize;

/// What a fault was found in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultSource {
    /// Journal segments: frames, CRCs, seq continuity, the chain.
    Journal,
    /// A snapshot file, or its agreement with the journal.
    Snapshot,
    /// A record that is intact on disk but that the aggregates cannot replay.
    Replay,
}

/// One fault, in the form every command prints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Fault {
    pub source: FaultSource,
    /// The first bad seq this fault names (the expected seq for journal damage, the snapshot's
    /// seq for snapshot faults); `None` for faults not tied to one seq.
    pub seq: Option<u64>,
    /// A stable snake_case name of the fault kind.
    pub kind: String,
    /// The file the fault is in.
    pub location: String,
    /// Byte offset within `location`, when known.
    pub offset: Option<u64>,
    pub detail: String,
    /// A damaged region after the last valid record, which crescentd copies into the
    /// journal's quarantine and cuts on its next open (or refuses under absolute_consistency).
    /// Whether it held an acknowledged record cannot be known from the bytes alone.
    pub torn_tail: bool,
}

impl Fault {
    pub fn new(
        source: FaultSource,
        seq: Option<u64>,
        kind: &str,
        location: &Path,
        detail: impl Into<String>,
    ) -> Self {
        Self {
            source,
            seq,
            kind: kind.to_string(),
            location: location.display().to_string(),
            offset: None,
            detail: detail.into(),
            torn_tail: false,
        }
    }

    /// A journal scan fault; `torn_tail` is decided by the caller once the scan has ended.
    pub fn from_scan(f: &ScanFault) -> Self {
        Self {
            source: FaultSource::Journal,
            seq: Some(f.expected_seq),
            kind: scan_kind_name(&f.kind).to_string(),
            location: f.path.display().to_string(),
            offset: Some(f.offset),
            detail: f.detail.clone(),
            torn_tail: false,
        }
    }
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let source = match self.source {
            FaultSource::Journal => "journal",
            FaultSource::Snapshot => "snapshot",
            FaultSource::Replay => "replay",
        };
        match self.seq {
            Some(seq) => write!(f, "[{source}] seq {seq}: {}: {}", self.kind, self.detail)?,
            None => write!(f, "[{source}] {}: {}", self.kind, self.detail)?,
        }
        write!(f, " ({}", self.location)?;
        if let Some(offset) = self.offset {
            write!(f, " at offset {offset}")?;
        }
        write!(f, ")")?;
        if self.torn_tail {
            write!(f, " [damaged tail]")?;
        }
        Ok(())
    }
}

/// A stable name for a scan fault kind.
pub fn scan_kind_name(kind: &FaultKind) -> &'static str {
    match kind {
        FaultKind::BadSegmentHeader => "bad_segment_header",
        FaultKind::UnsupportedSegmentVersion(_) => "unsupported_segment_version",
        FaultKind::SegmentNameMismatch { .. } => "segment_name_mismatch",
        FaultKind::SegmentSeqMismatch { .. } => "segment_seq_mismatch",
        FaultKind::SegmentChainMismatch => "segment_chain_mismatch",
        FaultKind::BadFrame(_) => "bad_frame",
        FaultKind::UnsupportedFrameVersion(_) => "unsupported_frame_version",
        FaultKind::SeqDiscontinuity { .. } => "seq_discontinuity",
        FaultKind::ChainMismatch => "chain_mismatch",
        FaultKind::GarbageAfterEnd => "garbage_after_end",
    }
}

/// The first bad seq: the lowest seq named by a journal or replay fault (damage of the history
/// itself), else the lowest seq named by a snapshot fault.
pub fn first_bad_seq(faults: &[Fault]) -> Option<u64> {
    let lowest = |pick: &dyn Fn(&Fault) -> bool| {
        faults
            .iter()
            .filter(|f| pick(f))
            .filter_map(|f| f.seq)
            .min()
    };
    lowest(&|f| f.source != FaultSource::Snapshot)
        .or_else(|| lowest(&|f| f.source == FaultSource::Snapshot))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fault(source: FaultSource, seq: Option<u64>) -> Fault {
        Fault::new(source, seq, "k", Path::new("f"), "d")
    }

    #[test]
    fn journal_damage_names_the_first_bad_seq_before_snapshot_faults() {
        assert_eq!(first_bad_seq(&[]), None);
        let faults = [
            fault(FaultSource::Snapshot, Some(3)),
            fault(FaultSource::Journal, Some(9)),
            fault(FaultSource::Replay, Some(7)),
            fault(FaultSource::Journal, None),
        ];
        assert_eq!(first_bad_seq(&faults), Some(7));
        assert_eq!(first_bad_seq(&faults[..1]), Some(3));
        assert_eq!(first_bad_seq(&faults[3..]), None);
    }
}
