//! A small replay state and record builders shared by the integration tests.
#![allow(dead_code)]

use std::collections::BTreeMap;

use crescent_journal::{chain_digest, EventData, Record, RecordRef, StreamId};
use crescent_snapshot::{Position, ReplayState, Section, SectionSet, SectionSpec};

/// Counts events per stream id; its sections are a required `meta` and an optional `tally`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    pub position: Position,
    pub counts: BTreeMap<String, u64>,
}

#[derive(Debug, thiserror::Error)]
pub enum TallyError {
    #[error("bad section {0}")]
    BadSection(String),
    #[error("refused record {0}")]
    Refused(u64),
}

impl ReplayState for Tally {
    type Error = TallyError;

    fn section_specs(&self) -> Vec<SectionSpec> {
        vec![
            SectionSpec {
                name: "meta".into(),
                schema: 1,
                optional: false,
            },
            SectionSpec {
                name: "tally".into(),
                schema: 1,
                optional: true,
            },
        ]
    }

    fn position(&self) -> Position {
        self.position
    }

    fn apply(&mut self, rec: RecordRef<'_>) -> Result<(), TallyError> {
        if rec.event_kind == "poison" {
            return Err(TallyError::Refused(rec.seq));
        }
        *self.counts.entry(rec.stream_id.to_string()).or_default() += 1;
        self.position = Position::of_ref(&rec);
        Ok(())
    }

    fn to_sections(&self) -> Result<Vec<Section>, TallyError> {
        let mut meta = self.position.seq.to_le_bytes().to_vec();
        meta.extend_from_slice(&self.position.term.to_le_bytes());
        meta.extend_from_slice(&self.position.digest);
        let tally = self
            .counts
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("\n");
        Ok(vec![
            Section {
                name: "meta".into(),
                optional: false,
                schema: 1,
                body: meta,
            },
            Section {
                name: "tally".into(),
                optional: true,
                schema: 1,
                body: tally.into_bytes(),
            },
        ])
    }

    fn load_sections(&mut self, at: &Position, mut sections: SectionSet) -> Result<(), TallyError> {
        let meta = sections
            .take("meta")
            .ok_or_else(|| TallyError::BadSection("meta".into()))?;
        if meta.body.len() != 48 || meta.body[..8] != at.seq.to_le_bytes() {
            return Err(TallyError::BadSection("meta".into()));
        }
        self.counts.clear();
        if let Some(t) = sections.take("tally") {
            let text =
                String::from_utf8(t.body).map_err(|_| TallyError::BadSection("tally".into()))?;
            for line in text.lines() {
                let (k, v) = line
                    .split_once('=')
                    .ok_or_else(|| TallyError::BadSection("tally".into()))?;
                let v = v
                    .parse()
                    .map_err(|_| TallyError::BadSection("tally".into()))?;
                self.counts.insert(k.to_string(), v);
            }
        }
        self.position = *at;
        Ok(())
    }
}

/// `n` chained records starting after `after`, spread over three stream ids.
pub fn records_after(after: Position, n: u64) -> Vec<Record> {
    let mut prev = after;
    (0..n)
        .map(|i| {
            let seq = prev.seq + 1;
            let stream = StreamId::new("tally", format!("s{}", seq % 3));
            let event = EventData {
                kind: "tick".into(),
                version: 1,
                payload: vec![i as u8; 8],
            };
            let digest = chain_digest(&prev.digest, seq, 1, seq as i64, &stream, &event);
            let rec = Record {
                seq,
                term: 1,
                timestamp_ms: seq as i64,
                stream,
                event,
                digest,
            };
            prev = Position::of(&rec);
            rec
        })
        .collect()
}

pub fn records(n: u64) -> Vec<Record> {
    records_after(Position::GENESIS, n)
}

/// The state after folding `recs` into an empty tally.
pub fn tally_of(recs: &[Record]) -> Tally {
    let mut t = Tally::default();
    for r in recs {
        t.apply(r.as_ref()).unwrap();
    }
    t
}
