//! Recovery of a file-backend journal directory opened for writing.
//!
//! Runs one [`JournalScan`] pass (without the chain check: CRCs guard the frames, and
//! `crescent-replay verify` checks the chain) and applies the recovery rule
//! ([`crate::recovery::rule`]) to what it saw:
//! - a segment header that is garbage, misnamed, or does not continue the previous segment is
//!   corruption (headers are written under a temporary name and renamed into place, so no crash
//!   leaves a bad one);
//! - a newer segment or frame format version is [`JournalError::UnsupportedVersion`];
//! - the first bad frame (torn, bad CRC/length/body, seq discontinuity, garbage after the
//!   end-of-data marker) starts the damaged region. If any valid record with a higher seq
//!   follows it (later in the segment, found by byte-wise resync, or in a later segment), the
//!   journal is [`JournalError::Corrupt`], naming `last good + 1` and the file, in every mode,
//!   and nothing is modified;
//! - otherwise the region is a damaged tail: refused under `AbsoluteConsistency`; under
//!   `TolerateTailCorruption` its bytes (and the written bytes of any later, record-less
//!   segments) are first copied into the quarantine directory and fsynced
//!   ([`crate::quarantine`]), then zeroed (fdatasync) and the later segments removed
//!   (directory fsynced). The report says whether the first bad frame was incomplete (a write
//!   that did not finish) or a complete frame that failed its check.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::backend::Recovered;
use crate::codec::{FrameError, FRAME_FORMAT_VERSION, FRAME_PREFIX_LEN};
use crate::error::{JournalError, Result};
use crate::file::scan::{written_end, FaultKind, JournalScan, ScanEntry, ScanFault, ScanOptions};
use crate::file::segment::{sync_dir, SegmentFile, SegmentHeader, HEADER_LEN};
use crate::quarantine::{quarantine_tail, DamageKind, DamagedTail};
use crate::recovery::{judge, FaultClass, RecoveryMode, Seen, TruncationReport, Verdict};

/// Where appends continue after recovery.
#[derive(Debug, Clone)]
pub(super) struct ActivePosition {
    pub segment: SegmentFile,
    pub write_pos: u64,
    pub records: u64,
}

#[derive(Debug)]
pub(super) struct FileRecovery {
    pub recovered: Recovered,
    pub segments: Vec<SegmentFile>,
    pub active: Option<ActivePosition>,
}

struct LastRecord {
    seq: u64,
    term: u64,
    digest: crate::record::Digest,
    segment: usize,
    end: u64,
}

pub(super) fn recover_dir(dir: &Path, mode: RecoveryMode) -> Result<FileRecovery> {
    let scan = JournalScan::open(dir)?;
    let mut segments = scan.segment_files().to_vec();
    if segments.is_empty() {
        return Ok(FileRecovery {
            recovered: Recovered {
                first_seq: 1,
                last_seq: 0,
                last_term: 0,
                max_term: 0,
                last_digest: crate::record::GENESIS_DIGEST,
                truncated: None,
                base: None,
            },
            segments,
            active: None,
        });
    }
    let mut seen = DirScan {
        mode,
        last: None,
        max_term: 0,
        records_per_segment: vec![0u64; segments.len()],
        damage: None,
    };
    for entry in scan.entries(ScanOptions {
        verify_chain: false,
    }) {
        match entry? {
            ScanEntry::Record {
                segment,
                offset,
                frame_len,
                record,
            } => seen.record(&segments, segment, offset + frame_len as u64, &record)?,
            ScanEntry::Fault(f) => seen.fault(f)?,
        }
    }

    let mut truncated = None;
    let active_index = match &seen.damage {
        None => segments.len() - 1,
        Some(f) => {
            let last_good_seq = seen
                .last
                .as_ref()
                .map_or(f.expected_seq.saturating_sub(1), |l| l.seq);
            // The header of the damaged segment carries the chain: it always continues.
            let verdict = judge(Seen::at_end(f.kind.class()), mode);
            truncated = Some(cut_tail(dir, &mut segments, f, last_good_seq, verdict)?);
            f.segment
        }
    };
    seen.recovered(segments, active_index, truncated)
}

/// What one scan of the directory saw: the last intact record, the highest term, the records
/// of each segment, and the first fault that starts the damaged region.
struct DirScan {
    mode: RecoveryMode,
    last: Option<LastRecord>,
    max_term: u64,
    records_per_segment: Vec<u64>,
    damage: Option<ScanFault>,
}

impl DirScan {
    /// Counts an intact record of `segment` that ends at `end`; after the damage it is either
    /// stale bytes inside the damaged tail or proof that acknowledged data is damaged.
    fn record(
        &mut self,
        segments: &[SegmentFile],
        segment: usize,
        end: u64,
        record: &crate::record::Record,
    ) -> Result<()> {
        if let Some(f) = &self.damage {
            if record.seq < f.expected_seq {
                return Ok(()); // stale bytes inside the damaged tail
            }
            let verdict = judge(Seen::followed_by_record(f.kind.class()), self.mode);
            debug_assert!(matches!(verdict, Verdict::Corrupt(_)));
            return Err(JournalError::Corrupt {
                seq: f.expected_seq,
                location: f.path.clone(),
                reason: format!(
                    "{} at offset {}, yet valid record {} follows in {}",
                    f.detail,
                    f.offset,
                    record.seq,
                    segments[segment].path.display()
                ),
            });
        }
        self.max_term = self.max_term.max(record.term);
        self.records_per_segment[segment] += 1;
        self.last = Some(LastRecord {
            seq: record.seq,
            term: record.term,
            digest: record.digest,
            segment,
            end,
        });
        Ok(())
    }

    /// Judges a fault: a newer format or corruption ends the scan with an error, a tail fault
    /// starts the damaged region (the first one is kept).
    fn fault(&mut self, f: ScanFault) -> Result<()> {
        let class = f.kind.class();
        let seen = match &self.damage {
            None => Seen::at_end(class),
            Some(first) => Seen {
                newer_format_after: class == FaultClass::NewerFormat,
                ..Seen::at_end(first.kind.class())
            },
        };
        match judge(seen, self.mode) {
            Verdict::NewerFormat => Err(unsupported(f)),
            Verdict::Corrupt(_) => Err(JournalError::Corrupt {
                seq: f.expected_seq,
                location: f.path,
                reason: f.detail,
            }),
            Verdict::RefuseTail | Verdict::CutTail => {
                self.damage.get_or_insert(f);
                Ok(())
            }
        }
    }

    /// The recovered journal and where appends continue: after the last record of the active
    /// segment, or after its header if it holds none.
    fn recovered(
        self,
        segments: Vec<SegmentFile>,
        active_index: usize,
        truncated: Option<TruncationReport>,
    ) -> Result<FileRecovery> {
        let active_seg = segments[active_index].clone();
        let write_pos = match &self.last {
            Some(l) if l.segment == active_index => l.end,
            _ => HEADER_LEN as u64,
        };
        let header = read_header(&active_seg)?;
        let first_header = read_header(&segments[0])?;
        // The first segment's header names the record before it: a reseeded or truncated
        // journal can vouch for that position (docs/ha.md, "Reseeding").
        let base = (first_header.first_seq > 1).then_some((
            first_header.first_seq - 1,
            first_header.prev_term,
            first_header.prev_digest,
        ));
        let recovered = match &self.last {
            Some(l) => Recovered {
                first_seq: first_header.first_seq,
                last_seq: l.seq,
                last_term: l.term,
                max_term: self.max_term.max(header.prev_term),
                last_digest: l.digest,
                truncated,
                base,
            },
            None => Recovered {
                first_seq: first_header.first_seq,
                last_seq: header.first_seq - 1,
                last_term: header.prev_term,
                max_term: header.prev_term,
                last_digest: header.prev_digest,
                truncated,
                base,
            },
        };
        Ok(FileRecovery {
            recovered,
            segments,
            active: Some(ActivePosition {
                segment: active_seg,
                write_pos,
                records: self.records_per_segment[active_index],
            }),
        })
    }
}

/// Acts on the verdict about the damaged tail starting at `f`: refuses it
/// ([`Verdict::RefuseTail`]), or copies it into the quarantine (fsynced), then zeroes it in its
/// segment and removes the later, record-less segments.
fn cut_tail(
    dir: &Path,
    segments: &mut Vec<SegmentFile>,
    f: &ScanFault,
    last_good_seq: u64,
    verdict: Verdict,
) -> Result<TruncationReport> {
    let seg_path = segments[f.segment].path.clone();
    let bytes = std::fs::read(&seg_path).map_err(|e| JournalError::io(&seg_path, e))?;
    let end = written_end(&bytes, f.offset as usize) as u64;
    let mut dropped = end.saturating_sub(f.offset);
    let mut later = Vec::new();
    for seg in &segments[f.segment + 1..] {
        let b = std::fs::read(&seg.path).map_err(|e| JournalError::io(&seg.path, e))?;
        let n = written_end(&b, 0);
        dropped += n as u64;
        if written_end(&b, HEADER_LEN) > HEADER_LEN {
            later.push((seg.path.as_path(), b[..n].to_vec()));
        }
    }
    let reason = f.to_string();
    if verdict != Verdict::CutTail {
        return Err(JournalError::TailCorruption {
            last_good_seq,
            dropped_bytes: dropped,
            reason,
        });
    }
    let from = (f.offset as usize).min(bytes.len());
    let tail = DamagedTail {
        seq: last_good_seq + 1,
        segment: &seg_path,
        offset: f.offset,
        bytes: &bytes[from..(end as usize).max(from)],
        later,
        kind: classify(f, &bytes),
        reason: reason.clone(),
    };
    // The copy is durable before a single byte of the tail is overwritten or removed.
    let quarantine = if tail.bytes.is_empty() && tail.later.is_empty() {
        None
    } else {
        Some(quarantine_tail(dir, &tail)?)
    };
    zero_range(&seg_path, f.offset, end)?;
    let removed: Vec<SegmentFile> = segments.drain(f.segment + 1..).collect();
    for seg in &removed {
        std::fs::remove_file(&seg.path).map_err(|e| JournalError::io(&seg.path, e))?;
    }
    if !removed.is_empty() {
        sync_dir(dir)?;
    }
    Ok(TruncationReport {
        last_good_seq,
        dropped_bytes: dropped,
        reason,
        quarantine,
    })
}

/// Whether the damage at `f` is a frame whose end was never written (a write that did not
/// finish) or anything else: a complete frame that fails its check, or bytes that cannot be
/// told apart from one, which may hold an acknowledged record. Segments are preallocated with
/// zeros and an unfinished write stops at a sector (512-byte) or page boundary of the file, so
/// an unfinished frame is one whose bytes from such a boundary to its declared end are all
/// still zero. A complete frame ends with its 32-byte SHA-256 digest, so it ends in zeros
/// reaching back to a 512-byte boundary with negligible probability.
fn classify(f: &ScanFault, bytes: &[u8]) -> DamageKind {
    const SECTOR: usize = 512;
    match &f.kind {
        FaultKind::BadFrame(FrameError::Torn { .. }) => DamageKind::Incomplete,
        FaultKind::BadFrame(FrameError::CrcMismatch { .. }) => {
            let at = f.offset as usize;
            let Some(word) = bytes.get(at..at + 4) else {
                return DamageKind::Incomplete;
            };
            let body = u32::from_le_bytes(word.try_into().expect("4 bytes")) as usize;
            let end = (at + FRAME_PREFIX_LEN + body).min(bytes.len());
            let written = written_end(&bytes[..end], at);
            if written.div_ceil(SECTOR) * SECTOR < end {
                DamageKind::Incomplete
            } else {
                DamageKind::Damaged
            }
        }
        _ => DamageKind::Damaged,
    }
}

/// The refusal of a segment or frame of a newer format version.
fn unsupported(f: ScanFault) -> JournalError {
    let (found, supported) = match f.kind {
        FaultKind::UnsupportedSegmentVersion(v) => {
            (v, crate::file::segment::SEGMENT_FORMAT_VERSION)
        }
        FaultKind::UnsupportedFrameVersion(v) => (v as u32, FRAME_FORMAT_VERSION as u32),
        _ => unreachable!("only a newer format version is judged NewerFormat"),
    };
    JournalError::UnsupportedVersion {
        location: f.path,
        found,
        supported,
    }
}

fn read_header(seg: &SegmentFile) -> Result<SegmentHeader> {
    let mut head = [0u8; HEADER_LEN];
    let file = std::fs::File::open(&seg.path).map_err(|e| JournalError::io(&seg.path, e))?;
    file.read_exact_at(&mut head, 0)
        .map_err(|e| JournalError::io(&seg.path, e))?;
    SegmentHeader::decode(&head).map_err(|e| e.into_journal_error(&seg.path, seg.first_seq))
}

/// Overwrites `from..to` of `path` with zeros and makes that durable.
pub(super) fn zero_range(path: &Path, from: u64, to: u64) -> Result<()> {
    if to <= from {
        return Ok(());
    }
    let file = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| JournalError::io(path, e))?;
    let zeros = vec![0u8; (to - from).min(1 << 20) as usize];
    let mut pos = from;
    while pos < to {
        let n = (to - pos).min(zeros.len() as u64) as usize;
        file.write_all_at(&zeros[..n], pos)
            .map_err(|e| JournalError::io(path, e))?;
        pos += n as u64;
    }
    file.sync_data().map_err(|e| JournalError::io(path, e))
}
