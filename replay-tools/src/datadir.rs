//! Opening a crescentd data dir for offline reading: the marker is checked before anything
//! else is looked at, and nothing is created, locked or written.
//!
//! Layout (see `server/src/datadir.rs`): `DIR/CRESCENT_DATA_DIR` (JSON marker), `DIR/journal/`
//! (file backend segments, or a sled db at `DIR/journal/sled`), `DIR/snapshots/`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Result, ToolError};

/// Newest data-dir layout version this binary reads (the server's `DATA_DIR_FORMAT_VERSION`).
pub const DATA_DIR_FORMAT_VERSION: u32 = 1;
/// Name of the marker file at the root of a data dir.
pub const MARKER_FILE: &str = "CRESCENT_DATA_DIR";

/// The marker's content, as crescentd writes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Marker {
    pub format_version: u32,
    pub created_at: String,
    pub journal_backend: String,
}

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
        let marker_path = root.join(MARKER_FILE);
        let bytes = match std::fs::read(&marker_path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(ToolError::unreadable(
                    root,
                    format!("not a crescent data dir (no {MARKER_FILE} marker)"),
                ))
            }
            Err(e) => return Err(ToolError::unreadable(&marker_path, e)),
        };
        // The version is read on its own first, so a newer marker whose other fields changed
        // is reported as "newer" rather than as garbage.
        #[derive(Deserialize)]
        struct VersionOnly {
            format_version: u32,
        }
        let version: VersionOnly =
            serde_json::from_slice(&bytes).map_err(|e| ToolError::BadMarker {
                path: root.to_path_buf(),
                reason: e.to_string(),
            })?;
        if version.format_version > DATA_DIR_FORMAT_VERSION {
            return Err(ToolError::NewerFormat {
                path: root.to_path_buf(),
                found: version.format_version,
                supported: DATA_DIR_FORMAT_VERSION,
            });
        }
        if version.format_version == 0 {
            return Err(ToolError::BadMarker {
                path: root.to_path_buf(),
                reason: "format_version 0 is not a valid version".into(),
            });
        }
        let marker: Marker = serde_json::from_slice(&bytes).map_err(|e| ToolError::BadMarker {
            path: root.to_path_buf(),
            reason: e.to_string(),
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
