//! Honest recovery with the real binaries: crescentd records a few segment mounts made with
//! the `crescent` CLI and is stopped; one byte of the journal's last (complete, acknowledged)
//! frame is flipped on disk. The restart under the default `tolerate_tail_corruption` must
//! copy that frame into `journal/quarantine/` byte for byte before cutting it, and report it
//! in `/healthz`, in `crescent status --json`, in the metrics and in `crescent-replay verify`
//! (a fault, exit 1) until `crescent-replay quarantine clear` removes it.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crescent_journal::file::{JournalScan, ScanEntry, ScanOptions};
use crescent_tests::binaries::ensure_workspace_binary;
use crescent_tests::crescentd::{log_tail, CrescentdProcess};
use crescent_tests::ha_cold_owner::{crescent, json_ok};
use serde_json::Value;

/// (segment file, offset, length, seq) of the journal's last frame.
fn last_frame(journal: &Path) -> (PathBuf, u64, usize, u64) {
    let scan = JournalScan::open(journal).expect("scan journal");
    let mut last = None;
    for entry in scan.entries(ScanOptions::default()) {
        if let ScanEntry::Record {
            segment,
            offset,
            frame_len,
            record,
        } = entry.expect("readable journal")
        {
            let path = scan.segment_files()[segment].path.clone();
            last = Some((path, offset, frame_len, record.seq));
        }
    }
    last.expect("the journal holds records")
}

/// Flips one byte in the middle of the frame; returns the frame's bytes as left on disk.
fn flip_middle_byte(path: &Path, offset: u64, len: usize) -> Vec<u8> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .expect("open segment");
    let at = offset + len as u64 / 2;
    let mut b = [0u8; 1];
    file.read_exact_at(&mut b, at).expect("read byte");
    file.write_all_at(&[b[0] ^ 0x01], at).expect("flip byte");
    file.sync_all().expect("sync segment");
    let mut frame = vec![0u8; len];
    file.read_exact_at(&mut frame, offset).expect("read frame");
    frame
}

fn replay(replay: &Path, args: &[&str], data_dir: &Path) -> (i32, String) {
    let out = Command::new(replay)
        .args(args)
        .arg(data_dir)
        .output()
        .expect("running crescent-replay");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

/// Three acknowledged segment mounts through `crescent` processes: journal records to damage.
fn mount_three_segments(node: &CrescentdProcess) {
    let server = &node.addr.to_string();
    // The owner mounts its own segments (docs/security.md: `owner` scoping).
    let token = node.owner_token("o1");
    for i in 0..3 {
        let segment = format!("seg-{i}");
        let (code, out, err) = crescent(
            &["--server", server],
            token.as_deref(),
            &[
                "segments",
                "mount",
                "--owner",
                "o1",
                "--segment",
                &segment,
                "--size",
                "1048576",
            ],
        );
        assert_eq!(
            code,
            0,
            "mount {segment}: {}{err}",
            String::from_utf8_lossy(&out)
        );
    }
}

fn start(bin: &Path, data_dir: &Path, log: &Path) -> CrescentdProcess {
    CrescentdProcess::start(bin, data_dir, log, &[]).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn a_damaged_last_frame_is_quarantined_reported_and_cleared_by_the_operator() {
    let crescentd = ensure_workspace_binary("crescent-server", "crescentd");
    let replay_bin = ensure_workspace_binary("crescent-replay-tools", "crescent-replay");
    let tmp = tempfile::tempdir().expect("tempdir");
    let data_dir = tmp.path().join("data");
    let log = tmp.path().join("crescentd.log");

    let mut node = start(&crescentd, &data_dir, &log);
    mount_three_segments(&node);
    node.guard.sigkill();

    let journal = data_dir.join("journal");
    let (segment, offset, len, seq) = last_frame(&journal);
    let frame = flip_middle_byte(&segment, offset, len);

    let node = start(&crescentd, &data_dir, &log);
    let health = json_ok(&node, &["status"]);
    let rows = health["journal"]["quarantined"]
        .as_array()
        .unwrap_or_else(|| panic!("no journal.quarantined in {health:#}"));
    assert_eq!(rows.len(), 1, "{health:#}");
    let row = &rows[0];
    assert_eq!(row["seq"], seq, "{row}");
    assert_eq!(row["kind"], "damaged", "{row}");
    assert_eq!(row["offset"], offset, "{row}");
    let copy = journal.join(row["file"].as_str().expect("file"));
    assert_eq!(std::fs::read(&copy).expect("quarantined copy"), frame);
    let logged = std::fs::read_to_string(&log).expect("log");
    assert!(
        logged.contains(&format!("complete frame at seq {seq} that fails its check")),
        "{}",
        log_tail(&log, 20)
    );
    assert!(
        !logged.contains("never acknowledged"),
        "{}",
        log_tail(&log, 20)
    );
    let metrics = reqwest_text(&format!("{}/metrics", node.base_url()));
    assert!(
        metrics.contains("crescent_journal_quarantined_frames{kind=\"damaged\"} 1"),
        "{metrics}"
    );
    drop(node);

    let (code, text) = replay(&replay_bin, &["verify"], &data_dir);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("quarantined_frame") && text.contains(&format!("seq {seq}")),
        "{text}"
    );
    let (code, text) = replay(&replay_bin, &["quarantine", "clear"], &data_dir);
    assert_eq!(code, 0, "{text}");
    let (code, text) = replay(&replay_bin, &["verify"], &data_dir);
    assert_eq!(code, 0, "after clearing: {text}");

    let node = start(&crescentd, &data_dir, &log);
    let health: Value = json_ok(&node, &["status"]);
    assert!(health["journal"].is_null(), "{health:#}");
}

/// A plain HTTP GET of `url`'s body (the metrics text).
fn reqwest_text(url: &str) -> String {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        reqwest::get(url)
            .await
            .expect("GET")
            .text()
            .await
            .expect("body")
    })
}

/// In an HA pair (real etcd, CRESCENT_TEST_ETCD): the active is killed right after
/// acknowledging mounts, and one byte of its journal's last frame is flipped. Restarted, it
/// quarantines that frame, follows the new active as a standby, and takes the record back from
/// it (docs/ha.md, "A quarantined journal tail"): the entry is then marked recovered (one of its
/// bytes differs from the record received), `/healthz` shows it, the gauge counts it as
/// recovered, and `crescent-replay verify` warns instead of failing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ha_node_takes_its_quarantined_record_back_from_the_active() {
    use crescent_tests::ha_pair::{health, wait_active, HaPair};
    use std::time::{Duration, Instant};

    let replay_bin = ensure_workspace_binary("crescent-replay-tools", "crescent-replay");
    let mut pair = HaPair::start(false).await;
    let active = pair.wait_in_sync().await;
    let survivor = 1 - active;
    mount_three_segments(pair.node(active));
    // Quiet: the standby holds every record the active wrote (each was acknowledged only once
    // the standby had it; nothing runs after the last mount).
    let started = Instant::now();
    loop {
        let a = health(pair.node(active).addr).await.unwrap_or_default();
        let s = health(pair.node(survivor).addr).await.unwrap_or_default();
        if a["commit_seq"].as_u64().is_some() && a["commit_seq"] == s["durable_seq"] {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "standby not caught up: {a} / {s}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    pair.node_mut(active).guard.sigkill();
    let data_dir = pair
        .dir
        .path()
        .join(crescent_tests::ha_pair::NODE_NAMES[active]);
    let journal = data_dir.join("journal");
    let (segment, offset, len, seq) = last_frame(&journal);
    let frame = flip_middle_byte(&segment, offset, len);
    wait_active(pair.node(survivor), Duration::from_secs(20)).await;

    pair.restart_as_standby(active);
    let started = Instant::now();
    let row = loop {
        let h = health(pair.node(active).addr).await.unwrap_or_default();
        let row = h["journal"]["quarantined"][0].clone();
        if row["recovered"].is_object() {
            break row;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the quarantined record did not come back: {h:#}\n{}",
            log_tail(&pair.node(active).log_path, 30)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(row["seq"], seq, "{row}");
    assert_eq!(row["recovered"]["source"], "replication", "{row}");
    assert_eq!(row["recovered"]["differing_bytes"], 1, "{row}");
    assert_eq!(row["recovered"]["frame_bytes"], len as u64, "{row}");
    let copy = journal.join(row["file"].as_str().expect("file"));
    assert_eq!(std::fs::read(&copy).expect("the copy stays"), frame);
    let metrics = reqwest::get(format!("{}/metrics", pair.node(active).base_url()))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics body");
    assert!(
        metrics.contains("crescent_journal_quarantined_frames{kind=\"recovered\"} 1")
            && metrics.contains("crescent_journal_quarantined_frames{kind=\"damaged\"} 0"),
        "{metrics}"
    );
    let (code, text) = replay(&replay_bin, &["verify"], &data_dir);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("quarantined_frame_recovered"), "{text}");
}
