//! A standby takes back the record of a damaged frame it quarantined (docs/ha.md, "A
//! quarantined journal tail").
//!
//! Recovery cut this node's journal before a `damaged` frame at seq S: a record that may have
//! been acknowledged. In the standby phase every record above the journal's last seq at the
//! start comes from the active this node follows, so once the journal is durable past S it
//! holds the record the pair agreed on for S. The entry is then marked recovered, with how many
//! bytes of the quarantined copy differ from the received frame (a flipped byte in the same
//! record shows as 1), and stops being reported as a fault; the copy stays on disk until an
//! operator clears it.

use std::path::{Path, PathBuf};

use crescent_journal::codec::EncodedBatch;
use crescent_journal::quarantine::{self, QuarantineEntry, Recovered};
use crescent_journal::{Journal, JournalError};

/// The quarantined damaged records this standby waits to receive from its active.
pub struct QuarantineRepair {
    journal_dir: PathBuf,
    pending: Vec<QuarantineEntry>,
}

impl QuarantineRepair {
    /// The unrecovered damaged entries of `journal_dir` above `last_seq` (the journal's last
    /// seq before this node follows anyone). An unreadable quarantine repairs nothing: the
    /// campaign hold and `/healthz` report it.
    pub fn new(journal_dir: &Path, last_seq: u64) -> QuarantineRepair {
        let pending = quarantine::list(journal_dir)
            .map(|entries| {
                entries
                    .into_iter()
                    .filter(|e| e.is_unrecovered_damage() && e.seq > last_seq)
                    .collect()
            })
            .unwrap_or_default();
        QuarantineRepair {
            journal_dir: journal_dir.to_path_buf(),
            pending,
        }
    }

    /// Marks every pending entry whose seq the journal now holds durably; an entry that cannot
    /// be marked yet stays pending (it is retried at the next call).
    pub fn poll(&mut self, journal: &Journal) {
        if self.pending.is_empty() {
            return;
        }
        let durable = journal.durable().get();
        let journal_dir = self.journal_dir.clone();
        self.pending.retain(|entry| {
            if entry.seq > durable {
                return true;
            }
            match recover(&journal_dir, journal, entry) {
                Ok(r) => {
                    tracing::info!(
                        seq = entry.seq,
                        term = r.term,
                        differing_bytes = r.differing_bytes,
                        frame_bytes = r.frame_bytes,
                        "the quarantined record came back from the active; the copy stays in \
                         journal/quarantine until an operator clears it"
                    );
                    false
                }
                Err(e) => {
                    tracing::warn!(seq = entry.seq, error = %e, "cannot mark a quarantined record recovered");
                    true
                }
            }
        });
    }

    /// Entries still waiting for their record.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }
}

/// Reads the record at `entry.seq`, compares its frame with the quarantined copy and writes
/// the recovery into the entry's description.
fn recover(
    journal_dir: &Path,
    journal: &Journal,
    entry: &QuarantineEntry,
) -> Result<Recovered, JournalError> {
    let record =
        journal
            .read_range(entry.seq, entry.seq)?
            .next()
            .ok_or(JournalError::OutOfRange {
                seq: entry.seq,
                first: journal.first_seq(),
                last: journal.durable().get(),
            })??;
    let mut encoded = EncodedBatch::new();
    encoded.push(&record);
    let frame = encoded.frame_bytes(0);
    let copy = quarantine::read_copy(journal_dir, entry)?;
    let recovered = Recovered {
        source: "replication".into(),
        term: record.term,
        frame_bytes: frame.len() as u64,
        differing_bytes: quarantine::differing_bytes(&copy, frame),
    };
    quarantine::mark_recovered(journal_dir, entry, recovered.clone())?;
    Ok(recovered)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::FileExt;

    use crescent_journal::file::{FileBackend, FileOptions, JournalScan, ScanEntry, ScanOptions};
    use crescent_journal::{EventData, JournalOptions, NewRecord, StreamId};

    use super::*;

    fn open(dir: &Path) -> Journal {
        Journal::open(
            Box::new(FileBackend::open(dir, FileOptions::default()).unwrap()),
            JournalOptions::default(),
        )
        .unwrap()
    }

    fn rec(n: u64) -> NewRecord {
        NewRecord {
            stream: StreamId::new("test", "s"),
            event: EventData {
                kind: "e".into(),
                version: 1,
                payload: vec![n as u8; 100],
            },
            timestamp_ms: n as i64,
        }
    }

    /// A journal of records 1..=5 whose last frame has one flipped byte, reopened: seq 5 is
    /// quarantined and cut.
    fn quarantined_journal(dir: &Path) -> Journal {
        let j = open(dir);
        for n in 1..=5 {
            j.append_blocking(1, vec![rec(n)]).unwrap();
        }
        j.shutdown().unwrap();
        drop(j);
        let scan = JournalScan::open(dir).unwrap();
        let mut last = None;
        for entry in scan.entries(ScanOptions::default()) {
            if let ScanEntry::Record {
                segment,
                offset,
                frame_len,
                ..
            } = entry.unwrap()
            {
                last = Some((
                    scan.segment_files()[segment].path.clone(),
                    offset,
                    frame_len,
                ));
            }
        }
        let (path, offset, len) = last.unwrap();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .unwrap();
        let at = offset + len as u64 / 2;
        let mut b = [0u8; 1];
        file.read_exact_at(&mut b, at).unwrap();
        file.write_all_at(&[b[0] ^ 0x10], at).unwrap();
        let j = open(dir);
        assert_eq!(j.last_seq(), 4, "the damaged frame was cut");
        j
    }

    #[test]
    fn the_same_record_received_again_marks_the_entry_recovered_with_one_differing_byte() {
        let t = tempfile::tempdir().unwrap();
        let j = quarantined_journal(t.path());
        let mut repair = QuarantineRepair::new(t.path(), j.last_seq());
        assert_eq!(repair.pending(), 1);
        repair.poll(&j);
        assert_eq!(repair.pending(), 1, "seq 5 is not held yet");

        // What the active sends: the same record (same term, time, payload, chain).
        j.append_blocking(1, vec![rec(5)]).unwrap();
        repair.poll(&j);
        assert_eq!(repair.pending(), 0);
        let entries = quarantine::list(t.path()).unwrap();
        let r = entries[0].recovered.clone().expect("recovered");
        assert_eq!((r.source.as_str(), r.term), ("replication", 1));
        assert_eq!(r.differing_bytes, 1);
        assert!(!entries[0].is_unrecovered_damage());
        assert_eq!(
            QuarantineRepair::new(t.path(), 4).pending(),
            0,
            "a recovered entry is not pending again"
        );
    }

    #[test]
    fn a_different_record_at_the_seq_is_recorded_as_such() {
        let t = tempfile::tempdir().unwrap();
        let j = quarantined_journal(t.path());
        let mut repair = QuarantineRepair::new(t.path(), j.last_seq());
        j.append_blocking(2, vec![rec(77)]).unwrap();
        repair.poll(&j);
        let r = quarantine::list(t.path()).unwrap()[0]
            .recovered
            .clone()
            .unwrap();
        assert_eq!(r.term, 2);
        assert!(r.differing_bytes > 10, "{r:?}");
    }

    #[test]
    fn entries_at_or_below_the_starting_seq_are_not_pending() {
        let t = tempfile::tempdir().unwrap();
        let j = quarantined_journal(t.path());
        j.append_blocking(1, vec![rec(5)]).unwrap();
        // Seq 5 was written by this node itself (it was standalone): not from a peer.
        assert_eq!(QuarantineRepair::new(t.path(), j.last_seq()).pending(), 0);
    }
}
