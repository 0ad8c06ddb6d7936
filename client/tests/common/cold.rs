//! The cold-tier end-to-end tests' view of a crescentd: the `crescent --json` calls they make
//! (put, get, offload, evict --hot, stat, cold ls) on a [`DirNode`].

use std::path::Path;

use serde_json::Value;

use super::{crescent, DirNode};

/// A crescentd on a data dir that outlives it (restarts reuse it).
pub struct Node {
    pub inner: DirNode,
}

/// Starts crescentd on `<dir>/data` with extra environment (e.g. `CRESCENT_CONFIG`).
pub fn start(dir: &Path, env: &[(&str, &str)]) -> Node {
    Node {
        inner: DirNode::start(dir, None, env),
    }
}

/// A deterministic payload of `n` bytes.
pub fn payload(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u32).wrapping_mul(31).wrapping_add(seed as u32) as u8)
        .collect()
}

impl Node {
    pub fn s(&self) -> String {
        self.inner.s()
    }

    pub fn log(&self) -> String {
        self.inner.log()
    }

    /// Runs the CLI with `--json`; returns (exit code, parsed stdout).
    pub fn cli(&self, args: &[&str], stdin: Option<&[u8]>) -> (i32, Value) {
        let mut full = vec!["--json"];
        full.extend_from_slice(args);
        let (code, out, err) = crescent(&self.s(), &full, stdin);
        let v = serde_json::from_slice(&out).unwrap_or_else(|e| {
            panic!(
                "{args:?}: {e}: {}\nstderr: {err}",
                String::from_utf8_lossy(&out)
            )
        });
        (code, v)
    }

    pub fn ok(&self, args: &[&str], stdin: Option<&[u8]>) -> Value {
        let (code, v) = self.cli(args, stdin);
        assert_eq!(code, 0, "{args:?}: {v}\n{}", self.log());
        v
    }

    pub fn put(&self, key: &str, data: &[u8]) {
        self.ok(&["put", key, "-"], Some(data));
    }

    pub fn put_upsert(&self, key: &str, data: &[u8]) {
        self.ok(&["put", "--upsert", key, "-"], Some(data));
    }

    /// The raw bytes of `get`, or its stderr.
    pub fn get(&self, key: &str) -> Result<Vec<u8>, String> {
        let (code, out, err) = crescent(&self.s(), &["get", key], None);
        if code == 0 {
            Ok(out)
        } else {
            Err(err)
        }
    }

    pub fn device(&self) -> Value {
        let devices = self.ok(&["cold", "ls"], None);
        let list = devices.as_array().expect("device list");
        assert_eq!(list.len(), 1, "{devices}");
        list[0].clone()
    }

    /// Used, reserved and the sum of live materialized lengths of the device.
    pub fn usage(&self) -> (u64, u64, u64) {
        let d = self.device();
        (
            d["used"].as_u64().unwrap(),
            d["reserved"].as_u64().unwrap(),
            d["live_materialized_bytes"].as_u64().unwrap(),
        )
    }

    pub fn kill(self) {
        self.inner.proc.signal(libc::SIGKILL);
        drop(self);
    }

    /// Waits for the process to end (it SIGKILLs itself at an armed fault point).
    pub fn wait_killed(self) {
        self.inner.wait_killed();
    }
}
