//! `crescent admin snapshot` (docs/api.md, `POST /v1/admin/snapshot`).

use clap::Subcommand;

use crate::error::ClientError;
use crate::CrescentClient;

#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Write a snapshot now (POST /v1/admin/snapshot; admin). Prints its seq and file.
    Snapshot,
}

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
    }
    Ok(0)
}
