//! `crescent-replay verify DATA_DIR [--json] [--allow-torn-tail]`: frames, CRCs, seq
//! continuity and the chain digest over the whole journal; every snapshot file; and each
//! snapshot against the journal replayed up to its seq; and the journal's quarantine. Exit 1 on
//! any fault, naming the first bad seq; exit 0 with a short summary on a clean data dir.
//!
//! A quarantined `damaged` tail (a complete frame that failed its check, cut by crescentd) is a
//! fault until an operator clears it (`crescent-replay quarantine clear`): the journal may lack
//! an acknowledged record. A quarantined `incomplete` tail (a write that did not finish) is a
//! warning (docs/journal-format.md, "Quarantine").

mod snapshots;

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use crescent_journal::file::JournalScan;
use crescent_journal::quarantine::{self, DamageKind, QuarantineEntry};
use serde::Serialize;

use crate::cmd::{range_text, write_json};
use crate::datadir::DataDirView;
use crate::error::{Result, EXIT_FAULT, EXIT_OK};
use crate::fault::{first_bad_seq, Fault, FaultSource};
use crate::walk::{walk, Flow, Step};
use snapshots::{SnapshotChecker, SnapshotReport};

#[derive(Debug, Clone, Args)]
pub struct VerifyArgs {
    /// The crescentd data dir (read only).
    pub data_dir: PathBuf,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Report a damaged tail after the last valid record (which crescentd quarantines and cuts
    /// on its next open under tolerate_tail_corruption) as a warning instead of a fault.
    #[arg(long)]
    pub allow_torn_tail: bool,
}

/// Everything `verify` found (its `--json` output).
#[derive(Debug, Clone, Serialize)]
pub struct VerifyReport {
    pub data_dir: String,
    pub format_version: u32,
    pub journal_backend: String,
    pub ok: bool,
    pub first_bad_seq: Option<u64>,
    pub journal: JournalReport,
    pub snapshots: Vec<SnapshotReport>,
    pub faults: Vec<Fault>,
    /// Findings that do not fail verification (a tolerated torn tail, a quarantined
    /// incomplete write).
    pub warnings: Vec<Fault>,
    /// The tails crescentd cut and copied into `journal/quarantine/`, until cleared.
    pub quarantined: Vec<QuarantineEntry>,
}

#[derive(Debug, Clone, Serialize)]
pub struct JournalReport {
    pub segments: usize,
    pub records: u64,
    pub seq_range: Option<(u64, u64)>,
    /// The chain digest of the last intact record.
    pub chain_head: Option<String>,
    /// The last intact seq before a torn tail, if the journal ends in one.
    pub torn_tail_after: Option<u64>,
}

pub fn run(args: &VerifyArgs, out: &mut dyn Write) -> Result<u8> {
    let report = verify(args)?;
    if args.json {
        write_json(out, &report)?;
    } else {
        print_text(&report, out)?;
    }
    Ok(if report.ok { EXIT_OK } else { EXIT_FAULT })
}

/// Runs every check and builds the report (prints nothing).
pub fn verify(args: &VerifyArgs) -> Result<VerifyReport> {
    let dir = DataDirView::open(&args.data_dir)?;
    let _span = tracing::info_span!("replay.verify", dir = %dir.root().display()).entered();
    let scan = JournalScan::open(dir.journal_dir())?;
    let mut checker = SnapshotChecker::load(&dir.snapshot_dir())?;
    let first_seq = scan.segment_files().first().map_or(1, |s| s.first_seq);
    let header = scan.first_header()?;
    let mut faults = Vec::new();
    if let Some(h) = header.as_ref().filter(|h| h.first_seq == 1) {
        if h.prev_digest != crescent_journal::GENESIS_DIGEST || h.prev_term != 0 {
            faults.push(Fault::new(
                FaultSource::Journal,
                Some(1),
                "bad_genesis",
                &scan.segment_files()[0].path,
                "the first segment starts at seq 1 but its previous digest/term is not genesis",
            ));
        }
    }
    checker.start(first_seq, header.as_ref());
    let mut chain_head = None;
    let outcome = walk(&scan, true, |step| {
        match step {
            Step::Record(loc) => {
                let path = &scan.segment_files()[loc.segment].path;
                checker.on_record(loc.record, path);
                chain_head = Some(loc.record.digest);
            }
            Step::Fault(_) => checker.on_journal_fault(),
        }
        Ok(Flow::Continue)
    })?;
    checker.finish(outcome.seq_range.map(|(_, last)| last), &dir.journal_dir());
    tracing::info!(
        records = outcome.records,
        faults = outcome.faults.len(),
        "journal walked"
    );

    let mut warnings = Vec::new();
    for fault in &outcome.faults {
        if fault.torn_tail && args.allow_torn_tail {
            warnings.push(fault.clone());
        } else {
            faults.push(fault.clone());
        }
    }
    faults.extend(checker.faults);
    let quarantined = check_quarantine(&dir.journal_dir(), &mut faults, &mut warnings);
    let torn_tail_after = outcome.torn_tail().map(|(seq, _)| seq);
    Ok(VerifyReport {
        data_dir: dir.root().display().to_string(),
        format_version: dir.marker.format_version,
        journal_backend: dir.marker.journal_backend.clone(),
        ok: faults.is_empty(),
        first_bad_seq: first_bad_seq(&faults),
        journal: JournalReport {
            segments: scan.segment_files().len(),
            records: outcome.records,
            seq_range: outcome.seq_range,
            chain_head: chain_head.map(hex::encode),
            torn_tail_after,
        },
        snapshots: checker.reports,
        faults,
        warnings,
        quarantined,
    })
}

/// Names every quarantined tail: `damaged` ones as faults, `incomplete` ones and damaged ones
/// whose record came back from an active as warnings.
fn check_quarantine(
    journal_dir: &std::path::Path,
    faults: &mut Vec<Fault>,
    warnings: &mut Vec<Fault>,
) -> Vec<QuarantineEntry> {
    let qdir = quarantine::quarantine_dir(journal_dir);
    let entries = match quarantine::list(journal_dir) {
        Ok(entries) => entries,
        Err(e) => {
            faults.push(Fault::new(
                FaultSource::Journal,
                None,
                "quarantine_unreadable",
                &qdir,
                e.to_string(),
            ));
            return Vec::new();
        }
    };
    for q in &entries {
        if let Some(r) = &q.recovered {
            warnings.push(Fault::new(
                FaultSource::Journal,
                Some(q.seq),
                "quarantined_frame_recovered",
                &qdir.join(&q.data_file),
                format!(
                    "a complete frame that failed its check was cut from offset {} of {} and \
                     quarantined; the journal holds the record again ({}, term {}; {} of its \
                     {} frame bytes differ from the quarantined copy); clear with \
                     `crescent-replay quarantine clear` once dealt with",
                    q.offset, q.segment, r.source, r.term, r.differing_bytes, r.frame_bytes
                ),
            ));
            continue;
        }
        let (kind, what, to) = match q.kind {
            DamageKind::Damaged => (
                "quarantined_frame",
                "a complete frame that failed its check (it may hold an acknowledged record)",
                &mut *faults,
            ),
            DamageKind::Incomplete => (
                "quarantined_incomplete_frame",
                "an incomplete frame (a write that did not finish)",
                &mut *warnings,
            ),
        };
        to.push(Fault::new(
            FaultSource::Journal,
            Some(q.seq),
            kind,
            &qdir.join(&q.data_file),
            format!(
                "{what} was cut from offset {} of {} and quarantined ({} bytes; {}); clear with \
                 `crescent-replay quarantine clear` once dealt with",
                q.offset, q.segment, q.bytes, q.reason
            ),
        ));
    }
    entries
}

fn print_text(r: &VerifyReport, out: &mut dyn Write) -> Result<()> {
    if r.ok {
        writeln!(out, "OK: {}", r.data_dir)?;
    } else {
        writeln!(out, "FAULTS FOUND: {}", r.data_dir)?;
        match r.first_bad_seq {
            Some(seq) => writeln!(out, "first bad seq: {seq}")?,
            None => writeln!(
                out,
                "first bad seq: none (the faults are not tied to one seq)"
            )?,
        }
    }
    let j = &r.journal;
    writeln!(
        out,
        "journal: {} segment(s), {} record(s), seqs {}, chain head {}",
        j.segments,
        j.records,
        range_text(j.seq_range),
        j.chain_head.as_deref().unwrap_or("genesis")
    )?;
    if let Some(seq) = j.torn_tail_after {
        writeln!(
            out,
            "journal tail: torn after seq {seq} (crescentd quarantines and cuts it on its next \
             open under tolerate_tail_corruption)"
        )?;
    }
    for q in &r.quarantined {
        writeln!(
            out,
            "WARNING journal quarantine: seq {} ({}) cut from offset {} of {}, kept in \
             journal/quarantine/{}",
            q.seq,
            q.kind.as_str(),
            q.offset,
            q.segment,
            q.data_file
        )?;
    }
    writeln!(out, "snapshots: {}", r.snapshots.len())?;
    for s in &r.snapshots {
        writeln!(
            out,
            "  seq {}: {} ({}) {}",
            s.seq, s.status, s.detail, s.file
        )?;
    }
    if !r.faults.is_empty() {
        writeln!(out, "faults ({}):", r.faults.len())?;
        for f in &r.faults {
            writeln!(out, "  {f}")?;
        }
    }
    if !r.warnings.is_empty() {
        writeln!(out, "warnings ({}):", r.warnings.len())?;
        for f in &r.warnings {
            writeln!(out, "  {f}")?;
        }
    }
    Ok(())
}
