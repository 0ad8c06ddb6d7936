//! One pass over a journal directory with [`JournalScan`], shared by every command: records in
//! file order, faults collected, and the faults after the last valid record marked as a torn
//! tail by the journal's one recovery rule ([`crescent_journal::recovery::rule`]), so a walk
//! reports as a torn tail exactly what crescentd cuts (or refuses) on its next open.

use crescent_journal::file::{JournalScan, ScanEntry, ScanOptions};
use crescent_journal::recovery::{judge, FaultClass, RecoveryMode, Seen};
use crescent_journal::Record;

use crate::error::Result;
use crate::fault::Fault;

/// A record as the scan found it.
#[derive(Debug, Clone, Copy)]
pub struct Located<'a> {
    /// Index into the scan's segment files.
    pub segment: usize,
    /// Byte offset of the frame in its segment file.
    pub offset: u64,
    pub frame_len: usize,
    pub record: &'a Record,
}

/// What a walk saw besides the records it handed out.
#[derive(Debug, Clone, Default)]
pub struct WalkOutcome {
    /// Journal faults in file order, tail ones marked.
    pub faults: Vec<Fault>,
    /// (first, last) seq of the valid records.
    pub seq_range: Option<(u64, u64)>,
    pub records: u64,
    /// The callback stopped the walk before the end of the journal.
    pub stopped_early: bool,
}

impl WalkOutcome {
    /// The torn tail, if the journal ends in one: (last good seq, its first fault).
    pub fn torn_tail(&self) -> Option<(u64, &Fault)> {
        let first = self.faults.iter().find(|f| f.torn_tail)?;
        Some((self.seq_range.map_or(0, |(_, last)| last), first))
    }
}

/// Whether a walk goes on after a callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// End the walk here (nothing later is read; no torn tail is judged).
    Stop,
}

/// What the callback is told about.
#[derive(Debug)]
pub enum Step<'a> {
    Record(Located<'a>),
    /// A fault, as soon as it is found (the torn-tail mark is only known at the end).
    Fault(&'a Fault),
}

/// Walks every entry of `scan`, calling `f` for each record and fault in order, until the end
/// or until `f` says [`Flow::Stop`].
pub fn walk(
    scan: &JournalScan,
    verify_chain: bool,
    mut f: impl FnMut(Step<'_>) -> Result<Flow>,
) -> Result<WalkOutcome> {
    let mut out = WalkOutcome::default();
    // Index into `out.faults` of the first fault after the last record so far.
    let mut after_last_record = 0;
    // The classes of the faults after the last record so far.
    let mut tail = Vec::new();
    for entry in scan.entries(ScanOptions { verify_chain }) {
        match entry? {
            ScanEntry::Record {
                segment,
                offset,
                frame_len,
                record,
            } => {
                out.records += 1;
                out.seq_range = Some(match out.seq_range {
                    None => (record.seq, record.seq),
                    Some((lo, hi)) => (lo.min(record.seq), hi.max(record.seq)),
                });
                after_last_record = out.faults.len();
                tail.clear();
                let flow = f(Step::Record(Located {
                    segment,
                    offset,
                    frame_len,
                    record: &record,
                }))?;
                if flow == Flow::Stop {
                    out.stopped_early = true;
                    return Ok(out);
                }
            }
            ScanEntry::Fault(sf) => {
                let fault = Fault::from_scan(&sf);
                tail.push(sf.kind.class());
                let flow = f(Step::Fault(&fault))?;
                out.faults.push(fault);
                if flow == Flow::Stop {
                    out.stopped_early = true;
                    return Ok(out);
                }
            }
        }
    }
    if ends_in_tail(&tail) {
        for fault in &mut out.faults[after_last_record..] {
            fault.torn_tail = true;
        }
    }
    Ok(out)
}

/// Whether the faults after the last record form a damaged tail under the recovery rule (a
/// record after them would have ended the tail, so none follows); anything else there (a newer
/// format, a broken header first) stays plain damage.
fn ends_in_tail(tail: &[FaultClass]) -> bool {
    let Some((&first, later)) = tail.split_first() else {
        return false;
    };
    let seen = Seen {
        newer_format_after: later.contains(&FaultClass::NewerFormat),
        ..Seen::at_end(first)
    };
    judge(seen, RecoveryMode::TolerateTailCorruption).is_tail()
}

#[cfg(test)]
mod tests {
    use super::*;
    use FaultClass::{Frame, NewerFormat, Structural};

    /// The same verdicts as the file backend's recovery: a damaged frame starts a tail that
    /// takes the later, record-less segments with it, even ones with a broken header.
    #[test]
    fn the_tail_is_judged_by_its_first_fault() {
        assert!(!ends_in_tail(&[]));
        assert!(ends_in_tail(&[Frame]));
        assert!(ends_in_tail(&[Frame, Structural, Frame]));
        assert!(!ends_in_tail(&[Structural, Frame]));
        assert!(!ends_in_tail(&[Frame, NewerFormat]));
        assert!(!ends_in_tail(&[NewerFormat]));
    }
}
