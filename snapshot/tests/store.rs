//! The snapshot directory: atomic writes, listing, newest-valid policy, retention, temp files.

mod common;

use std::fs;

use common::{records, tally_of, Tally};
use crescent_snapshot::{Position, ReplayState, SnapshotDir, SnapshotError};

fn write_at(dir: &SnapshotDir, n: u64) -> Tally {
    let t = tally_of(&records(n));
    dir.write(&t.position(), 1000 + n as i64, &t.to_sections().unwrap())
        .unwrap();
    t
}

fn files(dir: &SnapshotDir) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

fn flip_byte_in(path: &std::path::Path, from_end: usize) {
    let mut bytes = fs::read(path).unwrap();
    let i = bytes.len() - from_end;
    bytes[i] ^= 0xff;
    fs::write(path, bytes).unwrap();
}

#[test]
fn write_list_read() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = SnapshotDir::new(tmp.path().join("snapshots"));
    assert!(
        dir.list().unwrap().is_empty(),
        "a missing dir holds no snapshots"
    );
    dir.prepare_for_writing().unwrap();
    let t = write_at(&dir, 5);
    assert_eq!(files(&dir), ["snap-00000000000000000005.crsnap"]);
    let entries = dir.list().unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].seq, 5);
    let snap = SnapshotDir::read(&entries[0].path).unwrap();
    assert_eq!(snap.header.position, t.position());
    assert_eq!(snap.header.created_ms, 1005);
    let newest = dir.newest_valid(&t.section_specs()).unwrap();
    let (header, path, _set) = newest.snapshot.unwrap();
    assert_eq!(header.position.seq, 5);
    assert_eq!(path, entries[0].path);
    assert!(newest.skipped.is_empty());
}

#[test]
fn retention_keeps_the_newest() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = SnapshotDir::new(tmp.path());
    for n in [3, 9, 1, 12, 7] {
        write_at(&dir, n);
    }
    let kept = dir.retain(3).unwrap();
    assert_eq!(kept.iter().map(|e| e.seq).collect::<Vec<_>>(), [7, 9, 12]);
    assert_eq!(dir.list().unwrap(), kept);
    // Keeping zero would leave recovery nothing: at least one is kept.
    assert_eq!(dir.retain(0).unwrap().len(), 1);
    assert_eq!(files(&dir), ["snap-00000000000000000012.crsnap"]);
}

#[test]
fn no_temp_files_left_and_leftovers_are_ignored_then_cleaned() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = SnapshotDir::new(tmp.path());
    write_at(&dir, 4);
    assert!(files(&dir).iter().all(|f| !f.ends_with(".tmp")));
    // A crash mid-write leaves a temp file (possibly partial); readers ignore it.
    let leftover = tmp.path().join("snap-00000000000000000009.crsnap.4242.tmp");
    fs::write(&leftover, b"partial").unwrap();
    fs::write(tmp.path().join("unrelated.txt"), b"x").unwrap();
    assert_eq!(
        dir.list()
            .unwrap()
            .iter()
            .map(|e| e.seq)
            .collect::<Vec<_>>(),
        [4]
    );
    let t = tally_of(&records(4));
    let newest = dir.newest_valid(&t.section_specs()).unwrap();
    assert_eq!(newest.snapshot.unwrap().0.position.seq, 4);
    assert!(leftover.exists(), "reading never modifies the directory");
    assert_eq!(dir.prepare_for_writing().unwrap(), 1);
    assert!(!leftover.exists());
    assert!(tmp.path().join("unrelated.txt").exists());
}

#[test]
fn damaged_newest_is_skipped_for_an_older_valid_one() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = SnapshotDir::new(tmp.path());
    write_at(&dir, 3);
    write_at(&dir, 6);
    write_at(&dir, 9);
    let specs = Tally::default().section_specs();
    // Newest: a flipped byte inside its last section body; next: cut short.
    flip_byte_in(&tmp.path().join(SnapshotDir::file_name(9)), 21);
    let six = tmp.path().join(SnapshotDir::file_name(6));
    let bytes = fs::read(&six).unwrap();
    fs::write(&six, &bytes[..bytes.len() / 2]).unwrap();
    let newest = dir.newest_valid(&specs).unwrap();
    assert_eq!(newest.snapshot.unwrap().0.position.seq, 3);
    assert_eq!(newest.skipped.len(), 2);
    assert!(matches!(
        &newest.skipped[0].error,
        SnapshotError::Corrupt { section, .. } if section == "tally"
    ));
    assert!(matches!(
        newest.skipped[1].error,
        SnapshotError::Truncated { .. }
    ));
}

#[test]
fn renamed_file_is_damage() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = SnapshotDir::new(tmp.path());
    write_at(&dir, 3);
    fs::copy(
        tmp.path().join(SnapshotDir::file_name(3)),
        tmp.path().join(SnapshotDir::file_name(8)),
    )
    .unwrap();
    let newest = dir.newest_valid(&Tally::default().section_specs()).unwrap();
    assert_eq!(newest.snapshot.unwrap().0.position.seq, 3);
    assert_eq!(newest.skipped.len(), 1);
}

#[test]
fn newer_format_or_schema_is_never_skipped() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = SnapshotDir::new(tmp.path());
    write_at(&dir, 3);
    // Newest written by a "newer binary": tally schema 2.
    let t = tally_of(&records(6));
    let mut sections = t.to_sections().unwrap();
    sections[1].schema = 2;
    dir.write(&t.position(), 1, &sections).unwrap();
    let err = dir
        .newest_valid(&Tally::default().section_specs())
        .unwrap_err();
    assert!(
        matches!(err, SnapshotError::UnsupportedSchema { .. }),
        "{err}"
    );
    assert!(
        err.to_string().contains("snap-00000000000000000006.crsnap"),
        "{err}"
    );
    assert!(err.to_string().contains("tally"), "{err}");

    // Newer file format.
    let path = tmp.path().join(SnapshotDir::file_name(6));
    let mut bytes = fs::read(&path).unwrap();
    bytes[8] = 2;
    fs::write(&path, bytes).unwrap();
    let err = dir
        .newest_valid(&Tally::default().section_specs())
        .unwrap_err();
    assert!(
        matches!(err, SnapshotError::UnsupportedFormat { found: 2, .. }),
        "{err}"
    );
}

#[test]
fn unknown_required_section_in_the_newest_fails_closed() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = SnapshotDir::new(tmp.path());
    write_at(&dir, 3);
    let t = tally_of(&records(6));
    let mut sections = t.to_sections().unwrap();
    sections.push(crescent_snapshot::Section {
        name: "quota_root".into(),
        optional: false,
        schema: 1,
        body: vec![1, 2, 3],
    });
    dir.write(&Position { ..t.position() }, 1, &sections)
        .unwrap();
    let err = dir
        .newest_valid(&Tally::default().section_specs())
        .unwrap_err();
    assert!(
        matches!(err, SnapshotError::UnknownRequiredSection { ref section, .. } if section == "quota_root"),
        "{err}"
    );
}
