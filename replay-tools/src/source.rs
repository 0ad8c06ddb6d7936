//! A read-only [`JournalSource`] over a journal directory, so that replay goes through the
//! snapshot crate's own `restore_upto` (the same code path as crescentd's recovery).
//!
//! Records come from [`JournalScan`] with chain verification on, so a record whose digest does
//! not verify stops replay instead of being folded in. The "durable watermark" is the seq replay
//! stops at: reading ends after it, so damage beyond it (a torn tail) does not matter.

use crescent_journal::file::{JournalScan, ScanEntry, ScanOptions};
use crescent_journal::{JournalError, RecordIter, Watermark};
use crescent_snapshot::JournalSource;

/// See the module docs.
#[derive(Debug, Clone)]
pub struct OfflineJournal {
    scan: JournalScan,
    first_seq: u64,
    upto: u64,
    durable: Watermark,
}

impl OfflineJournal {
    /// Reads `scan` up to seq `upto`. The first seq is taken from the first segment's name
    /// (1 for a journal without segments).
    pub fn new(scan: JournalScan, upto: u64) -> Self {
        let first_seq = scan.segment_files().first().map_or(1, |s| s.first_seq);
        Self {
            scan,
            first_seq,
            upto,
            durable: Watermark::new(upto),
        }
    }
}

impl JournalSource for OfflineJournal {
    fn first_seq(&self) -> u64 {
        self.first_seq
    }

    fn durable(&self) -> Watermark {
        self.durable.clone()
    }

    fn read_from(&self, from: u64) -> crescent_journal::Result<RecordIter> {
        if from < self.first_seq {
            return Err(JournalError::OutOfRange {
                seq: from,
                first: self.first_seq,
                last: self.upto,
            });
        }
        let upto = self.upto;
        let mut done = from > upto;
        let entries = self.scan.entries(ScanOptions { verify_chain: true });
        let iter = entries.filter_map(move |entry| {
            if done {
                return None;
            }
            match entry {
                Err(e) => {
                    done = true;
                    Some(Err(e))
                }
                Ok(ScanEntry::Record { record, .. }) if record.seq < from => None,
                Ok(ScanEntry::Record { record, .. }) => {
                    done = record.seq >= upto;
                    Some(Ok(record))
                }
                // Damage before the first record needed does not affect what is replayed:
                // the first record read is checked against the snapshot's chain digest.
                Ok(ScanEntry::Fault(f)) if f.expected_seq < from => None,
                Ok(ScanEntry::Fault(f)) => {
                    done = true;
                    Some(Err(JournalError::Corrupt {
                        seq: f.expected_seq,
                        location: f.path.clone(),
                        reason: format!("{} (at offset {})", f.detail, f.offset),
                    }))
                }
            }
        });
        Ok(Box::new(iter))
    }

    fn truncate_prefix(&self, _keep_from: u64) -> crescent_journal::Result<()> {
        Err(JournalError::io(
            self.scan.dir(),
            std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                "crescent-replay never modifies a journal",
            ),
        ))
    }
}
