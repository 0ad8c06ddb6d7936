//! The journal quarantine: damaged tail bytes copied aside before recovery cuts them.
//!
//! Recovery under `tolerate_tail_corruption` never destroys a damaged tail it has not first
//! copied, byte for byte, into `JOURNAL_DIR/quarantine/` and fsynced (docs/journal-format.md,
//! "Quarantine"). Each cut leaves:
//!
//! ```text
//! quarantine/seq-<S>-off-<O>.frame          the cut segment's bytes from offset O to the end of
//!                                           its written area (S: the first seq not kept)
//! quarantine/seq-<S>-seg-<F>.segment        the written bytes of a later segment (first seq F)
//!                                           that the cut removed, if it held any
//! quarantine/seq-<S>-off-<O>.json           the description ([`QuarantineEntry`]), written last
//! ```
//!
//! The files stay until an operator removes them (`crescent-replay quarantine clear`), and
//! while they are there `crescent status`, `/healthz`, the `crescent_journal_quarantined_frames`
//! gauge and `crescent-replay verify` keep naming them.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{JournalError, Result};
use crate::file::segment::sync_dir;

/// Name of the quarantine directory inside a journal directory.
pub const QUARANTINE_DIR: &str = "quarantine";
/// Version of [`QuarantineEntry`] (its `format_version` field).
pub const QUARANTINE_FORMAT_VERSION: u32 = 1;

/// What the quarantined bytes are known to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DamageKind {
    /// A complete frame that failed its check (CRC, length, body, seq), or bytes that cannot be
    /// told apart from one. It may hold a record that was acknowledged.
    Damaged,
    /// A frame whose end was never written: a write that did not finish.
    Incomplete,
}

impl DamageKind {
    pub fn as_str(self) -> &'static str {
        match self {
            DamageKind::Damaged => "damaged",
            DamageKind::Incomplete => "incomplete",
        }
    }
}

/// A later, record-less segment removed by the cut.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuarantinedSegment {
    /// The segment's file name in the journal directory.
    pub segment: String,
    /// The copy's file name in the quarantine directory.
    pub data_file: String,
    pub bytes: u64,
}

/// The description of one quarantined tail (`seq-<S>-off-<O>.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuarantineEntry {
    pub format_version: u32,
    /// The first seq not kept (the last intact record + 1).
    pub seq: u64,
    /// The segment file name the damage starts in.
    pub segment: String,
    /// Byte offset of the damage in that segment.
    pub offset: u64,
    /// Bytes copied from the segment (`data_file`'s length).
    pub bytes: u64,
    pub kind: DamageKind,
    /// Why the bytes were judged damaged.
    pub reason: String,
    /// The copy's file name in the quarantine directory.
    pub data_file: String,
    #[serde(default)]
    pub later_segments: Vec<QuarantinedSegment>,
}

impl QuarantineEntry {
    /// The description's file name.
    pub fn meta_file(&self) -> String {
        format!("seq-{}-off-{}.json", self.seq, self.offset)
    }
}

/// The tail to copy: bytes `offset..end` of `segment`, then the written parts of `later`.
#[derive(Debug)]
pub(crate) struct DamagedTail<'a> {
    pub seq: u64,
    pub segment: &'a Path,
    pub offset: u64,
    pub bytes: &'a [u8],
    /// (segment path, its written bytes).
    pub later: Vec<(&'a Path, Vec<u8>)>,
    pub kind: DamageKind,
    pub reason: String,
}

/// `JOURNAL_DIR/quarantine`.
pub fn quarantine_dir(journal_dir: &Path) -> PathBuf {
    journal_dir.join(QUARANTINE_DIR)
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Writes `bytes` to `path` and fsyncs it.
fn write_synced(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut f = std::fs::File::create(path).map_err(|e| JournalError::io(path, e))?;
    f.write_all(bytes).map_err(|e| JournalError::io(path, e))?;
    f.sync_all().map_err(|e| JournalError::io(path, e))
}

/// Copies `tail` into the quarantine directory of `journal_dir` and makes it durable (files,
/// the quarantine directory and the journal directory fsynced). Idempotent: a recovery that
/// crashed after quarantining and runs again writes the same files.
pub(crate) fn quarantine_tail(
    journal_dir: &Path,
    tail: &DamagedTail<'_>,
) -> Result<QuarantineEntry> {
    let qdir = quarantine_dir(journal_dir);
    std::fs::create_dir_all(&qdir).map_err(|e| JournalError::io(&qdir, e))?;
    let data_file = format!("seq-{}-off-{}.frame", tail.seq, tail.offset);
    write_synced(&qdir.join(&data_file), tail.bytes)?;
    let mut later_segments = Vec::new();
    for (path, bytes) in &tail.later {
        let segment = file_name(path);
        let first = segment.trim_end_matches(".seg").trim_start_matches('0');
        let copy = format!("seq-{}-seg-{}.segment", tail.seq, first);
        write_synced(&qdir.join(&copy), bytes)?;
        later_segments.push(QuarantinedSegment {
            segment,
            data_file: copy,
            bytes: bytes.len() as u64,
        });
    }
    let entry = QuarantineEntry {
        format_version: QUARANTINE_FORMAT_VERSION,
        seq: tail.seq,
        segment: file_name(tail.segment),
        offset: tail.offset,
        bytes: tail.bytes.len() as u64,
        kind: tail.kind,
        reason: tail.reason.clone(),
        data_file,
        later_segments,
    };
    let meta = serde_json::to_vec_pretty(&entry)
        .map_err(|e| JournalError::Fatal(format!("cannot encode quarantine entry: {e}")))?;
    let tmp = qdir.join(format!("{}.tmp", entry.meta_file()));
    write_synced(&tmp, &meta)?;
    let meta_path = qdir.join(entry.meta_file());
    std::fs::rename(&tmp, &meta_path).map_err(|e| JournalError::io(&meta_path, e))?;
    sync_dir(&qdir)?;
    sync_dir(journal_dir)?;
    Ok(entry)
}

/// The quarantined tails of `journal_dir`, in seq order (empty when there is no quarantine
/// directory). A description that cannot be read is `Corrupt`, naming the file.
pub fn list(journal_dir: &Path) -> Result<Vec<QuarantineEntry>> {
    let qdir = quarantine_dir(journal_dir);
    let entries = match std::fs::read_dir(&qdir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(JournalError::io(&qdir, e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| JournalError::io(&qdir, e))?.path();
        if path.extension().is_none_or(|x| x != "json") {
            continue;
        }
        let bytes = std::fs::read(&path).map_err(|e| JournalError::io(&path, e))?;
        let parsed: QuarantineEntry =
            serde_json::from_slice(&bytes).map_err(|e| JournalError::Corrupt {
                seq: 0,
                location: path.clone(),
                reason: format!("unreadable quarantine description: {e}"),
            })?;
        out.push(parsed);
    }
    out.sort_by_key(|e| (e.seq, e.offset));
    Ok(out)
}

/// Removes the quarantine directory of `journal_dir` and everything in it (the operator has
/// dealt with the bytes); returns how many tails it held. Durable on return.
pub fn clear(journal_dir: &Path) -> Result<usize> {
    let qdir = quarantine_dir(journal_dir);
    if !qdir.exists() {
        return Ok(0);
    }
    let n = list(journal_dir).map(|l| l.len()).unwrap_or(0);
    std::fs::remove_dir_all(&qdir).map_err(|e| JournalError::io(&qdir, e))?;
    sync_dir(journal_dir)?;
    Ok(n)
}
