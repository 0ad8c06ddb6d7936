//! `crescent-replay stats DATA_DIR [--json]`: record counts by stream kind and by event kind,
//! bytes, seq / term / time ranges, the segment list with sizes, the snapshot list and the
//! state of the journal's tail. Exit 1 when the walk met any fault.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Args;
use crescent_journal::file::segment::HEADER_LEN;
use crescent_journal::file::JournalScan;
use crescent_snapshot::SnapshotDir;
use serde::Serialize;

use crate::cmd::{range_text, write_json};
use crate::datadir::DataDirView;
use crate::error::{Result, ToolError, EXIT_FAULT, EXIT_OK};
use crate::fault::{first_bad_seq, Fault, FaultSource};
use crate::records::rfc3339;
use crate::walk::{walk, Flow, Step};

#[derive(Debug, Clone, Args)]
pub struct StatsArgs {
    /// The crescentd data dir (read only).
    pub data_dir: PathBuf,
    /// Print the statistics as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct StreamKindStats {
    pub records: u64,
    /// Distinct stream ids (aggregate instances) of this kind.
    pub streams: u64,
    pub frame_bytes: u64,
    pub payload_bytes: u64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct EventKindStats {
    pub records: u64,
    pub payload_bytes: u64,
    /// Records per stored event version.
    pub versions: BTreeMap<u16, u64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SegmentInfo {
    pub file: String,
    pub first_seq: u64,
    pub file_bytes: u64,
    /// Header plus the frames up to the end of the last valid one.
    pub used_bytes: u64,
    pub records: u64,
    pub seq_range: Option<(u64, u64)>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SnapshotListing {
    pub seq: u64,
    pub file: String,
    pub bytes: u64,
    pub term: Option<u64>,
    pub created: Option<String>,
    /// `None` when the file verifies; else why it does not.
    pub error: Option<String>,
}

/// The tail of the journal.
#[derive(Debug, Clone, Serialize)]
pub struct TailStatus {
    /// `clean` or `torn`.
    pub status: &'static str,
    pub last_good_seq: Option<u64>,
    pub detail: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Stats {
    pub data_dir: String,
    pub format_version: u32,
    pub created_at: String,
    pub journal_backend: String,
    pub records: u64,
    pub seq_range: Option<(u64, u64)>,
    pub term_range: Option<(u64, u64)>,
    pub time_range: Option<(String, String)>,
    pub frame_bytes: u64,
    pub payload_bytes: u64,
    pub segment_file_bytes: u64,
    pub by_stream_kind: BTreeMap<String, StreamKindStats>,
    pub by_event_kind: BTreeMap<String, EventKindStats>,
    pub segments: Vec<SegmentInfo>,
    pub snapshots: Vec<SnapshotListing>,
    pub tail: TailStatus,
    pub faults: Vec<Fault>,
    pub first_bad_seq: Option<u64>,
}

fn widen<T: Ord + Copy>(r: &mut Option<(T, T)>, v: T) {
    *r = Some(r.map_or((v, v), |(lo, hi)| (lo.min(v), hi.max(v))));
}

pub fn run(args: &StatsArgs, out: &mut dyn Write) -> Result<u8> {
    let stats = collect(&args.data_dir)?;
    if args.json {
        write_json(out, &stats)?;
    } else {
        print_text(&stats, out)?;
    }
    Ok(if stats.faults.is_empty() {
        EXIT_OK
    } else {
        EXIT_FAULT
    })
}

pub fn collect(data_dir: &Path) -> Result<Stats> {
    let dir = DataDirView::open(data_dir)?;
    let _span = tracing::info_span!("replay.stats", dir = %dir.root().display()).entered();
    let scan = JournalScan::open(dir.journal_dir())?;
    let mut segments = Vec::new();
    for seg in scan.segment_files() {
        let file_bytes = std::fs::metadata(&seg.path)
            .map_err(|e| ToolError::unreadable(&seg.path, e))?
            .len();
        segments.push(SegmentInfo {
            file: seg.path.display().to_string(),
            first_seq: seg.first_seq,
            file_bytes,
            used_bytes: (HEADER_LEN as u64).min(file_bytes),
            records: 0,
            seq_range: None,
        });
    }
    let (mut term_range, mut time_range) = (None, None);
    let (mut frame_bytes, mut payload_bytes) = (0u64, 0u64);
    let mut by_stream_kind: BTreeMap<String, StreamKindStats> = BTreeMap::new();
    let mut stream_ids: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut by_event_kind: BTreeMap<String, EventKindStats> = BTreeMap::new();
    let outcome = walk(&scan, true, |step| {
        let Step::Record(loc) = step else {
            return Ok(Flow::Continue);
        };
        let rec = loc.record;
        let (frame, payload) = (loc.frame_len as u64, rec.event.payload.len() as u64);
        let seg = &mut segments[loc.segment];
        seg.records += 1;
        seg.used_bytes = seg.used_bytes.max(loc.offset + frame);
        widen(&mut seg.seq_range, rec.seq);
        widen(&mut term_range, rec.term);
        widen(&mut time_range, rec.timestamp_ms);
        frame_bytes += frame;
        payload_bytes += payload;
        let sk = by_stream_kind.entry(rec.stream.kind.clone()).or_default();
        sk.records += 1;
        sk.frame_bytes += frame;
        sk.payload_bytes += payload;
        let ids = stream_ids.entry(rec.stream.kind.clone()).or_default();
        if !ids.contains(&rec.stream.id) {
            ids.insert(rec.stream.id.clone());
            sk.streams += 1;
        }
        let ek = by_event_kind.entry(rec.event.kind.clone()).or_default();
        ek.records += 1;
        ek.payload_bytes += payload;
        *ek.versions.entry(rec.event.version).or_default() += 1;
        Ok(Flow::Continue)
    })?;
    let tail = match outcome.torn_tail() {
        Some((last_good, fault)) => TailStatus {
            status: "torn",
            last_good_seq: Some(last_good),
            detail: Some(fault.to_string()),
        },
        None => TailStatus {
            status: "clean",
            last_good_seq: outcome.seq_range.map(|r| r.1),
            detail: None,
        },
    };
    let snapshots = list_snapshots(&dir.snapshot_dir())?;
    let mut faults = outcome.faults.clone();
    for snap in &snapshots {
        if let Some(error) = &snap.error {
            faults.push(Fault::new(
                FaultSource::Snapshot,
                Some(snap.seq),
                "bad_snapshot",
                Path::new(&snap.file),
                error.clone(),
            ));
        }
    }
    Ok(Stats {
        data_dir: dir.root().display().to_string(),
        format_version: dir.marker.format_version,
        created_at: dir.marker.created_at.clone(),
        journal_backend: dir.marker.journal_backend.clone(),
        records: outcome.records,
        seq_range: outcome.seq_range,
        term_range,
        time_range: time_range.map(|(a, b)| (rfc3339(a), rfc3339(b))),
        frame_bytes,
        payload_bytes,
        segment_file_bytes: segments.iter().map(|s| s.file_bytes).sum(),
        by_stream_kind,
        by_event_kind,
        segments,
        snapshots,
        tail,
        first_bad_seq: first_bad_seq(&faults),
        faults,
    })
}

fn list_snapshots(dir: &Path) -> Result<Vec<SnapshotListing>> {
    let mut out = Vec::new();
    for entry in SnapshotDir::new(dir).list()? {
        let bytes = std::fs::metadata(&entry.path)
            .map_err(|e| ToolError::unreadable(&entry.path, e))?
            .len();
        let (term, created, error) = match SnapshotDir::read(&entry.path) {
            Ok(s) => (
                Some(s.header.position.term),
                Some(rfc3339(s.header.created_ms)),
                None,
            ),
            Err(e) => (None, None, Some(e.to_string())),
        };
        out.push(SnapshotListing {
            seq: entry.seq,
            file: entry.path.display().to_string(),
            bytes,
            term,
            created,
            error,
        });
    }
    Ok(out)
}

fn print_text(s: &Stats, out: &mut dyn Write) -> Result<()> {
    writeln!(
        out,
        "data dir: {} (format {}, {} journal, created {})",
        s.data_dir, s.format_version, s.journal_backend, s.created_at
    )?;
    writeln!(
        out,
        "records: {}  seqs {}  terms {}",
        s.records,
        range_text(s.seq_range),
        range_text(s.term_range)
    )?;
    if let Some((a, b)) = &s.time_range {
        writeln!(out, "time: {a} .. {b}")?;
    }
    writeln!(
        out,
        "bytes: {} in frames, {} of payload, {} in segment files",
        s.frame_bytes, s.payload_bytes, s.segment_file_bytes
    )?;
    writeln!(out, "by stream kind:")?;
    for (kind, k) in &s.by_stream_kind {
        writeln!(
            out,
            "  {kind}: {} record(s), {} stream(s), {} frame bytes",
            k.records, k.streams, k.frame_bytes
        )?;
    }
    writeln!(out, "by event kind:")?;
    for (kind, k) in &s.by_event_kind {
        let versions: Vec<String> = k
            .versions
            .iter()
            .map(|(v, n)| format!("v{v}:{n}"))
            .collect();
        writeln!(
            out,
            "  {kind}: {} record(s), {} payload bytes ({})",
            k.records,
            k.payload_bytes,
            versions.join(" ")
        )?;
    }
    writeln!(out, "segments: {}", s.segments.len())?;
    for g in &s.segments {
        writeln!(
            out,
            "  {}: first seq {}, {} record(s), seqs {}, {} of {} bytes used",
            g.file,
            g.first_seq,
            g.records,
            range_text(g.seq_range),
            g.used_bytes,
            g.file_bytes
        )?;
    }
    writeln!(out, "snapshots: {}", s.snapshots.len())?;
    for n in &s.snapshots {
        match &n.error {
            None => writeln!(
                out,
                "  seq {} term {} created {} {} bytes {}",
                n.seq,
                n.term.unwrap_or_default(),
                n.created.as_deref().unwrap_or("?"),
                n.bytes,
                n.file
            )?,
            Some(e) => writeln!(out, "  seq {} INVALID: {e}", n.seq)?,
        }
    }
    match &s.tail.detail {
        None => writeln!(out, "tail: clean")?,
        Some(d) => writeln!(
            out,
            "tail: torn after seq {}: {d}",
            s.tail.last_good_seq.unwrap_or_default()
        )?,
    }
    if !s.faults.is_empty() {
        if let Some(seq) = s.first_bad_seq {
            writeln!(out, "first bad seq: {seq}")?;
        }
        writeln!(out, "faults ({}):", s.faults.len())?;
        for f in &s.faults {
            writeln!(out, "  {f}")?;
        }
    }
    Ok(())
}
