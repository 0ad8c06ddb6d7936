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

/// A tenant's quota history, each command decided against the state: a policy, a create
/// that went all the way, an overwrite aborted, a delete that refunded.
fn quota_history() -> Vec<crescent_journal::NewRecord> {
    use crescent_actors::event_codec::new_record;
    use crescent_actors::quota_root::{
        AbortReason, ObjectChange, PolicyMode, QuotaCommand as C, QuotaLimits, QuotaRoot,
        ReserveItem,
    };
    use crescent_actors::{Aggregate, Ctx};
    let item = |op: &str, change| ReserveItem {
        op_id: op.into(),
        key: "d/a".into(),
        change,
    };
    let publish = |op: &str, rv| {
        (
            C::Publish {
                op_id: op.into(),
                route_version: rv,
                deadline_ms: T0 + 60_000,
            },
            C::Finalize {
                op_id: op.into(),
                route_version: rv,
            },
        )
    };
    let mut cmds = vec![C::SetPolicy {
        limits: QuotaLimits {
            max_bytes: Some(1000),
            max_objects: Some(10),
        },
        mode: PolicyMode::Bootstrap,
    }];
    let put = |op: &str, size| C::Reserve {
        item: item(op, ObjectChange::Put { size }),
        deadline_ms: T0 + 30_000,
    };
    cmds.push(put("p1", 300));
    let (p, f) = publish("p1", 11);
    cmds.extend([p, f, put("p2", 900)]);
    cmds.push(C::Abort {
        op_id: "p2".into(),
        reason: AbortReason::Failed,
    });
    cmds.push(C::Reserve {
        item: item("d1", ObjectChange::Delete),
        deadline_ms: T0 + 30_000,
    });
    let (p, f) = publish("d1", 12);
    cmds.extend([p, f]);
    let mut state = QuotaRoot::default();
    let mut out = Vec::new();
    for (i, cmd) in cmds.iter().enumerate() {
        let now = T0 + i as i64;
        for e in state.decide(cmd, &Ctx::at(now)).expect("command accepted") {
            state.apply(&e);
            out.push(new_record::<QuotaRoot>("acme", &e, now));
        }
    }
    out
}

#[test]
fn dump_and_replay_show_quota_root_events_and_state() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("data");
    let mut recs = history(2);
    let before = recs.len() as u64;
    recs.extend(quota_history());
    make_data_dir(&root, recs);
    let r = s(&root);
    let dump = run(&[
        "dump",
        r,
        "--json",
        "--decode",
        "--stream",
        "quota_root/acme",
    ]);
    assert_eq!(dump.code, 0, "{dump:?}");
    let lines: Vec<Value> = dump
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let kinds: Vec<&str> = lines
        .iter()
        .map(|l| l["decoded"]["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "quota_policy_set",
            "quota_reserved",
            "quota_publishing",
            "quota_finalized",
            "quota_reserved",
            "quota_aborted",
            "quota_reserved",
            "quota_publishing",
            "quota_finalized",
        ]
    );
    assert_eq!(lines[0]["seq"], before + 1);
    assert_eq!(lines[0]["decoded"]["data"]["max_bytes"], 1000);
    assert_eq!(lines[0]["decoded"]["data"]["policy_version"], 1);
    assert_eq!(lines[4]["decoded"]["data"]["kind"], "overwrite");
    assert_eq!(lines[4]["decoded"]["data"]["reserved_bytes"], 600);
    assert_eq!(lines[5]["decoded"]["data"]["reason"], "failed");
    assert_eq!(lines[8]["decoded"]["data"]["bytes_delta"], -300);
    assert_eq!(lines[8]["decoded"]["data"]["objects_delta"], -1);

    let all = records(&root);
    let replay = run(&["replay", r, "--to", &all.len().to_string(), "--json"]);
    assert_eq!(replay.code, 0, "{replay:?}");
    let state = &replay.json()["state"];
    assert_eq!(*state, world_of(&all).to_json().unwrap());
    let acme = &state["aggregates"]["quota_root"]["acme"];
    assert_eq!(
        (acme["used_bytes"].as_u64(), acme["pending_bytes"].as_u64()),
        (Some(0), Some(0))
    );
    assert_eq!(acme["operations"]["p2"]["state"], "aborted");
    assert_eq!(acme["objects"], serde_json::json!({}));
}
