//! `crescent-replay diff DIR_A DIR_B [--json]`: where two journals (say an active and its
//! standby) part ways. Both are walked in seq order and the chain digests compared seq by seq
//! over the range both hold. Since each digest covers the whole history before it, equal
//! digests at seq N mean equal histories up to N.
//!
//! Exit 0 when one journal is a prefix of the other (or they are identical), 1 when they
//! diverge, cannot be compared (no common seq), or either has faults.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Args;
use crescent_journal::file::{JournalScan, ScanEntry, ScanOptions};
use crescent_journal::Record;
use serde::Serialize;
use serde_json::Value;

use crate::cmd::{range_text, write_json};
use crate::datadir::DataDirView;
use crate::error::{Result, EXIT_FAULT, EXIT_OK};
use crate::fault::{first_bad_seq, Fault};
use crate::records::{json_object, text_line};

#[derive(Debug, Clone, Args)]
pub struct DiffArgs {
    /// The first data dir (read only).
    pub dir_a: PathBuf,
    /// The second data dir (read only).
    pub dir_b: PathBuf,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// How the two journals relate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Relation {
    /// Same records, same end.
    Identical,
    /// A ends earlier; everything A holds B holds too.
    APrefixOfB,
    /// B ends earlier; everything B holds A holds too.
    BPrefixOfA,
    /// The digests differ at `diverge_at`.
    Diverged,
    /// Both hold records but no seq in common (prefix truncation): nothing to compare.
    Disjoint,
}

#[derive(Debug, Clone, Serialize)]
pub struct DiffReport {
    pub relation: Relation,
    /// Last seq at which both journals hold the same digest.
    pub identical_up_to: Option<u64>,
    pub diverge_at: Option<u64>,
    /// Set when divergence was found at the first seq both hold: the histories may already
    /// differ before it (the records before it are not in both journals).
    pub diverged_before_overlap: bool,
    pub a: Side,
    pub b: Side,
    pub faults: Vec<Fault>,
    pub first_bad_seq: Option<u64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Side {
    pub dir: String,
    pub seq_range: Option<(u64, u64)>,
    /// The record at `diverge_at`, summarized.
    pub record_at_divergence: Option<Value>,
    #[serde(skip)]
    record: Option<Record>,
}

/// The intact records of one journal, faults set aside.
struct Records {
    entries: crescent_journal::file::scan::ScanEntries,
    faults: Vec<Fault>,
    range: Option<(u64, u64)>,
}

impl Records {
    fn open(dir: &Path) -> Result<Self> {
        let view = DataDirView::open(dir)?;
        let scan = JournalScan::open(view.journal_dir())?;
        Ok(Self {
            entries: scan.entries(ScanOptions { verify_chain: true }),
            faults: Vec::new(),
            range: None,
        })
    }

    fn next(&mut self) -> Result<Option<Record>> {
        for entry in self.entries.by_ref() {
            match entry? {
                ScanEntry::Record { record, .. } => {
                    self.range = Some(match self.range {
                        None => (record.seq, record.seq),
                        Some((lo, _)) => (lo, record.seq),
                    });
                    return Ok(Some(record));
                }
                ScanEntry::Fault(f) => self.faults.push(Fault::from_scan(&f)),
            }
        }
        Ok(None)
    }

    fn drain(&mut self) -> Result<()> {
        while self.next()?.is_some() {}
        Ok(())
    }
}

pub fn run(args: &DiffArgs, out: &mut dyn Write) -> Result<u8> {
    let report = diff(args)?;
    if args.json {
        write_json(out, &report)?;
    } else {
        print_text(&report, out)?;
    }
    let ok = report.faults.is_empty()
        && matches!(
            report.relation,
            Relation::Identical | Relation::APrefixOfB | Relation::BPrefixOfA
        );
    Ok(if ok { EXIT_OK } else { EXIT_FAULT })
}

pub fn diff(args: &DiffArgs) -> Result<DiffReport> {
    let _span =
        tracing::info_span!("replay.diff", a = %args.dir_a.display(), b = %args.dir_b.display())
            .entered();
    let mut a = Records::open(&args.dir_a)?;
    let mut b = Records::open(&args.dir_b)?;
    let (mut ra, mut rb) = (a.next()?, b.next()?);
    let mut identical_up_to = None;
    let mut first_common = None;
    let mut divergence = None;
    while let (Some(x), Some(y)) = (&ra, &rb) {
        if x.seq < y.seq {
            ra = a.next()?;
        } else if y.seq < x.seq {
            rb = b.next()?;
        } else {
            first_common.get_or_insert(x.seq);
            if x.digest != y.digest {
                divergence = Some((x.clone(), y.clone()));
                break;
            }
            identical_up_to = Some(x.seq);
            ra = a.next()?;
            rb = b.next()?;
        }
    }
    a.drain()?;
    b.drain()?;
    let (last_a, last_b) = (a.range.map(|r| r.1), b.range.map(|r| r.1));
    let relation = match (&divergence, first_common) {
        (Some(_), _) => Relation::Diverged,
        (None, None) if last_a.is_some() && last_b.is_some() => Relation::Disjoint,
        (None, _) => match last_a.cmp(&last_b) {
            std::cmp::Ordering::Equal => Relation::Identical,
            std::cmp::Ordering::Less => Relation::APrefixOfB,
            std::cmp::Ordering::Greater => Relation::BPrefixOfA,
        },
    };
    let diverge_at = divergence.as_ref().map(|(x, _)| x.seq);
    let diverged_before_overlap = diverge_at.is_some_and(|s| s > 1 && Some(s) == first_common);
    let mut faults = a.faults;
    faults.extend(b.faults);
    Ok(DiffReport {
        relation,
        identical_up_to,
        diverge_at,
        diverged_before_overlap,
        a: Side {
            dir: args.dir_a.display().to_string(),
            seq_range: a.range,
            record_at_divergence: divergence.as_ref().map(|(x, _)| json_object(x)),
            record: divergence.as_ref().map(|(x, _)| x.clone()),
        },
        b: Side {
            dir: args.dir_b.display().to_string(),
            seq_range: b.range,
            record_at_divergence: divergence.as_ref().map(|(_, y)| json_object(y)),
            record: divergence.as_ref().map(|(_, y)| y.clone()),
        },
        first_bad_seq: first_bad_seq(&faults),
        faults,
    })
}

fn print_text(r: &DiffReport, out: &mut dyn Write) -> Result<()> {
    let up_to = r
        .identical_up_to
        .map_or("no common record".to_string(), |s| format!("seq {s}"));
    match r.relation {
        Relation::Identical => writeln!(out, "identical up to {up_to}; same length")?,
        Relation::APrefixOfB => writeln!(out, "identical up to {up_to}; B is longer")?,
        Relation::BPrefixOfA => writeln!(out, "identical up to {up_to}; A is longer")?,
        Relation::Disjoint => writeln!(
            out,
            "cannot compare: the journals hold no seq in common (prefix truncation)"
        )?,
        Relation::Diverged => {
            let seq = r.diverge_at.unwrap_or_default();
            writeln!(out, "diverge at seq {seq}")?;
            if r.diverged_before_overlap {
                writeln!(
                    out,
                    "  (the first seq both hold: the histories may already differ before it)"
                )?;
            }
            writeln!(out, "identical up to {up_to}")?;
        }
    }
    for (name, side) in [("A", &r.a), ("B", &r.b)] {
        writeln!(
            out,
            "{name}: {} seqs {}",
            side.dir,
            range_text(side.seq_range)
        )?;
        if let Some(rec) = &side.record {
            writeln!(out, "  at divergence: {}", text_line(rec))?;
        }
    }
    if !r.faults.is_empty() {
        writeln!(out, "faults ({}):", r.faults.len())?;
        for f in &r.faults {
            writeln!(out, "  {f}")?;
        }
    }
    Ok(())
}
