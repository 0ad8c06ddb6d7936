//! `crescent-replay dump DATA_DIR [--from SEQ] [--to SEQ] [--stream KIND[/ID]]
//! [--kind EVENT_KIND] [--decode] [--json]`: one line per record; with `--json`, one JSON
//! object per line (JSON Lines). Journal faults met on the way go to stderr and make the exit
//! code 1, as do events that `--decode` cannot decode.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use crescent_journal::file::JournalScan;
use crescent_journal::Record;

use crate::datadir::DataDirView;
use crate::decode::EventDecoder;
use crate::error::{Result, ToolError, EXIT_FAULT, EXIT_OK};
use crate::records::{json_object, text_line};
use crate::walk::{walk, Flow, Step};

#[derive(Debug, Clone, Args)]
pub struct DumpArgs {
    /// The crescentd data dir (read only).
    pub data_dir: PathBuf,
    /// First seq to show.
    #[arg(long, value_name = "SEQ")]
    pub from: Option<u64>,
    /// Last seq to show.
    #[arg(long, value_name = "SEQ")]
    pub to: Option<u64>,
    /// Only records of this stream kind, or of one instance with KIND/ID.
    #[arg(long, value_name = "KIND[/ID]", value_parser = StreamFilter::parse)]
    pub stream: Option<StreamFilter>,
    /// Only records of this event kind (e.g. segment_mounted).
    #[arg(long = "kind", value_name = "EVENT_KIND")]
    pub event_kind: Option<String>,
    /// Also show each event decoded by its aggregate (as JSON).
    #[arg(long)]
    pub decode: bool,
    /// JSON Lines output.
    #[arg(long)]
    pub json: bool,
}

/// `--stream KIND` or `--stream KIND/ID` (the id may itself contain `/`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamFilter {
    pub kind: String,
    pub id: Option<String>,
}

impl StreamFilter {
    pub fn parse(s: &str) -> std::result::Result<Self, String> {
        let (kind, id) = match s.split_once('/') {
            Some((k, id)) => (k, Some(id)),
            None => (s, None),
        };
        if kind.is_empty() || id.is_some_and(str::is_empty) {
            return Err(format!("{s:?} is not KIND or KIND/ID"));
        }
        Ok(Self {
            kind: kind.to_string(),
            id: id.map(str::to_string),
        })
    }

    pub fn matches(&self, rec: &Record) -> bool {
        rec.stream.kind == self.kind && self.id.as_ref().is_none_or(|id| *id == rec.stream.id)
    }
}

impl DumpArgs {
    fn selects(&self, rec: &Record) -> bool {
        self.from.is_none_or(|f| rec.seq >= f)
            && self.to.is_none_or(|t| rec.seq <= t)
            && self.stream.as_ref().is_none_or(|s| s.matches(rec))
            && self
                .event_kind
                .as_ref()
                .is_none_or(|k| *k == rec.event.kind)
    }
}

pub fn run(args: &DumpArgs, out: &mut dyn Write) -> Result<u8> {
    if let (Some(from), Some(to)) = (args.from, args.to) {
        if from > to {
            return Err(ToolError::Usage(format!(
                "--from {from} is after --to {to}: nothing to show"
            )));
        }
    }
    let dir = DataDirView::open(&args.data_dir)?;
    let _span = tracing::info_span!("replay.dump", dir = %dir.root().display()).entered();
    let scan = JournalScan::open(dir.journal_dir())?;
    let decoder = args.decode.then(EventDecoder::default);
    let mut decode_failures = 0u64;
    let mut shown = 0u64;
    let outcome = walk(&scan, true, |step| {
        let Step::Record(loc) = step else {
            return Ok(Flow::Continue);
        };
        let rec = loc.record;
        if args.to.is_some_and(|t| rec.seq > t) {
            return Ok(Flow::Stop);
        }
        if !args.selects(rec) {
            return Ok(Flow::Continue);
        }
        shown += 1;
        let decoded = decoder.as_ref().map(|d| d.decode(rec));
        if let Some(Err(_)) = &decoded {
            decode_failures += 1;
        }
        if args.json {
            let mut obj = json_object(rec);
            obj["segment"] = scan.segment_files()[loc.segment]
                .path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .into();
            obj["offset"] = loc.offset.into();
            match decoded {
                Some(Ok(v)) => obj["decoded"] = v,
                Some(Err(e)) => obj["decode_error"] = e.to_string().into(),
                None => {}
            }
            serde_json::to_writer(&mut *out, &obj).map_err(std::io::Error::from)?;
            writeln!(out)?;
        } else {
            writeln!(out, "{}", text_line(rec))?;
            match decoded {
                Some(Ok(v)) => writeln!(out, "    {v}")?,
                Some(Err(e)) => writeln!(out, "    decode error: {e}")?,
                None => {}
            }
        }
        Ok(Flow::Continue)
    })?;
    tracing::debug!(shown, records = outcome.records, "dump done");
    // Only damage inside the requested range matters to a dump.
    let relevant: Vec<_> = outcome
        .faults
        .iter()
        .filter(|f| {
            f.seq.is_none_or(|s| {
                args.from.is_none_or(|from| s >= from) && args.to.is_none_or(|to| s <= to)
            })
        })
        .collect();
    for fault in &relevant {
        eprintln!("crescent-replay: journal fault: {fault}");
    }
    if decode_failures > 0 {
        eprintln!("crescent-replay: {decode_failures} event(s) could not be decoded");
    }
    Ok(if relevant.is_empty() && decode_failures == 0 {
        EXIT_OK
    } else {
        EXIT_FAULT
    })
}

#[cfg(test)]
mod tests {
    use super::StreamFilter;

    #[test]
    fn stream_filter_parses_kind_and_optional_id() {
        assert_eq!(
            StreamFilter::parse("segment_registry").unwrap(),
            StreamFilter {
                kind: "segment_registry".into(),
                id: None
            }
        );
        let f = StreamFilter::parse("weights/a/b").unwrap();
        assert_eq!((f.kind.as_str(), f.id.as_deref()), ("weights", Some("a/b")));
        for bad in ["", "/x", "kind/"] {
            assert!(StreamFilter::parse(bad).is_err(), "{bad:?}");
        }
    }
}
