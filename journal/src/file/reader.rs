//! Sequential reads of durable records from segment files: the fast replay path.
//!
//! Each segment is read front to back through a large buffer, one frame at a time: the length
//! word, then CRC + body into a reused buffer, CRC checked, body decoded. Records below the
//! requested start are skipped by peeking their seq, without decoding them.

use std::fs::File;
use std::io::{BufReader, ErrorKind, Read};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use crate::backend::{ReadSource, RecordIter};
use crate::codec::{
    check_frame, decode_body, peek_seq, FramePrefix, FRAME_PREFIX_LEN, MAX_FRAME_BODY,
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
        Ok(Box::new(FileRecords {
            segments: segments[start..].to_vec(),
            next_segment: 0,
            reader: None,
            expected: from,
            upto,
            strict: matches!(self.listing, Listing::Live(_)),
            buf: Vec::new(),
            done: from > upto,
        }))
    }

    fn boxed_clone(&self) -> Box<dyn ReadSource> {
        Box::new(self.clone())
    }
}

struct OpenSegment {
    path: PathBuf,
    reader: BufReader<File>,
    offset: u64,
}

struct FileRecords {
    segments: Vec<SegmentFile>,
    next_segment: usize,
    reader: Option<OpenSegment>,
    /// The next seq to yield.
    expected: u64,
    upto: u64,
    strict: bool,
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
        let file = match File::open(&seg.path) {
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
        let mut reader = BufReader::with_capacity(READ_BUFFER, file);
        let mut head = [0u8; HEADER_LEN];
        let n = read_full(&mut reader, &mut head).map_err(|e| JournalError::io(&seg.path, e))?;
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
            reader,
            offset: HEADER_LEN as u64,
        })
    }

    /// The next frame's record of the open segment (None at its end); skips records below
    /// `expected` without decoding them.
    fn next_in_segment(&mut self) -> Result<Option<Record>> {
        let mut seg = self.reader.take().expect("a segment is open");
        let result = loop {
            let mut len = [0u8; 4];
            let n =
                read_full(&mut seg.reader, &mut len).map_err(|e| JournalError::io(&seg.path, e))?;
            let body_len = u32::from_le_bytes(len) as usize;
            if n < 4 || body_len == 0 {
                break Ok(None);
            }
            if body_len > MAX_FRAME_BODY {
                break Err(self.corrupt(
                    &seg.path,
                    format!("bad frame length {body_len} at offset {}", seg.offset),
                ));
            }
            let total = FRAME_PREFIX_LEN + body_len;
            self.buf.clear();
            self.buf.resize(total, 0);
            self.buf[..4].copy_from_slice(&len);
            let got = read_full(&mut seg.reader, &mut self.buf[4..])
                .map_err(|e| JournalError::io(&seg.path, e))?;
            if got < total - 4 {
                break Err(self.corrupt(&seg.path, format!("torn frame at offset {}", seg.offset)));
            }
            if let Err(e) = check_frame(&self.buf)
                .map(|p| debug_assert_eq!(p, FramePrefix::Valid { len: total }))
            {
                break Err(self.corrupt(&seg.path, format!("{e} at offset {}", seg.offset)));
            }
            seg.offset += total as u64;
            let body = &self.buf[FRAME_PREFIX_LEN..];
            if peek_seq(body).is_some_and(|s| s < self.expected) {
                continue;
            }
            match decode_body(body) {
                Ok(r) => break Ok(Some(r)),
                Err(e) => break Err(frame_error(e, self.expected, &seg.path)),
            }
        };
        self.reader = Some(seg);
        result
    }
}

impl Iterator for FileRecords {
    type Item = Result<Record>;

    fn next(&mut self) -> Option<Result<Record>> {
        if self.done {
            return None;
        }
        let item = loop {
            if self.reader.is_none() {
                let Some(seg) = self.segments.get(self.next_segment).cloned() else {
                    if self.strict && self.expected <= self.upto {
                        let path = self
                            .segments
                            .last()
                            .map(|s| s.path.clone())
                            .unwrap_or_default();
                        break Err(self.corrupt(
                            &path,
                            "durable record missing at the end of the journal".into(),
                        ));
                    }
                    self.done = true;
                    return None;
                };
                self.next_segment += 1;
                match self.open_segment(&seg) {
                    Ok(s) => self.reader = Some(s),
                    Err(e) => break Err(e),
                }
            }
            match self.next_in_segment() {
                Ok(Some(r)) if r.seq == self.expected => break Ok(r),
                Ok(Some(r)) => {
                    let path = self
                        .reader
                        .as_ref()
                        .map(|s| s.path.clone())
                        .unwrap_or_default();
                    break Err(self.corrupt(
                        &path,
                        format!("found seq {} where seq {} should be", r.seq, self.expected),
                    ));
                }
                Ok(None) => self.reader = None,
                Err(e) => break Err(e),
            }
        };
        match &item {
            Ok(r) => {
                self.expected = r.seq + 1;
                self.done = r.seq >= self.upto;
            }
            Err(_) => self.done = true,
        }
        Some(item)
    }
}
