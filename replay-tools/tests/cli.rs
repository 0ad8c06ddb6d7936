//! End-to-end tests of the `crescent-replay` binary against real data dirs.

mod common;

use std::fs;

use common::*;
use crescent_journal::file::segment::HEADER_LEN;
use crescent_snapshot::ReplayState;
use serde_json::Value;

const ROUNDS: usize = 12;

fn fixture() -> (tempfile::TempDir, std::path::PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("data");
    make_data_dir(&root, history(ROUNDS));
    (t, root)
}

#[test]
fn fixture_spans_several_segments_and_streams() {
    let (_t, root) = fixture();
    let recs = records(&root);
    assert!(recs.len() > 50, "{} records", recs.len());
    let segments = fs::read_dir(root.join("journal"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "seg")
        })
        .count();
    assert!(segments >= 3, "only {segments} segments");
    assert!(recs.iter().any(|r| r.stream.id == "lab"));
    assert!(recs.iter().any(|r| r.stream.id == "cluster"));
}

#[test]
fn verify_clean_dir_exits_zero() {
    let (_t, root) = fixture();
    let recs = records(&root);
    write_snapshot(&root, &world_of(&recs[..10]));
    write_snapshot(&root, &world_of(&recs[..40]));
    let r = run(&["verify", s(&root)]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.starts_with("OK:"), "{}", r.stdout);
    let v = run(&["verify", s(&root), "--json"]).json();
    assert_eq!(v["ok"], true);
    assert_eq!(v["first_bad_seq"], Value::Null);
    assert_eq!(v["journal"]["records"], recs.len() as u64);
    let last = recs.last().unwrap();
    assert_eq!(v["journal"]["chain_head"], hex(&last.digest));
    let statuses: Vec<_> = v["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["seq"].as_u64().unwrap(),
                s["status"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        statuses,
        vec![(10, "matches_replay".into()), (40, "matches_replay".into())]
    );
}

fn hex(d: &[u8; 32]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn one_flipped_byte_names_its_record_as_first_bad_seq() {
    let (t, clean) = fixture();
    let recs = records(&clean);
    let n = recs.len() as u64;
    // The first record, one in the middle of the journal, and the last record of a segment
    // (the one before a segment boundary); each in its own copy of the data dir.
    let located = located_records(&clean);
    let boundary = located
        .windows(2)
        .find(|w| w[0].0 != w[1].0)
        .map(|w| w[0].3.seq)
        .expect("a segment boundary");
    for seq in [1, n / 2, boundary] {
        let root = t.path().join(format!("flip-{seq}"));
        copy_dir(&clean, &root);
        flip_byte_in_record(&root, seq);
        let before = fingerprint(&root);
        let r = run(&["verify", s(&root)]);
        assert_eq!(r.code, 1, "seq {seq}: {r:?}");
        assert!(
            r.stdout.contains(&format!("first bad seq: {seq}\n")),
            "seq {seq}:\n{}",
            r.stdout
        );
        let v = run(&["verify", s(&root), "--json"]).json();
        assert_eq!(v["ok"], false);
        assert_eq!(v["first_bad_seq"], seq, "{v:#}");
        let faults = v["faults"].as_array().unwrap();
        assert!(faults.iter().all(|f| f["seq"] == seq), "{faults:#?}");
        assert!(faults.iter().all(|f| f["torn_tail"] == false));
        // Records after the damage are still seen.
        assert_eq!(v["journal"]["records"], n - 1);
        assert_eq!(fingerprint(&root), before, "verify changed the data dir");
    }
}

#[test]
fn no_command_changes_a_byte_of_the_data_dir() {
    let (t, root) = fixture();
    let recs = records(&root);
    write_snapshot(&root, &world_of(&recs[..20]));
    let other = t.path().join("other");
    copy_dir(&root, &other);
    let before = (fingerprint(&root), fingerprint(&other));
    let (r, o) = (s(&root), s(&other));
    let to = (recs.len() / 2).to_string();
    let commands: Vec<Vec<&str>> = vec![
        vec!["dump", r],
        vec!["dump", r, "--decode", "--json"],
        vec![
            "dump",
            r,
            "--from",
            "3",
            "--to",
            "9",
            "--stream",
            "segment_registry/lab",
        ],
        vec!["verify", r],
        vec!["verify", r, "--json"],
        vec!["replay", r, "--to", &to],
        vec!["replay", r, "--to", &to, "--json"],
        vec!["replay", r, "--to", "5"],
        vec!["stats", r],
        vec!["stats", r, "--json"],
        vec!["diff", r, o],
        vec!["diff", r, o, "--json"],
    ];
    for args in &commands {
        let res = run(args);
        assert_eq!(res.code, 0, "{args:?}: {res:?}");
        assert_eq!(
            (fingerprint(&root), fingerprint(&other)),
            before,
            "{args:?} changed a data dir"
        );
    }
}

#[test]
fn replay_to_n_matches_applying_the_first_n_records() {
    let (_t, root) = fixture();
    let recs = records(&root);
    let n = recs.len();
    let check = |to: usize, expect_snapshot: Option<u64>| {
        let r = run(&["replay", s(&root), "--to", &to.to_string(), "--json"]);
        assert_eq!(r.code, 0, "--to {to}: {r:?}");
        let v = r.json();
        assert_eq!(v["seq"], to as u64);
        assert_eq!(
            v["state"],
            world_of(&recs[..to]).to_json().unwrap(),
            "--to {to}"
        );
        assert_eq!(
            v["from_snapshot"]["seq"].as_u64(),
            expect_snapshot,
            "--to {to}"
        );
    };
    for to in [0, 1, n / 3, n] {
        check(to, None);
    }
    // With snapshots: the newest at or below the seq is the base, and the result is the same.
    write_snapshot(&root, &world_of(&recs[..15]));
    write_snapshot(&root, &world_of(&recs[..30]));
    check(14, None);
    check(15, Some(15));
    check(29, Some(15));
    check(30, Some(30));
    check(n, Some(30));

    let text = run(&["replay", s(&root), "--to", "31"]);
    assert_eq!(text.code, 0);
    assert!(
        text.stdout
            .starts_with("state at seq 31: snapshot at seq 30"),
        "{}",
        text.stdout
    );

    let beyond = run(&["replay", s(&root), "--to", &(n + 1).to_string()]);
    assert_eq!(beyond.code, 2, "{beyond:?}");
    assert!(
        beyond.stderr.contains("beyond the end"),
        "{}",
        beyond.stderr
    );
}

#[test]
fn replay_refuses_seqs_the_truncated_journal_cannot_reach() {
    let (_t, root) = fixture();
    let recs = records(&root);
    let located = located_records(&root);
    // Drop the first segment, as prefix truncation behind a snapshot does.
    let first_seg = located[0].0.clone();
    let second_first = located.iter().find(|l| l.0 != first_seg).unwrap().3.seq;
    let snap_seq = second_first + 3;
    write_snapshot(&root, &world_of(&recs[..snap_seq as usize]));
    fs::remove_file(&first_seg).unwrap();

    let ok = run(&[
        "replay",
        s(&root),
        "--to",
        &(snap_seq + 2).to_string(),
        "--json",
    ]);
    assert_eq!(ok.code, 0, "{ok:?}");
    assert_eq!(
        ok.json()["state"],
        world_of(&recs[..snap_seq as usize + 2]).to_json().unwrap()
    );
    let low = run(&["replay", s(&root), "--to", &(snap_seq - 1).to_string()]);
    assert_eq!(low.code, 2, "{low:?}");
    assert!(
        low.stderr.contains("below what this data dir can rebuild"),
        "{}",
        low.stderr
    );
    // verify: the snapshot is the replay base and everything after it checks out.
    let v = run(&["verify", s(&root), "--json"]);
    assert_eq!(v.code, 0, "{v:?}");
    assert_eq!(v.json()["snapshots"][0]["status"], "replay_base");
}

#[test]
fn verify_reports_snapshot_disagreement_and_damage() {
    let (t, root) = fixture();
    let recs = records(&root);
    // A snapshot at seq 20 whose position is right but whose state is another history's.
    let right = world_of(&recs[..20]);
    let wrong = world_of(&recs[..12]);
    let mut sections = right.to_sections().unwrap();
    let wrong_sections = wrong.to_sections().unwrap();
    for s in sections.iter_mut().filter(|s| s.name != "meta") {
        *s = wrong_sections
            .iter()
            .find(|w| w.name == s.name)
            .unwrap()
            .clone();
    }
    let dir = crescent_snapshot::SnapshotDir::new(root.join("snapshots"));
    dir.write(&right.position(), T0, &sections).unwrap();
    // And a damaged snapshot file at seq 30.
    let damaged = write_snapshot(&root, &world_of(&recs[..30]));
    let mut bytes = fs::read(&damaged).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    fs::write(&damaged, bytes).unwrap();

    let r = run(&["verify", s(&root), "--json"]);
    assert_eq!(r.code, 1, "{r:?}");
    let v = r.json();
    assert_eq!(v["first_bad_seq"], 20);
    let kinds: Vec<_> = v["faults"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["seq"].as_u64().unwrap(),
                f["kind"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        vec![
            (20, "snapshot_state_mismatch".to_string()),
            (30, "bad_snapshot".to_string())
        ]
    );
    let _ = t;
}

#[test]
fn torn_tail_is_a_fault_unless_allowed() {
    let (_t, root) = fixture();
    let located = located_records(&root);
    let (path, offset, len, last) = located.last().unwrap().clone();
    let mut bytes = fs::read(&path).unwrap();
    let keep = offset as usize + len / 2;
    bytes[keep..offset as usize + len].fill(0);
    fs::write(&path, bytes).unwrap();

    let r = run(&["verify", s(&root)]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stdout.contains(&format!("first bad seq: {}", last.seq)),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout
            .contains(&format!("torn after seq {}", last.seq - 1)),
        "{}",
        r.stdout
    );
    let r = run(&["verify", s(&root), "--allow-torn-tail"]);
    assert_eq!(r.code, 0, "{r:?}");
    let v = run(&["stats", s(&root), "--json"]).json();
    assert_eq!(v["tail"]["status"], "torn");
    assert_eq!(v["tail"]["last_good_seq"], last.seq - 1);
    // Replay up to the last intact record still works.
    let r = run(&["replay", s(&root), "--to", &(last.seq - 1).to_string()]);
    assert_eq!(r.code, 0, "{r:?}");
}

#[test]
fn unreadable_or_unsupported_data_dirs_fail_clearly() {
    let t = tempfile::tempdir().unwrap();
    let missing = t.path().join("missing");
    let r = run(&["verify", s(&missing)]);
    assert_eq!(r.code, 2, "{r:?}");

    let foreign = t.path().join("foreign");
    fs::create_dir_all(foreign.join("journal")).unwrap();
    let r = run(&["stats", s(&foreign)]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("not a crescent data dir"), "{}", r.stderr);

    let newer = t.path().join("newer");
    write_marker(&newer, 2, "file");
    fs::create_dir_all(newer.join("journal")).unwrap();
    let before = fingerprint(&newer);
    let r = run(&["verify", s(&newer)]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("format version 2"), "{}", r.stderr);
    assert_eq!(fingerprint(&newer), before);

    let sled = t.path().join("sled");
    write_marker(&sled, 1, "sled");
    fs::create_dir_all(sled.join("journal").join("sled")).unwrap();
    let r = run(&["dump", s(&sled)]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr.contains("unsupported for sled data dirs"),
        "{}",
        r.stderr
    );

    let garbage = t.path().join("garbage");
    fs::create_dir_all(garbage.join("journal")).unwrap();
    fs::write(garbage.join("CRESCENT_DATA_DIR"), b"\x00garbage").unwrap();
    let r = run(&["verify", s(&garbage)]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("invalid marker"), "{}", r.stderr);

    // A garbage segment file is reported as damage, not a crash.
    let (_t2, root) = fixture();
    fs::write(
        root.join("journal").join(format!("{:020}.seg", 999_999)),
        vec![0xabu8; HEADER_LEN + 100],
    )
    .unwrap();
    let r = run(&["verify", s(&root)]);
    assert_eq!(r.code, 1, "{r:?}");

    let r = run(&["replay", s(&root)]);
    assert_eq!(r.code, 2, "missing --to is bad usage: {r:?}");
    let r = run(&["frobnicate"]);
    assert_eq!(r.code, 2);
    let r = run(&["--help"]);
    assert_eq!(r.code, 0);
}
