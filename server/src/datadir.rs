//! The data directory: a versioned marker file, then `journal/` and `snapshots/`.
//!
//! The marker is written once when the directory is first initialised. A directory written by a
//! newer format, or one whose marker is unreadable, is refused before anything in it is opened,
//! so nothing stored is ever rewritten by a binary that does not understand it.

use std::fs;
use std::path::{Path, PathBuf};

use crescent_journal::datadir::{self as marker_file, MarkerError};
pub use crescent_journal::datadir::{Marker, DATA_DIR_FORMAT_VERSION, MARKER_FILE};

#[derive(Debug, thiserror::Error)]
pub enum DataDirError {
    #[error("data dir {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Marker(#[from] MarkerError),
    #[error("data dir {} holds a {found} journal but crescentd is configured for {configured}; set journal.backend = \"{found}\" (a journal is never converted in place)", path.display())]
    BackendMismatch {
        path: PathBuf,
        found: String,
        configured: String,
    },
    #[error("{} is not empty and is not a crescent data dir (no {MARKER_FILE} marker); refusing to use it", path.display())]
    Foreign { path: PathBuf },
}

/// An opened data directory.
#[derive(Debug, Clone)]
pub struct DataDir {
    root: PathBuf,
    pub marker: Marker,
}

impl DataDir {
    /// Opens `root`, initialising it when it does not exist or is empty. `journal_backend` must
    /// match the backend the dir was created with.
    pub fn open_or_init(root: &Path, journal_backend: &str) -> Result<DataDir, DataDirError> {
        let io = |source| DataDirError::Io {
            path: root.to_path_buf(),
            source,
        };
        fs::create_dir_all(root).map_err(io)?;
        let marker = match marker_file::read_marker(root) {
            Ok(marker) => {
                if marker.journal_backend != journal_backend {
                    return Err(DataDirError::BackendMismatch {
                        path: root.to_path_buf(),
                        found: marker.journal_backend,
                        configured: journal_backend.to_string(),
                    });
                }
                marker
            }
            Err(MarkerError::Missing { .. }) => {
                if fs::read_dir(root).map_err(io)?.next().is_some() {
                    return Err(DataDirError::Foreign {
                        path: root.to_path_buf(),
                    });
                }
                let marker = Marker {
                    format_version: DATA_DIR_FORMAT_VERSION,
                    created_at: chrono::Utc::now().to_rfc3339(),
                    journal_backend: journal_backend.to_string(),
                };
                marker_file::write_marker(root, &marker).map_err(io)?;
                marker
            }
            Err(e) => return Err(e.into()),
        };
        let dir = DataDir {
            root: root.to_path_buf(),
            marker,
        };
        fs::create_dir_all(dir.journal_dir()).map_err(io)?;
        fs::create_dir_all(dir.snapshot_dir()).map_err(io)?;
        Ok(dir)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn journal_dir(&self) -> PathBuf {
        marker_file::journal_dir(&self.root)
    }

    pub fn snapshot_dir(&self) -> PathBuf {
        marker_file::snapshot_dir(&self.root)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_then_reopen() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("d");
        let a = DataDir::open_or_init(&root, "file").unwrap();
        assert_eq!(a.marker.format_version, DATA_DIR_FORMAT_VERSION);
        assert!(a.journal_dir().is_dir() && a.snapshot_dir().is_dir());
        let b = DataDir::open_or_init(&root, "file").unwrap();
        assert_eq!(a.marker, b.marker);
    }

    #[test]
    fn switching_backend_is_refused() {
        let t = tempfile::tempdir().unwrap();
        DataDir::open_or_init(t.path(), "file").unwrap();
        let err = DataDir::open_or_init(t.path(), "sled").unwrap_err();
        assert!(matches!(err, DataDirError::BackendMismatch { .. }), "{err}");
    }

    #[test]
    fn newer_format_is_refused_and_left_untouched() {
        let t = tempfile::tempdir().unwrap();
        let marker = r#"{"format_version": 9, "created_at": "x", "journal_backend": "file"}"#;
        fs::write(t.path().join(MARKER_FILE), marker).unwrap();
        let err = DataDir::open_or_init(t.path(), "file").unwrap_err();
        assert!(
            matches!(
                err,
                DataDirError::Marker(MarkerError::Newer { found: 9, .. })
            ),
            "{err}"
        );
        assert_eq!(
            fs::read_to_string(t.path().join(MARKER_FILE)).unwrap(),
            marker
        );
        assert!(!t.path().join("journal").exists());
    }

    #[test]
    fn garbage_marker_and_foreign_dirs_are_refused() {
        let t = tempfile::tempdir().unwrap();
        fs::write(t.path().join(MARKER_FILE), b"\x00\x01garbage").unwrap();
        assert!(matches!(
            DataDir::open_or_init(t.path(), "file").unwrap_err(),
            DataDirError::Marker(MarkerError::Bad { .. })
        ));
        let t = tempfile::tempdir().unwrap();
        fs::write(t.path().join("precious.txt"), b"keep me").unwrap();
        assert!(matches!(
            DataDir::open_or_init(t.path(), "file").unwrap_err(),
            DataDirError::Foreign { .. }
        ));
        assert_eq!(fs::read(t.path().join("precious.txt")).unwrap(), b"keep me");
    }
}
