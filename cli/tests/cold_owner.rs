//! The cold tier over storage owners' segments: a crescentd without an embedded segment, the
//! hot replicas in a `crescent owner` process. crescentd reads the replica over the data
//! plane to offload it, and a restore promotes the verified bytes back into the owner's
//! segment (or serves them inline when no owner can take them).

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::cold::{payload, start, Node};
use common::start_owner;

const OWNER: &str = "cold-owner";
const SEGMENT: &str = "cold-owner/seg0";

fn start_without_embedded(dir: &Path) -> Node {
    let config = dir.join("crescentd.toml");
    std::fs::write(&config, "[store]\nembedded_segment_bytes = 0\n").unwrap();
    start(dir, &[("CRESCENT_CONFIG", config.to_str().unwrap())])
}

fn replica_segments(node: &Node, key: &str) -> Vec<String> {
    let stat = node.ok(&["stat", key], None);
    stat["replicas"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["segment_id"].as_str().unwrap().to_string())
        .collect()
}

/// Background promotions that ended with `outcome` (done, failed, stale) or were offered
/// (queued, duplicate, dropped).
fn promotions(node: &Node, outcome: &str) -> f64 {
    node.metric(&format!(
        "crescent_cold_promotions_total{{outcome=\"{outcome}\"}}"
    ))
}

/// Every queued promotion has ended.
fn promotions_settled(node: &Node) -> bool {
    let ended: f64 = ["done", "failed", "stale"]
        .iter()
        .map(|o| promotions(node, o))
        .sum();
    ended >= promotions(node, "queued")
}

/// `evict --hot`, retried while the gets' read leases on the promoted replica last (BUSY).
fn evict_after_leases(node: &Node, key: &str) {
    let started = Instant::now();
    loop {
        let (code, v) = node.cli(&["evict", key, "--hot"], None);
        if code == 0 {
            return;
        }
        assert_eq!(v["error"]["code"], "BUSY", "{v}");
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "lease never ended: {v}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn offload_evict_and_restore_through_an_owner_segment() {
    let dir = tempfile::tempdir().unwrap();
    let node = start_without_embedded(dir.path());
    let (owner, ready) = start_owner(&node.s(), OWNER, "32M");
    assert!(ready.contains(SEGMENT), "{ready}");

    let small = payload(4096, 1);
    let large = payload(5 << 20, 2);
    node.put("o/small", &small);
    node.put("o/large", &large);
    for key in ["o/small", "o/large"] {
        assert_eq!(replica_segments(&node, key), [SEGMENT], "{key}");
        // Offload reads the owner's replica over the transport and verifies it.
        let stat = node.ok(&["offload", key], None);
        assert_eq!(stat["cold"]["state"], "materialized", "{stat}");
        assert_eq!(stat["cold"]["op_state"], "usage_committed", "{stat}");
        let evicted = node.ok(&["evict", key, "--hot"], None);
        assert!(
            evicted["replicas"].as_array().unwrap().is_empty(),
            "{evicted}"
        );
    }
    let total = (small.len() + large.len()) as u64;
    assert_eq!(node.usage(), (total, 0, total));

    // Restore on read: verified bytes, then promoted into the owner's segment in the
    // background (deferred until reads are quiet: docs/cold-tier.md).
    assert_eq!(node.get("o/small").unwrap(), small);
    assert_eq!(node.get("o/large").unwrap(), large);
    for key in ["o/small", "o/large"] {
        node.wait_for(&format!("{key} promoted"), || {
            replica_segments(&node, key) == [SEGMENT]
        });
    }
    // The promoted replica is what later gets read (byte-identical through the owner).
    assert_eq!(node.get("o/large").unwrap(), large);

    // With the owner gone no segment can take a promotion: the verified bytes come inline.
    evict_after_leases(&node, "o/large");
    drop(owner);
    let failed_before = promotions(&node, "failed");
    assert_eq!(node.get("o/large").unwrap(), large);
    // The promotion the restore offered runs later and finds no segment to take it.
    node.wait_for("the promotion to fail", || {
        promotions(&node, "failed") > failed_before && promotions_settled(&node)
    });
    assert!(replica_segments(&node, "o/large").is_empty());
    assert_eq!(node.usage(), (total, 0, total));
}
