//! Backups of a data dir, and restoring one (docs/operations.md, "Backup and restore").
//!
//! A backup is a data dir of its own, cut at one snapshot's seq S:
//!
//! ```text
//! BACKUP/CRESCENT_DATA_DIR             the source's marker
//! BACKUP/snapshots/snap-<S>.crsnap     the snapshot at S
//! BACKUP/journal/<first>.seg           the journal segment holding record S, cut after S
//! BACKUP/CRESCENT_BACKUP               this manifest, written last (versioned JSON)
//! ```
//!
//! It is taken from a running crescentd: records up to S are durable (the snapshotter only
//! reads durable records) and never rewritten, so copying the segment while crescentd appends
//! to it and cutting the copy after S gives a consistent journal. Record S must carry the
//! snapshot's chain digest, and the copy must pass `crescent-replay verify` before the
//! manifest is written; a restore verifies it again. Only what the journal and the snapshot
//! hold is backed up: object bytes live on the storage owners, cold-tier devices are
//! directories of their own.
//!
//! This is the one module of the crate that writes, and only into a new directory: the
//! backup, or the empty data dir a restore fills.

use std::fs::{self, File};
use std::path::{Path, PathBuf};

use crescent_journal::datadir::{self, MARKER_FILE};
use crescent_journal::file::{JournalScan, ScanEntry, ScanOptions};
use crescent_snapshot::{Position, SnapshotDir};
use serde::{Deserialize, Serialize};

use crate::cmd::verify::{verify, VerifyArgs};

/// Name of the manifest at the root of a backup.
pub const MANIFEST_FILE: &str = "CRESCENT_BACKUP";
/// Version of the backup layout this binary writes and the newest it reads.
pub const BACKUP_FORMAT_VERSION: u32 = 1;

/// What a backup holds (the manifest's content).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub format_version: u32,
    /// RFC 3339 time the backup was taken (informational).
    pub created_at: String,
    /// The snapshot's position: the last record the backup holds.
    pub seq: u64,
    pub term: u64,
    /// The chain digest of record `seq` (hex).
    pub digest: String,
    pub journal_backend: String,
}

/// Why a backup or a restore was refused. Every variant has a stable code ([`Self::code`]).
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error("{} is not empty; a backup or restore only writes into a new or empty directory", path.display())]
    TargetNotEmpty { path: PathBuf },
    #[error("the data dir uses the {backend} journal backend; backups support the file backend")]
    Unsupported { backend: String },
    /// The source changed under the copy (a snapshot or segment removed by retention):
    /// taking a new snapshot and starting again succeeds.
    #[error("the source changed under the copy: {detail}; take the backup again")]
    SourceChanged { detail: String },
    #[error("the source data dir {} cannot be backed up: {detail}", path.display())]
    Source { path: PathBuf, detail: String },
    #[error("{} holds no {MANIFEST_FILE} manifest: not a backup, or an interrupted one", path.display())]
    Incomplete { path: PathBuf },
    #[error("backup manifest {} is unreadable: {detail}", path.display())]
    Unreadable { path: PathBuf, detail: String },
    #[error("backup {} has format version {found}; this binary reads up to {BACKUP_FORMAT_VERSION}", path.display())]
    Version { path: PathBuf, found: u32 },
    #[error("backup {} does not verify: {detail}", path.display())]
    Invalid { path: PathBuf, detail: String },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl BackupError {
    /// The stable code (docs/operations.md, "Backup and restore").
    pub fn code(&self) -> &'static str {
        match self {
            BackupError::TargetNotEmpty { .. } => "TARGET_NOT_EMPTY",
            BackupError::Unsupported { .. } => "BACKUP_UNSUPPORTED",
            BackupError::SourceChanged { .. } => "BACKUP_SOURCE_CHANGED",
            BackupError::Source { .. } => "BACKUP_SOURCE_INVALID",
            BackupError::Incomplete { .. } => "BACKUP_INCOMPLETE",
            BackupError::Unreadable { .. } => "BACKUP_UNREADABLE",
            BackupError::Version { .. } => "BACKUP_VERSION",
            BackupError::Invalid { .. } => "BACKUP_INVALID",
            BackupError::Io { .. } => "IO_ERROR",
        }
    }
}

type Result<T> = std::result::Result<T, BackupError>;

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> BackupError + '_ {
    move |source| BackupError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Copies `from` to `to`; a source that vanished is [`BackupError::SourceChanged`].
fn copy_source(from: &Path, to: &Path) -> Result<()> {
    match fs::copy(from, to) {
        Ok(_) => sync_file(to),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(BackupError::SourceChanged {
            detail: format!("{} was removed", from.display()),
        }),
        Err(e) => Err(io(from)(e)),
    }
}

fn sync_file(path: &Path) -> Result<()> {
    File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(io(path))
}

/// Creates `dir` if needed; refuses one that holds anything.
fn ensure_empty_dir(dir: &Path) -> Result<()> {
    fs::create_dir_all(dir).map_err(io(dir))?;
    if fs::read_dir(dir).map_err(io(dir))?.next().is_some() {
        return Err(BackupError::TargetNotEmpty {
            path: dir.to_path_buf(),
        });
    }
    Ok(())
}

/// Backs up `data_dir` at its snapshot `seq` (just written by `POST /v1/admin/snapshot`)
/// into `to`, a new or empty directory; see the module docs. On failure `to` is emptied
/// again (best effort).
pub fn create(data_dir: &Path, seq: u64, to: &Path) -> Result<Manifest> {
    ensure_empty_dir(to)?;
    let result = copy_cut_verify(data_dir, seq, to);
    if result.is_err() {
        if let Ok(rd) = fs::read_dir(to) {
            for entry in rd.flatten() {
                let p = entry.path();
                let _ = if p.is_dir() {
                    fs::remove_dir_all(&p)
                } else {
                    fs::remove_file(&p)
                };
            }
        }
    }
    result
}

fn copy_cut_verify(data_dir: &Path, seq: u64, to: &Path) -> Result<Manifest> {
    let source = |detail: String| BackupError::Source {
        path: data_dir.to_path_buf(),
        detail,
    };
    let marker = datadir::read_marker(data_dir).map_err(|e| source(e.to_string()))?;
    if marker.journal_backend != "file" {
        return Err(BackupError::Unsupported {
            backend: marker.journal_backend,
        });
    }
    let snap_name = SnapshotDir::file_name(seq);
    let snap_from = datadir::snapshot_dir(data_dir).join(&snap_name);
    let position = match SnapshotDir::read(&snap_from) {
        Ok(s) => s.header.position,
        Err(_) if !snap_from.exists() => {
            return Err(BackupError::SourceChanged {
                detail: format!(
                    "{} is missing: retention removed it, or {} is not the data dir of the \
                     crescentd that wrote the snapshot",
                    snap_from.display(),
                    data_dir.display()
                ),
            })
        }
        Err(e) => return Err(source(e.to_string())),
    };
    if position.seq != seq {
        return Err(source(format!(
            "{} holds seq {}",
            snap_from.display(),
            position.seq
        )));
    }
    let snap_dir = datadir::snapshot_dir(to);
    let journal_to = datadir::journal_dir(to);
    for d in [&snap_dir, &journal_to] {
        fs::create_dir_all(d).map_err(io(d))?;
    }
    copy_source(&snap_from, &snap_dir.join(&snap_name))?;
    copy_journal_through(&datadir::journal_dir(data_dir), &journal_to, &position).map_err(|e| {
        match e {
            BackupError::Invalid { detail, .. } => source(detail),
            other => other,
        }
    })?;
    fs::copy(data_dir.join(MARKER_FILE), to.join(MARKER_FILE)).map_err(io(data_dir))?;
    sync_file(&to.join(MARKER_FILE))?;
    check(to, seq)?;
    let manifest = Manifest {
        format_version: BACKUP_FORMAT_VERSION,
        created_at: chrono::Utc::now().to_rfc3339(),
        seq,
        term: position.term,
        digest: hex::encode(position.digest),
        journal_backend: marker.journal_backend,
    };
    let path = to.join(MANIFEST_FILE);
    let body = serde_json::to_vec_pretty(&manifest).expect("manifest serializes");
    fs::write(&path, body).map_err(io(&path))?;
    sync_file(&path)?;
    for d in [&snap_dir, &journal_to, &to.to_path_buf()] {
        sync_file(d)?;
    }
    Ok(manifest)
}

/// Copies the segment of `from` holding record `at.seq` into `to` and cuts the copy after it
/// (nothing to copy at seq 0). Record `at.seq` must carry `at.digest`.
fn copy_journal_through(from: &Path, to: &Path, at: &Position) -> Result<()> {
    if at.seq == 0 {
        return Ok(());
    }
    let invalid = |detail: String| BackupError::Invalid {
        path: from.to_path_buf(),
        detail,
    };
    let live = JournalScan::open(from).map_err(|e| invalid(e.to_string()))?;
    let Some(seg) = live
        .segment_files()
        .iter()
        .rev()
        .find(|s| s.first_seq <= at.seq)
    else {
        return Err(BackupError::SourceChanged {
            detail: format!("no journal segment holds record {} any more", at.seq),
        });
    };
    let name = seg.path.file_name().expect("segment files have names");
    let copy = to.join(name);
    copy_source(&seg.path, &copy)?;
    let scan = JournalScan::open(to).map_err(|e| invalid(e.to_string()))?;
    let mut cut = None;
    for entry in scan.entries(ScanOptions {
        verify_chain: false,
    }) {
        match entry.map_err(|e| invalid(e.to_string()))? {
            ScanEntry::Record {
                offset,
                frame_len,
                record,
                ..
            } if record.seq == at.seq => {
                if record.digest != at.digest {
                    return Err(invalid(format!(
                        "journal record {} does not carry the snapshot's chain digest",
                        at.seq
                    )));
                }
                cut = Some(offset + frame_len as u64);
                break;
            }
            ScanEntry::Record { .. } => {}
            ScanEntry::Fault(f) => {
                return Err(invalid(format!("damaged before seq {}: {f}", at.seq)))
            }
        }
    }
    let Some(cut) = cut else {
        return Err(invalid(format!(
            "record {} is not in {}",
            at.seq,
            seg.path.display()
        )));
    };
    // Everything after record S becomes zeros again, as in a preallocated segment: shrinking
    // the file and growing it back leaves a hole that reads as zeros.
    let f = fs::OpenOptions::new()
        .write(true)
        .open(&copy)
        .map_err(io(&copy))?;
    let len = f.metadata().map_err(io(&copy))?.len();
    f.set_len(cut)
        .and_then(|()| f.set_len(len))
        .and_then(|()| f.sync_all())
        .map_err(io(&copy))
}

/// `crescent-replay verify` over `dir`, which must end at record `seq` with the snapshot at
/// `seq` checked against it.
fn check(dir: &Path, seq: u64) -> Result<()> {
    let invalid = |detail: String| BackupError::Invalid {
        path: dir.to_path_buf(),
        detail,
    };
    let report = verify(&VerifyArgs {
        data_dir: dir.to_path_buf(),
        json: false,
        allow_torn_tail: false,
    })
    .map_err(|e| invalid(e.to_string()))?;
    if let Some(f) = report.faults.first() {
        return Err(invalid(format!(
            "{} fault(s), the first: {} at seq {:?}: {}",
            report.faults.len(),
            f.kind,
            f.seq,
            f.detail
        )));
    }
    let last = report.journal.seq_range.map_or(0, |(_, last)| last);
    if last != seq {
        return Err(invalid(format!(
            "the journal ends at seq {last}, the backup is at seq {seq}"
        )));
    }
    let snap_ok = report
        .snapshots
        .iter()
        .any(|s| s.seq == seq && matches!(s.status, "replay_base" | "matches_replay"));
    if !snap_ok {
        return Err(invalid(format!(
            "the snapshot at seq {seq} is missing or not checked against the journal"
        )));
    }
    Ok(())
}

/// Reads the manifest of `backup` and verifies the backup against it.
pub fn verify_backup(backup: &Path) -> Result<Manifest> {
    let path = backup.join(MANIFEST_FILE);
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(BackupError::Incomplete {
                path: backup.to_path_buf(),
            })
        }
        Err(e) => return Err(io(&path)(e)),
    };
    // The version first, so a newer layout is named as such even if its fields changed.
    #[derive(Deserialize)]
    struct Versioned {
        format_version: u32,
    }
    let unreadable = |e: serde_json::Error| BackupError::Unreadable {
        path: path.clone(),
        detail: e.to_string(),
    };
    let v: Versioned = serde_json::from_slice(&bytes).map_err(unreadable)?;
    if v.format_version > BACKUP_FORMAT_VERSION {
        return Err(BackupError::Version {
            path: backup.to_path_buf(),
            found: v.format_version,
        });
    }
    let manifest: Manifest = serde_json::from_slice(&bytes).map_err(unreadable)?;
    check(backup, manifest.seq)?;
    Ok(manifest)
}

/// Restores `backup` into `data_dir` (new or empty): verifies the backup, copies the journal
/// and the snapshot, and the marker last, so an interrupted restore leaves a directory that
/// crescentd refuses (no marker) rather than a partial data dir it would open.
pub fn restore(backup: &Path, data_dir: &Path) -> Result<Manifest> {
    let manifest = verify_backup(backup)?;
    ensure_empty_dir(data_dir)?;
    for (from, to) in [
        (datadir::journal_dir(backup), datadir::journal_dir(data_dir)),
        (
            datadir::snapshot_dir(backup),
            datadir::snapshot_dir(data_dir),
        ),
    ] {
        fs::create_dir_all(&to).map_err(io(&to))?;
        for entry in fs::read_dir(&from).map_err(io(&from))? {
            let entry = entry.map_err(io(&from))?;
            if entry.file_type().map_err(io(&from))?.is_file() {
                let dest = to.join(entry.file_name());
                fs::copy(entry.path(), &dest).map_err(io(&dest))?;
                sync_file(&dest)?;
            }
        }
        sync_file(&to)?;
    }
    let marker = data_dir.join(MARKER_FILE);
    fs::copy(backup.join(MARKER_FILE), &marker).map_err(io(&marker))?;
    sync_file(&marker)?;
    sync_file(data_dir)?;
    Ok(manifest)
}
