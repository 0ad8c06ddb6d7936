//! File-backend specifics beyond the conformance suite: locking, segment layout and rotation,
//! damage across segments, version handling, and the read-only scan API.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crescent_journal::file::segment::{segment_file_name, SegmentHeader, HEADER_LEN};
use crescent_journal::file::{
    open_read_only, FaultKind, FileBackend, FileOptions, JournalScan, ScanOptions,
};
use crescent_journal::quarantine::{self, DamageKind};
use crescent_journal::{
    EventData, Journal, JournalError, JournalOptions, NewRecord, RecoveryMode, StreamId,
};

const SEG: u64 = 16 << 10;

fn opts() -> FileOptions {
    FileOptions {
        segment_bytes: SEG,
        ..FileOptions::default()
    }
}

fn open(dir: &Path, mode: RecoveryMode) -> Result<Journal, JournalError> {
    Journal::open(
        Box::new(FileBackend::open(dir, opts())?),
        JournalOptions {
            recovery_mode: mode,
            ..JournalOptions::default()
        },
    )
}

fn rec(n: u64, len: usize) -> NewRecord {
    NewRecord {
        stream: StreamId::new("test", "s"),
        event: EventData {
            kind: "e".into(),
            version: 1,
            payload: vec![(n % 256) as u8; len],
        },
        timestamp_ms: n as i64,
    }
}

/// A journal of `n` records of ~200 bytes, one per batch, in `dir`.
fn fill(dir: &Path, n: u64) {
    let j = open(dir, RecoveryMode::TolerateTailCorruption).unwrap();
    for i in 0..n {
        j.append_blocking(1, vec![rec(i, 200)]).unwrap();
    }
    j.shutdown().unwrap();
}

fn segs(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .collect();
    v.sort();
    v
}

fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| {
            let b = std::fs::read(&p).unwrap();
            (p, b)
        })
        .collect();
    v.sort();
    v
}

fn locate(dir: &Path, seq: u64) -> (PathBuf, u64, usize) {
    let scan = JournalScan::open(dir).unwrap();
    for e in scan.entries(ScanOptions {
        verify_chain: false,
    }) {
        if let crescent_journal::file::ScanEntry::Record {
            segment,
            offset,
            frame_len,
            record,
        } = e.unwrap()
        {
            if record.seq == seq {
                return (
                    scan.segment_files()[segment].path.clone(),
                    offset,
                    frame_len,
                );
            }
        }
    }
    panic!("seq {seq} not found");
}

fn patch(path: &Path, at: u64, bytes: &[u8]) {
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(bytes, at).unwrap();
}

#[test]
fn second_writer_is_refused_while_first_lives() {
    let t = tempfile::tempdir().unwrap();
    let j = open(t.path(), RecoveryMode::default()).unwrap();
    match FileBackend::open(t.path(), opts()) {
        Err(e @ JournalError::Locked { .. }) => {
            assert_eq!(e.class(), crescent_journal::error::ErrorClass::Retryable)
        }
        other => panic!("expected Locked, got {other:?}"),
    }
    j.shutdown().unwrap();
    drop(j);
    FileBackend::open(t.path(), opts()).expect("lock released after drop");
}

#[test]
fn segments_rotate_and_are_named_by_first_seq() {
    let t = tempfile::tempdir().unwrap();
    fill(t.path(), 300);
    let files = segs(t.path());
    assert!(
        files.len() > 3,
        "300 x ~260 B frames need several 16 KiB segments"
    );
    let summary = JournalScan::open(t.path()).unwrap().summary().unwrap();
    let mut expect_first = 1;
    for f in &files {
        let bytes = std::fs::read(f).unwrap();
        assert_eq!(bytes.len() as u64, SEG, "preallocated to the segment size");
        let h = SegmentHeader::decode(&bytes[..HEADER_LEN]).unwrap();
        assert_eq!(
            f.file_name().unwrap().to_str().unwrap(),
            segment_file_name(h.first_seq)
        );
        assert_eq!(h.first_seq, expect_first);
        let st = summary.segments.iter().find(|s| &s.path == f).unwrap();
        let (lo, hi) = st.seq_range.unwrap();
        assert_eq!(lo, h.first_seq);
        expect_first = hi + 1;
    }
    assert_eq!(expect_first, 301);
}

#[test]
fn record_larger_than_segment_goes_alone_into_its_own() {
    let t = tempfile::tempdir().unwrap();
    let j = open(t.path(), RecoveryMode::default()).unwrap();
    j.append_blocking(1, vec![rec(0, 100)]).unwrap();
    j.append_blocking(1, vec![rec(1, 100 << 10)]).unwrap();
    j.append_blocking(1, vec![rec(2, 100)]).unwrap();
    j.shutdown().unwrap();
    drop(j);
    let names: Vec<_> = segs(t.path())
        .iter()
        .map(|p| p.file_name().unwrap().to_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        names,
        vec![
            segment_file_name(1),
            segment_file_name(2),
            segment_file_name(3)
        ]
    );
    assert!(
        std::fs::metadata(t.path().join(segment_file_name(2)))
            .unwrap()
            .len()
            > 100 << 10
    );
    let j = open(t.path(), RecoveryMode::AbsoluteConsistency).unwrap();
    let all: Vec<_> = j.read_from(1).unwrap().map(|r| r.unwrap()).collect();
    assert_eq!(all.len(), 3);
    assert_eq!(all[1].event.payload.len(), 100 << 10);
}

#[test]
fn damage_at_end_of_a_non_last_segment_is_corrupt_and_untouched() {
    let t = tempfile::tempdir().unwrap();
    fill(t.path(), 300);
    // the last record of the first segment: later segments hold valid records
    let summary = JournalScan::open(t.path()).unwrap().summary().unwrap();
    let last_of_first = summary.segments[0].seq_range.unwrap().1;
    let (path, off, len) = locate(t.path(), last_of_first);
    patch(&path, off + len as u64 - 3, &[0xEE, 0xEE, 0xEE]);
    let before = snapshot(t.path());
    for mode in [
        RecoveryMode::TolerateTailCorruption,
        RecoveryMode::AbsoluteConsistency,
    ] {
        match open(t.path(), mode) {
            Err(JournalError::Corrupt { seq, location, .. }) => {
                assert_eq!(seq, last_of_first);
                assert_eq!(location, path);
            }
            other => panic!("expected Corrupt, got {other:?}"),
        }
    }
    assert_eq!(
        snapshot(t.path()),
        before,
        "a refused open modifies nothing"
    );
}

#[test]
fn zeroed_length_word_of_a_middle_record_is_corrupt() {
    let t = tempfile::tempdir().unwrap();
    fill(t.path(), 20);
    let (path, off, _) = locate(t.path(), 7);
    patch(&path, off, &[0, 0, 0, 0]);
    match open(t.path(), RecoveryMode::TolerateTailCorruption) {
        Err(JournalError::Corrupt { seq, .. }) => assert_eq!(seq, 7),
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

#[test]
fn torn_length_word_at_tail_is_truncated() {
    let t = tempfile::tempdir().unwrap();
    fill(t.path(), 20);
    let (path, off, len) = locate(t.path(), 20);
    // a length word claiming more than was written, then garbage
    patch(&path, off, &(u32::MAX / 2).to_le_bytes());
    let j = open(t.path(), RecoveryMode::TolerateTailCorruption).unwrap();
    let report = j.truncation().unwrap();
    assert_eq!(report.last_good_seq, 19);
    assert_eq!(report.dropped_bytes, len as u64);
    assert_eq!(
        j.append_blocking(1, vec![rec(99, 10)]).unwrap().last_seq,
        20
    );
    j.shutdown().unwrap();
    drop(j);
    let summary = JournalScan::open(t.path()).unwrap().summary().unwrap();
    assert!(summary.faults.is_empty(), "{:?}", summary.faults);
    assert_eq!(summary.seq_range, Some((1, 20)));
}

#[test]
fn torn_first_frame_of_a_new_segment_is_a_tail() {
    let t = tempfile::tempdir().unwrap();
    fill(t.path(), 300);
    let last = segs(t.path()).pop().unwrap();
    let first_in_last = SegmentHeader::decode(&std::fs::read(&last).unwrap()[..HEADER_LEN])
        .unwrap()
        .first_seq;
    // wipe every frame of the last segment but leave half of its first frame
    let (_, off, len) = locate(t.path(), first_in_last);
    let zeros = vec![0u8; (SEG - off) as usize - len / 2];
    patch(&last, off + (len / 2) as u64, &zeros);
    let j = open(t.path(), RecoveryMode::TolerateTailCorruption).unwrap();
    assert_eq!(j.truncation().unwrap().last_good_seq, first_in_last - 1);
    assert_eq!(
        j.append_blocking(1, vec![rec(0, 10)]).unwrap().last_seq,
        first_in_last
    );
}

#[test]
fn newer_segment_version_is_unsupported_and_garbage_header_is_corrupt() {
    let t = tempfile::tempdir().unwrap();
    fill(t.path(), 5);
    let seg = segs(t.path()).remove(0);
    let before = std::fs::read(&seg).unwrap();
    patch(&seg, 8, &2u32.to_le_bytes());
    match open(t.path(), RecoveryMode::TolerateTailCorruption) {
        Err(JournalError::UnsupportedVersion {
            found,
            supported,
            location,
        }) => {
            assert_eq!((found, supported), (2, 1));
            assert_eq!(location, seg);
        }
        other => panic!("expected UnsupportedVersion, got {other:?}"),
    }
    patch(&seg, 0, &before[..HEADER_LEN]);
    patch(&seg, 30, &[0xAB]); // inside prev_digest: header CRC fails
    assert!(matches!(
        open(t.path(), RecoveryMode::TolerateTailCorruption),
        Err(JournalError::Corrupt { seq: 1, .. })
    ));
}

#[test]
fn stray_segment_name_is_refused_and_temp_files_are_removed() {
    let t = tempfile::tempdir().unwrap();
    fill(t.path(), 3);
    std::fs::write(t.path().join("00000000000000000099.seg.tmp"), b"half made").unwrap();
    let j = open(t.path(), RecoveryMode::AbsoluteConsistency).unwrap();
    j.shutdown().unwrap();
    drop(j);
    assert!(!t.path().join("00000000000000000099.seg.tmp").exists());
    std::fs::write(t.path().join("junk.seg"), b"x").unwrap();
    assert!(matches!(
        open(t.path(), RecoveryMode::TolerateTailCorruption),
        Err(JournalError::Corrupt { .. })
    ));
}

#[test]
fn scan_is_read_only_and_names_the_first_bad_seq() {
    let t = tempfile::tempdir().unwrap();
    fill(t.path(), 300);
    let scan = JournalScan::open(t.path()).unwrap();
    let clean = scan.summary().unwrap();
    assert!(clean.faults.is_empty());
    assert_eq!(clean.records, 300);
    assert_eq!(clean.seq_range, Some((1, 300)));
    assert_eq!(clean.term_range, Some((1, 1)));
    assert_eq!(clean.segments.iter().map(|s| s.records).sum::<u64>(), 300);

    let (path, off, len) = locate(t.path(), 123);
    patch(
        &path,
        off + len as u64 / 2,
        &[0x42 ^ std::fs::read(&path).unwrap()[(off + len as u64 / 2) as usize]],
    );
    let before = snapshot(t.path());
    let damaged = JournalScan::open(t.path()).unwrap().summary().unwrap();
    assert_eq!(snapshot(t.path()), before, "scanning writes nothing");
    let first = damaged.first_fault().expect("a fault");
    assert_eq!(first.expected_seq, 123);
    assert!(matches!(first.kind, FaultKind::BadFrame(_)));
    assert_eq!(first.path, path);
    assert_eq!(damaged.records, 299, "the scan resyncs past the damage");
    assert_eq!(damaged.seq_range, Some((1, 300)));

    // the read-only source reads up to the damage, then errors
    let src = open_read_only(t.path()).unwrap();
    let items: Vec<_> = src.read_range(1, u64::MAX).unwrap().collect();
    assert_eq!(items.iter().filter(|r| r.is_ok()).count(), 122);
    assert!(matches!(
        items.last(),
        Some(Err(JournalError::Corrupt { seq: 123, .. }))
    ));
    assert_eq!(snapshot(t.path()), before);
}

#[test]
fn scan_reports_chain_mismatch() {
    let t = tempfile::tempdir().unwrap();
    fill(t.path(), 10);
    // Re-encode record 5 with a wrong digest but a valid CRC: only the chain check sees it.
    let (path, off, len) = locate(t.path(), 5);
    let bytes = std::fs::read(&path).unwrap();
    let (mut r, _) = crescent_journal::codec::decode_frame(&bytes[off as usize..])
        .unwrap()
        .unwrap();
    r.digest[0] ^= 1;
    let frame = crescent_journal::codec::encode_record(&r);
    assert_eq!(frame.len(), len);
    patch(&path, off, &frame);
    let s = JournalScan::open(t.path()).unwrap().summary().unwrap();
    let f = s.first_fault().unwrap();
    assert_eq!((f.expected_seq, &f.kind), (5, &FaultKind::ChainMismatch));
}

#[test]
fn read_only_open_of_missing_dir_fails_without_creating_it() {
    let t = tempfile::tempdir().unwrap();
    let missing = t.path().join("nope");
    assert!(open_read_only(&missing).is_err());
    assert!(JournalScan::open(&missing).is_err());
    assert!(!missing.exists());
}

#[test]
fn read_only_source_reads_a_live_journal_and_ranges() {
    let t = tempfile::tempdir().unwrap();
    fill(t.path(), 250);
    let src = open_read_only(t.path()).unwrap();
    let seqs: Vec<_> = src
        .read_range(100, 180)
        .unwrap()
        .map(|r| r.unwrap().seq)
        .collect();
    assert_eq!(seqs, (100..=180).collect::<Vec<_>>());
    assert_eq!(src.read_range(1, u64::MAX).unwrap().count(), 250);
    assert!(
        t.path().join("LOCK").exists(),
        "LOCK exists from the writer"
    );
}

/// Flips one byte in the middle of record `seq`'s frame; returns (segment, offset, the frame's
/// bytes after the flip).
fn flip_in_frame(dir: &Path, seq: u64) -> (PathBuf, u64, Vec<u8>) {
    let (path, off, len) = locate(dir, seq);
    let at = off + len as u64 / 2;
    let b = std::fs::read(&path).unwrap()[at as usize];
    patch(&path, at, &[b ^ 0x01]);
    let frame = std::fs::read(&path).unwrap()[off as usize..off as usize + len].to_vec();
    (path, off, frame)
}

#[test]
fn complete_last_frame_failing_its_crc_is_quarantined_before_the_cut() {
    let t = tempfile::tempdir().unwrap();
    fill(t.path(), 20);
    let (path, off, frame) = flip_in_frame(t.path(), 20);
    let j = open(t.path(), RecoveryMode::TolerateTailCorruption).unwrap();
    let report = j.truncation().unwrap();
    assert_eq!(report.last_good_seq, 19);
    let q = report
        .quarantine
        .clone()
        .expect("the cut bytes were quarantined");
    assert_eq!((q.seq, q.offset, q.kind), (20, off, DamageKind::Damaged));
    assert_eq!(q.segment, path.file_name().unwrap().to_str().unwrap());
    let qdir = quarantine::quarantine_dir(t.path());
    assert_eq!(std::fs::read(qdir.join(&q.data_file)).unwrap(), frame);
    assert_eq!(q.data_file, format!("seq-20-off-{off}.frame"));
    // The seq is taken again by the next record, but the quarantine keeps naming the old one.
    let old_head = j.head();
    assert_eq!(old_head.0, 19);
    assert_eq!(
        j.append_blocking(1, vec![rec(99, 10)]).unwrap().last_seq,
        20
    );
    j.shutdown().unwrap();
    drop(j);
    let j = open(t.path(), RecoveryMode::TolerateTailCorruption).unwrap();
    assert!(j.truncation().is_none(), "the cut is durable");
    j.shutdown().unwrap();
    drop(j);
    assert_eq!(quarantine::list(t.path()).unwrap(), vec![q]);
    assert_eq!(quarantine::clear(t.path()).unwrap(), 1);
    assert!(quarantine::list(t.path()).unwrap().is_empty());
    assert!(!qdir.exists());
}

#[test]
fn absolute_consistency_refuses_a_damaged_last_frame_and_changes_nothing() {
    let t = tempfile::tempdir().unwrap();
    fill(t.path(), 20);
    flip_in_frame(t.path(), 20);
    let before = snapshot(t.path());
    match open(t.path(), RecoveryMode::AbsoluteConsistency) {
        Err(JournalError::TailCorruption { last_good_seq, .. }) => assert_eq!(last_good_seq, 19),
        Err(e) => panic!("expected TailCorruption, got {e}"),
        Ok(_) => panic!("absolute consistency opened a journal with a damaged tail"),
    }
    assert_eq!(snapshot(t.path()), before);
    assert!(quarantine::list(t.path()).unwrap().is_empty());
}

#[test]
fn incomplete_last_frame_is_copied_and_reported_as_incomplete() {
    let t = tempfile::tempdir().unwrap();
    fill(t.path(), 20);
    let j = open(t.path(), RecoveryMode::TolerateTailCorruption).unwrap();
    j.append_blocking(1, vec![rec(20, 2000)]).unwrap();
    j.shutdown().unwrap();
    drop(j);
    let (path, off, len) = locate(t.path(), 21);
    // A write that did not finish: everything from the first 512-byte boundary of the file
    // inside the frame (after its length word) never reached the disk.
    let cut = (off + 8).div_ceil(512) * 512;
    assert!(cut < off + len as u64, "the frame spans a sector boundary");
    patch(&path, cut, &vec![0u8; (off + len as u64 - cut) as usize]);
    let on_disk = std::fs::read(&path).unwrap()[off as usize..off as usize + len].to_vec();
    let j = open(t.path(), RecoveryMode::TolerateTailCorruption).unwrap();
    let q = j.truncation().unwrap().quarantine.expect("copied aside");
    assert_eq!((q.seq, q.kind), (21, DamageKind::Incomplete));
    let copy = std::fs::read(quarantine::quarantine_dir(t.path()).join(&q.data_file)).unwrap();
    assert!(!copy.is_empty() && on_disk.starts_with(&copy));
    assert!(on_disk[copy.len()..].iter().all(|&b| b == 0));
}

#[test]
fn damaged_frame_followed_by_a_valid_one_stays_corrupt_and_quarantines_nothing() {
    let t = tempfile::tempdir().unwrap();
    fill(t.path(), 20);
    flip_in_frame(t.path(), 19);
    match open(t.path(), RecoveryMode::TolerateTailCorruption) {
        Err(JournalError::Corrupt { seq, .. }) => assert_eq!(seq, 19),
        Err(e) => panic!("expected Corrupt at 19, got {e}"),
        Ok(_) => panic!("opened a journal whose damage is followed by a valid record"),
    }
    assert!(quarantine::list(t.path()).unwrap().is_empty());
}
