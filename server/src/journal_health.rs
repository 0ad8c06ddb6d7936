//! The `journal` part of `/healthz` and `crescent status`: damaged tails that recovery copied
//! into the journal's quarantine directory and that no operator has cleared yet
//! (docs/journal-format.md, "Quarantine"; docs/operations.md).

use std::path::Path;

use crescent_journal::quarantine::{self, QuarantineEntry};
use crescent_journal::JournalMetrics;
use serde::Serialize;

/// Present in the health document only while the quarantine holds something (or cannot be
/// read), so older clients and the common case see no new field.
#[derive(Debug, Clone, Serialize)]
pub struct JournalHealth {
    /// One row per quarantined tail, in seq order.
    pub quarantined: Vec<QuarantinedTail>,
    /// Set when the quarantine directory cannot be listed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quarantine_error: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct QuarantinedTail {
    /// The first seq the journal no longer holds.
    pub seq: u64,
    /// `damaged` (a complete frame that failed its check: it may have been acknowledged) or
    /// `incomplete` (a write that did not finish).
    pub kind: &'static str,
    pub segment: String,
    pub offset: u64,
    pub bytes: u64,
    /// The copy, relative to the journal directory.
    pub file: String,
    /// Present once the journal holds the record again (received from an active).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recovered: Option<quarantine::Recovered>,
}

impl From<&QuarantineEntry> for QuarantinedTail {
    fn from(e: &QuarantineEntry) -> Self {
        QuarantinedTail {
            seq: e.seq,
            kind: e.kind.as_str(),
            segment: e.segment.clone(),
            offset: e.offset,
            bytes: e.bytes,
            file: format!("{}/{}", quarantine::QUARANTINE_DIR, e.data_file),
            recovered: e.recovered.clone(),
        }
    }
}

/// Lists the quarantine of `journal_dir`, sets the `crescent_journal_quarantined_frames`
/// gauge from it, and returns the health part (`None` when the quarantine is empty).
pub fn journal_health(journal_dir: &Path, metrics: &JournalMetrics) -> Option<JournalHealth> {
    match quarantine::list(journal_dir) {
        Ok(entries) => {
            metrics.set_quarantined(&entries);
            (!entries.is_empty()).then(|| JournalHealth {
                quarantined: entries.iter().map(QuarantinedTail::from).collect(),
                quarantine_error: None,
            })
        }
        Err(e) => Some(JournalHealth {
            quarantined: Vec::new(),
            quarantine_error: Some(e.to_string()),
        }),
    }
}

/// Why an HA node must not campaign (docs/ha.md, "A quarantined journal tail"): its journal
/// ends before a `damaged` frame it quarantined, a record that may have been acknowledged and
/// that its peer may hold. The hold lifts once the node has caught up past that seq from the
/// active, or once an operator clears the quarantine (accepting the loss). An `incomplete`
/// tail (a write whose sync never finished here) does not hold.
pub fn campaign_hold(journal_dir: &Path, last_seq: u64) -> Option<String> {
    let entries = match quarantine::list(journal_dir) {
        Ok(entries) => entries,
        Err(e) => return Some(format!("the journal quarantine cannot be read: {e}")),
    };
    let seq = entries
        .iter()
        .filter(|q| q.is_unrecovered_damage() && q.seq > last_seq)
        .map(|q| q.seq)
        .min()?;
    Some(format!(
        "the journal quarantined a damaged frame at seq {seq} and holds records only up to \
         {last_seq}; a peer may hold that record: this node follows an active to get it, or an \
         operator clears the quarantine (crescent-replay quarantine clear) to accept its loss"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crescent_journal::quarantine::{DamageKind, QUARANTINE_FORMAT_VERSION};

    fn put(journal_dir: &Path, seq: u64, kind: DamageKind) {
        let entry = QuarantineEntry {
            format_version: QUARANTINE_FORMAT_VERSION,
            seq,
            segment: "00000000000000000001.seg".into(),
            offset: 64,
            bytes: 10,
            kind,
            reason: "test".into(),
            data_file: format!("seq-{seq}-off-64.frame"),
            later_segments: Vec::new(),
            recovered: None,
        };
        let dir = quarantine::quarantine_dir(journal_dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join(entry.meta_file()),
            serde_json::to_vec(&entry).unwrap(),
        )
        .unwrap();
    }

    #[test]
    fn a_damaged_quarantined_seq_beyond_the_journal_holds_the_campaign() {
        let t = tempfile::tempdir().unwrap();
        assert_eq!(campaign_hold(t.path(), 5), None, "no quarantine");
        put(t.path(), 4, DamageKind::Incomplete);
        assert_eq!(
            campaign_hold(t.path(), 3),
            None,
            "an incomplete write does not hold"
        );
        put(t.path(), 6, DamageKind::Damaged);
        let reason = campaign_hold(t.path(), 5).expect("held");
        assert!(reason.contains("seq 6"), "{reason}");
        assert_eq!(campaign_hold(t.path(), 6), None, "caught up past it");
        quarantine::clear(t.path()).unwrap();
        assert_eq!(campaign_hold(t.path(), 5), None, "cleared");
    }

    #[test]
    fn the_health_part_is_absent_without_a_quarantine() {
        let t = tempfile::tempdir().unwrap();
        let metrics = JournalMetrics::unregistered();
        assert!(journal_health(t.path(), &metrics).is_none());
        put(t.path(), 6, DamageKind::Damaged);
        let h = journal_health(t.path(), &metrics).expect("reported");
        assert_eq!(h.quarantined.len(), 1);
        assert_eq!(h.quarantined[0].kind, "damaged");
        assert_eq!(h.quarantined[0].file, "quarantine/seq-6-off-64.frame");
    }
}
