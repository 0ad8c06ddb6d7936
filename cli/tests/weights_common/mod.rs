//! Shared by the managed-weight end-to-end tests: a crescentd on a data dir that outlives it
//! (restarts, SIGKILL fault injection), the `crescent --json weights ...` runner, and a
//! generator of model-shaped safetensors files.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

#[path = "../common/mod.rs"]
pub mod common;
#[allow(unused_imports)] // each test binary uses its own part
pub use common::{crescent, crescentd_bin, start_owner, DirNode, Proc};

/// A crescentd on `<dir>/data`, configured by `<dir>/crescentd.toml`.
pub struct Node {
    pub inner: DirNode,
    pub dir: PathBuf,
    /// Recovery passes in the (appended) log before this start.
    passes_before: usize,
}

/// The log line that ends crescentd's weight recovery pass (after the rebuild gate opened).
pub const RECOVERED: &str = "weight revisions recovered and checked for lost payloads";

/// crescentd without an embedded segment: every object lives in a storage owner's segment
/// (the production topology; start the owner with [`start_weights_owner`]).
pub const OWNER_TOPOLOGY: &str = "[store]\nembedded_segment_bytes = 0\n";

/// A `crescent owner` process with a 128 MiB segment, following the node's address: it
/// outlives crescentd's restarts there and replays its ownership table to each new run.
pub fn start_weights_owner(node: &Node) -> Proc {
    start_owner(&node.s(), "weights-owner", "128M").0
}

impl Node {
    /// Starts crescentd with `config` (TOML text, may be empty) and extra environment.
    pub fn start(dir: &Path, config: &str, env: &[(&str, &str)]) -> Node {
        Self::start_at(dir, config, env, None)
    }

    /// [`Node::start`] on `addr` (a restart the storage owners find again), or a free port.
    pub fn start_at(
        dir: &Path,
        config: &str,
        env: &[(&str, &str)],
        addr: Option<SocketAddr>,
    ) -> Node {
        let passes_before = std::fs::read_to_string(dir.join("crescentd.log"))
            .unwrap_or_default()
            .matches(RECOVERED)
            .count();
        Node {
            inner: DirNode::start_at(dir, Some(config), env, addr),
            dir: dir.to_path_buf(),
            passes_before,
        }
    }

    /// SIGKILLed (by itself or the test): starts crescentd again on the same data dir and
    /// address, without fault injection.
    pub fn restart(dir: &Path, config: &str, addr: SocketAddr) -> Node {
        Self::start_at(dir, config, &[], Some(addr))
    }

    /// The log of this start only.
    pub fn this_run_log(&self) -> String {
        let log = self.log();
        // Each start logs its rebuild gate (with the owners it expects) once; this run's is
        // the last.
        let marker = "expected_owners=";
        let at = log
            .rfind(marker)
            .map_or(0, |i| log[..i].rfind('\n').map_or(0, |n| n + 1));
        log[at..].to_string()
    }

    /// Waits for this start's weight recovery pass (it runs once the rebuild gate is open).
    pub fn wait_recovered(&self) {
        self.wait_for("the weight recovery pass", || {
            self.log().matches(RECOVERED).count() > self.passes_before
        });
    }

    pub fn addr(&self) -> SocketAddr {
        self.inner.addr
    }

    pub fn s(&self) -> String {
        self.inner.s()
    }

    pub fn log(&self) -> String {
        self.inner.log()
    }

    /// SIGKILLs the node.
    pub fn kill(&self) {
        self.inner.kill9();
    }

    /// `crescent --json ARGS`: (exit code, parsed stdout or Null, stderr).
    pub fn cli(&self, args: &[&str]) -> (i32, Value, String) {
        let mut full = vec!["--json"];
        full.extend_from_slice(args);
        let (code, out, err) = crescent(&self.s(), &full, None);
        let v = serde_json::from_slice(&out).unwrap_or(Value::Null);
        (code, v, err)
    }

    /// `crescent --json ARGS`, which must succeed.
    pub fn ok(&self, args: &[&str]) -> Value {
        let (code, v, err) = self.cli(args);
        assert_eq!(code, 0, "{args:?}: {v}\n{err}\n{}", self.log());
        v
    }

    /// Waits for the node to kill itself (fault injection).
    pub fn wait_killed(self) {
        self.inner.wait_killed();
    }

    /// Waits until `done` holds (polling), or fails with the log.
    pub fn wait_for(&self, what: &str, mut done: impl FnMut() -> bool) {
        let started = Instant::now();
        while !done() {
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "timed out waiting for {what}:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until the cold device holds more than `bytes` and its usage stopped changing
    /// (passthrough has copied everything queued so far).
    pub fn wait_cold_settled(&self, bytes: u64) {
        let mut last = (u64::MAX, u64::MAX, u64::MAX);
        self.wait_for("the cold copies", || {
            let now = self.cold_usage();
            let settled = now == last && now.0 > bytes && now.1 == 0;
            last = now;
            if !settled {
                std::thread::sleep(Duration::from_millis(300));
            }
            settled
        });
    }

    /// The cold device's (used, reserved, live materialized bytes).
    pub fn cold_usage(&self) -> (u64, u64, u64) {
        let v = self.ok(&["cold", "ls"]);
        let d = v
            .get("devices")
            .and_then(|d| d.get(0))
            .or_else(|| v.get(0))
            .unwrap_or_else(|| panic!("no cold device in {v}"))
            .clone();
        (
            d["used"].as_u64().unwrap(),
            d["reserved"].as_u64().unwrap(),
            d["live_materialized_bytes"].as_u64().unwrap(),
        )
    }
}

/// `ID` arguments of `crescent weights`.
pub fn id_args(resource: &str, generation: u64) -> Vec<String> {
    [
        "--namespace",
        "llm",
        "--resource",
        resource,
        "--revision",
        "main",
        "--generation",
        &generation.to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// `crescent --json weights CMD ID TAIL...` arguments.
pub fn weights_args(cmd: &str, resource: &str, generation: u64, tail: &[&str]) -> Vec<String> {
    let mut v = vec!["weights".to_string(), cmd.to_string()];
    v.extend(id_args(resource, generation));
    v.extend(tail.iter().map(|s| s.to_string()));
    v
}

pub fn refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// A model-shaped safetensors file: `tensors` tensors whose sizes vary around `total_bytes /
/// tensors` (embedding-, attention- and MLP-like shapes in turn, F16/BF16/F32), a
/// `__metadata__` entry, a header padded to 8 bytes and a 32-byte alignment hole after the
/// first tensor. Deterministic in `seed`.
pub fn model_safetensors(tensors: usize, total_bytes: u64, seed: u64) -> Vec<u8> {
    assert!(tensors > 0);
    let per = (total_bytes / tensors as u64).max(64);
    let mut header = serde_json::Map::new();
    header.insert(
        "__metadata__".into(),
        serde_json::json!({"format": "pt", "generator": "crescent-test", "seed": seed.to_string()}),
    );
    let mut layout = Vec::with_capacity(tensors);
    let mut offset = 0u64;
    for t in 0..tensors {
        // Three shapes in turn: x1/2, x1, x3/2 of the mean (mean preserved every 3 tensors).
        let bytes = match t % 3 {
            0 => per / 2,
            1 => per,
            _ => per + per / 2,
        }
        .max(64)
            / 64
            * 64;
        let (dtype, width) = match t % 3 {
            0 => ("F16", 2u64),
            1 => ("BF16", 2),
            _ => ("F32", 4),
        };
        if t == 1 {
            offset += 32;
        }
        let elements = bytes / width;
        let name = match t % 3 {
            0 => format!("model.layers.{}.self_attn.q_proj.weight", t / 3),
            1 => format!("model.layers.{}.mlp.up_proj.weight", t / 3),
            _ => format!("model.layers.{}.mlp.down_proj.weight", t / 3),
        };
        header.insert(
            name,
            serde_json::json!({
                "dtype": dtype,
                "shape": [elements / 64, 64],
                "data_offsets": [offset, offset + bytes],
            }),
        );
        layout.push((offset, bytes));
        offset += bytes;
    }
    let mut text = serde_json::to_string(&header).unwrap();
    while !text.len().is_multiple_of(8) {
        text.push(' ');
    }
    let mut file = Vec::with_capacity(8 + text.len() + offset as usize);
    file.extend_from_slice(&(text.len() as u64).to_le_bytes());
    file.extend_from_slice(text.as_bytes());
    let data_start = file.len();
    file.resize(data_start + offset as usize, 0);
    let mut state = seed | 1;
    for chunk in file[data_start..].chunks_mut(8) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let b = state.to_le_bytes();
        chunk.copy_from_slice(&b[..chunk.len()]);
    }
    // The alignment hole is zeros, as writers leave it.
    let hole = data_start + layout[0].1 as usize;
    if tensors > 1 {
        file[hole..hole + 32].fill(0);
    }
    file
}

/// Writes `bytes` as `<dir>/<name>/model.safetensors` and returns the directory.
pub fn model_dir(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let d = dir.join(name);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("model.safetensors"), bytes).unwrap();
    d
}

/// `weights get ... -o DIR` and the file read back.
pub fn get_model(node: &Node, resource: &str, generation: u64, out: &Path) -> Vec<u8> {
    let _ = std::fs::remove_dir_all(out);
    let args = weights_args("get", resource, generation, &["-o", out.to_str().unwrap()]);
    node.ok(&refs(&args));
    std::fs::read(out.join("model.safetensors")).unwrap()
}

/// The payload bytes of a safetensors file (what `logical_bytes` counts).
pub fn payload_bytes(file: &[u8]) -> u64 {
    let header = u64::from_le_bytes(file[..8].try_into().unwrap());
    file.len() as u64 - 8 - header
}

/// The value after `key=` on the first log line containing `marker` (and `also`).
pub fn log_field(log: &str, marker: &str, also: &str, key: &str) -> Option<String> {
    log.lines()
        .filter(|l| l.contains(marker) && l.contains(also))
        .find_map(|l| {
            let at = l.find(&format!("{key}="))? + key.len() + 1;
            let rest = &l[at..];
            let end = rest.find([' ', ',', '}']).unwrap_or(rest.len());
            Some(rest[..end].trim_matches('"').to_string())
        })
}
