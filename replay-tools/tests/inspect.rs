//! End-to-end tests of `crescent-replay dump`, `diff` and `stats` against real data dirs.

mod common;

use common::*;
use serde_json::Value;

const ROUNDS: usize = 12;

fn fixture() -> (tempfile::TempDir, std::path::PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("data");
    make_data_dir(&root, history(ROUNDS));
    (t, root)
}

fn hex(d: &[u8; 32]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

fn dump_seqs(args: &[&str]) -> Vec<u64> {
    let r = run(args);
    assert_eq!(r.code, 0, "{args:?}: {r:?}");
    r.stdout
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("each line is JSON");
            v["seq"].as_u64().unwrap()
        })
        .collect()
}

#[test]
fn dump_filters_select_exactly_the_expected_records() {
    let (_t, root) = fixture();
    let recs = records(&root);
    let r = s(&root);
    let all: Vec<u64> = recs.iter().map(|x| x.seq).collect();
    assert_eq!(dump_seqs(&["dump", r, "--json"]), all);

    assert_eq!(
        dump_seqs(&["dump", r, "--json", "--from", "5", "--to", "17"]),
        (5..=17).collect::<Vec<_>>()
    );
    let lab: Vec<u64> = recs
        .iter()
        .filter(|x| x.stream.id == "lab")
        .map(|x| x.seq)
        .collect();
    assert!(!lab.is_empty());
    assert_eq!(
        dump_seqs(&["dump", r, "--json", "--stream", "segment_registry/lab"]),
        lab
    );
    assert_eq!(
        dump_seqs(&["dump", r, "--json", "--stream", "segment_registry"]),
        all
    );
    assert!(dump_seqs(&["dump", r, "--json", "--stream", "weights"]).is_empty());
    let mounted: Vec<u64> = recs
        .iter()
        .filter(|x| x.event.kind == "segment_mounted")
        .map(|x| x.seq)
        .collect();
    assert_eq!(
        dump_seqs(&["dump", r, "--json", "--kind", "segment_mounted"]),
        mounted
    );
    let combined: Vec<u64> = recs
        .iter()
        .filter(|x| {
            x.seq >= 10
                && x.seq <= 40
                && x.stream.id == "cluster"
                && x.event.kind == "segment_unmounted"
        })
        .map(|x| x.seq)
        .collect();
    assert!(!combined.is_empty());
    assert_eq!(
        dump_seqs(&[
            "dump",
            r,
            "--json",
            "--from",
            "10",
            "--to",
            "40",
            "--stream",
            "segment_registry/cluster",
            "--kind",
            "segment_unmounted",
        ]),
        combined
    );

    // Text lines and decoded JSON carry the record's fields.
    let text = run(&["dump", r, "--from", "2", "--to", "2"]);
    assert_eq!(text.code, 0);
    let line = text.stdout.lines().next().unwrap();
    let rec = &recs[1];
    assert!(line.starts_with("seq=2 term=1 time=2025-"), "{line}");
    assert!(line.contains(&format!("stream=segment_registry/{}", rec.stream.id)));
    assert!(line.contains(&format!("event={} v{}", rec.event.kind, rec.event.version)));
    assert!(line.contains(&format!("digest={}", &hex(&rec.digest)[..16])));

    let decoded = run(&[
        "dump",
        r,
        "--json",
        "--decode",
        "--kind",
        "segment_mounted",
        "--to",
        "4",
    ]);
    assert_eq!(decoded.code, 0, "{decoded:?}");
    let first: Value = serde_json::from_str(decoded.stdout.lines().next().unwrap()).unwrap();
    assert_eq!(first["decoded"]["kind"], "segment_mounted");
    assert_eq!(first["decoded"]["data"]["segment_id"], "seg-0-0");
    assert_eq!(first["decoded"]["data"]["transport"], "tcp");
    assert_eq!(first["decoded"]["data"]["size"], 1u64 << 30);

    let bad = run(&["dump", r, "--from", "9", "--to", "3"]);
    assert_eq!(bad.code, 2, "{bad:?}");
    let bad = run(&["dump", r, "--stream", "/x"]);
    assert_eq!(bad.code, 2, "{bad:?}");
}

#[test]
fn diff_finds_identical_prefix_and_divergence() {
    let (t, a) = fixture();
    let n = records(&a).len() as u64;
    let b = t.path().join("b");
    copy_dir(&a, &b);
    let r = run(&["diff", s(&a), s(&b)]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout
            .starts_with(&format!("identical up to seq {n}; same length")),
        "{}",
        r.stdout
    );

    // B gets more of the same history: A is a prefix of B.
    let c = t.path().join("c");
    copy_dir(&a, &c);
    let extra = history(ROUNDS + 3).split_off(n as usize);
    append(&c, 1, extra);
    let v = run(&["diff", s(&a), s(&c), "--json"]);
    assert_eq!(v.code, 0, "{v:?}");
    let v = v.json();
    assert_eq!(v["relation"], "a_prefix_of_b");
    assert_eq!(v["identical_up_to"], n);

    // D continues with other records (a different term and time): they diverge at n + 1.
    let d = t.path().join("d");
    copy_dir(&a, &d);
    let mut other = history(2);
    for r in &mut other {
        r.timestamp_ms += 99;
    }
    append(&d, 2, other);
    let r = run(&["diff", s(&c), s(&d)]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stdout.starts_with(&format!("diverge at seq {}\n", n + 1)),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains(&format!("identical up to seq {n}")),
        "{}",
        r.stdout
    );
    let v = run(&["diff", s(&c), s(&d), "--json"]).json();
    assert_eq!(v["relation"], "diverged");
    assert_eq!(v["diverge_at"], n + 1);
    assert_eq!(v["a"]["record_at_divergence"]["term"], 1);
    assert_eq!(v["b"]["record_at_divergence"]["term"], 2);
}

#[test]
fn stats_counts_match_the_journal() {
    let (_t, root) = fixture();
    let recs = records(&root);
    write_snapshot(&root, &world_of(&recs[..25]));
    let r = run(&["stats", s(&root), "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let v = r.json();
    assert_eq!(v["records"], recs.len() as u64);
    assert_eq!(v["seq_range"], serde_json::json!([1, recs.len()]));
    assert_eq!(v["term_range"], serde_json::json!([1, 1]));
    let sr = &v["by_stream_kind"]["segment_registry"];
    assert_eq!(sr["records"], recs.len() as u64);
    assert_eq!(sr["streams"], 2);
    let payload: usize = recs.iter().map(|r| r.event.payload.len()).sum();
    assert_eq!(v["payload_bytes"], payload as u64);
    for kind in [
        "owner_registered",
        "segment_mounted",
        "segment_unmounted",
        "owner_removed",
    ] {
        let count = recs.iter().filter(|r| r.event.kind == kind).count() as u64;
        assert!(count > 0, "{kind}");
        assert_eq!(v["by_event_kind"][kind]["records"], count, "{kind}");
    }
    let segments = v["segments"].as_array().unwrap();
    let seg_records: u64 = segments
        .iter()
        .map(|s| s["records"].as_u64().unwrap())
        .sum();
    assert_eq!(seg_records, recs.len() as u64);
    assert!(segments
        .iter()
        .all(|s| s["used_bytes"].as_u64() <= s["file_bytes"].as_u64()));
    assert_eq!(v["snapshots"][0]["seq"], 25);
    assert_eq!(v["snapshots"][0]["term"], 1);
    assert_eq!(v["snapshots"][0]["error"], Value::Null);
    assert_eq!(v["tail"]["status"], "clean");
    let text = run(&["stats", s(&root)]);
    assert_eq!(text.code, 0);
    assert!(text.stdout.contains("segment_registry:"), "{}", text.stdout);
}
