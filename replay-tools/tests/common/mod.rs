//! Fixtures for the CLI tests: real data dirs written with the journal and snapshot crates and
//! real SegmentRegistry events, plus helpers to run the binary and fingerprint a directory.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crescent_actors::event_codec::new_record;
use crescent_actors::{
    Aggregate, Ctx, SegmentRegistry, SegmentRegistryCommand, TransportKind, World,
};
use crescent_journal::file::{FileBackend, FileOptions, JournalScan, ScanEntry, ScanOptions};
use crescent_journal::{Journal, JournalOptions, NewRecord, Record};
use crescent_snapshot::{ReplayState, SnapshotDir};
use sha2::{Digest as _, Sha256};

pub const T0: i64 = 1_764_000_000_000;
/// Small segments so that fixtures span several segment files.
pub const SEGMENT_BYTES: u64 = 4096;

/// The result of running `crescent-replay`.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}", self.stdout))
    }
}

pub fn run(args: &[&str]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_crescent-replay"))
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("spawn crescent-replay");
    Run {
        code: out.status.code().expect("exited normally"),
        stdout: String::from_utf8(out.stdout).expect("utf-8 stdout"),
        stderr: String::from_utf8(out.stderr).expect("utf-8 stderr"),
    }
}

pub fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

pub fn write_marker(root: &Path, format_version: u32, backend: &str) {
    fs::create_dir_all(root).unwrap();
    let marker = serde_json::json!({
        "format_version": format_version,
        "created_at": "2026-11-29T10:00:00+00:00",
        "journal_backend": backend,
    });
    fs::write(
        root.join("CRESCENT_DATA_DIR"),
        serde_json::to_vec_pretty(&marker).unwrap(),
    )
    .unwrap();
}

/// A varied SegmentRegistry history over two instances (`cluster` and `lab`): registrations,
/// mounts, unmounts, an owner restart (which unmounts its segments) and an owner removal.
/// Each command is decided against the instance's state and its events are recorded.
pub fn history(rounds: usize) -> Vec<NewRecord> {
    let mut instances: BTreeMap<&str, SegmentRegistry> = BTreeMap::new();
    let mut out = Vec::new();
    let mut now = T0;
    let mut exec = |id: &'static str, cmd: SegmentRegistryCommand, out: &mut Vec<NewRecord>| {
        now += 1_000;
        let reg = instances.entry(id).or_default();
        let events = reg.decide(&cmd, &Ctx::at(now)).expect("command accepted");
        for e in &events {
            reg.apply(e);
            out.push(new_record::<SegmentRegistry>(id, e, now));
        }
    };
    for r in 0..rounds {
        let id = if r % 3 == 2 { "lab" } else { "cluster" };
        let owner = format!("owner-{}", r % 4);
        exec(
            id,
            SegmentRegistryCommand::RegisterOwner {
                owner_id: owner.clone(),
                endpoint: format!("10.0.0.{}:7000", r % 4),
                incarnation: (r / 4 + 1) as u64,
            },
            &mut out,
        );
        for k in 0..3 {
            exec(
                id,
                SegmentRegistryCommand::MountSegment {
                    segment_id: format!("seg-{r}-{k}"),
                    owner_id: owner.clone(),
                    base: (k as u64) << 30,
                    size: 1 << 30,
                    transport: if k == 1 {
                        TransportKind::TransferEngine
                    } else {
                        TransportKind::Tcp
                    },
                },
                &mut out,
            );
        }
        exec(
            id,
            SegmentRegistryCommand::UnmountSegment {
                segment_id: format!("seg-{r}-0"),
            },
            &mut out,
        );
        if r % 5 == 4 {
            exec(
                id,
                SegmentRegistryCommand::RemoveOwner {
                    owner_id: owner.clone(),
                    reason: "decommissioned".into(),
                },
                &mut out,
            );
        }
    }
    out
}

/// Appends `records` (in batches, so group commit and rotation both happen) to the file
/// journal of data dir `root`, then shuts the journal down.
pub fn append(root: &Path, term: u64, records: Vec<NewRecord>) {
    let backend = FileBackend::open(
        root.join("journal"),
        FileOptions {
            segment_bytes: SEGMENT_BYTES,
            preallocate: true,
        },
    )
    .unwrap();
    let journal = Journal::open(Box::new(backend), JournalOptions::default()).unwrap();
    for chunk in records.chunks(7) {
        journal.append_blocking(term, chunk.to_vec()).unwrap();
    }
    journal.shutdown().unwrap();
}

/// A fresh data dir at `root` holding `records`.
pub fn make_data_dir(root: &Path, records: Vec<NewRecord>) {
    write_marker(root, 1, "file");
    fs::create_dir_all(root.join("snapshots")).unwrap();
    append(root, 1, records);
}

/// Every intact record of the data dir, with where its frame is.
pub fn located_records(root: &Path) -> Vec<(PathBuf, u64, usize, Record)> {
    let scan = JournalScan::open(root.join("journal")).unwrap();
    scan.entries(ScanOptions { verify_chain: true })
        .map(|e| match e.unwrap() {
            ScanEntry::Record {
                segment,
                offset,
                frame_len,
                record,
            } => (
                scan.segment_files()[segment].path.clone(),
                offset,
                frame_len,
                record,
            ),
            ScanEntry::Fault(f) => panic!("fixture journal has a fault: {f}"),
        })
        .collect()
}

pub fn records(root: &Path) -> Vec<Record> {
    located_records(root).into_iter().map(|l| l.3).collect()
}

/// The world after applying `records` directly.
pub fn world_of(records: &[Record]) -> World {
    let mut w = crescent_domain::standard_world();
    for r in records {
        w.apply(r).unwrap();
    }
    w
}

/// Writes a snapshot of `world` into the data dir.
pub fn write_snapshot(root: &Path, world: &World) -> PathBuf {
    let dir = SnapshotDir::new(root.join("snapshots"));
    dir.prepare_for_writing().unwrap();
    dir.write(&world.position(), T0, &world.to_sections().unwrap())
        .unwrap()
        .path
}

/// Flips one byte in the middle of `seq`'s frame body.
pub fn flip_byte_in_record(root: &Path, seq: u64) {
    let (path, offset, len, _) = located_records(root)
        .into_iter()
        .find(|l| l.3.seq == seq)
        .unwrap_or_else(|| panic!("no record {seq}"));
    let at = (offset as usize) + 8 + (len - 8) / 2;
    let mut bytes = fs::read(&path).unwrap();
    bytes[at] ^= 0x40;
    fs::write(&path, bytes).unwrap();
}

/// Content hash of every file under `root`, by relative path.
pub fn fingerprint(root: &Path) -> BTreeMap<PathBuf, [u8; 32]> {
    fn visit(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, [u8; 32]>) {
        for entry in fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                visit(root, &path, out);
            } else {
                let digest: [u8; 32] = Sha256::digest(fs::read(&path).unwrap()).into();
                out.insert(path.strip_prefix(root).unwrap().to_path_buf(), digest);
            }
        }
    }
    let mut out = BTreeMap::new();
    visit(root, root, &mut out);
    out
}

/// Recursively copies a directory.
pub fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let dest = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_dir(&path, &dest);
        } else {
            fs::copy(&path, &dest).unwrap();
        }
    }
}
