//! Backup and restore with the real binaries (docs/operations.md, "Backup and restore"):
//! objects and a weight revision are written with the CLI onto a `crescent owner`, the node is
//! backed up with `crescent admin backup`, SIGKILLed and its data dir wiped, restored with
//! `crescentd --restore-from --restore-only`, started again, and everything reads back. The
//! refusals (a non-empty target; a damaged, newer, unreadable or incomplete backup) are
//! checked on the way, and a restore elsewhere is compared with the original by
//! `crescent-replay diff`.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{crescent, crescentd_bin, json, start_owner, DirNode};
use crescent_replay_tools::cmd::diff::{diff, DiffArgs, Relation};

const CONFIG: &str = "[store]\nembedded_segment_bytes = 0\n";

/// `crescentd --data-dir DATA --restore-from BACKUP --restore-only`: (exit code, stderr).
fn restore_only(data: &Path, backup: &Path) -> (i32, String) {
    let out = Command::new(crescentd_bin())
        .arg("--data-dir")
        .arg(data)
        .arg("--restore-from")
        .arg(backup)
        .arg("--restore-only")
        .env_remove("CRESCENT_CONFIG")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A small safetensors file: 4 F32 tensors of 4096 values.
fn safetensors() -> Vec<u8> {
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    for t in 0..4u32 {
        let start = data.len();
        for i in 0..4096u32 {
            data.extend_from_slice(&((t * 4096 + i) as f32).to_le_bytes());
        }
        header.insert(
            format!("layer.{t}.weight"),
            serde_json::json!({"dtype": "F32", "shape": [64, 64], "data_offsets": [start, data.len()]}),
        );
    }
    let mut text = serde_json::to_string(&header).unwrap();
    while !text.len().is_multiple_of(8) {
        text.push(' ');
    }
    let mut file = (text.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(text.as_bytes());
    file.extend_from_slice(&data);
    file
}

const WEIGHT_ID: [&str; 8] = [
    "--namespace",
    "llm",
    "--resource",
    "tiny",
    "--revision",
    "main",
    "--generation",
    "1",
];

fn weights(s: &str, cmd: &str, tail: &[&str]) -> (i32, Vec<u8>, String) {
    let mut args = vec!["--json", "weights", cmd];
    args.extend(WEIGHT_ID);
    args.extend(tail);
    crescent(s, &args, None)
}

#[test]
fn backup_kill_wipe_restore_reads_everything_back() {
    let tmp = tempfile::tempdir().unwrap();
    let node_dir = tmp.path().join("node");
    std::fs::create_dir(&node_dir).unwrap();
    let data = node_dir.join("data");
    let node = DirNode::start(&node_dir, Some(CONFIG), &[]);
    let s = node.s();
    let (_owner, _) = start_owner(&s, "owner-bk", "64M");

    let objects: Vec<(String, Vec<u8>)> = (0..5)
        .map(|i| (format!("obj/{i}"), vec![b'a' + i as u8; 1000 * (i + 1)]))
        .collect();
    for (key, value) in &objects {
        let (code, _, err) = crescent(&s, &["put", key, "-"], Some(value));
        assert_eq!(code, 0, "{err}");
    }
    let model = tmp.path().join("model.safetensors");
    let model_bytes = safetensors();
    std::fs::write(&model, &model_bytes).unwrap();
    let (code, _, err) = weights(&s, "put", &["--policy", "hot", model.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}\n{}", node.log());

    let (code, out, err) = crescent(&s, &["--json", "admin", "snapshot"], None);
    assert_eq!(code, 0, "{err}");
    let snap = json(&out);
    assert!(snap["seq"].as_u64().unwrap() > 0, "{snap}");
    assert!(
        snap["path"].as_str().unwrap().ends_with(".crsnap"),
        "{snap}"
    );

    let backup = tmp.path().join("backup");
    let backup_args = |to: &Path| {
        let to = to.to_str().unwrap().to_string();
        let data = data.to_str().unwrap().to_string();
        crescent(
            &s,
            &[
                "--json",
                "admin",
                "backup",
                "--data-dir",
                &data,
                "--to",
                &to,
            ],
            None,
        )
    };
    let (code, out, err) = backup_args(&backup);
    assert_eq!(code, 0, "{err}");
    let seq = json(&out)["seq"].as_u64().unwrap();
    assert!(seq >= snap["seq"].as_u64().unwrap());
    let (code, _, err) = backup_args(&backup);
    assert_ne!(code, 0);
    assert!(err.contains("TARGET_NOT_EMPTY"), "{err}");
    // Not a data dir: refused, and the target is left empty.
    let elsewhere = tmp.path().join("elsewhere");
    let (code, _, err) = crescent(
        &s,
        &[
            "admin",
            "backup",
            "--data-dir",
            tmp.path().to_str().unwrap(),
            "--to",
            elsewhere.to_str().unwrap(),
        ],
        None,
    );
    assert_ne!(code, 0);
    assert!(err.contains("BACKUP_SOURCE_INVALID"), "{err}");
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);

    drop(node); // SIGKILL

    // Refusals change nothing: a non-empty target, a damaged backup, no manifest.
    let busy = tmp.path().join("busy");
    std::fs::create_dir(&busy).unwrap();
    std::fs::write(busy.join("keep"), b"x").unwrap();
    let (code, err) = restore_only(&busy, &backup);
    assert_eq!(code, 1);
    assert!(err.contains("TARGET_NOT_EMPTY"), "{err}");
    let damaged = tmp.path().join("damaged");
    copy_tree(&backup, &damaged);
    let snap_file = std::fs::read_dir(damaged.join("snapshots"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let mut bytes = std::fs::read(&snap_file).unwrap();
    bytes[100] ^= 0x01;
    std::fs::write(&snap_file, bytes).unwrap();
    let (code, err) = restore_only(&tmp.path().join("fresh-1"), &damaged);
    assert_eq!(code, 1);
    assert!(err.contains("BACKUP_INVALID"), "{err}");
    assert!(!tmp.path().join("fresh-1").exists());
    let manifest = damaged.join("CRESCENT_BACKUP");
    let mut newer = json(&std::fs::read(&manifest).unwrap());
    newer["format_version"] = 99.into();
    std::fs::write(&manifest, newer.to_string()).unwrap();
    let (code, err) = restore_only(&tmp.path().join("fresh-2"), &damaged);
    assert_eq!(code, 1);
    assert!(err.contains("BACKUP_VERSION"), "{err}");
    std::fs::write(&manifest, b"{not json").unwrap();
    let (code, err) = restore_only(&tmp.path().join("fresh-2"), &damaged);
    assert_eq!(code, 1);
    assert!(err.contains("BACKUP_UNREADABLE"), "{err}");
    std::fs::remove_file(&manifest).unwrap();
    let (code, err) = restore_only(&tmp.path().join("fresh-2"), &damaged);
    assert_eq!(code, 1);
    assert!(err.contains("BACKUP_INCOMPLETE"), "{err}");
    assert!(!tmp.path().join("fresh-2").exists());

    // A restore elsewhere holds the same history as the original up to the backup's seq.
    let check = tmp.path().join("check");
    let (code, err) = restore_only(&check, &backup);
    assert_eq!(code, 0, "{err}");
    let report = diff(&DiffArgs {
        dir_a: data.clone(),
        dir_b: check,
        json: false,
    })
    .unwrap();
    assert!(
        matches!(report.relation, Relation::Identical | Relation::BPrefixOfA),
        "{report:?}"
    );
    assert_eq!(report.identical_up_to, Some(seq), "{report:?}");

    std::fs::remove_dir_all(&data).unwrap();
    let (code, err) = restore_only(&data, &backup);
    assert_eq!(code, 0, "{err}");
    let node = DirNode::start_at(&node_dir, Some(CONFIG), &[], Some(s.parse().unwrap()));
    wait_serving(&s, &node);
    for (key, value) in &objects {
        let (code, out, err) = crescent(&s, &["get", key], None);
        assert_eq!(code, 0, "{key}: {err}\n{}", node.log());
        assert!(&out == value, "{key} differs");
    }
    let out_dir = tmp.path().join("model-out");
    let (code, _, err) = weights(&s, "get", &["-o", out_dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}\n{}", node.log());
    let back = std::fs::read(out_dir.join("model.safetensors")).unwrap();
    assert!(back == model_bytes, "the weight file read back differs");
}

/// Waits for the restarted node's rebuild gate to open (the owner replays its table).
fn wait_serving(s: &str, node: &DirNode) {
    let started = Instant::now();
    loop {
        let (code, out, _) = crescent(s, &["health"], None);
        if code == 0 && json(&out)["gate"] == "SERVING" {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "gate not SERVING:\n{}",
            node.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let dest = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &dest);
        } else {
            std::fs::copy(entry.path(), &dest).unwrap();
        }
    }
}
