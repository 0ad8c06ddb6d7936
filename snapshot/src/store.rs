//! A directory of snapshot files: atomic writes, listing, reading the newest valid one, and
//! retention.
//!
//! Policy when the newest snapshot is damaged (checksum or truncation): it is skipped with a
//! warning and the next older valid one is used; [`crate::restore`] then requires the journal to
//! still hold the tail from that older snapshot (retention truncates the journal only behind the
//! *oldest* retained snapshot, so it normally does) and fails closed naming the gap otherwise.
//! A snapshot of a newer format or section schema, or with an unknown required section, is
//! never skipped: falling back to an older snapshot would silently downgrade.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{Result, SnapshotError};
use crate::format::{self, Position, Section, SnapshotHeader};
use crate::state::{SectionSet, SectionSpec};

const PREFIX: &str = "snap-";
const SUFFIX: &str = ".crsnap";
const TEMP_SUFFIX: &str = ".tmp";

/// One snapshot file found in the directory (not yet read).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotEntry {
    pub seq: u64,
    pub path: PathBuf,
}

/// A snapshot file that was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotInfo {
    pub path: PathBuf,
    pub position: Position,
    pub created_ms: i64,
    pub bytes: u64,
}

/// A snapshot read and verified from disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub path: PathBuf,
    pub header: SnapshotHeader,
    pub sections: Vec<Section>,
}

impl Snapshot {
    /// Applies the section rules of [`SectionSet::validate`] for a consumer with `specs`.
    pub fn into_section_set(self, specs: &[SectionSpec]) -> Result<SectionSet> {
        SectionSet::validate(&self.path, self.sections, specs)
    }
}

/// A damaged snapshot that a reader skipped.
#[derive(Debug)]
pub struct SkippedSnapshot {
    pub path: PathBuf,
    pub error: SnapshotError,
}

/// What [`SnapshotDir::newest_valid`] found.
#[derive(Debug)]
pub struct NewestValid {
    /// The newest snapshot that verified, with its sections checked against the specs.
    pub snapshot: Option<(SnapshotHeader, PathBuf, SectionSet)>,
    /// Newer snapshots that were damaged and skipped, newest first.
    pub skipped: Vec<SkippedSnapshot>,
}

/// The snapshot directory of a data dir. Reading never modifies it; only the `write`,
/// `retain` and `remove_temp_files` methods do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotDir {
    path: PathBuf,
}

impl SnapshotDir {
    /// A handle on `path`; does no IO.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// Creates the directory if needed and removes leftover temp files of interrupted writes:
    /// what a writer calls once at startup.
    pub fn prepare_for_writing(&self) -> Result<usize> {
        fs::create_dir_all(&self.path).map_err(|e| SnapshotError::io(&self.path, e))?;
        self.remove_temp_files()
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `snap-{seq:020}.crsnap`
    pub fn file_name(seq: u64) -> String {
        format!("{PREFIX}{seq:020}{SUFFIX}")
    }

    fn parse_name(name: &str) -> Option<u64> {
        let digits = name.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)?;
        if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        digits.parse().ok()
    }

    fn is_temp_name(name: &str) -> bool {
        name.starts_with(PREFIX) && name.ends_with(TEMP_SUFFIX)
    }

    /// Snapshot files, oldest first. Temp files and foreign files are ignored; a missing
    /// directory holds no snapshots.
    pub fn list(&self) -> Result<Vec<SnapshotEntry>> {
        let rd = match crescent_journal::fd_reserve::open_with_reserve(|| fs::read_dir(&self.path))
        {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(SnapshotError::io(&self.path, e)),
        };
        let mut out = Vec::new();
        for entry in rd {
            let entry = entry.map_err(|e| SnapshotError::io(&self.path, e))?;
            let name = entry.file_name();
            if let Some(seq) = name.to_str().and_then(Self::parse_name) {
                out.push(SnapshotEntry {
                    seq,
                    path: entry.path(),
                });
            }
        }
        out.sort_by_key(|e| e.seq);
        Ok(out)
    }

    /// Reads and checks one file's fixed header alone (format version, header CRC): what it
    /// claims to be, without reading the rest.
    pub fn read_header(path: &Path) -> Result<SnapshotHeader> {
        use std::io::Read;
        let mut head = Vec::with_capacity(format::HEADER_BYTES);
        File::open(path)
            .and_then(|f| f.take(format::HEADER_BYTES as u64).read_to_end(&mut head))
            .map_err(|e| SnapshotError::io(path, e))?;
        format::decode_header_only(path, &head)
    }

    /// Reads and verifies one snapshot file (checksums, truncation, format version).
    pub fn read(path: &Path) -> Result<Snapshot> {
        let bytes = fs::read(path).map_err(|e| SnapshotError::io(path, e))?;
        let (header, sections) = format::decode(path, &bytes)?;
        Ok(Snapshot {
            path: path.to_path_buf(),
            header,
            sections,
        })
    }

    /// The newest snapshot that verifies and passes the section rules for `specs`, skipping
    /// damaged newer ones (see the module docs for the policy). Fails closed on a newer format
    /// or schema, an unknown required section, a missing required section, and IO errors.
    pub fn newest_valid(&self, specs: &[SectionSpec]) -> Result<NewestValid> {
        self.newest_valid_upto(specs, u64::MAX)
    }

    /// [`SnapshotDir::newest_valid`] among the snapshots at seq <= `upto` (what
    /// `crescent-replay replay --to SEQ` starts from).
    pub fn newest_valid_upto(&self, specs: &[SectionSpec], upto: u64) -> Result<NewestValid> {
        let mut skipped = Vec::new();
        for entry in self.list()?.into_iter().rev().filter(|e| e.seq <= upto) {
            match Self::read(&entry.path) {
                Ok(snap) => {
                    if snap.header.position.seq != entry.seq {
                        let error = SnapshotError::Corrupt {
                            file: entry.path.clone(),
                            section: "header".into(),
                            reason: format!(
                                "header seq {} does not match the file name",
                                snap.header.position.seq
                            ),
                        };
                        tracing::warn!(%error, "skipping damaged snapshot");
                        skipped.push(SkippedSnapshot {
                            path: entry.path,
                            error,
                        });
                        continue;
                    }
                    let header = snap.header;
                    let path = snap.path.clone();
                    let set = snap.into_section_set(specs)?;
                    return Ok(NewestValid {
                        snapshot: Some((header, path, set)),
                        skipped,
                    });
                }
                Err(error) if error.is_damage() => {
                    tracing::warn!(%error, "skipping damaged snapshot, trying an older one");
                    skipped.push(SkippedSnapshot {
                        path: entry.path,
                        error,
                    });
                }
                Err(error) => return Err(error),
            }
        }
        Ok(NewestValid {
            snapshot: None,
            skipped,
        })
    }

    /// Writes a snapshot atomically: a temp file in the same directory, fsync, rename over the
    /// final name, fsync of the directory. A crash leaves either no file or a complete one (plus
    /// possibly a temp file, which readers ignore and the next writer removes).
    pub fn write(
        &self,
        position: &Position,
        created_ms: i64,
        sections: &[Section],
    ) -> Result<SnapshotInfo> {
        let bytes = format::encode(position, created_ms, sections)?;
        let final_path = self.path.join(Self::file_name(position.seq));
        let temp_path = self.path.join(format!(
            "{}.{}{TEMP_SUFFIX}",
            Self::file_name(position.seq),
            std::process::id()
        ));
        let result = (|| {
            // Through the descriptor reserve (crescent_journal::fd_reserve): a flood of
            // connections must not stop snapshots.
            let mut f =
                crescent_journal::fd_reserve::open_with_reserve(|| File::create(&temp_path))
                    .map_err(|e| SnapshotError::io(&temp_path, e))?;
            f.write_all(&bytes)
                .map_err(|e| SnapshotError::io(&temp_path, e))?;
            f.sync_all().map_err(|e| SnapshotError::io(&temp_path, e))?;
            drop(f);
            fs::rename(&temp_path, &final_path).map_err(|e| SnapshotError::io(&final_path, e))?;
            self.sync_dir()
        })();
        if let Err(e) = result {
            // Best effort: a leftover temp file is harmless (ignored, removed on next start).
            let _ = fs::remove_file(&temp_path);
            return Err(e);
        }
        Ok(SnapshotInfo {
            path: final_path,
            position: *position,
            created_ms,
            bytes: bytes.len() as u64,
        })
    }

    fn sync_dir(&self) -> Result<()> {
        crescent_journal::fd_reserve::open_with_reserve(|| File::open(&self.path))
            .and_then(|d| d.sync_all())
            .map_err(|e| SnapshotError::io(&self.path, e))
    }

    /// Keeps the `keep` newest snapshots (at least one), deletes the rest. Returns the kept
    /// entries, oldest first.
    pub fn retain(&self, keep: usize) -> Result<Vec<SnapshotEntry>> {
        let keep = keep.max(1);
        let mut entries = self.list()?;
        let cut = entries.len().saturating_sub(keep);
        let kept = entries.split_off(cut);
        for old in &entries {
            fs::remove_file(&old.path).map_err(|e| SnapshotError::io(&old.path, e))?;
            tracing::info!(file = %old.path.display(), "removed old snapshot");
        }
        if !entries.is_empty() {
            self.sync_dir()?;
        }
        Ok(kept)
    }

    /// Deletes temp files left by interrupted writes. Returns how many were removed.
    pub fn remove_temp_files(&self) -> Result<usize> {
        let rd = match crescent_journal::fd_reserve::open_with_reserve(|| fs::read_dir(&self.path))
        {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(SnapshotError::io(&self.path, e)),
        };
        let mut removed = 0;
        for entry in rd {
            let entry = entry.map_err(|e| SnapshotError::io(&self.path, e))?;
            if entry.file_name().to_str().is_some_and(Self::is_temp_name) {
                let p = entry.path();
                fs::remove_file(&p).map_err(|e| SnapshotError::io(&p, e))?;
                tracing::info!(file = %p.display(), "removed leftover snapshot temp file");
                removed += 1;
            }
        }
        Ok(removed)
    }
}
