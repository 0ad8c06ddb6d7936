//! `crescent-replay replay DATA_DIR --to SEQ [--json]`: the state of every aggregate at SEQ,
//! rebuilt the way crescentd recovers (newest valid snapshot at or below SEQ + the journal
//! after it, through `crescent_snapshot::restore_upto`).

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use crescent_journal::file::{FileReadSource, JournalScan};
use crescent_journal::ReadSource;
use crescent_snapshot::{restore_upto, SnapshotDir, SnapshotError};
use serde_json::json;

use crate::cmd::write_json;
use crate::datadir::DataDirView;
use crate::error::{Result, ToolError, EXIT_OK};
use crate::source::OfflineJournal;

#[derive(Debug, Clone, Args)]
pub struct ReplayArgs {
    /// The crescentd data dir (read only).
    pub data_dir: PathBuf,
    /// The seq to rebuild the state at (0 = the empty state before the first record).
    #[arg(long, value_name = "SEQ")]
    pub to: u64,
    /// Print `{"seq", "from_snapshot", "replayed", "state": {"position", "aggregates"}}`.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &ReplayArgs, out: &mut dyn Write) -> Result<u8> {
    let dir = DataDirView::open(&args.data_dir)?;
    let _span =
        tracing::info_span!("replay.replay", dir = %dir.root().display(), to = args.to).entered();
    let scan = JournalScan::open(dir.journal_dir())?;
    let snapshots = SnapshotDir::new(dir.snapshot_dir());
    let snapshot_seqs: Vec<u64> = snapshots.list()?.iter().map(|e| e.seq).collect();
    let journal_first = scan.segment_files().first().map_or(1, |s| s.first_seq);
    let journal_last = last_seq(&scan)?;
    check_reachable(args.to, journal_first, journal_last, &snapshot_seqs)?;

    let journal = OfflineJournal::new(scan, args.to);
    let restored = restore_upto(
        &snapshots,
        &journal,
        crescent_domain::standard_world(),
        args.to,
    )
    .map_err(|e| match e {
        SnapshotError::JournalGap {
            needed_from,
            journal_first,
            ..
        } => ToolError::Usage(format!(
            "seq {} cannot be reached: the newest valid snapshot at or below it needs \
                 records from seq {needed_from}, but the journal starts at seq {journal_first} \
                 (older snapshots may be damaged; run verify)",
            args.to
        )),
        other => other.into(),
    })?;
    let reached = restored.last_applied_seq();
    if reached != args.to {
        return Err(ToolError::Invalid(format!(
            "replay stopped at seq {reached}, before the requested seq {}: the journal does not \
             hold the records in between (run verify)",
            args.to
        )));
    }
    for s in &restored.skipped {
        eprintln!(
            "crescent-replay: skipped damaged snapshot {}: {}",
            s.path.display(),
            s.error
        );
    }
    let state = restored.state.to_json()?;
    let from_snapshot = restored
        .snapshot
        .as_ref()
        .map(|(path, pos)| json!({ "seq": pos.seq, "file": path.display().to_string() }));
    if args.json {
        write_json(
            out,
            &json!({
                "seq": args.to,
                "from_snapshot": from_snapshot,
                "replayed": restored.replayed,
                "state": state,
            }),
        )?;
    } else {
        match &restored.snapshot {
            Some((path, pos)) => writeln!(
                out,
                "state at seq {}: snapshot at seq {} ({}) + {} journal record(s)",
                args.to,
                pos.seq,
                path.display(),
                restored.replayed
            )?,
            None => writeln!(
                out,
                "state at seq {}: {} journal record(s) from the start",
                args.to, restored.replayed
            )?,
        }
        write_json(out, &state)?;
    }
    Ok(EXIT_OK)
}

/// Refuses a seq beyond the end of what the data dir holds, or below the lowest seq the
/// journal plus the snapshots can rebuild.
fn check_reachable(
    to: u64,
    journal_first: u64,
    journal_last: Option<u64>,
    snapshots: &[u64],
) -> Result<()> {
    let newest_snapshot = snapshots.last().copied();
    let end = journal_last.max(newest_snapshot).unwrap_or(0);
    if to > end {
        return Err(ToolError::Usage(format!(
            "seq {to} is beyond the end of the data dir: the journal ends at {} and the newest \
             snapshot is {}",
            journal_last.map_or("no record".into(), |s| format!("seq {s}")),
            newest_snapshot.map_or("none".into(), |s| format!("at seq {s}"))
        )));
    }
    // From genesis when the journal starts at 1; else from any snapshot whose tail the
    // journal still holds (seq >= journal_first - 1).
    let lowest = if journal_first <= 1 {
        Some(0)
    } else {
        snapshots.iter().copied().find(|&s| s + 1 >= journal_first)
    };
    match lowest {
        Some(lowest) if to >= lowest => Ok(()),
        Some(lowest) => Err(ToolError::Usage(format!(
            "seq {to} is below what this data dir can rebuild: the journal starts at seq \
             {journal_first} and the oldest snapshot it continues is at seq {lowest}"
        ))),
        None => Err(ToolError::Invalid(format!(
            "the journal starts at seq {journal_first} and no snapshot at seq >= {} covers the \
             records before it: no state can be rebuilt",
            journal_first - 1
        ))),
    }
}

/// The last intact seq of the journal, read from the last segment holding records (reading
/// stops at damage, which `verify` reports).
fn last_seq(scan: &JournalScan) -> Result<Option<u64>> {
    let source = FileReadSource::offline(scan.dir());
    for seg in scan.segment_files().iter().rev() {
        let mut last = None;
        for rec in source.read_range(seg.first_seq, u64::MAX)? {
            match rec {
                Ok(r) => last = Some(r.seq),
                Err(_) => break,
            }
        }
        if last.is_some() {
            return Ok(last);
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::check_reachable;
    use crate::error::ToolError;

    #[test]
    fn reachable_range_follows_journal_and_snapshots() {
        // Journal from genesis: everything up to the end.
        assert!(check_reachable(0, 1, Some(10), &[]).is_ok());
        assert!(check_reachable(10, 1, Some(10), &[5]).is_ok());
        assert!(matches!(
            check_reachable(11, 1, Some(10), &[5]),
            Err(ToolError::Usage(m)) if m.contains("beyond the end")
        ));
        // Journal truncated to 21..=40: the snapshot at 20 is the lowest base; 15 is too old
        // to be continued.
        assert!(check_reachable(20, 21, Some(40), &[15, 20, 30]).is_ok());
        assert!(matches!(
            check_reachable(19, 21, Some(40), &[15, 20, 30]),
            Err(ToolError::Usage(m)) if m.contains("below what this data dir can rebuild")
        ));
        // No snapshot continues the journal at all.
        assert!(matches!(
            check_reachable(30, 21, Some(40), &[15]),
            Err(ToolError::Invalid(_))
        ));
    }
}
