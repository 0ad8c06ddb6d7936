//! Reseeding a standby from the active's snapshot: the data dir it is built in, and its
//! installation at the next start (docs/ha.md, "Reseeding").
//!
//! A standby the active refuses with NEEDS_RESEED (its journal ends before the active's
//! begins: the active truncated it behind a snapshot; or it is empty) receives the active's
//! snapshot (reseed_fetch.rs) into a new data dir beside its own, `<data-dir>.reseed`:
//!
//! ```text
//! <data-dir>.reseed/CRESCENT_DATA_DIR                 copy of the data dir's marker
//! <data-dir>.reseed/NODE_NAME                         copy of the node's name
//! <data-dir>.reseed/snapshots/snap-<S>.crsnap         the active's snapshot at seq S
//! <data-dir>.reseed/journal/<S+1>.seg                 an empty segment continuing S's chain
//! <data-dir>.reseed/RESEED_COMPLETE                   written last: the dir is whole
//! ```
//!
//! Every file and directory is fsynced before `RESEED_COMPLETE` is, and that before the node
//! restarts. At the next start, before the journal is opened, [`apply_pending`] swaps the two
//! directories in one `renameat2(RENAME_EXCHANGE)` and removes the old one. A crash at any
//! point leaves either the old data dir or the complete new one: a reseed dir without
//! `RESEED_COMPLETE` (cut mid-transfer, or the old data dir after a swap) is removed at start.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use crescent_journal::file::segment::{create_segment, SegmentHeader, HEADER_LEN};
use crescent_journal::replication::SnapshotOfferInfo;
use serde::{Deserialize, Serialize};

use crate::config::{Config, JournalBackendKind};
use crate::error::ServerError;

/// Exit code of a standby that staged a reseed (restart it: it installs the snapshot).
pub const RESEED_EXIT_CODE: i32 = 77;
/// Written last into a complete reseed dir.
pub const COMPLETE_FILE: &str = "RESEED_COMPLETE";
const FORMAT_VERSION: u32 = 1;

/// The description in `RESEED_COMPLETE`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Staged {
    pub format_version: u32,
    /// The snapshot's position: the journal continues at `seq + 1`.
    pub seq: u64,
    pub term: u64,
    /// The chain digest at `seq` (hex).
    pub digest: String,
    pub snapshot_bytes: u64,
}

/// `<data-dir>.reseed`, beside the data dir (same filesystem, so it can be renamed over it).
pub fn stage_path(data_dir: &Path) -> PathBuf {
    let mut name = data_dir
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_else(|| "crescent-data".into());
    name.push(".reseed");
    parent_of(data_dir).join(name)
}

fn parent_of(data_dir: &Path) -> PathBuf {
    match data_dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

fn io_err(path: &Path) -> impl Fn(std::io::Error) -> ServerError + '_ {
    move |e| ServerError::Recovery(format!("reseed: {}: {e}", path.display()))
}

fn sync_dir(dir: &Path) -> Result<(), ServerError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(dir))
}

/// A reseed dir being written; removed on drop unless [`Stage::complete`] finished.
pub struct Stage {
    root: PathBuf,
    data_dir: PathBuf,
    done: bool,
}

impl Stage {
    /// Starts a fresh reseed dir for `data_dir` (removing any leftover), with the marker and
    /// the node name copied from the data dir. Refused when the data dir is a mount point
    /// (it could not be swapped by a rename).
    pub fn create(data_dir: &Path) -> Result<Stage, ServerError> {
        refuse_mount_point(data_dir)?;
        let root = stage_path(data_dir);
        remove_dir_if_present(&root)?;
        let stage = Stage {
            root: root.clone(),
            data_dir: data_dir.to_path_buf(),
            done: false,
        };
        for sub in ["", "snapshots", "journal"] {
            fs::create_dir_all(root.join(sub)).map_err(io_err(&root))?;
        }
        for file in [
            crescent_journal::datadir::MARKER_FILE,
            super::identity::NODE_NAME_FILE,
        ] {
            let to = root.join(file);
            fs::copy(data_dir.join(file), &to).map_err(io_err(&to))?;
            File::open(&to)
                .and_then(|f| f.sync_all())
                .map_err(io_err(&to))?;
        }
        Ok(stage)
    }

    /// Where the snapshot of `seq` goes.
    pub fn snapshot_path(&self, seq: u64) -> PathBuf {
        self.root
            .join("snapshots")
            .join(crescent_snapshot::SnapshotDir::file_name(seq))
    }

    /// Completes the dir once the snapshot file was written, synced and checked: the empty
    /// journal after it, then `RESEED_COMPLETE`, each made durable in order.
    pub fn complete(mut self, offer: &SnapshotOfferInfo) -> Result<Staged, ServerError> {
        let journal = self.root.join("journal");
        let header = SegmentHeader::new(offer.seq + 1, offer.digest, offer.snap_term);
        create_segment(&journal, &header, HEADER_LEN as u64)
            .map_err(|e| ServerError::Recovery(format!("reseed: {e}")))?;
        for dir in [journal, self.root.join("snapshots")] {
            sync_dir(&dir)?;
        }
        let staged = Staged {
            format_version: FORMAT_VERSION,
            seq: offer.seq,
            term: offer.snap_term,
            digest: offer.digest.iter().map(|b| format!("{b:02x}")).collect(),
            snapshot_bytes: offer.bytes,
        };
        let path = self.root.join(COMPLETE_FILE);
        let body = serde_json::to_vec_pretty(&staged).expect("serializes");
        File::create(&path)
            .and_then(|mut f| f.write_all(&body).and_then(|()| f.sync_all()))
            .map_err(io_err(&path))?;
        sync_dir(&self.root)?;
        sync_dir(&parent_of(&self.data_dir))?;
        self.done = true;
        crescent_crash::point(crescent_crash::points::RESEED_AFTER_STAGE);
        Ok(staged)
    }
}

impl Drop for Stage {
    fn drop(&mut self) {
        if !self.done {
            if let Err(e) = fs::remove_dir_all(&self.root) {
                tracing::warn!(dir = %self.root.display(), error = %e,
                    "cannot remove an unfinished reseed dir (removed at the next start)");
            }
        }
    }
}

fn remove_dir_if_present(dir: &Path) -> Result<bool, ServerError> {
    match fs::remove_dir_all(dir) {
        Ok(()) => {
            sync_dir(&parent_of(dir))?;
            Ok(true)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io_err(dir)(e)),
    }
}

/// A data dir on its own filesystem cannot be swapped by a rename.
fn refuse_mount_point(data_dir: &Path) -> Result<(), ServerError> {
    use std::os::unix::fs::MetadataExt;
    let dev = |p: &Path| fs::metadata(p).map(|m| m.dev()).map_err(io_err(p));
    let parent = parent_of(data_dir);
    if dev(data_dir)? != dev(&parent)? {
        return Err(ServerError::Recovery(format!(
            "reseed: {} is a mount point; a reseed swaps it with {} by a rename, so the data \
             dir must be a directory inside the mounted filesystem",
            data_dir.display(),
            stage_path(data_dir).display()
        )));
    }
    Ok(())
}

/// Installs a complete reseed dir, if there is one (before the journal is opened), and removes
/// any leftover of an unfinished one. Returns what was installed.
pub fn apply_pending(config: &Config) -> Result<Option<Staged>, ServerError> {
    let data_dir = &config.data_dir;
    let stage = stage_path(data_dir);
    let complete = stage.join(COMPLETE_FILE);
    let installed = match fs::read(&complete) {
        Ok(body) => Some(install(config, &stage, &body)?),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if remove_dir_if_present(&stage)? {
                tracing::warn!(dir = %stage.display(), "removed an unfinished reseed dir");
            }
            None
        }
        Err(e) => return Err(io_err(&complete)(e)),
    };
    // Left in the data dir by an install that stopped before removing it.
    let leftover = data_dir.join(COMPLETE_FILE);
    if leftover.exists() {
        fs::remove_file(&leftover).map_err(io_err(&leftover))?;
        sync_dir(data_dir)?;
    }
    Ok(installed)
}

fn install(config: &Config, stage: &Path, body: &[u8]) -> Result<Staged, ServerError> {
    let span = tracing::info_span!("reseed_install", dir = %stage.display());
    let _g = span.enter();
    let bad = |why: String| ServerError::Recovery(format!("{}: {why}", stage.display()));
    let staged: Staged = serde_json::from_slice(body).map_err(|e| bad(e.to_string()))?;
    if staged.format_version != FORMAT_VERSION {
        return Err(bad(format!(
            "format version {} (this binary reads {FORMAT_VERSION})",
            staged.format_version
        )));
    }
    if config.journal.backend != JournalBackendKind::File {
        return Err(bad("a reseed needs the file journal backend".into()));
    }
    let data_dir = &config.data_dir;
    if data_dir.exists() {
        exchange(stage, data_dir)?;
    } else {
        fs::rename(stage, data_dir).map_err(io_err(data_dir))?;
    }
    sync_dir(&parent_of(data_dir))?;
    crescent_crash::point(crescent_crash::points::RESEED_AFTER_EXCHANGE);
    // `stage` now holds the old data dir (no RESEED_COMPLETE), if there was one.
    remove_dir_if_present(stage)?;
    tracing::warn!(
        seq = staged.seq,
        term = staged.term,
        snapshot_bytes = staged.snapshot_bytes,
        "reseed installed: the data dir now holds the active's snapshot and continues after it"
    );
    Ok(staged)
}

/// Swaps two directories atomically (`renameat2(RENAME_EXCHANGE)`).
fn exchange(a: &Path, b: &Path) -> Result<(), ServerError> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| {
        CString::new(p.as_os_str().as_bytes())
            .map_err(|_| ServerError::Recovery(format!("{} holds a NUL byte", p.display())))
    };
    let (ca, cb) = (c(a)?, c(b)?);
    // SAFETY: both paths are valid NUL-terminated strings that outlive the call; renameat2
    // reads nothing else.
    #[allow(unsafe_code)]
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            ca.as_ptr(),
            libc::AT_FDCWD,
            cb.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        return Err(ServerError::Recovery(format!(
            "reseed: cannot swap {} with {} (renameat2 RENAME_EXCHANGE: {e})",
            a.display(),
            b.display()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offer(seq: u64) -> SnapshotOfferInfo {
        SnapshotOfferInfo {
            term: 4,
            seq,
            snap_term: 3,
            digest: [9; 32],
            bytes: 5,
        }
    }

    fn config(data_dir: &Path) -> Config {
        Config {
            data_dir: data_dir.to_path_buf(),
            ..Config::default()
        }
    }

    fn data_dir(root: &Path) -> PathBuf {
        let d = root.join("node");
        crate::datadir::DataDir::open_or_init(&d, "file").unwrap();
        super::super::identity::node_name(&d).unwrap();
        fs::write(d.join("journal").join("old"), b"old").unwrap();
        d
    }

    #[test]
    fn a_complete_stage_is_swapped_in_and_the_old_dir_removed() {
        let t = tempfile::tempdir().unwrap();
        let d = data_dir(t.path());
        let name = fs::read(d.join("NODE_NAME")).unwrap();
        let stage = Stage::create(&d).unwrap();
        fs::write(stage.snapshot_path(7), b"snap!").unwrap();
        stage.complete(&offer(7)).unwrap();
        let got = apply_pending(&config(&d)).unwrap().unwrap();
        assert_eq!(got.seq, 7);
        assert!(!stage_path(&d).exists());
        assert!(!d.join("journal").join("old").exists());
        assert!(!d.join(COMPLETE_FILE).exists());
        assert_eq!(fs::read(d.join("NODE_NAME")).unwrap(), name);
        assert!(d.join("journal").join("00000000000000000008.seg").exists());
        assert!(d
            .join("snapshots")
            .join("snap-00000000000000000007.crsnap")
            .exists());
        assert_eq!(apply_pending(&config(&d)).unwrap(), None);
    }

    #[test]
    fn an_unfinished_stage_is_dropped_and_the_data_dir_kept() {
        let t = tempfile::tempdir().unwrap();
        let d = data_dir(t.path());
        let stage = Stage::create(&d).unwrap();
        fs::write(stage.snapshot_path(7), b"sn").unwrap();
        std::mem::forget(stage); // as a kill -9 mid-transfer leaves it
        assert!(stage_path(&d).exists());
        assert_eq!(apply_pending(&config(&d)).unwrap(), None);
        assert!(!stage_path(&d).exists());
        assert!(d.join("journal").join("old").exists());
    }

    #[test]
    fn a_crash_after_the_swap_finishes_at_the_next_start() {
        let t = tempfile::tempdir().unwrap();
        let d = data_dir(t.path());
        let stage = Stage::create(&d).unwrap();
        stage.complete(&offer(7)).unwrap();
        // The swap done, nothing after it: the old dir sits at the stage path.
        exchange(&stage_path(&d), &d).unwrap();
        assert_eq!(apply_pending(&config(&d)).unwrap(), None);
        assert!(!stage_path(&d).exists());
        assert!(!d.join(COMPLETE_FILE).exists());
        assert!(d.join("journal").join("00000000000000000008.seg").exists());
    }
}
