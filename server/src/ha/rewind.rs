//! Rejoining after a deposition: dropping the journal tail the new active never received.
//!
//! A node that was active may hold records that were durable locally but never reached its
//! standby, so were never acknowledged to a client (sync commit waits for the standby, and a
//! standby marked out of sync may not take over). When it follows the new active, the
//! handshake refuses it as DIVERGED and names the newest record both share. The standby then
//! records a rewind request in its data dir and exits ([`REWIND_EXIT_CODE`]); on the next start,
//! before the journal is opened, [`apply_pending`] checks that its record at that seq has the
//! given digest (proving both histories are equal up to it), drops every later record and the
//! snapshots past it, and removes the request. Nothing is dropped if the digest differs.

use std::path::Path;

use crescent_journal::file::rewind::{rewind_after, RewindReport};
use crescent_journal::replication::RewindPoint;
use crescent_snapshot::SnapshotDir;
use serde::{Deserialize, Serialize};

use crate::config::{Config, JournalBackendKind};
use crate::datadir::DataDir;
use crate::error::ServerError;

/// Exit code of a standby that recorded a rewind (restart it: it rewinds and follows).
pub const REWIND_EXIT_CODE: i32 = 76;
/// The request file in the data dir.
pub const REWIND_FILE: &str = "REWIND";
const FORMAT_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct RewindRequest {
    format_version: u32,
    /// Keep records up to and including this seq.
    keep_through: u64,
    /// Its digest on the active (hex).
    digest: String,
    reason: String,
}

/// Records a rewind request (atomically) for the next start.
pub fn request(data_dir: &Path, point: &RewindPoint, reason: &str) -> Result<(), ServerError> {
    let req = RewindRequest {
        format_version: FORMAT_VERSION,
        keep_through: point.seq,
        digest: point.digest.iter().map(|b| format!("{b:02x}")).collect(),
        reason: reason.to_string(),
    };
    let body = serde_json::to_vec_pretty(&req).expect("request serializes");
    let tmp = data_dir.join(format!("{REWIND_FILE}.tmp"));
    let path = data_dir.join(REWIND_FILE);
    let write = || -> std::io::Result<()> {
        std::fs::write(&tmp, &body)?;
        std::fs::File::open(&tmp)?.sync_all()?;
        std::fs::rename(&tmp, &path)?;
        std::fs::File::open(data_dir)?.sync_all()
    };
    write().map_err(|e| ServerError::Recovery(format!("cannot write {}: {e}", path.display())))
}

/// Applies a pending rewind request, if any (before the journal is opened).
pub fn apply_pending(config: &Config) -> Result<Option<RewindReport>, ServerError> {
    let path = config.data_dir.join(REWIND_FILE);
    let body = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(ServerError::Recovery(format!(
                "cannot read {}: {e}",
                path.display()
            )))
        }
    };
    let bad = |why: String| ServerError::Recovery(format!("{}: {why}", path.display()));
    let req: RewindRequest = serde_json::from_slice(&body).map_err(|e| bad(e.to_string()))?;
    if req.format_version != FORMAT_VERSION {
        return Err(bad(format!(
            "format version {} (this binary reads {FORMAT_VERSION})",
            req.format_version
        )));
    }
    if config.journal.backend != JournalBackendKind::File {
        return Err(bad(
            "a rewind needs the file journal backend; move this data dir aside and let the node \
             follow from an empty one"
                .into(),
        ));
    }
    let digest: [u8; 32] = (0..req.digest.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(req.digest.get(i..i + 2).unwrap_or("zz"), 16))
        .collect::<Result<Vec<u8>, _>>()
        .ok()
        .and_then(|v| v.try_into().ok())
        .ok_or_else(|| bad(format!("digest {:?} is not 32 bytes of hex", req.digest)))?;
    let dir = DataDir::open_or_init(&config.data_dir, config.journal.backend.as_str())?;
    let report = rewind_after(&dir.journal_dir(), req.keep_through, &digest)?;
    let snapshots = SnapshotDir::new(dir.snapshot_dir());
    for snap in snapshots.list()? {
        if snap.seq > req.keep_through {
            std::fs::remove_file(&snap.path).map_err(|e| {
                ServerError::Recovery(format!("cannot remove {}: {e}", snap.path.display()))
            })?;
        }
    }
    std::fs::remove_file(&path)
        .map_err(|e| ServerError::Recovery(format!("cannot remove {}: {e}", path.display())))?;
    tracing::warn!(
        keep_through = req.keep_through,
        dropped_records = report.dropped_records,
        dropped_bytes = report.dropped_bytes,
        reason = %req.reason,
        "rewound the journal: dropped records the active never received (never acknowledged)"
    );
    Ok(Some(report))
}
