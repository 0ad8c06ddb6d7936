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
//! gauge and `crescent-replay verify` keep naming them, unless the record came back: an HA
//! node that receives the record at the quarantined seq from its active marks the entry
//! [`QuarantineEntry::recovered`] ([`mark_recovered`], docs/ha.md "A quarantined journal
//! tail"), and a recovered entry is a note, not a fault.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{JournalError, Result};
use crate::file::segment::sync_dir;

/// Name of the quarantine directory inside a journal directory.
pub const QUARANTINE_DIR: &str = "quarantine";
/// Version of [`QuarantineEntry`] (its `format_version` field). Version 2 added `recovered`;
/// version 1 descriptions are read as they are (never recovered).
pub const QUARANTINE_FORMAT_VERSION: u32 = 2;

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
    /// Set once the journal holds the record at `seq` again, received from an active.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovered: Option<Recovered>,
}

impl QuarantineEntry {
    /// The description's file name.
    pub fn meta_file(&self) -> String {
        format!("seq-{}-off-{}.json", self.seq, self.offset)
    }

    /// A `damaged` record that the journal does not hold again: it may have been acknowledged
    /// and only the quarantine holds its bytes.
    pub fn is_unrecovered_damage(&self) -> bool {
        self.kind == DamageKind::Damaged && self.recovered.is_none()
    }
}

/// How the record at a quarantined seq came back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recovered {
    /// Where the record came from: `replication` (the active sent it to this standby).
    pub source: String,
    /// The term of the record received.
    pub term: u64,
    /// Length of the received record's frame.
    pub frame_bytes: u64,
    /// Bytes of the quarantined copy that differ from the received frame, over the frame's
    /// length (bytes missing from the copy count as differing). A flipped byte in the same
    /// record shows as 1; a different record as many.
    pub differing_bytes: u64,
}

/// Compares a quarantined copy (it starts at the damaged frame) with the frame of the record
/// received for the same seq: the [`Recovered::differing_bytes`] figure.
pub fn differing_bytes(quarantined: &[u8], frame: &[u8]) -> u64 {
    frame
        .iter()
        .enumerate()
        .filter(|(i, b)| quarantined.get(*i) != Some(b))
        .count() as u64
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
        recovered: None,
    };
    write_description(&qdir, &entry)?;
    sync_dir(journal_dir)?;
    Ok(entry)
}

/// Writes `entry`'s description into `qdir` atomically (temp file, fsync, rename, fsync of
/// the directory).
fn write_description(qdir: &Path, entry: &QuarantineEntry) -> Result<()> {
    let meta = serde_json::to_vec_pretty(entry)
        .map_err(|e| JournalError::Fatal(format!("cannot encode quarantine entry: {e}")))?;
    let tmp = qdir.join(format!("{}.tmp", entry.meta_file()));
    write_synced(&tmp, &meta)?;
    let meta_path = qdir.join(entry.meta_file());
    std::fs::rename(&tmp, &meta_path).map_err(|e| JournalError::io(&meta_path, e))?;
    sync_dir(qdir)
}

/// The quarantined bytes of `entry` (its `data_file`).
pub fn read_copy(journal_dir: &Path, entry: &QuarantineEntry) -> Result<Vec<u8>> {
    let path = quarantine_dir(journal_dir).join(&entry.data_file);
    std::fs::read(&path).map_err(|e| JournalError::io(&path, e))
}

/// Records in `entry`'s description that the journal holds its record again; the bytes stay.
/// Durable on return.
pub fn mark_recovered(
    journal_dir: &Path,
    entry: &QuarantineEntry,
    recovered: Recovered,
) -> Result<QuarantineEntry> {
    let updated = QuarantineEntry {
        format_version: QUARANTINE_FORMAT_VERSION,
        recovered: Some(recovered),
        ..entry.clone()
    };
    write_description(&quarantine_dir(journal_dir), &updated)?;
    Ok(updated)
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
        if parsed.format_version > QUARANTINE_FORMAT_VERSION {
            return Err(JournalError::UnsupportedVersion {
                location: path.clone(),
                found: parsed.format_version,
                supported: QUARANTINE_FORMAT_VERSION,
            });
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(version: u32) -> QuarantineEntry {
        QuarantineEntry {
            format_version: version,
            seq: 7,
            segment: "00000000000000000001.seg".into(),
            offset: 64,
            bytes: 3,
            kind: DamageKind::Damaged,
            reason: "crc".into(),
            data_file: "seq-7-off-64.frame".into(),
            later_segments: Vec::new(),
            recovered: None,
        }
    }

    fn write(dir: &Path, e: &QuarantineEntry) {
        let q = quarantine_dir(dir);
        std::fs::create_dir_all(&q).unwrap();
        std::fs::write(q.join(e.meta_file()), serde_json::to_vec(e).unwrap()).unwrap();
    }

    #[test]
    fn differing_bytes_counts_changed_and_missing_bytes_over_the_frame() {
        assert_eq!(differing_bytes(b"abcd", b"abcd"), 0);
        assert_eq!(differing_bytes(b"abXd", b"abcd"), 1);
        assert_eq!(differing_bytes(b"ab", b"abcd"), 2, "missing bytes differ");
        assert_eq!(differing_bytes(b"abcd\0\0\0", b"abcd"), 0, "padding after");
    }

    #[test]
    fn a_recovered_mark_is_durable_and_keeps_the_rest_of_the_entry() {
        let t = tempfile::tempdir().unwrap();
        let e = entry(1);
        write(t.path(), &e);
        let r = Recovered {
            source: "replication".into(),
            term: 3,
            frame_bytes: 90,
            differing_bytes: 1,
        };
        mark_recovered(t.path(), &e, r.clone()).unwrap();
        let listed = list(t.path()).unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].recovered, Some(r));
        assert_eq!(listed[0].format_version, QUARANTINE_FORMAT_VERSION);
        assert_eq!((listed[0].seq, listed[0].offset), (e.seq, e.offset));
        assert!(!listed[0].is_unrecovered_damage());
    }

    #[test]
    fn a_version_1_description_reads_as_unrecovered_and_a_newer_one_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let q = quarantine_dir(t.path());
        std::fs::create_dir_all(&q).unwrap();
        // Written by a binary that knew only format 1 (no `recovered` field).
        std::fs::write(
            q.join("seq-7-off-64.json"),
            br#"{"format_version":1,"seq":7,"segment":"s","offset":64,"bytes":3,
                "kind":"damaged","reason":"crc","data_file":"seq-7-off-64.frame"}"#,
        )
        .unwrap();
        assert!(list(t.path()).unwrap()[0].is_unrecovered_damage());
        write(t.path(), &entry(QUARANTINE_FORMAT_VERSION + 1));
        assert!(matches!(
            list(t.path()),
            Err(JournalError::UnsupportedVersion { found, .. }) if found == QUARANTINE_FORMAT_VERSION + 1
        ));
    }
}
