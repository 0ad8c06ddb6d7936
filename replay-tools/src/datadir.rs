//! Opening a crescentd data dir for offline reading: the marker is checked before anything
//! else is looked at, and nothing is created, locked or written.
//!
//! Layout (see `crescent_journal::datadir`): `DIR/CRESCENT_DATA_DIR` (JSON marker), `DIR/journal/`
//! (file backend segments, or a sled db at `DIR/journal/sled`), `DIR/snapshots/`.

use std::path::{Path, PathBuf};

use crescent_journal::datadir::{read_marker, MarkerError};
pub use crescent_journal::datadir::{Marker, DATA_DIR_FORMAT_VERSION, MARKER_FILE};

use crate::error::{Result, ToolError};

/// A data dir opened read-only.
#[derive(Debug, Clone)]
pub struct DataDirView {
    root: PathBuf,
    pub marker: Marker,
}

impl DataDirView {
    /// Checks that `root` is a data dir this binary can read offline: a marker of a known
    /// format version, and a journal backend with a safe read-only path (the file backend).
    pub fn open(root: &Path) -> Result<Self> {
        let meta = std::fs::metadata(root).map_err(|e| ToolError::unreadable(root, e))?;
        if !meta.is_dir() {
            return Err(ToolError::unreadable(root, "not a directory"));
        }
        let marker = read_marker(root).map_err(|e| match e {
            MarkerError::Missing { .. } => ToolError::unreadable(
                root,
                format!("not a crescent data dir (no {MARKER_FILE} marker)"),
            ),
            MarkerError::Io { path, source } => ToolError::unreadable(&path, source),
            MarkerError::Bad { path, reason } => ToolError::BadMarker { path, reason },
            MarkerError::Newer {
                path,
                found,
                supported,
            } => ToolError::NewerFormat {
                path,
                found,
                supported,
            },
        })?;
        match marker.journal_backend.as_str() {
            "file" => {}
            "sled" => {
                return Err(ToolError::UnsupportedBackend {
                    path: root.to_path_buf(),
                    backend: marker.journal_backend,
                    why: "sled 0.34 has no read-only open: opening the database would take its \
                          lock and may rewrite it during recovery, and crescent-replay never \
                          writes to a data dir",
                })
            }
            other => {
                return Err(ToolError::BadMarker {
                    path: root.to_path_buf(),
                    reason: format!("unknown journal backend {other:?}"),
                })
            }
        }
        let view = Self {
            root: root.to_path_buf(),
            marker,
        };
        let journal = view.journal_dir();
        if !journal.is_dir() {
            return Err(ToolError::unreadable(
                &journal,
                "the data dir has no journal directory",
            ));
        }
        Ok(view)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `DIR/journal`: the file backend's segment directory.
    pub fn journal_dir(&self) -> PathBuf {
        self.root.join("journal")
    }

    /// `DIR/snapshots` (may be missing: no snapshots).
    pub fn snapshot_dir(&self) -> PathBuf {
        self.root.join("snapshots")
    }
}
