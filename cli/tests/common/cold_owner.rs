//! A storage owner serving a cold device (`crescent owner --cold-device ob=DIR`) next to a
//! crescentd [`Node`], and the views of that device the owner-device tests check: its
//! `cold ls` row, usage, payload files and health.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

use super::cold::Node;
use super::{crescent_bin, Proc};

/// The owner device's id.
pub const DEVICE: &str = "ob";
/// The storage owner's id.
pub const OWNER_ID: &str = "node-b";

/// `crescent owner` (id [`OWNER_ID`], a 32 MiB segment) with the cold device [`DEVICE`] at
/// [`device_dir`]; returns once registered. Fault injection is cleared unless `env` sets it.
pub fn start_device_owner(node: &Node, dir: &Path, env: &[(&str, &str)]) -> Proc {
    start_owner_with(node, dir, ("32M", "16M"), &[], env)
}

/// `crescent owner` with a segment of `sizes.0` and the device [`DEVICE`] of capacity
/// `sizes.1`, `args` added to its options (e.g. the staging size and ttl); returns once
/// registered.
pub fn start_owner_with(
    node: &Node,
    dir: &Path,
    sizes: (&str, &str),
    args: &[&str],
    env: &[(&str, &str)],
) -> Proc {
    use std::io::{BufRead, BufReader};
    let (segment, capacity) = sizes;
    let device = format!("{DEVICE}={},capacity={capacity}", device_dir(dir).display());
    let mut cmd = Command::new(crescent_bin());
    if let Some(key) = super::key_of(&node.s()) {
        cmd.env("CRESCENT_TOKEN", key.owner(OWNER_ID));
    }
    cmd.args(["--server", &node.s(), "--json", "owner", "--size", segment])
        .args(["--id", OWNER_ID, "--cold-device", &device])
        .args(args)
        .env_remove(crescent_crash::CRASH_AT_ENV)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut proc = Proc(cmd.spawn().expect("spawning crescent owner"));
    let mut lines = BufReader::new(proc.0.stdout.take().unwrap()).lines();
    let ready: Value = serde_json::from_str(&lines.next().expect("ready line").unwrap()).unwrap();
    assert_eq!(
        ready["cold_devices"],
        serde_json::json!([DEVICE]),
        "{ready}"
    );
    std::thread::spawn(move || for _ in lines {});
    proc
}

/// Puts `data` under `key`, offloads it to the owner's device and evicts the hot replica;
/// returns the payload file in the owner's directory.
pub fn cold_on_owner(node: &Node, dir: &Path, key: &str, data: &[u8]) -> PathBuf {
    node.put(key, data);
    let stat = node.ok(&["offload", key], None);
    assert_eq!(stat["cold"]["device_id"], DEVICE, "{stat}");
    evict_hot(node, key);
    device_dir(dir).join(stat["cold"]["locator"].as_str().unwrap())
}

/// crescentd's count of owner IO items of `work` with `outcome`.
pub fn owner_io(node: &Node, work: &str, outcome: &str) -> f64 {
    node.metric(&format!(
        "crescent_cold_owner_io_total{{outcome=\"{outcome}\",work=\"{work}\"}}"
    ))
}

/// The owner device's directory under the test's `dir`.
pub fn device_dir(dir: &Path) -> PathBuf {
    dir.join("owner-cold")
}

/// The owner device's `cold ls` row (null when crescentd does not list it).
pub fn owner_device(node: &Node) -> Value {
    let list = node.ok(&["cold", "ls"], None);
    list["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["id"] == DEVICE)
        .cloned()
        .unwrap_or(Value::Null)
}

pub fn wait_healthy(node: &Node) {
    node.wait_for("the owner device to be healthy", || {
        owner_device(node)["health"] == "healthy"
    });
}

/// The payload files in the owner device's directory.
pub fn payload_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let objects = device_dir(dir).join("objects");
    for shard in std::fs::read_dir(objects).into_iter().flatten().flatten() {
        for f in std::fs::read_dir(shard.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            out.push(f.path());
        }
    }
    out
}

/// `evict KEY --hot`, retried while a read lease (the owner's read of the object for its
/// write, whose release is deferred and batched, or a get's) still holds the replica (BUSY).
pub fn evict_hot(node: &Node, key: &str) {
    node.wait_for("evict --hot after the read leases", || {
        let (code, v) = node.cli(&["evict", key, "--hot"], None);
        assert!(code == 0 || v["error"]["code"] == "BUSY", "{v}");
        code == 0
    });
}

/// Used, reserved and the sum of live materialized lengths of the owner device.
pub fn usage(node: &Node) -> (u64, u64, u64) {
    let d = owner_device(node);
    (
        d["used"].as_u64().unwrap(),
        d["reserved"].as_u64().unwrap(),
        d["live_materialized_bytes"].as_u64().unwrap(),
    )
}
