//! `crescent admin snapshot` (docs/api.md) and `crescent admin backup` (docs/operations.md,
//! "Backup and restore").

use std::path::{Path, PathBuf};

use clap::Subcommand;
use crescent_replay_tools::backup::{self, BackupError, Manifest};
use serde_json::json;

use crescent_client::CrescentClient;
use crescent_client::{ClientError, ErrorClass, ScriptCode};

#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Write a snapshot now (POST /v1/admin/snapshot; admin). Prints its seq and file.
    Snapshot,
    /// Back up crescentd's data dir on this host into a new directory: a snapshot taken now,
    /// plus the journal cut at it, verified as `crescent-replay verify` does. Restore with
    /// `crescentd --restore-from DIR`.
    Backup {
        /// The data dir of the crescentd that --server reaches (read only).
        #[arg(long)]
        data_dir: PathBuf,
        /// Where the backup goes: a new or empty directory.
        #[arg(long, value_name = "DIR")]
        to: PathBuf,
    },
}

/// Snapshots that retention removes while the copy runs are retried this often.
const BACKUP_ATTEMPTS: usize = 3;

pub(super) async fn run(
    client: &CrescentClient,
    command: AdminCommand,
    json: bool,
) -> Result<u8, ClientError> {
    match command {
        AdminCommand::Snapshot => {
            let s = client.snapshot_now().await?;
            if json {
                outln!("{}", serde_json::to_string(&s).expect("json output"))?;
            } else {
                outln!(
                    "snapshot at seq {} (term {}), {} bytes: {}",
                    s.seq,
                    s.term,
                    s.bytes,
                    s.path
                )?;
            }
        }
        AdminCommand::Backup { data_dir, to } => {
            let m = backup_with_retries(client, &data_dir, &to).await?;
            if json {
                outln!(
                    "{}",
                    json!({"to": to.display().to_string(), "seq": m.seq, "term": m.term,
                        "digest": m.digest, "created_at": m.created_at})
                )?;
            } else {
                outln!(
                    "backup of seq {} (term {}) in {}, verified",
                    m.seq,
                    m.term,
                    to.display()
                )?;
            }
        }
    }
    Ok(0)
}

async fn backup_with_retries(
    client: &CrescentClient,
    data_dir: &Path,
    to: &Path,
) -> Result<Manifest, ClientError> {
    let mut attempt = 1;
    loop {
        let snap = client.snapshot_now().await?;
        let (dir, seq, to) = (data_dir.to_path_buf(), snap.seq, to.to_path_buf());
        // Copying and verifying is blocking file IO.
        let done = tokio::task::spawn_blocking(move || backup::create(&dir, seq, &to))
            .await
            .map_err(|e| ClientError::Protocol(format!("backup task failed: {e}")))?;
        match done {
            Err(BackupError::SourceChanged { detail }) if attempt < BACKUP_ATTEMPTS => {
                tracing::warn!(%detail, attempt, "the data dir changed during the backup; again");
                attempt += 1;
            }
            other => return other.map_err(backup_failure),
        }
    }
}

/// A backup's error as the CLI reports it: the backup's own code, and whether running it
/// again can help.
fn backup_failure(e: BackupError) -> ClientError {
    let class = match e {
        BackupError::SourceChanged { .. } => ErrorClass::Retryable,
        BackupError::TargetNotEmpty { .. } | BackupError::Unsupported { .. } => ErrorClass::User,
        _ => ErrorClass::Fatal,
    };
    let code = match e {
        BackupError::Io { .. } => ScriptCode::IoError,
        _ => ScriptCode::Backup(e.code()),
    };
    ClientError::Backup {
        code,
        class,
        source: Box::new(e),
    }
}
