//! Rolling upgrade of an HA pair on a real etcd (docs/operations.md, "Upgrading an HA pair"),
//! with two builds whose event schemas differ: the "old release" is this workspace's crescentd,
//! the "new release" the same built with the test feature `upgrade-test-schema`, which adds
//! `segment_mounted` v3 (and can still write v2). Every write is an acknowledged
//! `crescent segments mount` (a CLI process that exits).
//!
//! The steps: both old; the standby replaced by the new build (it catches up); failover
//! (SIGTERM of the old active), so the new node is active with an old standby and writes v2;
//! kill -9 of that new active, so the old node takes over and reads everything it wrote (the
//! old crescent-replay decodes its data dir too); the remaining old node upgraded, so the new
//! active writes v3 once its standby says it reads v3. At every step every acknowledged mount
//! is listed by the active; at the end `crescent-replay verify` passes on both data dirs, the
//! journal holds v3 records only for mounts written after the switch, and the old
//! crescent-replay can no longer decode it (so the two builds really differ).
//!
//! Ignored by default: the second build costs minutes (README.md, "Other commands").

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crescent_tests::binaries::{ensure_workspace_binary, workspace_bin_dir, workspace_root};
use crescent_tests::crescentd::{log_tail, CrescentdProcess};
use crescent_tests::ha_pair::{
    cluster_name, health, start_node_bin, wait_active, wait_pair_in_sync, REWIND_EXIT_CODE,
};
use crescent_tests::store_e2e::crescent_cli;

/// crescentd and crescent-replay of both builds.
struct Builds {
    old_crescentd: PathBuf,
    old_replay: PathBuf,
    new_crescentd: PathBuf,
    new_replay: PathBuf,
}

/// The new release: from `CRESCENT_UPGRADE_BIN_DIR` (prebuilt), else built
/// here with the feature into this target dir and copied to `TARGET/PROFILE/upgrade-test/`.
/// The old release is then (re)built without it, which puts the default binaries back.
fn builds() -> Builds {
    let new_dir = match std::env::var_os("CRESCENT_UPGRADE_BIN_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => build_new_release(),
    };
    let b = Builds {
        old_crescentd: ensure_workspace_binary("crescent-server", "crescentd"),
        old_replay: ensure_workspace_binary("crescent-replay-tools", "crescent-replay"),
        new_crescentd: new_dir.join("crescentd"),
        new_replay: new_dir.join("crescent-replay"),
    };
    for (old, new) in [
        (&b.old_crescentd, &b.new_crescentd),
        (&b.old_replay, &b.new_replay),
    ] {
        let (o, n) = (std::fs::read(old).unwrap(), std::fs::read(new).unwrap());
        assert_ne!(
            o,
            n,
            "{} and {} are the same build",
            old.display(),
            new.display()
        );
    }
    b
}

fn build_new_release() -> PathBuf {
    let bin_dir = workspace_bin_dir();
    cargo_build(
        &bin_dir,
        &["--features", "crescent-domain/upgrade-test-schema"],
    );
    let new_dir = bin_dir.join("upgrade-test");
    std::fs::create_dir_all(&new_dir).unwrap();
    for bin in ["crescentd", "crescent-replay"] {
        std::fs::copy(bin_dir.join(bin), new_dir.join(bin)).unwrap();
    }
    // Put the default binaries back (even with CRESCENT_BIN_DIR set, which stops
    // `ensure_workspace_binary` from building).
    cargo_build(&bin_dir, &[]);
    new_dir
}

/// `cargo build` of crescentd and crescent-replay into `bin_dir`'s target dir, with `extra`.
fn cargo_build(bin_dir: &Path, extra: &[&str]) {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(workspace_root())
        .args([
            "build",
            "-p",
            "crescent-server",
            "-p",
            "crescent-replay-tools",
        ])
        .args(["--bin", "crescentd", "--bin", "crescent-replay"])
        .args(extra);
    if let Some(target) = bin_dir.parent() {
        cmd.arg("--target-dir").arg(target);
    }
    eprintln!("building: {cmd:?}");
    let out = cmd.output().expect("running cargo");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The pair in a temp dir: nodes "a" and "b", each `None` while stopped.
struct Pair {
    /// Kept when the test fails (its path is printed), removed when it passes.
    dir: PathBuf,
    cluster: String,
    nodes: [Option<CrescentdProcess>; 2],
    /// Every acknowledged mount: segment id -> stage it was written in.
    acked: BTreeMap<String, &'static str>,
}

const NAMES: [&str; 2] = ["a", "b"];

impl Pair {
    fn start(&mut self, i: usize, bin: &Path) {
        self.nodes[i] = Some(start_node_bin(
            bin,
            self.dir.as_path(),
            NAMES[i],
            &self.cluster,
        ));
    }

    /// Starts node `i` as the standby of a running active: a node that must first drop a tail
    /// the active never received exits with the rewind code once and is started again (a
    /// supervisor's job, docs/ha.md).
    fn start_standby(&mut self, i: usize, bin: &Path) {
        for _ in 0..3 {
            self.start(i, bin);
            let t = Instant::now();
            while t.elapsed() < Duration::from_secs(4) {
                let n = self.nodes[i].as_mut().unwrap();
                if let Some(status) = n.guard.try_exit_status() {
                    assert_eq!(
                        status.code(),
                        Some(REWIND_EXIT_CODE),
                        "{}: {status}\n{}",
                        NAMES[i],
                        log_tail(&n.log_path, 30)
                    );
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            if self.nodes[i]
                .as_mut()
                .unwrap()
                .guard
                .try_exit_status()
                .is_none()
            {
                return;
            }
        }
        panic!("{} kept exiting on restart", NAMES[i]);
    }

    fn node(&self, i: usize) -> &CrescentdProcess {
        self.nodes[i].as_ref().expect("node running")
    }

    fn data_dir(&self, i: usize) -> PathBuf {
        self.dir.as_path().join(NAMES[i])
    }

    /// SIGTERM, and waits for the exit: clean, or (a standby may not catch it) by the signal.
    fn stop(&mut self, i: usize) {
        use std::os::unix::process::ExitStatusExt;
        let mut n = self.nodes[i].take().expect("node running");
        n.guard.signal(libc::SIGTERM);
        let status = n.guard.wait();
        assert!(
            status.success() || status.signal() == Some(libc::SIGTERM),
            "{} exited {status}:\n{}",
            NAMES[i],
            log_tail(&n.log_path, 30)
        );
    }

    fn kill9(&mut self, i: usize) {
        let mut n = self.nodes[i].take().expect("node running");
        n.guard.sigkill();
    }

    async fn in_sync(&self) -> usize {
        wait_pair_in_sync(&[self.node(0), self.node(1)]).await
    }

    fn cli(&self, i: usize, args: &[&str]) -> (i32, String, String) {
        let n = self.node(i);
        let token = n.admin_token();
        let (code, out, err) = crescent_cli(&n.base_url(), token.as_deref(), args);
        (code, String::from_utf8_lossy(&out).into_owned(), err)
    }

    /// `count` mounts through the active `i`, each a CLI process; every one must be
    /// acknowledged (the pair is healthy).
    fn write(&mut self, i: usize, stage: &'static str, count: usize) {
        for k in 0..count {
            let seg = format!("{stage}-{k:03}");
            let (code, _, err) = self.cli(
                i,
                &[
                    "segments",
                    "mount",
                    "--owner",
                    "owner-u",
                    "--segment",
                    &seg,
                    "--size",
                    "4096",
                ],
            );
            assert_eq!(code, 0, "mount {seg}: {err}");
            self.acked.insert(seg, stage);
        }
    }

    /// Every acknowledged mount is listed by the active `i`.
    fn assert_all_listed(&self, i: usize, when: &str) {
        let (code, out, err) = self.cli(i, &["segments", "ls", "--json"]);
        assert_eq!(code, 0, "{when}: segments ls: {err}");
        for seg in self.acked.keys() {
            assert!(out.contains(&format!("\"{seg}\"")), "{when}: {seg} lost");
        }
    }

    /// The `event_versions` the active `i` reports for `segment_mounted` (writes, newest).
    async fn written_version(&self, i: usize) -> Option<(u64, u64)> {
        let h = health(self.node(i).addr).await?;
        let kinds = h["ha"]["event_versions"].as_array()?.clone();
        let k = kinds.iter().find(|k| k["kind"] == "segment_mounted")?;
        Some((k["writes"].as_u64()?, k["newest"].as_u64()?))
    }

    async fn wait_written_version(&self, i: usize, want: (u64, u64)) {
        let started = Instant::now();
        while self.written_version(i).await != Some(want) {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "segment_mounted not written at {want:?}: {:?}; log:\n{}",
                self.written_version(i).await,
                log_tail(&self.node(i).log_path, 30)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// `crescent-replay ARGS` of `bin`: (exit code, stdout, stderr).
fn replay(bin: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(bin)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("running crescent-replay");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `verify` passes and every `segment_mounted` record decodes with `bin`'s build; returns
/// segment id -> the version each was written at.
fn verify_and_decode(bin: &Path, data: &Path) -> BTreeMap<String, u64> {
    let data = data.to_str().unwrap();
    let (code, out, err) = replay(bin, &["verify", data]);
    assert_eq!(code, 0, "verify {data}:\n{out}\n{err}");
    let (code, out, err) = replay(
        bin,
        &[
            "dump",
            data,
            "--kind",
            "segment_mounted",
            "--decode",
            "--json",
        ],
    );
    assert_eq!(code, 0, "dump --decode {data}:\n{err}");
    out.lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let seg = v["decoded"]["data"]["segment_id"].as_str().unwrap();
            (seg.to_string(), v["event"]["version"].as_u64().unwrap())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "builds a second crescentd (minutes): README.md, \"Other commands\""]
async fn a_rolling_upgrade_writes_what_the_older_peer_reads_and_loses_nothing() {
    let b = builds();
    let mut p = Pair {
        dir: tempfile::tempdir().unwrap().keep(),
        cluster: cluster_name(),
        nodes: [None, None],
        acked: BTreeMap::new(),
    };
    eprintln!("pair in {}", p.dir.display());
    // 1. Both old.
    p.start(0, &b.old_crescentd);
    p.start(1, &b.old_crescentd);
    let active = p.in_sync().await;
    let standby = 1 - active;
    p.write(active, "old", 10);

    eprintln!("stage 2");
    // 2. The standby replaced by the new build, on its data dir: it catches up.
    p.stop(standby);
    p.start_standby(standby, &b.new_crescentd);
    assert_eq!(p.in_sync().await, active);
    p.write(active, "newstandby", 10);
    p.assert_all_listed(active, "with a new standby");

    eprintln!("stage 3");
    // 3. Failover to the new node; the old one rejoins as its standby.
    p.stop(active);
    wait_active(p.node(standby), Duration::from_secs(15)).await;
    p.start_standby(active, &b.old_crescentd);
    assert_eq!(p.in_sync().await, standby);
    p.wait_written_version(standby, (2, 3)).await;
    p.write(standby, "mixed", 10);
    p.assert_all_listed(standby, "mixed, new active");

    eprintln!("stage 4");
    // 4. kill -9 of the new active while mixed: the old node takes over with everything.
    p.kill9(standby);
    wait_active(p.node(active), Duration::from_secs(15)).await;
    p.assert_all_listed(active, "after kill -9 of the new active");
    let old_reads = verify_and_decode(&b.old_replay, &p.data_dir(standby));
    assert!(old_reads.values().all(|v| *v == 2), "{old_reads:?}");
    p.start_standby(standby, &b.new_crescentd);
    assert_eq!(p.in_sync().await, active);
    p.write(active, "oldagain", 5);

    eprintln!("stage 5");
    // 5. Upgrade the remaining old node: fail over to the new one, restart the old as new.
    p.stop(active);
    wait_active(p.node(standby), Duration::from_secs(15)).await;
    p.start_standby(active, &b.new_crescentd);
    assert_eq!(p.in_sync().await, standby);
    p.wait_written_version(standby, (3, 3)).await;
    p.write(standby, "upgraded", 10);
    p.assert_all_listed(standby, "both new");

    // Both stopped: every data dir verifies and holds each mount at the version its stage
    // allowed; the old release cannot decode the upgraded journal.
    // The standby (node `active` of step 1) first: stopped after its active, it would be
    // taking over.
    p.stop(active);
    p.stop(standby);
    for (i, name) in NAMES.iter().enumerate() {
        let versions = verify_and_decode(&b.new_replay, &p.data_dir(i));
        for (seg, stage) in &p.acked {
            let want = if *stage == "upgraded" { 3 } else { 2 };
            assert_eq!(versions.get(seg), Some(&want), "{name} {seg}");
        }
        let data = p.data_dir(i);
        let (code, _, _) = replay(
            &b.old_replay,
            &[
                "dump",
                data.to_str().unwrap(),
                "--kind",
                "segment_mounted",
                "--decode",
            ],
        );
        assert_ne!(code, 0, "the old release decoded v3 records");
    }
    std::fs::remove_dir_all(&p.dir).unwrap();
}
