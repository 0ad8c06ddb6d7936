//! The cold-tier end-to-end tests' view of a crescentd: the `crescent --json` calls they make
//! (put, get, offload, evict --hot, stat, cold ls) on a [`DirNode`].

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crescent_transport::tcp::{TcpConfig, TcpTransport};
use crescent_transport::{
    RemoteSegment, SegmentMemory, TransferDescriptor, TransferOp, Transport, TransportMetrics,
};
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

/// [`start`] in open mode (no `[auth]`): for the tests that cannot run with credentials (each
/// says why).
pub fn start_open(dir: &Path, env: &[(&str, &str)]) -> Node {
    Node {
        inner: DirNode::start_open_at(dir, None, env, None),
    }
}

/// Writes `text` as `<dir>/crescentd.toml`; returns its path (for `CRESCENT_CONFIG`).
pub fn write_config(dir: &Path, text: &str) -> String {
    let path = dir.join("crescentd.toml");
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
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
        let list = devices["devices"].as_array().expect("device list");
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

    /// Polls `done` every 50 ms; fails the test (with the node's log) after 30 s.
    pub fn wait_for(&self, what: &str, mut done: impl FnMut() -> bool) {
        let started = Instant::now();
        while !done() {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "timed out waiting for {what}:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// How many hot replicas `key` has (`stat`).
    pub fn replicas(&self, key: &str) -> usize {
        let stat: Value = self.ok(&["stat", key], None);
        stat["replicas"].as_array().unwrap().len()
    }

    /// One sample of a server metric (`name{labels}` as exported), 0 when absent.
    pub fn metric(&self, series: &str) -> f64 {
        use std::io::{Read, Write};
        let mut conn = std::net::TcpStream::connect(self.s()).unwrap();
        write!(conn, "GET /metrics HTTP/1.0\r\nHost: crescentd\r\n\r\n").unwrap();
        let mut text = String::new();
        conn.read_to_string(&mut text).unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or(0.0)
    }

    pub fn kill(self) {
        self.inner.kill9();
        drop(self);
    }

    /// Waits for the process to end (it SIGKILLs itself at an armed fault point).
    pub fn wait_killed(self) {
        self.inner.wait_killed();
    }
}

/// A small multi-threaded runtime for the tests' in-process clients.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Puts `data` under `key` and leaves it cold-only on the default device; returns its payload
/// file.
pub fn cold_only(dir: &Path, node: &Node, key: &str, data: &[u8]) -> PathBuf {
    node.put(key, data);
    node.ok(&["offload", key], None);
    let stat = node.ok(&["evict", key, "--hot"], None);
    assert!(stat["replicas"].as_array().unwrap().is_empty(), "{stat}");
    let locator = stat["cold"]["locator"].as_str().expect("locator");
    dir.join("data/cold/local0").join(locator)
}

/// Reads a staged payload's bytes from wherever its answer names (crescentd's staging pool or
/// a storage owner's region) over the data plane, as a (late) reader would, presenting the
/// payload's read grant (with `[auth]`, docs/security.md "The data plane").
pub fn read_staged(rt: &tokio::runtime::Runtime, staged: &Value) -> Result<Vec<u8>, String> {
    let length = staged["length"].as_u64().unwrap();
    let grant = serde_json::from_value::<Option<Vec<u8>>>(staged["grant"].clone())
        .unwrap()
        .and_then(|g| crescent_transport::Grant::decode(&g));
    rt.block_on(async {
        let transport = TcpTransport::start(TcpConfig::default(), TransportMetrics::unregistered())
            .await
            .unwrap();
        let memory = Arc::new(SegmentMemory::allocate(length as usize).unwrap());
        let local = transport.register(memory.clone()).unwrap();
        let desc = [TransferDescriptor {
            op: TransferOp::Read,
            remote: RemoteSegment::new(
                staged["endpoint"].as_str().unwrap(),
                staged["segment_id"].as_str().unwrap(),
            ),
            remote_offset: staged["offset"].as_u64().unwrap(),
            local,
            local_offset: 0,
            length,
            grant,
        }];
        let done = transport.submit(&desc).await.map_err(|e| e.to_string())?;
        done.into_result().map_err(|e| e.to_string())?;
        Ok(memory.read_to_vec(0, length).await.unwrap())
    })
}
