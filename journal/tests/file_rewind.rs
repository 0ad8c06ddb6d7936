//! Offline rewind of a file journal (a deposed active rejoining as a standby).

use crescent_journal::file::rewind::rewind_after;
use crescent_journal::file::{FileBackend, FileOptions};
use crescent_journal::{
    EventData, Journal, JournalError, JournalOptions, NewRecord, Record, StreamId, GENESIS_DIGEST,
};

fn open(dir: &std::path::Path) -> Journal {
    let backend = FileBackend::open(
        dir,
        FileOptions {
            segment_bytes: 64 << 10,
            ..FileOptions::default()
        },
    )
    .unwrap();
    Journal::open(Box::new(backend), JournalOptions::default()).unwrap()
}

fn rec(i: u64) -> NewRecord {
    NewRecord {
        stream: StreamId::new("t", "x"),
        event: EventData {
            kind: "e".into(),
            version: 1,
            payload: vec![(i % 251) as u8; 700],
        },
        timestamp_ms: i as i64,
    }
}

fn all(j: &Journal) -> Vec<Record> {
    j.read_from(j.first_seq())
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

fn fill(dir: &std::path::Path, n: u64) -> Vec<Record> {
    let j = open(dir);
    for i in 0..n {
        j.append_blocking(2, vec![rec(i)]).unwrap();
    }
    let records = all(&j);
    j.shutdown().unwrap();
    records
}

#[test]
fn rewind_drops_the_tail_and_appends_continue_the_chain() {
    let d = tempfile::tempdir().unwrap();
    let before = fill(d.path(), 300); // several 64 KiB segments
    let segments = std::fs::read_dir(d.path()).unwrap().count();
    assert!(segments > 3, "{segments}");
    let report = rewind_after(d.path(), 120, &before[119].digest).unwrap();
    assert_eq!(report.dropped_records, 180);
    assert_eq!(report.last_dropped, 300);
    assert!(report.dropped_bytes > 180 * 700);
    let j = open(d.path());
    assert_eq!(j.head(), (120, 2, before[119].digest));
    assert_eq!(all(&j), before[..120].to_vec());
    let ack = j.append_blocking(5, vec![rec(999)]).unwrap();
    assert_eq!(ack.first_seq, 121);
    let again = all(&j);
    assert_eq!(
        again[120].expected_digest(&before[119].digest),
        again[120].digest
    );
    j.shutdown().unwrap();
    // nothing to drop is a no-op
    let j_last = again.last().unwrap().clone();
    let r = rewind_after(d.path(), j_last.seq, &j_last.digest).unwrap();
    assert_eq!(r.dropped_records, 0);
}

#[test]
fn a_wrong_digest_or_a_missing_record_changes_nothing() {
    let d = tempfile::tempdir().unwrap();
    let before = fill(d.path(), 50);
    assert!(matches!(
        rewind_after(d.path(), 20, &before[20].digest),
        Err(JournalError::Diverged { seq: 20, .. })
    ));
    assert!(matches!(
        rewind_after(d.path(), 80, &before[0].digest),
        Err(JournalError::OutOfRange { .. })
    ));
    let j = open(d.path());
    assert_eq!(all(&j), before);
    j.shutdown().unwrap();
}

#[test]
fn rewind_to_genesis_and_to_a_segment_boundary() {
    let d = tempfile::tempdir().unwrap();
    let before = fill(d.path(), 200);
    // find a record that starts a segment: the file names are first seqs
    let mut firsts: Vec<u64> = std::fs::read_dir(d.path())
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".seg").and_then(|s| s.parse().ok())
        })
        .collect();
    firsts.sort();
    let boundary = firsts[2];
    rewind_after(
        d.path(),
        boundary - 1,
        &before[(boundary - 2) as usize].digest,
    )
    .unwrap();
    let j = open(d.path());
    assert_eq!(j.last_seq(), boundary - 1);
    assert_eq!(all(&j), before[..(boundary - 1) as usize].to_vec());
    j.append_blocking(3, vec![rec(1)]).unwrap();
    j.shutdown().unwrap();

    let e = tempfile::tempdir().unwrap();
    fill(e.path(), 10);
    rewind_after(e.path(), 0, &GENESIS_DIGEST).unwrap();
    let j = open(e.path());
    assert_eq!(j.last_seq(), 0);
    assert_eq!(j.append_blocking(4, vec![rec(1)]).unwrap().first_seq, 1);
    j.shutdown().unwrap();
}
