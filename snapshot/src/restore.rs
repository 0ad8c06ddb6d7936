//! Recovery: the newest valid snapshot plus the journal tail after it.

use std::path::PathBuf;

use crate::error::{Result, SnapshotError};
use crate::format::Position;
use crate::source::JournalSource;
use crate::state::ReplayState;
use crate::store::{SkippedSnapshot, SnapshotDir};

/// The outcome of [`restore`].
#[derive(Debug)]
pub struct Restored<S> {
    pub state: S,
    /// The snapshot restore started from (`None`: replayed from the start of the journal).
    pub snapshot: Option<(PathBuf, Position)>,
    /// Damaged newer snapshots that were skipped (each was logged).
    pub skipped: Vec<SkippedSnapshot>,
    /// Journal records replayed on top of the snapshot.
    pub replayed: u64,
}

impl<S: ReplayState> Restored<S> {
    /// The last seq folded into `state`.
    pub fn last_applied_seq(&self) -> u64 {
        self.state.position().seq
    }
}

/// Rebuilds `empty` (a fresh state) from the newest valid snapshot in `dir` plus the records
/// `journal` holds after it.
///
/// Fails closed when: a snapshot is of a newer format/schema or has an unknown required section;
/// the journal lacks records between the snapshot and its tail ([`SnapshotError::JournalGap`]);
/// the journal ends before the snapshot; the first tail record does not continue the snapshot's
/// chain digest, or seqs are not contiguous ([`SnapshotError::Discontinuity`]); or the state
/// refuses a record.
pub fn restore<S: ReplayState, J: JournalSource + ?Sized>(
    dir: &SnapshotDir,
    journal: &J,
    empty: S,
) -> Result<Restored<S>> {
    restore_upto(dir, journal, empty, u64::MAX)
}

/// [`restore`], stopping at seq `upto`: starts from the newest valid snapshot at or before
/// `upto` and replays records up to it. If the journal ends earlier, the state stops there
/// (compare [`Restored::last_applied_seq`] with `upto`).
pub fn restore_upto<S: ReplayState, J: JournalSource + ?Sized>(
    dir: &SnapshotDir,
    journal: &J,
    empty: S,
    upto: u64,
) -> Result<Restored<S>> {
    let span = tracing::info_span!("snapshot.restore", dir = %dir.path().display(), upto);
    let _g = span.enter();
    let mut state = empty;
    let newest = dir.newest_valid_upto(&state.section_specs(), upto)?;
    let snapshot = match newest.snapshot {
        Some((header, path, set)) => {
            let at = header.position;
            state
                .load_sections(&at, set)
                .map_err(|e| SnapshotError::state(format!("loading {}", path.display()), e))?;
            if state.position() != at {
                return Err(SnapshotError::Corrupt {
                    file: path,
                    section: "meta".into(),
                    reason: format!(
                        "state loaded at seq {} but the header says seq {}",
                        state.position().seq,
                        at.seq
                    ),
                });
            }
            tracing::info!(file = %path.display(), seq = at.seq, "loaded snapshot");
            Some((path, at))
        }
        None => None,
    };
    let base = state.position();
    let snapshot_path = snapshot.as_ref().map(|(p, _)| p.clone());

    let journal_first = journal.first_seq();
    if journal_first > base.seq + 1 {
        return Err(SnapshotError::JournalGap {
            snapshot: snapshot_path,
            needed_from: base.seq + 1,
            journal_first,
        });
    }
    let durable = journal.durable().get();
    if durable < base.seq {
        return Err(SnapshotError::JournalBehindSnapshot {
            file: snapshot_path.unwrap_or_default(),
            snapshot_seq: base.seq,
            journal_last: durable,
        });
    }

    let mut replayed = 0u64;
    if durable > base.seq && upto > base.seq {
        let mut prev = base;
        crescent_journal::visit_capturing(
            |visit| journal.visit_range(base.seq + 1, upto, visit),
            |rec| {
                if rec.seq != prev.seq + 1 {
                    return Err(SnapshotError::Discontinuity {
                        snapshot: snapshot_path.clone(),
                        after: prev.seq,
                        reason: format!("next record has seq {}", rec.seq),
                    });
                }
                // The chain link between the snapshot and the journal is what proves the tail
                // belongs to the same history; later links are the journal's to verify.
                if replayed == 0 && rec.expected_digest(&prev.digest) != *rec.digest {
                    return Err(SnapshotError::Discontinuity {
                        snapshot: snapshot_path.clone(),
                        after: prev.seq,
                        reason: format!(
                            "record {} does not continue the chain digest {}",
                            rec.seq,
                            hex::encode(prev.digest)
                        ),
                    });
                }
                state
                    .apply(rec)
                    .map_err(|e| SnapshotError::state(format!("replaying seq {}", rec.seq), e))?;
                prev = Position::of_ref(&rec);
                replayed += 1;
                Ok(())
            },
        )?;
    }
    tracing::info!(
        from = base.seq,
        replayed,
        last_seq = state.position().seq,
        "restore complete"
    );
    Ok(Restored {
        state,
        snapshot,
        skipped: newest.skipped,
        replayed,
    })
}
