//! Strictly read-only inspection of a file-backend journal directory, for `crescent-replay` and
//! for the file backend's own recovery.
//!
//! [`JournalScan::open`] never creates, truncates, locks or writes anything; it only lists the
//! `{first_seq:020}.seg` files. [`JournalScan::entries`] then walks every frame of every segment
//! in order and yields a [`ScanEntry`] per record *and per fault*: it never stops at damage.
//! After a bad frame it resynchronises by scanning forward byte by byte for the next frame with
//! a valid length, CRC and body, so records after a damaged one are still reported.
//!
//! Checked on the way (each failure is a [`ScanFault`] naming the segment, byte offset and the
//! seq that was expected there, i.e. the first bad seq):
//! - segment headers (magic, version, CRC, file name = header first seq), and that each segment
//!   starts right after the previous one's last record;
//! - every frame's length, CRC and body ([`crate::codec`]);
//! - seq continuity;
//! - the chain digest of every record and at segment boundaries (with
//!   [`ScanOptions::verify_chain`]);
//! - that nothing but zeros follows the end-of-data marker.
//!
//! [`JournalScan::summary`] runs a full verifying pass and reports per-segment sizes and seq /
//! term ranges plus all faults.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use crate::codec::{
    check_frame, decode_body, decode_frame, FrameError, FramePrefix, FRAME_PREFIX_LEN,
};
use crate::error::{JournalError, Result};
use crate::file::segment::{list_segments, HeaderError, SegmentFile, SegmentHeader, HEADER_LEN};
use crate::record::{Digest, Record};
use crate::recovery::FaultClass;

/// What a scan checks beyond framing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScanOptions {
    /// Recompute every record's chain digest (SHA-256) and compare.
    pub verify_chain: bool,
}

impl Default for ScanOptions {
    fn default() -> Self {
        Self { verify_chain: true }
    }
}

/// Kinds of damage a scan reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FaultKind {
    /// Segment header too short, wrong magic or bad CRC.
    BadSegmentHeader,
    /// Segment written by a newer format (its frames are skipped).
    UnsupportedSegmentVersion(u32),
    /// The header's first seq differs from the file name.
    SegmentNameMismatch { header_first_seq: u64 },
    /// The segment does not start right after the previous segment's last record.
    SegmentSeqMismatch { header_first_seq: u64 },
    /// The header's previous digest differs from the previous record's digest.
    SegmentChainMismatch,
    /// A frame failed to decode (torn, bad length, CRC, body, digest).
    BadFrame(FrameError),
    /// A frame of a newer format version.
    UnsupportedFrameVersion(u8),
    /// A valid frame whose seq is not the next one.
    SeqDiscontinuity { found: u64 },
    /// A record's stored digest differs from the recomputed chain digest.
    ChainMismatch,
    /// Non-zero bytes after the end-of-data marker (a zero length word).
    GarbageAfterEnd,
}

impl FaultKind {
    /// How this fault bears on the recovery rule ([`crate::recovery::rule`]).
    pub fn class(&self) -> FaultClass {
        match self {
            FaultKind::UnsupportedSegmentVersion(_) | FaultKind::UnsupportedFrameVersion(_) => {
                FaultClass::NewerFormat
            }
            FaultKind::BadSegmentHeader
            | FaultKind::SegmentNameMismatch { .. }
            | FaultKind::SegmentSeqMismatch { .. }
            | FaultKind::SegmentChainMismatch => FaultClass::Structural,
            FaultKind::BadFrame(_)
            | FaultKind::SeqDiscontinuity { .. }
            | FaultKind::ChainMismatch
            | FaultKind::GarbageAfterEnd => FaultClass::Frame,
        }
    }
}

/// One fault found by a scan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanFault {
    /// Index into [`JournalScan::segment_files`].
    pub segment: usize,
    pub path: PathBuf,
    /// Byte offset in the segment file.
    pub offset: u64,
    /// The seq expected at this point: the first bad seq (last good + 1, or the record whose
    /// digest does not verify).
    pub expected_seq: u64,
    pub kind: FaultKind,
    pub detail: String,
}

impl std::fmt::Display for ScanFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "seq {}: {} at offset {} of {}",
            self.expected_seq,
            self.detail,
            self.offset,
            self.path.display()
        )
    }
}

/// What a scan yields, in file order.
#[derive(Debug, Clone, PartialEq)]
pub enum ScanEntry {
    Record {
        segment: usize,
        /// Byte offset of the frame in the segment file.
        offset: u64,
        /// Length of the whole frame.
        frame_len: usize,
        record: Record,
    },
    Fault(ScanFault),
}

/// Per-segment figures from [`JournalScan::summary`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentStats {
    pub path: PathBuf,
    /// First seq according to the file name.
    pub first_seq: u64,
    pub file_len: u64,
    /// Bytes up to the end of the last valid frame (header included).
    pub used_bytes: u64,
    pub records: u64,
    /// (first, last) seq of the valid records in this segment.
    pub seq_range: Option<(u64, u64)>,
    /// (lowest, highest) term of the valid records.
    pub term_range: Option<(u64, u64)>,
}

/// Everything a verifying pass found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ScanSummary {
    pub segments: Vec<SegmentStats>,
    pub records: u64,
    pub seq_range: Option<(u64, u64)>,
    pub term_range: Option<(u64, u64)>,
    /// The digest of the last valid record (or of the first segment's `prev_digest`).
    pub last_digest: Option<Digest>,
    pub faults: Vec<ScanFault>,
}

impl ScanSummary {
    /// The first fault, which names the first bad seq.
    pub fn first_fault(&self) -> Option<&ScanFault> {
        self.faults.first()
    }
}

/// A read-only view of a journal directory. See the module docs.
#[derive(Debug, Clone)]
pub struct JournalScan {
    dir: PathBuf,
    segments: Vec<SegmentFile>,
}

impl JournalScan {
    /// Lists the segments of `dir` (which must exist). Writes nothing.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        let meta = std::fs::metadata(&dir).map_err(|e| JournalError::io(&dir, e))?;
        if !meta.is_dir() {
            return Err(JournalError::io(
                &dir,
                std::io::Error::new(std::io::ErrorKind::NotADirectory, "not a directory"),
            ));
        }
        let segments = list_segments(&dir)?;
        Ok(Self { dir, segments })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The segment files, in seq order.
    pub fn segment_files(&self) -> &[SegmentFile] {
        &self.segments
    }

    /// The header of the first segment (it names the position the journal starts after), if
    /// there is one and it is readable.
    pub fn first_header(&self) -> Result<Option<SegmentHeader>> {
        let Some(first) = self.segments.first() else {
            return Ok(None);
        };
        let mut head = [0u8; HEADER_LEN];
        let n = read_prefix(&first.path, &mut head)?;
        Ok(SegmentHeader::decode(&head[..n]).ok())
    }

    /// Walks every frame of every segment (see the module docs).
    pub fn entries(&self, opts: ScanOptions) -> ScanEntries {
        ScanEntries {
            segments: self.segments.clone(),
            opts,
            next_segment: 0,
            cur: None,
            expected: None,
            prev_digest: None,
            out: VecDeque::new(),
        }
    }

    /// A full verifying pass (chain included).
    pub fn summary(&self) -> Result<ScanSummary> {
        let mut s = ScanSummary::default();
        for seg in &self.segments {
            let file_len = std::fs::metadata(&seg.path)
                .map_err(|e| JournalError::io(&seg.path, e))?
                .len();
            s.segments.push(SegmentStats {
                path: seg.path.clone(),
                first_seq: seg.first_seq,
                file_len,
                used_bytes: HEADER_LEN.min(file_len as usize) as u64,
                records: 0,
                seq_range: None,
                term_range: None,
            });
        }
        s.last_digest = self.first_header()?.map(|h| h.prev_digest);
        let widen = |r: &mut Option<(u64, u64)>, v: u64| {
            *r = Some(r.map_or((v, v), |(lo, hi)| (lo.min(v), hi.max(v))));
        };
        for entry in self.entries(ScanOptions { verify_chain: true }) {
            match entry? {
                ScanEntry::Record {
                    segment,
                    offset,
                    frame_len,
                    record,
                } => {
                    let st = &mut s.segments[segment];
                    st.records += 1;
                    st.used_bytes = st.used_bytes.max(offset + frame_len as u64);
                    widen(&mut st.seq_range, record.seq);
                    widen(&mut st.term_range, record.term);
                    s.records += 1;
                    widen(&mut s.seq_range, record.seq);
                    widen(&mut s.term_range, record.term);
                    s.last_digest = Some(record.digest);
                }
                ScanEntry::Fault(f) => s.faults.push(f),
            }
        }
        Ok(s)
    }
}

fn read_prefix(path: &Path, buf: &mut [u8]) -> Result<usize> {
    use std::io::Read;
    let mut f = std::fs::File::open(path).map_err(|e| JournalError::io(path, e))?;
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(JournalError::io(path, e)),
        }
    }
    Ok(n)
}

/// The segment being walked.
struct CurrentSegment {
    index: usize,
    path: PathBuf,
    bytes: Vec<u8>,
    pos: usize,
    /// One past the last non-zero byte: nothing after it was ever written.
    written_end: usize,
}

/// Iterator of [`JournalScan::entries`]. An `Err` (an unreadable file) ends it.
pub struct ScanEntries {
    segments: Vec<SegmentFile>,
    opts: ScanOptions,
    next_segment: usize,
    cur: Option<CurrentSegment>,
    /// The seq the next record should carry (unknown before the first header).
    expected: Option<u64>,
    /// The digest the next record should chain from.
    prev_digest: Option<Digest>,
    out: VecDeque<ScanEntry>,
}

impl std::fmt::Debug for ScanEntries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScanEntries")
            .field("next_segment", &self.next_segment)
            .field("expected", &self.expected)
            .finish()
    }
}

/// One past the last non-zero byte of `bytes` at or after `from` (or `from` if all zero).
pub(crate) fn written_end(bytes: &[u8], from: usize) -> usize {
    let tail = &bytes[from.min(bytes.len())..];
    // A preallocated segment is mostly zeros: skip them a word at a time from the end, then
    // find the exact byte in the last non-zero word.
    let mut end = tail.len();
    while end >= 8 {
        let word = u64::from_ne_bytes(tail[end - 8..end].try_into().expect("8 bytes"));
        if word != 0 {
            break;
        }
        end -= 8;
    }
    tail[..end]
        .iter()
        .rposition(|&b| b != 0)
        .map_or(from, |i| from + i + 1)
}

/// The offset of the next decodable frame in `bytes[from..end]`, found byte by byte.
pub(crate) fn resync(bytes: &[u8], from: usize, end: usize) -> Option<usize> {
    let end = end.min(bytes.len());
    let mut o = from;
    while o + FRAME_PREFIX_LEN < end {
        if let Ok(FramePrefix::Valid { len }) = check_frame(&bytes[o..end]) {
            if decode_body(&bytes[o + FRAME_PREFIX_LEN..o + len]).is_ok() {
                return Some(o);
            }
        }
        o += 1;
    }
    None
}

impl ScanEntries {
    fn fault(
        &mut self,
        cur_index: usize,
        path: &Path,
        offset: usize,
        expected: u64,
        kind: FaultKind,
        detail: String,
    ) {
        self.out.push_back(ScanEntry::Fault(ScanFault {
            segment: cur_index,
            path: path.to_path_buf(),
            offset: offset as u64,
            expected_seq: expected,
            kind,
            detail,
        }));
    }

    /// Loads the next segment and checks its header; false when there are no more segments.
    fn open_next(&mut self) -> Result<bool> {
        let Some(seg) = self.segments.get(self.next_segment).cloned() else {
            return Ok(false);
        };
        let index = self.next_segment;
        self.next_segment += 1;
        let bytes = std::fs::read(&seg.path).map_err(|e| JournalError::io(&seg.path, e))?;
        let expected = self.expected.unwrap_or(seg.first_seq);
        let mut pos = HEADER_LEN.min(bytes.len());
        match SegmentHeader::decode(&bytes) {
            Err(HeaderError::UnsupportedVersion(v)) => {
                let e = HeaderError::UnsupportedVersion(v);
                self.fault(
                    index,
                    &seg.path,
                    0,
                    expected,
                    FaultKind::UnsupportedSegmentVersion(v),
                    e.to_string(),
                );
                return Ok(true); // its frames cannot be interpreted: skip the segment
            }
            Err(e @ HeaderError::Garbage(_)) => {
                self.fault(
                    index,
                    &seg.path,
                    0,
                    expected,
                    FaultKind::BadSegmentHeader,
                    e.to_string(),
                );
                pos = 0; // look for frames anywhere in the file
            }
            Ok(h) => {
                if h.first_seq != seg.first_seq {
                    self.fault(
                        index,
                        &seg.path,
                        12,
                        expected,
                        FaultKind::SegmentNameMismatch {
                            header_first_seq: h.first_seq,
                        },
                        format!(
                            "header says first seq {} but the file is named for {}",
                            h.first_seq, seg.first_seq
                        ),
                    );
                }
                if self.expected.is_some_and(|e| e != h.first_seq) {
                    self.fault(
                        index,
                        &seg.path,
                        12,
                        expected,
                        FaultKind::SegmentSeqMismatch {
                            header_first_seq: h.first_seq,
                        },
                        format!(
                            "segment starts at seq {} but seq {expected} comes next",
                            h.first_seq
                        ),
                    );
                } else if self.opts.verify_chain
                    && self.prev_digest.is_some_and(|d| d != h.prev_digest)
                {
                    self.fault(
                        index,
                        &seg.path,
                        20,
                        expected,
                        FaultKind::SegmentChainMismatch,
                        "segment header's previous digest differs from the last record's digest"
                            .into(),
                    );
                }
                self.expected = Some(h.first_seq);
                self.prev_digest = Some(h.prev_digest);
            }
        }
        let written_end = written_end(&bytes, pos);
        if pos == 0 {
            // garbage header: resync from the start
            pos = resync(&bytes, 0, written_end).unwrap_or(bytes.len());
        }
        self.cur = Some(CurrentSegment {
            index,
            path: seg.path,
            bytes,
            pos,
            written_end,
        });
        Ok(true)
    }

    /// Decodes the next item of the current segment into `out`; false at its end.
    fn step(&mut self) -> bool {
        let Some(mut cur) = self.cur.take() else {
            return false;
        };
        let pos = cur.pos;
        if pos >= cur.bytes.len() {
            return false;
        }
        let expected = self.expected.unwrap_or(0);
        let resync_from = |cur: &mut CurrentSegment, from: usize| {
            cur.pos = resync(&cur.bytes, from, cur.written_end).unwrap_or(cur.bytes.len());
        };
        match decode_frame(&cur.bytes[pos..]) {
            Ok(None) => {
                if cur.written_end > pos {
                    self.fault(
                        cur.index,
                        &cur.path,
                        pos,
                        expected,
                        FaultKind::GarbageAfterEnd,
                        format!(
                            "{} bytes of data after the end-of-data marker",
                            cur.written_end - pos
                        ),
                    );
                    resync_from(&mut cur, pos + 1);
                } else {
                    cur.pos = cur.bytes.len();
                }
            }
            Ok(Some((record, len))) => {
                let mut check_chain = self.opts.verify_chain;
                if record.seq != expected {
                    self.fault(
                        cur.index,
                        &cur.path,
                        pos,
                        expected,
                        FaultKind::SeqDiscontinuity { found: record.seq },
                        format!("found seq {} where seq {expected} should be", record.seq),
                    );
                    check_chain = false;
                }
                if check_chain {
                    if let Some(prev) = self.prev_digest {
                        if record.expected_digest(&prev) != record.digest {
                            self.fault(
                                cur.index,
                                &cur.path,
                                pos,
                                record.seq,
                                FaultKind::ChainMismatch,
                                format!("chain digest of seq {} does not verify", record.seq),
                            );
                        }
                    }
                }
                self.expected = Some(record.seq + 1);
                self.prev_digest = Some(record.digest);
                self.out.push_back(ScanEntry::Record {
                    segment: cur.index,
                    offset: pos as u64,
                    frame_len: len,
                    record,
                });
                cur.pos = pos + len;
            }
            Err(FrameError::UnsupportedVersion(v)) => {
                self.fault(
                    cur.index,
                    &cur.path,
                    pos,
                    expected,
                    FaultKind::UnsupportedFrameVersion(v),
                    FrameError::UnsupportedVersion(v).to_string(),
                );
                resync_from(&mut cur, pos + 1);
            }
            Err(e) => {
                let detail = e.to_string();
                self.fault(
                    cur.index,
                    &cur.path,
                    pos,
                    expected,
                    FaultKind::BadFrame(e),
                    detail,
                );
                resync_from(&mut cur, pos + 1);
            }
        }
        self.cur = Some(cur);
        true
    }
}

impl Iterator for ScanEntries {
    type Item = Result<ScanEntry>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(e) = self.out.pop_front() {
                return Some(Ok(e));
            }
            if !self.step() {
                self.cur = None;
                match self.open_next() {
                    Ok(true) => {}
                    Ok(false) => return None,
                    Err(e) => {
                        self.next_segment = self.segments.len();
                        return Some(Err(e));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod written_end_tests {
    use super::written_end;

    #[test]
    fn finds_the_last_non_zero_byte_at_any_alignment() {
        for len in [0usize, 1, 7, 8, 9, 63, 64, 65, 1000] {
            let zeros = vec![0u8; len];
            assert_eq!(written_end(&zeros, 0), 0);
            for at in 0..len {
                let mut b = zeros.clone();
                b[at] = 0x5a;
                assert_eq!(written_end(&b, 0), at + 1, "len {len} at {at}");
                // `from` past the byte: nothing written at or after it.
                assert_eq!(written_end(&b, at + 1), at + 1);
                assert_eq!(written_end(&b, at), at + 1);
            }
        }
        assert_eq!(written_end(&[1, 2, 3], 10), 10);
    }
}
