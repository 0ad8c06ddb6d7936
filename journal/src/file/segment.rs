//! Segment files: naming, the 64-byte header, creation with preallocation, and directory sync.
//!
//! # Segment header (format version 1), 64 bytes at offset 0
//!
//! ```text
//! offset  size  field
//! 0       8     magic          b"CRSJSEG\0"
//! 8       4     format_version u32 LE (currently 1)
//! 12      8     first_seq      u64 LE, seq of the first frame; equals the file name's number
//! 20      32    prev_digest    chain digest of record first_seq - 1 (all zeros at genesis)
//! 52      8     prev_term      u64 LE, term of record first_seq - 1 (0 at genesis)
//! 60      4     header_crc     u32 LE, CRC32C of bytes 0..60
//! ```
//!
//! Frames (see [`crate::codec`]) follow from offset 64, back to back. The rest of the file is
//! zeros (preallocated), and the first zero length word marks the end of the data.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{JournalError, Result};
use crate::record::Digest;

pub const SEGMENT_MAGIC: [u8; 8] = *b"CRSJSEG\0";
/// The segment format version this binary writes and the newest it reads.
pub const SEGMENT_FORMAT_VERSION: u32 = 1;
pub const HEADER_LEN: usize = 64;
/// Extension of segment files.
pub const SEGMENT_EXT: &str = "seg";
/// Suffix of a segment being created (renamed into place once its header is durable).
pub const TEMP_SUFFIX: &str = ".seg.tmp";

/// The decoded header of a segment file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentHeader {
    pub format_version: u32,
    pub first_seq: u64,
    pub prev_digest: Digest,
    pub prev_term: u64,
}

/// Why a header is unusable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderError {
    /// Too short, wrong magic or bad CRC.
    Garbage(String),
    /// Written by a newer format.
    UnsupportedVersion(u32),
}

impl std::fmt::Display for HeaderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeaderError::Garbage(why) => write!(f, "bad segment header: {why}"),
            HeaderError::UnsupportedVersion(v) => write!(
                f,
                "segment format version {v} is newer than supported {SEGMENT_FORMAT_VERSION}"
            ),
        }
    }
}

impl HeaderError {
    /// The journal error for this header fault at `path`.
    pub fn into_journal_error(self, path: &Path, seq: u64) -> JournalError {
        match self {
            HeaderError::UnsupportedVersion(v) => JournalError::UnsupportedVersion {
                location: path.to_path_buf(),
                found: v,
                supported: SEGMENT_FORMAT_VERSION,
            },
            HeaderError::Garbage(reason) => JournalError::Corrupt {
                seq,
                location: path.to_path_buf(),
                reason: format!("bad segment header: {reason}"),
            },
        }
    }
}

impl SegmentHeader {
    pub fn new(first_seq: u64, prev_digest: Digest, prev_term: u64) -> Self {
        Self {
            format_version: SEGMENT_FORMAT_VERSION,
            first_seq,
            prev_digest,
            prev_term,
        }
    }

    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..8].copy_from_slice(&SEGMENT_MAGIC);
        b[8..12].copy_from_slice(&self.format_version.to_le_bytes());
        b[12..20].copy_from_slice(&self.first_seq.to_le_bytes());
        b[20..52].copy_from_slice(&self.prev_digest);
        b[52..60].copy_from_slice(&self.prev_term.to_le_bytes());
        let crc = crescent_checksum::crc32c(&b[0..60]);
        b[60..64].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes a header: magic first, then the version (so a newer layout is reported as a
    /// version problem, not as garbage), then the CRC.
    pub fn decode(b: &[u8]) -> std::result::Result<Self, HeaderError> {
        if b.len() < HEADER_LEN {
            return Err(HeaderError::Garbage(format!(
                "file is {} bytes, shorter than the {HEADER_LEN}-byte header",
                b.len()
            )));
        }
        if b[0..8] != SEGMENT_MAGIC {
            return Err(HeaderError::Garbage("wrong magic".into()));
        }
        let version = u32::from_le_bytes(b[8..12].try_into().expect("4 bytes"));
        if version > SEGMENT_FORMAT_VERSION {
            return Err(HeaderError::UnsupportedVersion(version));
        }
        let stored = u32::from_le_bytes(b[60..64].try_into().expect("4 bytes"));
        if stored != crescent_checksum::crc32c(&b[0..60]) {
            return Err(HeaderError::Garbage("header CRC mismatch".into()));
        }
        if version == 0 {
            return Err(HeaderError::Garbage("format version 0".into()));
        }
        Ok(Self {
            format_version: version,
            first_seq: u64::from_le_bytes(b[12..20].try_into().expect("8 bytes")),
            prev_digest: b[20..52].try_into().expect("32 bytes"),
            prev_term: u64::from_le_bytes(b[52..60].try_into().expect("8 bytes")),
        })
    }
}

/// `{first_seq:020}.seg`
pub fn segment_file_name(first_seq: u64) -> String {
    format!("{first_seq:020}.{SEGMENT_EXT}")
}

/// The first seq encoded in a segment file name, if `name` is one.
pub fn parse_segment_name(name: &str) -> Option<u64> {
    let stem = name.strip_suffix(".seg")?;
    if stem.len() != 20 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    stem.parse().ok()
}

/// A segment file found in a journal directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentFile {
    /// The first seq from the file name.
    pub first_seq: u64,
    pub path: PathBuf,
}

/// Lists the segment files of `dir`, sorted by first seq. Files that merely end in `.seg` but
/// are not named `{20 digits}.seg` are reported as corruption: something wrote into the dir.
pub fn list_segments(dir: &Path) -> Result<Vec<SegmentFile>> {
    let mut out = Vec::new();
    let entries = crate::fd_reserve::open_with_reserve(|| std::fs::read_dir(dir))
        .map_err(|e| JournalError::io(dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| JournalError::io(dir, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !name.ends_with(".seg") {
            continue;
        }
        match parse_segment_name(name) {
            Some(first_seq) => out.push(SegmentFile {
                first_seq,
                path: entry.path(),
            }),
            None => {
                return Err(JournalError::Corrupt {
                    seq: 0,
                    location: entry.path(),
                    reason: "segment file name is not {20 digits}.seg".into(),
                })
            }
        }
    }
    out.sort_by_key(|s| s.first_seq);
    Ok(out)
}

/// fsyncs a directory so that creations, renames and removals in it are durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    crate::fd_reserve::open_waiting(crate::fd_reserve::WRITER_WAIT, || File::open(dir))
        .and_then(|d| d.sync_all())
        .map_err(|e| JournalError::io(dir, e))
}

/// Reserves `len` bytes for `file` (zeros on read). Falls back to growing the file sparsely
/// where the filesystem cannot preallocate; returns whether blocks were really reserved.
pub fn preallocate(file: &File, len: u64) -> std::io::Result<bool> {
    use std::os::fd::AsRawFd;
    let len_off = libc::off_t::try_from(len)
        .map_err(|_| std::io::Error::other("segment size exceeds off_t"))?;
    // SAFETY: fallocate only reads its integer arguments; the fd is owned by `file` and open.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len_off) };
    if rc == 0 {
        return Ok(true);
    }
    let err = std::io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) | Some(libc::EINVAL) => {
            tracing::debug!(error = %err, "fallocate unsupported, growing the segment sparsely");
            file.set_len(len)?;
            Ok(false)
        }
        _ => Err(err),
    }
}

/// Creates segment `first_seq` in `dir` with `capacity` bytes (header included) reserved:
/// written under a temporary name, made durable, renamed into place, directory synced. A crash
/// at any point leaves either no segment or a complete one (plus, maybe, a temp file that the
/// next writable open removes).
pub fn create_segment(
    dir: &Path,
    header: &SegmentHeader,
    capacity: u64,
) -> Result<(File, PathBuf)> {
    let path = dir.join(segment_file_name(header.first_seq));
    let tmp = dir.join(format!("{:020}{TEMP_SUFFIX}", header.first_seq));
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |e| JournalError::io(p, e)
    };
    // Through the descriptor reserve: a rotation must not fail because a flood of
    // connections took every descriptor (docs/configuration.md, `net.fd_reserve`).
    let mut file = crate::fd_reserve::open_waiting(crate::fd_reserve::WRITER_WAIT, || {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)
    })
    .map_err(io(&tmp))?;
    preallocate(&file, capacity.max(HEADER_LEN as u64)).map_err(io(&tmp))?;
    file.write_all(&header.encode()).map_err(io(&tmp))?;
    file.sync_all().map_err(io(&tmp))?;
    std::fs::rename(&tmp, &path).map_err(io(&path))?;
    sync_dir(dir)?;
    Ok((file, path))
}

/// Removes leftover temporary segment files (from a crash during creation).
pub fn remove_temp_files(dir: &Path) -> Result<usize> {
    let mut removed = 0;
    for entry in std::fs::read_dir(dir).map_err(|e| JournalError::io(dir, e))? {
        let entry = entry.map_err(|e| JournalError::io(dir, e))?;
        if entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.ends_with(TEMP_SUFFIX))
        {
            std::fs::remove_file(entry.path()).map_err(|e| JournalError::io(entry.path(), e))?;
            removed += 1;
        }
    }
    if removed > 0 {
        sync_dir(dir)?;
    }
    Ok(removed)
}
