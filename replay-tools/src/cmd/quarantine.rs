//! `crescent-replay quarantine list DATA_DIR [--json]` and `crescent-replay quarantine clear
//! DATA_DIR`: the damaged journal tails crescentd copied aside before cutting them
//! (docs/journal-format.md, "Quarantine").
//!
//! `list` reads only. `clear` is the one command of this tool that writes: it removes
//! `DATA_DIR/journal/quarantine/` once the operator has dealt with the bytes (restored the
//! record from an HA peer or a backup, or judged it lost), so that `crescent-replay verify`,
//! `crescent status` and the `crescent_journal_quarantined_frames` gauge stop naming them.

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, Subcommand};
use crescent_journal::quarantine;

use crate::cmd::write_json;
use crate::datadir::DataDirView;
use crate::error::{Result, EXIT_OK};

#[derive(Debug, Clone, Args)]
pub struct QuarantineArgs {
    #[command(subcommand)]
    pub command: QuarantineCommand,
}

#[derive(Debug, Clone, Subcommand)]
pub enum QuarantineCommand {
    /// List the quarantined tails (read only).
    List {
        /// The crescentd data dir.
        data_dir: PathBuf,
        /// Print the listing as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove the quarantined tails (copy them elsewhere first if they are still needed).
    Clear {
        /// The crescentd data dir.
        data_dir: PathBuf,
    },
}

pub fn run(args: &QuarantineArgs, out: &mut dyn Write) -> Result<u8> {
    match &args.command {
        QuarantineCommand::List { data_dir, json } => {
            let dir = DataDirView::open(data_dir)?;
            let entries = quarantine::list(&dir.journal_dir())?;
            if *json {
                write_json(out, &entries)?;
            } else if entries.is_empty() {
                writeln!(out, "quarantine: empty")?;
            } else {
                for q in &entries {
                    writeln!(
                        out,
                        "seq {} ({}): {} bytes from offset {} of {} in journal/quarantine/{} ({})",
                        q.seq,
                        q.kind.as_str(),
                        q.bytes,
                        q.offset,
                        q.segment,
                        q.data_file,
                        q.reason
                    )?;
                    if let Some(r) = &q.recovered {
                        writeln!(
                            out,
                            "  recovered: the journal holds seq {} again ({}, term {}; {} of {} \
                             frame bytes differ from the copy)",
                            q.seq, r.source, r.term, r.differing_bytes, r.frame_bytes
                        )?;
                    }
                }
            }
        }
        QuarantineCommand::Clear { data_dir } => {
            let dir = DataDirView::open(data_dir)?;
            let n = quarantine::clear(&dir.journal_dir())?;
            tracing::info!(cleared = n, "journal quarantine cleared");
            writeln!(out, "cleared {n} quarantined tail(s)")?;
        }
    }
    Ok(EXIT_OK)
}
