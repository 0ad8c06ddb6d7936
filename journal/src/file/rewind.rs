//! Dropping a journal's tail after a given record: how a deposed active rejoins its pair.
//!
//! A node that was active may hold records its standby never received (durable locally, never
//! acknowledged to a client, because sync commit waits for the standby). When it comes back
//! as a standby, the new active names the newest record both share (the replication
//! handshake's rewind point, with its digest); everything after it was never committed and is
//! dropped here, offline, before the journal is opened. The record at the rewind point must
//! carry exactly the given digest, which proves the two histories are equal up to there; if
//! not, nothing is touched.

use std::path::Path;

use crate::error::{JournalError, Result};
use crate::file::recover::zero_range;
use crate::file::scan::{written_end, JournalScan, ScanEntry, ScanOptions};
use crate::file::segment::{sync_dir, HEADER_LEN};
use crate::record::{short_hex, Digest};

/// What [`rewind_after`] dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RewindReport {
    /// Records removed (seqs `keep_through + 1 ..= last`).
    pub dropped_records: u64,
    pub dropped_bytes: u64,
    /// The highest seq dropped (0 if none).
    pub last_dropped: u64,
}

/// Drops every record after `keep_through` from the file journal in `dir`, after checking that
/// the record `keep_through` has digest `expected` (`keep_through == 0`: drop everything;
/// `expected` is then the genesis digest). The journal must not be open. Durable on return.
pub fn rewind_after(dir: &Path, keep_through: u64, expected: &Digest) -> Result<RewindReport> {
    let scan = JournalScan::open(dir)?;
    let segments = scan.segment_files().to_vec();
    let mut cut: Option<(usize, u64)> = None;
    let mut seen_keep = keep_through == 0;
    let mut dropped_records = 0;
    let mut last_dropped = 0;
    for entry in scan.entries(ScanOptions {
        verify_chain: false,
    }) {
        match entry? {
            ScanEntry::Record {
                segment,
                offset,
                record,
                ..
            } => {
                if record.seq == keep_through {
                    if record.digest != *expected {
                        return Err(JournalError::Diverged {
                            seq: keep_through,
                            reason: format!(
                                "record {keep_through} has digest {}, the rewind point says {}: the \
                                 histories differ before it, nothing was changed",
                                short_hex(&record.digest),
                                short_hex(expected)
                            ),
                        });
                    }
                    seen_keep = true;
                } else if record.seq > keep_through {
                    cut.get_or_insert((segment, offset));
                    dropped_records += 1;
                    last_dropped = record.seq;
                }
            }
            ScanEntry::Fault(f) => {
                return Err(JournalError::Corrupt {
                    seq: f.expected_seq,
                    location: f.path.clone(),
                    reason: format!("cannot rewind a damaged journal: {f}"),
                })
            }
        }
    }
    if !seen_keep {
        return Err(JournalError::OutOfRange {
            seq: keep_through,
            first: segments.first().map_or(1, |s| s.first_seq),
            last: last_dropped,
        });
    }
    let Some((segment, offset)) = cut else {
        return Ok(RewindReport {
            dropped_records: 0,
            dropped_bytes: 0,
            last_dropped: 0,
        });
    };
    let mut dropped_bytes = 0;
    // Whole later segments go; the cut segment is zeroed from the first dropped frame on, or
    // removed too when that frame is its first (the previous segment then ends at the cut),
    // unless it is the only segment (its header keeps the chain position).
    let remove_from = if offset == HEADER_LEN as u64 && segment > 0 {
        segment
    } else {
        let path = &segments[segment].path;
        let bytes = std::fs::read(path).map_err(|e| JournalError::io(path, e))?;
        let end = written_end(&bytes, offset as usize) as u64;
        dropped_bytes += end - offset;
        zero_range(path, offset, end)?;
        segment + 1
    };
    for seg in &segments[remove_from..] {
        let bytes = std::fs::read(&seg.path).map_err(|e| JournalError::io(&seg.path, e))?;
        dropped_bytes += written_end(&bytes, HEADER_LEN).saturating_sub(HEADER_LEN) as u64;
        std::fs::remove_file(&seg.path).map_err(|e| JournalError::io(&seg.path, e))?;
    }
    if remove_from < segments.len() {
        sync_dir(dir)?;
    }
    Ok(RewindReport {
        dropped_records,
        dropped_bytes,
        last_dropped,
    })
}
