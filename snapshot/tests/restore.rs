//! restore = newest valid snapshot + journal tail, and every way it fails closed.

mod common;

use std::fs;

use common::{records, records_after, tally_of, Tally};
use crescent_journal::EventData;
use crescent_snapshot::{
    restore, restore_upto, JournalSource, RecordBuffer, ReplayState, Section, SnapshotDir,
    SnapshotError,
};

fn journal_with(n: u64) -> (RecordBuffer, Vec<crescent_journal::Record>) {
    let recs = records(n);
    let j = RecordBuffer::new();
    j.push(recs.clone()).unwrap();
    (j, recs)
}

fn snapshot_at(dir: &SnapshotDir, recs: &[crescent_journal::Record], s: usize) {
    let t = tally_of(&recs[..s]);
    dir.write(&t.position(), 0, &t.to_sections().unwrap())
        .unwrap();
}

#[test]
fn without_a_snapshot_replays_the_whole_journal() {
    let tmp = tempfile::tempdir().unwrap();
    let (j, recs) = journal_with(20);
    let r = restore(
        &SnapshotDir::new(tmp.path().join("none")),
        &j,
        Tally::default(),
    )
    .unwrap();
    assert_eq!(r.state, tally_of(&recs));
    assert_eq!(r.last_applied_seq(), 20);
    assert_eq!(r.replayed, 20);
    assert!(r.snapshot.is_none());
}

#[test]
fn snapshot_plus_tail_equals_full_replay() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = SnapshotDir::new(tmp.path());
    let (j, recs) = journal_with(50);
    for s in [0usize, 1, 17, 49, 50] {
        snapshot_at(&dir, &recs, s);
        let r = restore(&dir, &j, Tally::default()).unwrap();
        assert_eq!(r.state, tally_of(&recs), "snapshot at {s}");
        assert_eq!(r.replayed, 50 - s as u64);
        assert_eq!(r.snapshot.as_ref().unwrap().1.seq, s as u64);
    }
}

#[test]
fn damaged_newest_falls_back_while_the_journal_holds_the_tail() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = SnapshotDir::new(tmp.path());
    let (j, recs) = journal_with(40);
    snapshot_at(&dir, &recs, 10);
    snapshot_at(&dir, &recs, 30);
    let newest = tmp.path().join(SnapshotDir::file_name(30));
    let mut bytes = fs::read(&newest).unwrap();
    bytes[100] ^= 0x01;
    fs::write(&newest, bytes).unwrap();
    j.truncate_prefix(11).unwrap();
    let r = restore(&dir, &j, Tally::default()).unwrap();
    assert_eq!(r.state, tally_of(&recs));
    assert_eq!(r.snapshot.as_ref().unwrap().1.seq, 10);
    assert_eq!(r.skipped.len(), 1);
    assert_eq!(r.skipped[0].path, newest);

    // Once the journal no longer holds the tail from the older snapshot: fail closed.
    j.truncate_prefix(20).unwrap();
    let err = restore(&dir, &j, Tally::default()).unwrap_err();
    assert!(
        matches!(
            err,
            SnapshotError::JournalGap {
                needed_from: 11,
                journal_first: 20,
                ..
            }
        ),
        "{err}"
    );
    assert!(
        err.to_string().contains("snap-00000000000000000010.crsnap"),
        "{err}"
    );
}

#[test]
fn all_snapshots_damaged_and_journal_truncated_fails_closed() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = SnapshotDir::new(tmp.path());
    let (j, recs) = journal_with(10);
    snapshot_at(&dir, &recs, 5);
    let path = tmp.path().join(SnapshotDir::file_name(5));
    let bytes = fs::read(&path).unwrap();
    fs::write(&path, &bytes[..bytes.len() - 1]).unwrap();
    j.truncate_prefix(6).unwrap();
    let err = restore(&dir, &j, Tally::default()).unwrap_err();
    assert!(
        matches!(
            err,
            SnapshotError::JournalGap {
                snapshot: None,
                needed_from: 1,
                journal_first: 6
            }
        ),
        "{err}"
    );
}

#[test]
fn journal_behind_the_snapshot_fails_closed() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = SnapshotDir::new(tmp.path());
    let recs = records(30);
    snapshot_at(&dir, &recs, 30);
    let j = RecordBuffer::new();
    j.push(recs[..20].to_vec()).unwrap();
    let err = restore(&dir, &j, Tally::default()).unwrap_err();
    assert!(
        matches!(
            err,
            SnapshotError::JournalBehindSnapshot {
                snapshot_seq: 30,
                journal_last: 20,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn a_tail_from_another_history_fails_closed() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = SnapshotDir::new(tmp.path());
    let recs = records(10);
    snapshot_at(&dir, &recs, 5);
    // Same seqs, but the journal forked at seq 3.
    let mut forked = recs[..2].to_vec();
    let mut other = records_after(common::tally_of(&recs[..2]).position, 8);
    other[0].event.payload = b"different".to_vec();
    let other = {
        // Rechain after the edit.
        let mut prev = tally_of(&recs[..2]).position;
        other
            .into_iter()
            .map(|mut r| {
                r.digest = r.expected_digest(&prev.digest);
                prev = crescent_snapshot::Position::of(&r);
                r
            })
            .collect::<Vec<_>>()
    };
    forked.extend(other);
    let j = RecordBuffer::new();
    j.push(forked).unwrap();
    let err = restore(&dir, &j, Tally::default()).unwrap_err();
    assert!(
        matches!(err, SnapshotError::Discontinuity { after: 5, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("chain"), "{err}");
}

#[test]
fn a_record_the_state_refuses_fails_closed() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, mut recs) = journal_with(5);
    recs[3].event = EventData {
        kind: "poison".into(),
        version: 1,
        payload: vec![],
    };
    let j = RecordBuffer::new();
    j.push(recs).unwrap();
    let err = restore(&SnapshotDir::new(tmp.path()), &j, Tally::default()).unwrap_err();
    assert!(matches!(err, SnapshotError::State { .. }), "{err}");
    assert!(err.to_string().contains("seq 4"), "{err}");
    let _ = j.first_seq();
}

#[test]
fn restore_upto_stops_at_the_requested_seq() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = SnapshotDir::new(tmp.path());
    let (j, recs) = journal_with(30);
    snapshot_at(&dir, &recs, 10);
    snapshot_at(&dir, &recs, 25);
    let r = restore_upto(&dir, &j, Tally::default(), 20).unwrap();
    assert_eq!(r.state, tally_of(&recs[..20]));
    assert_eq!(
        r.snapshot.as_ref().unwrap().1.seq,
        10,
        "the snapshot at 25 is past the target"
    );
    assert_eq!(r.replayed, 10);
    let r = restore_upto(&dir, &j, Tally::default(), 25).unwrap();
    assert_eq!(r.replayed, 0);
    assert_eq!(r.last_applied_seq(), 25);
    // Past the end of the journal: the state stops at its end.
    let r = restore_upto(&dir, &j, Tally::default(), 99).unwrap();
    assert_eq!(r.last_applied_seq(), 30);
}

#[test]
fn unknown_optional_section_on_disk_is_ignored() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = SnapshotDir::new(tmp.path());
    let (j, recs) = journal_with(12);
    let t = tally_of(&recs[..8]);
    let mut sections = t.to_sections().unwrap();
    sections.push(Section {
        name: "weight_revision".into(),
        optional: true,
        schema: 7,
        body: b"state of an aggregate this build does not have".to_vec(),
    });
    dir.write(&t.position(), 0, &sections).unwrap();
    let r = restore(&dir, &j, Tally::default()).unwrap();
    assert_eq!(r.snapshot.as_ref().unwrap().1.seq, 8);
    assert_eq!(r.state, tally_of(&recs));
}

#[test]
fn missing_optional_section_on_disk_starts_that_part_empty() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = SnapshotDir::new(tmp.path());
    let (j, recs) = journal_with(6);
    let t = tally_of(&recs[..6]);
    let sections: Vec<Section> = t
        .to_sections()
        .unwrap()
        .into_iter()
        .filter(|s| s.name != "tally")
        .collect();
    dir.write(&t.position(), 0, &sections).unwrap();
    let r = restore(&dir, &j, Tally::default()).unwrap();
    assert!(r.state.counts.is_empty());
    assert_eq!(r.last_applied_seq(), 6);
}
