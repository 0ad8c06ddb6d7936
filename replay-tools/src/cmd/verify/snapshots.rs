//! Snapshot checks for `verify`: every snapshot file on its own (format, checksums, sections
//! the standard [`World`] can load), then each one against the journal as the journal walk
//! passes its seq: the chain position must match the journal's record at that seq, and the
//! state must equal the journal replayed from the start (or from an older snapshot).

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use crescent_actors::World;
use crescent_journal::file::segment::SegmentHeader;
use crescent_journal::Record;
use crescent_snapshot::{Position, ReplayState, SnapshotDir};
use serde::Serialize;

use crate::fault::{Fault, FaultSource};

/// What `verify` says about one snapshot file.
#[derive(Debug, Clone, Serialize)]
pub struct SnapshotReport {
    pub seq: u64,
    pub file: String,
    /// `matches_replay`, `replay_base` (chain checked; state used as the base of replay),
    /// `not_covered` (below the journal's first seq; file checked only), `unverified` (the
    /// journal has no intact record there), or `invalid`.
    pub status: &'static str,
    pub detail: String,
}

/// A snapshot that decoded into a [`World`], waiting for the journal walk to reach its seq.
struct Candidate {
    seq: u64,
    path: PathBuf,
    world: World,
}

/// Follows the journal walk. See the module docs.
pub struct SnapshotChecker {
    pending: VecDeque<Candidate>,
    pub reports: Vec<SnapshotReport>,
    pub faults: Vec<Fault>,
    /// The journal replayed so far (`None` before a base is known or after damage).
    replay: Option<World>,
    /// Whether replay ever had a base (genesis or a snapshot).
    ever_based: bool,
    journal_first: u64,
}

impl SnapshotChecker {
    /// Reads and checks every snapshot file in `dir` (a missing dir holds none).
    pub fn load(dir: &Path) -> crate::error::Result<Self> {
        let mut checker = Self {
            pending: VecDeque::new(),
            reports: Vec::new(),
            faults: Vec::new(),
            replay: None,
            ever_based: false,
            journal_first: 1,
        };
        for entry in SnapshotDir::new(dir).list()? {
            match load_world(&entry.path, entry.seq) {
                Ok(world) => checker.pending.push_back(Candidate {
                    seq: entry.seq,
                    path: entry.path,
                    world,
                }),
                Err(detail) => checker.invalid(entry.seq, &entry.path, "bad_snapshot", detail),
            }
        }
        Ok(checker)
    }

    fn invalid(&mut self, seq: u64, path: &Path, kind: &str, detail: String) {
        self.faults.push(Fault::new(
            FaultSource::Snapshot,
            Some(seq),
            kind,
            path,
            detail.clone(),
        ));
        self.report(seq, path, "invalid", detail);
    }

    fn report(&mut self, seq: u64, path: &Path, status: &'static str, detail: String) {
        self.reports.push(SnapshotReport {
            seq,
            file: path.display().to_string(),
            status,
            detail,
        });
    }

    /// The journal starts at `first_seq`, after the position in `header` (the first segment's
    /// header, `None` if unreadable).
    pub fn start(&mut self, first_seq: u64, header: Option<&SegmentHeader>) {
        self.journal_first = first_seq;
        let before = first_seq.saturating_sub(1);
        while let Some(c) = self.pending.front().filter(|c| c.seq < before) {
            let (seq, path) = (c.seq, c.path.clone());
            self.pending.pop_front();
            self.report(
                seq,
                &path,
                "not_covered",
                format!("below the journal's first seq {first_seq}: file checked only"),
            );
        }
        if first_seq <= 1 {
            self.replay = Some(crescent_domain::standard_world());
            self.ever_based = true;
            self.at(Position::GENESIS);
        } else if let Some(h) = header {
            self.at(Position {
                seq: before,
                term: h.prev_term,
                digest: h.prev_digest,
            });
        }
    }

    /// Folds in one intact record (stored in `location`) and checks the snapshots at its seq.
    pub fn on_record(&mut self, rec: &Record, location: &Path) {
        if let Some(world) = &mut self.replay {
            if let Err(e) = world.apply(rec) {
                self.faults.push(Fault::new(
                    FaultSource::Replay,
                    Some(rec.seq),
                    "unreplayable_record",
                    location,
                    format!(
                        "the aggregates cannot replay this record ({}): {e}",
                        rec.stream
                    ),
                ));
                self.replay = None;
            }
        }
        self.at(Position::of(rec));
    }

    /// Journal damage: the state after it is unknown until a later snapshot gives a new base.
    pub fn on_journal_fault(&mut self) {
        self.replay = None;
    }

    /// The journal stands at `pos`: check the snapshots taken there.
    fn at(&mut self, pos: Position) {
        while let Some(c) = self.pending.front().filter(|c| c.seq < pos.seq) {
            let (seq, path) = (c.seq, c.path.clone());
            self.pending.pop_front();
            self.report(
                seq,
                &path,
                "unverified",
                format!("the journal has no intact record {seq} to compare with"),
            );
        }
        while self.pending.front().is_some_and(|c| c.seq == pos.seq) {
            let c = self.pending.pop_front().expect("front checked");
            self.compare(c, pos);
        }
    }

    fn compare(&mut self, c: Candidate, pos: Position) {
        let snap = c.world.position();
        if snap != pos {
            let detail = format!(
                "snapshot position (term {}, digest {}) differs from the journal's at seq {} \
                 (term {}, digest {}): they are different histories",
                snap.term,
                short(&snap.digest),
                pos.seq,
                pos.term,
                short(&pos.digest)
            );
            self.invalid(c.seq, &c.path, "snapshot_chain_mismatch", detail);
            return;
        }
        match &self.replay {
            Some(replayed) if *replayed == c.world => {
                self.report(
                    c.seq,
                    &c.path,
                    "matches_replay",
                    "chain digest and every aggregate equal the replayed journal".into(),
                );
            }
            Some(replayed) => {
                let detail = format!(
                    "state differs from the replayed journal in aggregate kind(s) {}",
                    differing_kinds(replayed, &c.world).join(", ")
                );
                self.invalid(c.seq, &c.path, "snapshot_state_mismatch", detail);
                // Keep replaying the journal's own state: it is the ground truth.
            }
            None => {
                self.report(
                    c.seq,
                    &c.path,
                    "replay_base",
                    "chain digest matches the journal; replay continues from this snapshot".into(),
                );
                self.replay = Some(c.world);
                self.ever_based = true;
            }
        }
    }

    /// The walk ended; `last_seq` is the journal's last intact seq (`None`: no records).
    pub fn finish(&mut self, last_seq: Option<u64>, journal_dir: &Path) {
        let end = last_seq.unwrap_or(self.journal_first.saturating_sub(1));
        while let Some(c) = self.pending.pop_front() {
            let detail = format!(
                "snapshot is at seq {} but the journal ends at seq {end}: acknowledged records \
                 are missing from the journal",
                c.seq
            );
            self.invalid(c.seq, &c.path, "snapshot_ahead_of_journal", detail);
        }
        if !self.ever_based {
            self.faults.push(Fault::new(
                FaultSource::Snapshot,
                None,
                "unrestorable_prefix",
                journal_dir,
                format!(
                    "the journal starts at seq {} and no valid snapshot at seq >= {} covers the \
                     records before it: the state cannot be restored",
                    self.journal_first,
                    self.journal_first.saturating_sub(1)
                ),
            ));
        }
        self.reports.sort_by_key(|r| r.seq);
        self.faults.sort_by_key(|f| f.seq);
    }
}

/// Reads one snapshot file into a standard world, or says why it cannot be.
fn load_world(path: &Path, name_seq: u64) -> Result<World, String> {
    let snap = SnapshotDir::read(path).map_err(|e| e.to_string())?;
    let at = snap.header.position;
    if at.seq != name_seq {
        return Err(format!(
            "header seq {} does not match the file name (seq {name_seq})",
            at.seq
        ));
    }
    let mut world = crescent_domain::standard_world();
    let set = snap
        .into_section_set(&world.section_specs())
        .map_err(|e| e.to_string())?;
    world.load_sections(&at, set).map_err(|e| e.to_string())?;
    Ok(world)
}

fn differing_kinds(a: &World, b: &World) -> Vec<String> {
    let (Ok(ja), Ok(jb)) = (a.to_json(), b.to_json()) else {
        return vec!["<unrenderable>".into()];
    };
    let kinds: std::collections::BTreeSet<&String> = ja["aggregates"]
        .as_object()
        .into_iter()
        .chain(jb["aggregates"].as_object())
        .flat_map(|m| m.keys())
        .collect();
    kinds
        .into_iter()
        .filter(|k| ja["aggregates"].get(*k) != jb["aggregates"].get(*k))
        .cloned()
        .collect()
}

fn short(d: &[u8; 32]) -> String {
    hex::encode(&d[..8])
}
