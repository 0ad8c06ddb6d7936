//! Sequential reads of durable records from segment files: the fast replay path.
//!
//! Each segment is read front to back through a large buffer, one frame at a time: the length
//! word, then CRC + body into a reused buffer, CRC checked, body decoded. Records below the
//! requested start are skipped by peeking their seq, without decoding them.

use std::fs::File;
use std::io::{ErrorKind, Read};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use crate::backend::{ReadSource, RecordIter, RecordVisitor};
use crate::codec::{
    check_frame, decode_body, decode_body_ref, peek_seq, FramePrefix, FRAME_PREFIX_LEN,
    MAX_FRAME_BODY,
};
use crate::error::{JournalError, Result};
use crate::file::segment::{list_segments, SegmentFile, SegmentHeader, HEADER_LEN};
use crate::keyed::frame_error;
use crate::record::Record;

const READ_BUFFER: usize = 1 << 20;

/// Where the list of segments comes from.
#[derive(Debug, Clone)]
enum Listing {
    /// Kept up to date by the writing [`crate::file::FileBackend`].
    Live(Arc<RwLock<Vec<SegmentFile>>>),
    /// Listed from the directory at every read (offline, read-only use).
    Dir,
}

/// A [`ReadSource`] over a directory of segment files.
#[derive(Debug, Clone)]
pub struct FileReadSource {
    dir: PathBuf,
    listing: Listing,
}

impl FileReadSource {
    pub(crate) fn live(dir: PathBuf, segments: Arc<RwLock<Vec<SegmentFile>>>) -> Self {
        Self {
            dir,
            listing: Listing::Live(segments),
        }
    }

    /// A reader that lists `dir` afresh on every call and never writes or locks anything.
    pub fn offline(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            listing: Listing::Dir,
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn segments(&self) -> Result<Vec<SegmentFile>> {
        match &self.listing {
            Listing::Live(list) => Ok(list.read().unwrap_or_else(|p| p.into_inner()).clone()),
            Listing::Dir => list_segments(&self.dir),
        }
    }
}

impl FileReadSource {
    fn records(&self, segments: Vec<SegmentFile>, from: u64, upto: u64) -> FileRecords {
        FileRecords {
            segments,
            next_segment: 0,
            reader: None,
            expected: from,
            upto,
            strict: matches!(self.listing, Listing::Live(_)),
            buf: Vec::new(),
            done: from > upto,
        }
    }
}

impl ReadSource for FileReadSource {
    /// Records `from..=upto` in order. For a live journal every seq up to `upto` must be there
    /// (a missing one is `Corrupt`); offline, reading simply ends at the end of the data.
    fn read_range(&self, from: u64, upto: u64) -> Result<RecordIter> {
        let segments = self.segments()?;
        let Some(first) = segments.first() else {
            return Ok(Box::new(std::iter::empty()));
        };
        if from < first.first_seq {
            return Err(JournalError::OutOfRange {
                seq: from,
                first: first.first_seq,
                last: upto,
            });
        }
        let start = segments.partition_point(|s| s.first_seq <= from) - 1;
        Ok(Box::new(self.records(
            segments[start..].to_vec(),
            from,
            upto,
        )))
    }

    fn visit_range(&self, from: u64, upto: u64, visit: &mut RecordVisitor<'_>) -> Result<()> {
        let segments = self.segments()?;
        let Some(first) = segments.first() else {
            return Ok(());
        };
        if from < first.first_seq {
            return Err(JournalError::OutOfRange {
                seq: from,
                first: first.first_seq,
                last: upto,
            });
        }
        let start = segments.partition_point(|s| s.first_seq <= from) - 1;
        self.records(segments[start..].to_vec(), from, upto)
            .visit(visit)
    }

    fn boxed_clone(&self) -> Box<dyn ReadSource> {
        Box::new(self.clone())
    }
}

/// One segment file being read front to back through a buffer of whole frames: frames are
/// decoded in place, and only a frame cut by the end of a read is moved (to the buffer's front).
struct OpenSegment {
    path: PathBuf,
    file: File,
    /// File offset of `buf[start]`.
    offset: u64,
    start: usize,
    end: usize,
    eof: bool,
}

impl OpenSegment {
    /// Makes at least `need` unread bytes available in `buf[start..]`; false if the file ends
    /// first.
    fn fill(&mut self, buf: &mut Vec<u8>, need: usize) -> std::io::Result<bool> {
        if self.end - self.start >= need {
            return Ok(true);
        }
        if self.start > 0 {
            buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if buf.len() < need.max(READ_BUFFER) {
            buf.resize(need.max(READ_BUFFER), 0);
        }
        while self.end < need && !self.eof {
            match self.file.read(&mut buf[self.end..]) {
                Ok(0) => self.eof = true,
                Ok(k) => self.end += k,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(self.end - self.start >= need)
    }
}

struct FileRecords {
    segments: Vec<SegmentFile>,
    next_segment: usize,
    reader: Option<OpenSegment>,
    /// The next seq to yield.
    expected: u64,
    upto: u64,
    strict: bool,
    /// The read buffer of the open segment (kept across segments).
    buf: Vec<u8>,
    done: bool,
}

/// Reads into `buf` until it is full or the file ends; returns the bytes read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

impl FileRecords {
    fn corrupt(&self, path: &Path, reason: String) -> JournalError {
        JournalError::Corrupt {
            seq: self.expected,
            location: path.to_path_buf(),
            reason,
        }
    }

    fn open_segment(&mut self, seg: &SegmentFile) -> Result<OpenSegment> {
        let mut file = match crate::fd_reserve::open_with_reserve(|| File::open(&seg.path)) {
            Ok(f) => f,
            // removed by a concurrent prefix truncation
            Err(e) if e.kind() == ErrorKind::NotFound => {
                return Err(JournalError::OutOfRange {
                    seq: self.expected,
                    first: seg.first_seq,
                    last: self.upto,
                })
            }
            Err(e) => return Err(JournalError::io(&seg.path, e)),
        };
        let mut head = [0u8; HEADER_LEN];
        let n = read_full(&mut file, &mut head).map_err(|e| JournalError::io(&seg.path, e))?;
        let header = SegmentHeader::decode(&head[..n])
            .map_err(|e| e.into_journal_error(&seg.path, self.expected))?;
        if header.first_seq != seg.first_seq {
            return Err(self.corrupt(
                &seg.path,
                format!(
                    "header first seq {} differs from the file name",
                    header.first_seq
                ),
            ));
        }
        Ok(OpenSegment {
            path: seg.path.clone(),
            file,
            offset: HEADER_LEN as u64,
            start: 0,
            end: 0,
            eof: false,
        })
    }

    /// The body of the open segment's next frame as a range of `self.buf` (None at the
    /// segment's end); skips records below `expected` without decoding them.
    fn next_in_segment(&mut self) -> Result<Option<Range<usize>>> {
        let mut seg = self.reader.take().expect("a segment is open");
        let result = loop {
            if !seg
                .fill(&mut self.buf, 4)
                .map_err(|e| JournalError::io(&seg.path, e))?
            {
                break Ok(None);
            }
            let at = seg.start;
            let body_len =
                u32::from_le_bytes(self.buf[at..at + 4].try_into().expect("4 bytes")) as usize;
            if body_len == 0 {
                break Ok(None);
            }
            if body_len > MAX_FRAME_BODY {
                break Err(self.corrupt(
                    &seg.path,
                    format!("bad frame length {body_len} at offset {}", seg.offset),
                ));
            }
            let total = FRAME_PREFIX_LEN + body_len;
            if !seg
                .fill(&mut self.buf, total)
                .map_err(|e| JournalError::io(&seg.path, e))?
            {
                break Err(self.corrupt(&seg.path, format!("torn frame at offset {}", seg.offset)));
            }
            let frame = seg.start..seg.start + total;
            if let Err(e) = check_frame(&self.buf[frame.clone()])
                .map(|p| debug_assert_eq!(p, FramePrefix::Valid { len: total }))
            {
                break Err(self.corrupt(&seg.path, format!("{e} at offset {}", seg.offset)));
            }
            seg.start += total;
            seg.offset += total as u64;
            let body = frame.start + FRAME_PREFIX_LEN..frame.end;
            if peek_seq(&self.buf[body.clone()]).is_some_and(|s| s < self.expected) {
                continue;
            }
            break Ok(Some(body));
        };
        self.reader = Some(seg);
        result
    }

    /// The body of the next record at or after `expected` (opening segments as needed), or
    /// None when the range is done.
    fn next_body(&mut self) -> Option<Result<Range<usize>>> {
        if self.done {
            return None;
        }
        loop {
            if self.reader.is_none() {
                let Some(seg) = self.segments.get(self.next_segment).cloned() else {
                    if self.strict && self.expected <= self.upto {
                        let path = self
                            .segments
                            .last()
                            .map(|s| s.path.clone())
                            .unwrap_or_default();
                        return Some(Err(self.corrupt(
                            &path,
                            "durable record missing at the end of the journal".into(),
                        )));
                    }
                    self.done = true;
                    return None;
                };
                self.next_segment += 1;
                match self.open_segment(&seg) {
                    Ok(s) => self.reader = Some(s),
                    Err(e) => return Some(Err(e)),
                }
            }
            match self.next_in_segment() {
                Ok(Some(body)) => return Some(Ok(body)),
                Ok(None) => self.reader = None,
                Err(e) => return Some(Err(e)),
            }
        }
    }

    /// Checks that a decoded record is the one expected next and advances.
    fn accept(&mut self, seq: u64) -> Result<()> {
        if seq != self.expected {
            let path = self
                .reader
                .as_ref()
                .map(|s| s.path.clone())
                .unwrap_or_default();
            return Err(self.corrupt(
                &path,
                format!("found seq {seq} where seq {} should be", self.expected),
            ));
        }
        self.expected = seq + 1;
        self.done = seq >= self.upto;
        Ok(())
    }

    fn decode_error(&self, e: crate::codec::FrameError) -> JournalError {
        let path = self
            .reader
            .as_ref()
            .map(|s| s.path.clone())
            .unwrap_or_default();
        frame_error(e, self.expected, &path)
    }

    /// Hands every remaining record to `visit`, decoded in place.
    fn visit(&mut self, visit: &mut RecordVisitor<'_>) -> Result<()> {
        let result = self.visit_inner(visit);
        if result.is_err() {
            self.done = true;
        }
        result
    }

    fn visit_inner(&mut self, visit: &mut RecordVisitor<'_>) -> Result<()> {
        while let Some(body) = self.next_body() {
            let body = body?;
            // The seq comes from a peek so the order check runs before the view borrows the
            // buffer; a body whose seq cannot be peeked fails to decode just below.
            if let Some(seq) = peek_seq(&self.buf[body.clone()]) {
                self.accept(seq)?;
            }
            let record = decode_body_ref(&self.buf[body]).map_err(|e| self.decode_error(e))?;
            visit(record)?;
        }
        Ok(())
    }
}

impl Iterator for FileRecords {
    type Item = Result<Record>;

    fn next(&mut self) -> Option<Result<Record>> {
        let item = self.next_body()?.and_then(|body| {
            let record = decode_body(&self.buf[body]).map_err(|e| self.decode_error(e))?;
            self.accept(record.seq)?;
            Ok(record)
        });
        if item.is_err() {
            self.done = true;
        }
        Some(item)
    }
}
