//! Sled-backend specifics beyond the conformance suite: missing keys, values under the wrong
//! key, and values of a newer frame format.

use crescent_journal::codec::FRAME_PREFIX_LEN;
use crescent_journal::sled_backend::SledBackend;
use crescent_journal::{
    EventData, Journal, JournalError, JournalOptions, NewRecord, RecoveryMode, StreamId,
};

fn rec(n: u64) -> NewRecord {
    NewRecord {
        stream: StreamId::new("test", "s"),
        event: EventData {
            kind: "e".into(),
            version: 1,
            payload: vec![n as u8; 40],
        },
        timestamp_ms: n as i64,
    }
}

fn open(path: &std::path::Path, mode: RecoveryMode) -> Result<Journal, JournalError> {
    Journal::open(
        Box::new(SledBackend::open(path)?),
        JournalOptions {
            recovery_mode: mode,
            ..JournalOptions::default()
        },
    )
}

fn fill(path: &std::path::Path, n: u64) {
    let j = open(path, RecoveryMode::default()).unwrap();
    for i in 0..n {
        j.append_blocking(1, vec![rec(i)]).unwrap();
    }
    j.shutdown().unwrap();
}

fn with_db(path: &std::path::Path, f: impl FnOnce(&sled::Db)) {
    // sled drops its file lock a moment after the journal's last handle goes
    let mut tries = 0;
    let db = loop {
        match sled::open(path) {
            Ok(db) => break db,
            Err(e) if tries < 300 => {
                tries += 1;
                let _ = e;
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(e) => panic!("open sled: {e}"),
        }
    };
    f(&db);
    db.flush().unwrap();
}

#[test]
fn a_missing_middle_key_is_corrupt_in_every_mode() {
    let t = tempfile::tempdir().unwrap();
    let path = t.path().join("db");
    fill(&path, 10);
    with_db(&path, |db| {
        db.remove(4u64.to_be_bytes()).unwrap();
    });
    for mode in [
        RecoveryMode::TolerateTailCorruption,
        RecoveryMode::AbsoluteConsistency,
    ] {
        match open(&path, mode) {
            Err(JournalError::Corrupt { seq, .. }) => assert_eq!(seq, 4),
            other => panic!("expected Corrupt at 4, got {other:?}"),
        }
    }
}

#[test]
fn a_value_under_the_wrong_key_at_the_end_is_a_tail() {
    let t = tempfile::tempdir().unwrap();
    let path = t.path().join("db");
    fill(&path, 10);
    with_db(&path, |db| {
        let v9 = db.get(9u64.to_be_bytes()).unwrap().unwrap();
        db.insert(10u64.to_be_bytes(), v9).unwrap();
    });
    assert!(matches!(
        open(&path, RecoveryMode::AbsoluteConsistency),
        Err(JournalError::TailCorruption {
            last_good_seq: 9,
            ..
        })
    ));
    let j = open(&path, RecoveryMode::TolerateTailCorruption).unwrap();
    assert_eq!(j.truncation().unwrap().last_good_seq, 9);
    assert_eq!(j.append_blocking(1, vec![rec(99)]).unwrap().last_seq, 10);
}

#[test]
fn a_newer_frame_version_is_unsupported() {
    let t = tempfile::tempdir().unwrap();
    let path = t.path().join("db");
    fill(&path, 3);
    with_db(&path, |db| {
        let body = rmp_serde::to_vec(&(9u8, 3u64)).unwrap();
        let mut frame = (body.len() as u32).to_le_bytes().to_vec();
        frame.extend_from_slice(&crescent_checksum::crc32c(&body).to_le_bytes());
        frame.extend_from_slice(&body);
        assert!(frame.len() > FRAME_PREFIX_LEN);
        db.insert(3u64.to_be_bytes(), frame).unwrap();
    });
    match open(&path, RecoveryMode::TolerateTailCorruption) {
        Err(JournalError::UnsupportedVersion { found, .. }) => assert_eq!(found, 9),
        other => panic!("expected UnsupportedVersion, got {other:?}"),
    }
}

#[test]
fn a_damaged_last_value_is_quarantined_before_it_is_removed() {
    let t = tempfile::tempdir().unwrap();
    let path = t.path().join("sled");
    fill(&path, 10);
    let mut damaged = Vec::new();
    with_db(&path, |db| {
        let mut v = db.get(10u64.to_be_bytes()).unwrap().unwrap().to_vec();
        let mid = v.len() / 2;
        v[mid] ^= 0x01;
        db.insert(10u64.to_be_bytes(), v.clone()).unwrap();
        damaged = v;
    });
    let j = open(&path, RecoveryMode::TolerateTailCorruption).unwrap();
    let report = j.truncation().unwrap();
    assert_eq!(report.last_good_seq, 9);
    let q = report.quarantine.clone().expect("copied aside");
    assert_eq!((q.seq, q.segment.as_str(), q.offset), (10, "sled", 0));
    assert_eq!(q.kind, crescent_journal::quarantine::DamageKind::Damaged);
    // Beside the database, where the file backend keeps its quarantine too.
    let copy = crescent_journal::quarantine::quarantine_dir(t.path()).join(&q.data_file);
    assert_eq!(std::fs::read(copy).unwrap(), damaged);
    assert_eq!(
        crescent_journal::quarantine::list(t.path()).unwrap(),
        vec![q]
    );
    assert_eq!(j.append_blocking(1, vec![rec(99)]).unwrap().last_seq, 10);
}
