//! The data-dir marker: the one file that says a directory is a Crescent data dir, which layout
//! version it has and which journal backend it was created with. crescentd writes it once;
//! crescentd and crescent-replay read it before touching anything else in the directory.
//!
//! ```text
//! DATA_DIR/CRESCENT_DATA_DIR   {"format_version": 1, "created_at": "...", "journal_backend": "file"}
//! DATA_DIR/journal/            the OpLog (file backend), or DATA_DIR/journal/sled
//! DATA_DIR/snapshots/          snapshot files
//! ```

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Version of the data-dir layout this binary writes and the newest it reads.
pub const DATA_DIR_FORMAT_VERSION: u32 = 1;
/// Name of the marker file at the root of a data dir.
pub const MARKER_FILE: &str = "CRESCENT_DATA_DIR";

/// The marker's content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Marker {
    pub format_version: u32,
    /// RFC 3339 time of creation (informational).
    pub created_at: String,
    /// The journal backend the dir was created with; switching it would hide the journal.
    pub journal_backend: String,
}

/// Why a marker could not be read.
#[derive(Debug, thiserror::Error)]
pub enum MarkerError {
    #[error("{} is not a crescent data dir (no {MARKER_FILE} marker)", path.display())]
    Missing { path: PathBuf },
    #[error("cannot read {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("data dir {} has an unreadable marker {MARKER_FILE}: {reason}", path.display())]
    Bad { path: PathBuf, reason: String },
    #[error("data dir {} has format version {found}; this binary supports up to {supported} (upgrade it; a data dir is never downgraded)", path.display())]
    Newer {
        path: PathBuf,
        found: u32,
        supported: u32,
    },
}

/// Reads and checks the marker of `root`, creating nothing.
pub fn read_marker(root: &Path) -> Result<Marker, MarkerError> {
    let path = root.join(MARKER_FILE);
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(MarkerError::Missing {
                path: root.to_path_buf(),
            })
        }
        Err(source) => return Err(MarkerError::Io { path, source }),
    };
    let bad = |reason: String| MarkerError::Bad {
        path: root.to_path_buf(),
        reason,
    };
    // The version is read on its own first, so a newer marker whose other fields changed is
    // reported as newer rather than as garbage.
    #[derive(Deserialize)]
    struct VersionOnly {
        format_version: u32,
    }
    let version: VersionOnly = serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
    if version.format_version > DATA_DIR_FORMAT_VERSION {
        return Err(MarkerError::Newer {
            path: root.to_path_buf(),
            found: version.format_version,
            supported: DATA_DIR_FORMAT_VERSION,
        });
    }
    if version.format_version == 0 {
        return Err(bad("format_version 0 is not a valid version".into()));
    }
    serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))
}

/// Writes the marker atomically (temp file, fsync, rename, fsync of the directory).
pub fn write_marker(root: &Path, marker: &Marker) -> std::io::Result<()> {
    let tmp = root.join(format!("{MARKER_FILE}.tmp"));
    let mut f = fs::File::create(&tmp)?;
    f.write_all(&serde_json::to_vec_pretty(marker).expect("marker serializes"))?;
    f.sync_all()?;
    fs::rename(&tmp, root.join(MARKER_FILE))?;
    fs::File::open(root)?.sync_all()
}

/// `DATA_DIR/journal`.
pub fn journal_dir(root: &Path) -> PathBuf {
    root.join("journal")
}

/// `DATA_DIR/snapshots`.
pub fn snapshot_dir(root: &Path) -> PathBuf {
    root.join("snapshots")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marker() -> Marker {
        Marker {
            format_version: DATA_DIR_FORMAT_VERSION,
            created_at: "2026-11-29T00:00:00Z".into(),
            journal_backend: "file".into(),
        }
    }

    #[test]
    fn round_trip() {
        let t = tempfile::tempdir().unwrap();
        write_marker(t.path(), &marker()).unwrap();
        assert_eq!(read_marker(t.path()).unwrap(), marker());
        assert!(!t.path().join(format!("{MARKER_FILE}.tmp")).exists());
    }

    #[test]
    fn missing_newer_zero_and_garbage_are_distinct_errors() {
        let t = tempfile::tempdir().unwrap();
        assert!(matches!(
            read_marker(t.path()),
            Err(MarkerError::Missing { .. })
        ));
        fs::write(
            t.path().join(MARKER_FILE),
            r#"{"format_version": 9, "other": 1}"#,
        )
        .unwrap();
        assert!(matches!(
            read_marker(t.path()),
            Err(MarkerError::Newer { found: 9, .. })
        ));
        fs::write(t.path().join(MARKER_FILE), r#"{"format_version": 0}"#).unwrap();
        assert!(matches!(
            read_marker(t.path()),
            Err(MarkerError::Bad { .. })
        ));
        fs::write(t.path().join(MARKER_FILE), b"\x00garbage").unwrap();
        assert!(matches!(
            read_marker(t.path()),
            Err(MarkerError::Bad { .. })
        ));
    }
}
