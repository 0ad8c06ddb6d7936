//! The file backend (the default): a directory of preallocated, append-only segment files.
//!
//! # Directory layout
//!
//! ```text
//! DIR/LOCK                          flock'ed (exclusive) by the one process writing DIR
//! DIR/00000000000000000001.seg      segment whose first record is seq 1
//! DIR/00000000000000052311.seg      next segment, first seq 52311
//! DIR/*.seg.tmp                     a segment being created (removed on the next open)
//! DIR/quarantine/                   damaged tails copied aside by recovery (docs/journal-format.md)
//! ```
//!
//! Each segment file is a 64-byte header (see [`segment`]) followed by frames (see
//! [`crate::codec`]) back to back, then zeros up to the preallocated size. The first zero length
//! word ends the data. Segments are preallocated with `fallocate` (default 64 MiB, falling back to
//! a sparse `set_len` where unsupported) so that appends do not change the file size and one
//! `fdatasync` per batch suffices. A segment is rotated when the next frame does not fit; a frame
//! larger than the segment size goes alone into a segment sized for it.
//!
//! # Durability
//!
//! - One [`JournalBackend::append`] = `pwrite` of the batch's frames (one write per segment
//!   touched) + `fdatasync` of each touched segment; a segment being left is synced before the
//!   next one is created, so a segment with records never follows one with a torn tail.
//! - New segments are created under a temporary name, preallocated, headed, fsynced, renamed into
//!   place, and the directory fsynced. Removed segments are followed by a directory fsync.
//!
//! # Recovery
//!
//! One [`scan::JournalScan`] pass over every segment (rules in `recover.rs`):
//! - a bad segment header (garbage, misnamed, not continuing the previous segment) is `Corrupt`;
//!   a newer segment or frame format version is `UnsupportedVersion`;
//! - the first bad frame (torn, bad length/CRC/body, seq discontinuity, non-zero bytes after the
//!   end-of-data marker) starts the damaged region. If any valid record with a higher seq
//!   follows (found by scanning forward byte by byte, or in a later segment), the journal is
//!   `Corrupt` naming `last good + 1` and the file, in every mode, and nothing is modified;
//! - otherwise it is a damaged tail: `AbsoluteConsistency` returns `TailCorruption` and changes
//!   nothing; `TolerateTailCorruption` copies the region into `DIR/quarantine/` (fsynced, see
//!   [`crate::quarantine`]), then zeroes it (fdatasync), removes later record-less segments
//!   (directory fsync) and returns a [`crate::TruncationReport`] naming the quarantine.
//!
//! # Prefix truncation
//!
//! Whole segment files entirely below `keep_from` are deleted (directory fsynced); the segment
//! holding `keep_from`, and always the last segment, stay. So after a reopen the first seq may
//! be lower than the `keep_from` asked for.
//!
//! # Offline, read-only access
//!
//! [`scan::JournalScan`] inspects a directory frame by frame, reporting faults instead of
//! stopping (for `crescent-replay verify`/`stats`/`dump`); [`open_read_only`] gives a plain
//! [`ReadSource`] over it. Neither creates, truncates, locks or writes anything.

mod reader;
mod recover;
pub mod rewind;
pub mod scan;
pub mod segment;

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

pub use reader::FileReadSource;
pub use scan::{
    FaultKind, JournalScan, ScanEntry, ScanFault, ScanOptions, ScanSummary, SegmentStats,
};

use crate::backend::{BackendFactory, JournalBackend, ReadSource, Recovered};
use crate::codec::{EncodedBatch, FRAME_PREFIX_LEN};
use crate::error::{JournalError, Result};
use crate::record::{Digest, GENESIS_DIGEST};
use crate::recovery::RecoveryMode;
use segment::{
    create_segment, remove_temp_files, sync_dir, SegmentFile, SegmentHeader, HEADER_LEN,
};

/// Name of the lock file in a journal directory.
pub const LOCK_FILE: &str = "LOCK";

/// Options of the file backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileOptions {
    /// Size each segment is preallocated to (default 64 MiB).
    pub segment_bytes: u64,
    /// Reserve segment space with `fallocate` (default true). Off, segments grow as written.
    pub preallocate: bool,
}

impl Default for FileOptions {
    fn default() -> Self {
        Self {
            segment_bytes: 64 << 20,
            preallocate: true,
        }
    }
}

/// The segment appends go to.
#[derive(Debug)]
struct ActiveSegment {
    file: File,
    path: PathBuf,
    write_pos: u64,
    capacity: u64,
    records: u64,
    /// Written since the last fdatasync.
    dirty: bool,
}

/// The file backend. Holds an exclusive `flock` on `DIR/LOCK` while it lives.
#[derive(Debug)]
pub struct FileBackend {
    dir: PathBuf,
    opts: FileOptions,
    _lock: File,
    segments: Arc<RwLock<Vec<SegmentFile>>>,
    active: Option<ActiveSegment>,
    last_digest: Digest,
    last_term: u64,
}

/// Takes the exclusive, non-blocking flock on `DIR/LOCK`.
fn lock_dir(dir: &Path) -> Result<File> {
    use std::os::fd::AsRawFd;
    let path = dir.join(LOCK_FILE);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| JournalError::io(&path, e))?;
    // SAFETY: flock only takes the fd (owned by `file`, open) and integer flags.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
            return Err(JournalError::Locked {
                path: dir.to_path_buf(),
            });
        }
        return Err(JournalError::io(&path, err));
    }
    Ok(file)
}

impl FileBackend {
    /// Opens `dir` for writing (creating it if needed) and locks it against other processes.
    /// Nothing is read or changed until [`JournalBackend::recover`].
    pub fn open(dir: impl AsRef<Path>, opts: FileOptions) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        std::fs::create_dir_all(&dir).map_err(|e| JournalError::io(&dir, e))?;
        let lock = lock_dir(&dir)?;
        Ok(Self {
            dir,
            opts,
            _lock: lock,
            segments: Arc::new(RwLock::new(Vec::new())),
            active: None,
            last_digest: GENESIS_DIGEST,
            last_term: 0,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn segments_mut(&self) -> std::sync::RwLockWriteGuard<'_, Vec<SegmentFile>> {
        self.segments.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes `bytes` at the active segment's write position.
    fn write_active(&mut self, bytes: &[u8], at: u64) -> Result<()> {
        let a = self.active.as_mut().expect("active segment");
        a.file
            .write_all_at(bytes, at)
            .map_err(|e| JournalError::io(&a.path, e))?;
        a.dirty = true;
        Ok(())
    }

    fn sync_active(&mut self) -> Result<()> {
        if let Some(a) = self.active.as_mut().filter(|a| a.dirty) {
            a.file
                .sync_data()
                .map_err(|e| JournalError::io(&a.path, e))?;
            a.dirty = false;
        }
        Ok(())
    }

    /// Syncs the segment being left and starts a new one at `first_seq`, big enough for a
    /// frame of `frame_len` bytes.
    fn rotate(&mut self, first_seq: u64, frame_len: u64) -> Result<()> {
        self.sync_active()?;
        let capacity = self.opts.segment_bytes.max(HEADER_LEN as u64 + frame_len);
        let header = SegmentHeader::new(first_seq, self.last_digest, self.last_term);
        let reserve = if self.opts.preallocate {
            capacity
        } else {
            HEADER_LEN as u64
        };
        let (file, path) = create_segment(&self.dir, &header, reserve)?;
        tracing::debug!(segment = %path.display(), first_seq, "journal segment created");
        self.segments_mut().push(SegmentFile {
            first_seq,
            path: path.clone(),
        });
        self.active = Some(ActiveSegment {
            file,
            path,
            write_pos: HEADER_LEN as u64,
            capacity,
            records: 0,
            dirty: false,
        });
        Ok(())
    }
}

impl JournalBackend for FileBackend {
    fn name(&self) -> &'static str {
        "file"
    }

    fn recover(&mut self, mode: RecoveryMode) -> Result<Recovered> {
        let removed = remove_temp_files(&self.dir)?;
        if removed > 0 {
            tracing::warn!(removed, "removed half-created journal segments");
        }
        let rec = recover::recover_dir(&self.dir, mode)?;
        *self.segments_mut() = rec.segments.clone();
        self.last_digest = rec.recovered.last_digest;
        self.last_term = rec.recovered.last_term;
        self.active = match rec.active {
            None => None,
            Some(pos) => {
                let path = pos.segment.path;
                let file = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(&path)
                    .map_err(|e| JournalError::io(&path, e))?;
                let len = file
                    .metadata()
                    .map_err(|e| JournalError::io(&path, e))?
                    .len();
                Some(ActiveSegment {
                    file,
                    path,
                    write_pos: pos.write_pos,
                    capacity: len.max(self.opts.segment_bytes),
                    records: pos.records,
                    dirty: false,
                })
            }
        };
        Ok(rec.recovered)
    }

    fn append(&mut self, batch: &EncodedBatch) -> Result<()> {
        if batch.digests.len() != batch.frames.len() || batch.terms.len() != batch.frames.len() {
            return Err(JournalError::Fatal(
                "encoded batch lacks per-frame digests or terms".into(),
            ));
        }
        // A run of contiguous batch bytes bound for the active segment: (batch start, batch
        // end, file offset).
        let mut run: Option<(usize, usize, u64)> = None;
        for (i, (seq, range)) in batch.frames.iter().enumerate() {
            let len = range.len() as u64;
            let full = match &self.active {
                None => true,
                Some(a) => a.records > 0 && a.write_pos + len > a.capacity,
            };
            if full {
                if let Some((s, e, at)) = run.take() {
                    self.write_active(&batch.bytes[s..e], at)?;
                }
                self.rotate(*seq, len)?;
            }
            let a = self.active.as_mut().expect("active segment");
            run = Some(match run {
                Some((s, _, at)) => (s, range.end, at),
                None => (range.start, range.end, a.write_pos),
            });
            a.write_pos += len;
            a.capacity = a.capacity.max(a.write_pos);
            a.records += 1;
            self.last_digest = batch.digests[i];
            self.last_term = batch.terms[i];
        }
        if let Some((s, e, at)) = run {
            self.write_active(&batch.bytes[s..e], at)?;
        }
        self.sync_active()
    }

    fn truncate_prefix(&mut self, keep_from: u64) -> Result<()> {
        let doomed: Vec<SegmentFile> = {
            let mut segs = self.segments_mut();
            // Segment i lies wholly below keep_from when the next one starts at or before it;
            // the last segment always stays.
            let keep_at = segs
                .windows(2)
                .take_while(|w| w[1].first_seq <= keep_from)
                .count();
            segs.drain(..keep_at).collect()
        };
        if doomed.is_empty() {
            return Ok(());
        }
        for seg in &doomed {
            std::fs::remove_file(&seg.path).map_err(|e| JournalError::io(&seg.path, e))?;
        }
        sync_dir(&self.dir)?;
        tracing::info!(
            removed = doomed.len(),
            keep_from,
            "journal segments below the retained prefix removed"
        );
        Ok(())
    }

    fn read_source(&self) -> Box<dyn ReadSource> {
        Box::new(FileReadSource::live(
            self.dir.clone(),
            self.segments.clone(),
        ))
    }
}

/// A read-only [`ReadSource`] over a journal directory, for offline tools. It neither creates,
/// truncates nor locks anything, and lists the directory afresh on every read. Reading ends at
/// the end of the data; damage ends it with an error (use [`JournalScan`] to see past damage).
pub fn open_read_only(dir: impl AsRef<Path>) -> Result<Box<dyn ReadSource>> {
    let dir = dir.as_ref();
    let meta = std::fs::metadata(dir).map_err(|e| JournalError::io(dir, e))?;
    if !meta.is_dir() {
        return Err(JournalError::io(
            dir,
            std::io::Error::new(std::io::ErrorKind::NotADirectory, "not a directory"),
        ));
    }
    Ok(Box::new(FileReadSource::offline(dir)))
}

/// Opens [`FileBackend`]s on one directory (a temporary one by default), for the conformance
/// suite, crash tests and benchmarks.
#[derive(Debug)]
pub struct FileBackendFactory {
    dir: PathBuf,
    opts: FileOptions,
    _temp: Option<tempfile::TempDir>,
}

impl FileBackendFactory {
    pub fn new(dir: impl Into<PathBuf>, opts: FileOptions) -> Self {
        Self {
            dir: dir.into(),
            opts,
            _temp: None,
        }
    }

    /// A factory over a fresh temporary directory, removed when the factory is dropped.
    pub fn in_tempdir(opts: FileOptions) -> Result<Self> {
        let temp = tempfile::Builder::new()
            .prefix("crescent-journal-")
            .tempdir()
            .map_err(|e| JournalError::io(std::env::temp_dir(), e))?;
        Ok(Self {
            dir: temp.path().join("journal"),
            opts,
            _temp: Some(temp),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Finds the frame of `seq` (or of the last record): (path, offset, frame length).
    fn locate(&self, seq: Option<u64>) -> Option<(PathBuf, u64, usize)> {
        let scan = JournalScan::open(&self.dir).ok()?;
        let mut found = None;
        for entry in scan.entries(ScanOptions {
            verify_chain: false,
        }) {
            if let Ok(ScanEntry::Record {
                segment,
                offset,
                frame_len,
                record,
            }) = entry
            {
                if seq.is_none_or(|s| s == record.seq) {
                    found = Some((
                        scan.segment_files()[segment].path.clone(),
                        offset,
                        frame_len,
                    ));
                }
            }
        }
        found
    }
}

/// Writes `bytes` at `offset` of `path` and syncs (test damage helpers).
fn overwrite(path: &Path, offset: u64, bytes: &[u8]) {
    let file = OpenOptions::new()
        .write(true)
        .open(path)
        .expect("open segment to damage it");
    file.write_all_at(bytes, offset).expect("damage segment");
    file.sync_data().expect("sync damaged segment");
}

impl BackendFactory for FileBackendFactory {
    fn name(&self) -> &'static str {
        "file"
    }

    fn open(&self) -> Result<Box<dyn JournalBackend>> {
        Ok(Box::new(FileBackend::open(&self.dir, self.opts.clone())?))
    }

    /// Zeroes the second half of the last frame, as a write torn by a crash leaves it.
    fn tear_tail(&self) {
        if let Some((path, offset, len)) = self.locate(None) {
            let keep = (len / 2).max(FRAME_PREFIX_LEN + 1);
            overwrite(&path, offset + keep as u64, &vec![0u8; len - keep]);
        }
    }

    fn corrupt_record(&self, seq: u64) {
        let (path, offset, len) = self
            .locate(Some(seq))
            .unwrap_or_else(|| panic!("no record {seq} in {}", self.dir.display()));
        let at = offset + (FRAME_PREFIX_LEN + (len - FRAME_PREFIX_LEN) / 2) as u64;
        let file = File::open(&path).expect("open segment");
        let mut b = [0u8; 1];
        file.read_exact_at(&mut b, at).expect("read byte");
        overwrite(&path, at, &[b[0] ^ 0xff]);
    }
}
