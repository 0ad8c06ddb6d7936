//! Several cold devices on one crescentd (`[[cold.devices]]`): offloads spread over them by
//! placement, every object reads back from its own device, a restart replays both, and an
//! unavailable device takes no offload and fails the reads of its objects with a clear code.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::cold::{payload, Node};
use common::DirNode;
use serde_json::Value;

const TWO_DEVICES: &str = r#"
[cold]
health_probe_interval_ms = 100

[[cold.devices]]
id = "ssd-a"
capacity_bytes = 4194304
tags = ["ssd"]

[[cold.devices]]
id = "ssd-b"
capacity_bytes = 4194304
tags = ["ssd"]
"#;

fn start(dir: &Path) -> Node {
    Node {
        inner: DirNode::start(dir, Some(TWO_DEVICES), &[]),
    }
}

/// `crescent cold ls`, by device id.
fn devices(node: &Node) -> BTreeMap<String, Value> {
    let list = node.ok(&["cold", "ls"], None);
    list["devices"]
        .as_array()
        .expect("device list")
        .iter()
        .map(|d| (d["id"].as_str().unwrap().to_string(), d.clone()))
        .collect()
}

fn used(d: &Value) -> u64 {
    d["used"].as_u64().unwrap()
}

/// Every device's used bytes equal the sum of its live materialized lengths, nothing is
/// reserved, and the totals match `expected` (device id -> bytes).
fn assert_usage(node: &Node, expected: &BTreeMap<String, u64>) {
    let devices = devices(node);
    for (id, d) in &devices {
        assert_eq!(d["reserved"].as_u64(), Some(0), "{d}");
        assert_eq!(d["used"], d["live_materialized_bytes"], "{d}");
        assert_eq!(used(d), expected.get(id).copied().unwrap_or(0), "{id}: {d}");
    }
}

#[test]
fn two_devices_are_filled_by_placement_read_back_and_replayed_after_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path());
    let listed = devices(&node);
    assert_eq!(listed.len(), 2, "{listed:?}");
    for (id, d) in &listed {
        assert_eq!(d["health"], "healthy");
        assert_eq!(d["capacity"].as_u64(), Some(4 << 20));
        assert!(dir
            .path()
            .join("data/cold")
            .join(id)
            .join("DEVICE")
            .exists());
    }

    // Equal sizes: placement (most free bytes, smallest id on a tie) alternates a, b, a, ...
    let objects: Vec<(String, Vec<u8>)> = (0..6)
        .map(|i| (format!("obj{i}"), payload(300_000 + i, i as u8)))
        .collect();
    let mut expected: BTreeMap<String, u64> = BTreeMap::new();
    let mut device_of = BTreeMap::new();
    for (key, data) in &objects {
        node.put(key, data);
        let stat = node.ok(&["offload", key], None);
        assert_eq!(stat["cold"]["state"], "materialized", "{stat}");
        let device = stat["cold"]["device_id"].as_str().unwrap().to_string();
        let file = dir
            .path()
            .join("data/cold")
            .join(&device)
            .join(stat["cold"]["locator"].as_str().unwrap());
        assert!(file.exists(), "{}", file.display());
        *expected.entry(device.clone()).or_default() += data.len() as u64;
        device_of.insert(key.clone(), device);
        node.ok(&["evict", key, "--hot"], None);
    }
    let on: Vec<&str> = objects.iter().map(|(k, _)| device_of[k].as_str()).collect();
    assert_eq!(on, ["ssd-a", "ssd-b", "ssd-a", "ssd-b", "ssd-a", "ssd-b"]);
    assert_usage(&node, &expected);

    // Cold-only reads from both devices: local (this host reads the device) and remote.
    for (key, data) in &objects {
        assert_eq!(&node.get(key).unwrap(), data, "{key}");
        let (code, out, err) =
            common::crescent(&node.s(), &["--no-local-cold-restore", "get", key], None);
        assert_eq!(code, 0, "{err}");
        assert_eq!(&out, data, "{key} (remote restore)");
    }

    // A delete reclaims on the object's own device.
    node.wait_for("promotions to settle", || {
        objects.iter().all(|(k, _)| node.replicas(k) == 1)
    });
    let (gone, gone_data) = &objects[1];
    node.ok(&["rm", gone], None);
    *expected.get_mut(&device_of[gone]).unwrap() -= gone_data.len() as u64;
    assert_usage(&node, &expected);

    // SIGKILL and restart: both devices replay from the journal; every remaining object is
    // cold-only again (the embedded segment's memory is new) and reads back from its device.
    node.kill();
    let node = start(dir.path());
    assert_eq!(devices(&node).len(), 2);
    assert_usage(&node, &expected);
    for (key, data) in objects.iter().filter(|(k, _)| k != gone) {
        let stat = node.ok(&["stat", key], None);
        assert_eq!(
            stat["cold"]["device_id"].as_str(),
            Some(device_of[key].as_str())
        );
        assert_eq!(&node.get(key).unwrap(), data, "{key} after restart");
    }
    assert!(node.get(gone).is_err());
}

#[test]
fn an_unavailable_device_takes_no_offload_and_its_reads_fail_clearly_until_it_returns() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path());
    let first = payload(200_000, 1);
    node.put("first", &first);
    let stat = node.ok(&["offload", "first"], None);
    assert_eq!(stat["cold"]["device_id"], "ssd-a", "{stat}");
    node.ok(&["evict", "first", "--hot"], None);

    // The device's directory disappears (an unmounted share): its probes fail.
    let root = dir.path().join("data/cold/ssd-a");
    let moved = dir.path().join("ssd-a.unmounted");
    std::fs::rename(&root, &moved).unwrap();
    node.wait_for("ssd-a to be unavailable", || {
        devices(&node)["ssd-a"]["health"] == "unavailable"
    });

    // New offloads go to the other device, even the ones placement preferred for ssd-a.
    for i in 0..3 {
        let key = format!("later{i}");
        node.put(&key, &payload(100_000, 10 + i));
        let stat = node.ok(&["offload", &key], None);
        assert_eq!(stat["cold"]["device_id"], "ssd-b", "{stat}");
    }

    // A read of the unavailable device's object fails with UNAVAILABLE naming the device,
    // on the remote path and on the local one (the server names no backing it cannot read).
    for args in [
        &["get", "first"][..],
        &["--no-local-cold-restore", "get", "first"][..],
    ] {
        let (code, v) = node.cli(args, None);
        assert_ne!(code, 0, "{v}");
        assert_eq!(v["error"]["code"], "UNAVAILABLE", "{v}");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains("ssd-a"), "{message}");
        assert!(message.contains("unavailable"), "{message}");
    }
    // Nothing was lost: the journal still accounts the object on ssd-a.
    assert_eq!(used(&devices(&node)["ssd-a"]), first.len() as u64);

    // It returns: the probe heals it and the object reads back.
    std::fs::rename(&moved, &root).unwrap();
    node.wait_for("ssd-a to be healthy", || {
        devices(&node)["ssd-a"]["health"] == "healthy"
    });
    assert_eq!(node.get("first").unwrap(), first);
}

#[test]
fn a_journaled_device_dropped_from_the_config_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path());
    node.put("k", &payload(10_000, 4));
    node.ok(&["offload", "k"], None);
    node.kill();
    // Only ssd-b configured now: ssd-a still holds an object in the journal.
    let only_b = "[[cold.devices]]\nid = \"ssd-b\"\ncapacity_bytes = 4194304\n";
    let config = dir.path().join("crescentd.toml");
    std::fs::write(&config, only_b).unwrap();
    let out = std::process::Command::new(common::crescentd_bin())
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .arg("--listen")
        .arg("127.0.0.1:0")
        .arg("--config")
        .arg(&config)
        .env_remove("CRESCENT_CONFIG")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("\"ssd-a\" is in the journal with 1 cold object"),
        "{text}"
    );
    // Configured again, it serves the object.
    let node = start(dir.path());
    assert_eq!(node.get("k").unwrap(), payload(10_000, 4));
}
