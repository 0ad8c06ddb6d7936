//! Background re-promotion of objects restored from a STORAGE OWNER's cold device
//! (docs/cold-tier.md, "Restore on read": the restore re-promotes into DRAM, best effort). With a
//! staging region on the owner, crescentd reads the payload to promote through it (work `stage`,
//! the slot pulled over crescentd's data plane, `release_staged`), never in the owner's poll body:
//! an object above the inline limit (16 MiB - 64 KiB) gets a hot replica again. An owner without a
//! region (`--cold-staging-bytes 0`) still promotes a small object inline; a larger one stays
//! cold-only and readable, the promotion counted as failed.

mod common;

use std::path::Path;

use common::cold::{payload, Node};
use common::cold_owner::{cold_on_owner, owner_io, start_owner_with, wait_healthy, DEVICE};
use common::{DirNode, Proc};

/// crescentd's own device takes no offload (placement picks the owner's); promotion on read
/// is on (the default), its deferral short.
const CONFIG: &str = "[cold]\nschedulable = false\nhealth_probe_interval_ms = 200\n\
                      promotion_quiet_ms = 0\npromotion_max_defer_ms = 100\n";

fn start_node(dir: &Path) -> Node {
    Node {
        inner: DirNode::start_at(dir, Some(CONFIG), &[], None),
    }
}

fn start_owner(node: &Node, dir: &Path, extra: &[&str]) -> Proc {
    start_owner_with(node, dir, ("96M", "128M"), extra, &[])
}

fn promotions(node: &Node, outcome: &str) -> f64 {
    node.metric(&format!(
        "crescent_cold_promotions_total{{outcome=\"{outcome}\"}}"
    ))
}

/// Reads `key` (a local restore: the client reads the owner's directory, so no owner IO
/// but the promotion's), checks the bytes, and waits for its promotion to end.
fn get_and_settle(node: &Node, key: &str, data: &[u8]) {
    let ended = promotions(node, "done") + promotions(node, "failed");
    assert!(node.get(key).unwrap() == data, "{key}: byte-identical");
    node.wait_for("the promotion to end", || {
        promotions(node, "done") + promotions(node, "failed") > ended
    });
}

#[test]
fn an_object_over_the_inline_limit_is_re_promoted_through_the_owners_staging() {
    let dir = tempfile::tempdir().unwrap();
    let node = start_node(dir.path());
    let _owner = start_owner(&node, dir.path(), &[]);
    wait_healthy(&node);
    let big = payload(40 << 20, 21);
    cold_on_owner(&node, dir.path(), "big", &big);
    assert_eq!(node.replicas("big"), 0, "cold-only");

    get_and_settle(&node, "big", &big);
    assert_eq!(promotions(&node, "done"), 1.0, "{}", node.log());
    let stat = node.ok(&["stat", "big"], None);
    assert_eq!(stat["replicas"].as_array().unwrap().len(), 1, "{stat}");
    assert_eq!(
        stat["cold"]["device_id"], DEVICE,
        "the cold copy stays: {stat}"
    );
    // Through the owner's staging, released at once; no payload in a poll body.
    assert_eq!(owner_io(&node, "stage", "ok"), 1.0);
    assert_eq!(owner_io(&node, "release_staged", "posted"), 1.0);
    assert_eq!(owner_io(&node, "read", "ok"), 0.0);
    assert_eq!(owner_io(&node, "read", "failed"), 0.0);
    // The hot replica reads back byte-identical, with no further owner IO.
    assert!(node.get("big").unwrap() == big);
    assert_eq!(owner_io(&node, "stage", "ok"), 1.0);
    assert_eq!(node.replicas("big"), 1);
}

#[test]
fn an_owner_without_staging_promotes_small_objects_inline_and_leaves_large_ones_cold() {
    let dir = tempfile::tempdir().unwrap();
    let node = start_node(dir.path());
    let _owner = start_owner(&node, dir.path(), &["--cold-staging-bytes", "0"]);
    wait_healthy(&node);
    let small = payload(100_000, 22);
    let big = payload(20 << 20, 23);
    cold_on_owner(&node, dir.path(), "small", &small);
    cold_on_owner(&node, dir.path(), "big", &big);

    // Small: read inline through the owner's poll, promoted.
    get_and_settle(&node, "small", &small);
    assert_eq!(promotions(&node, "done"), 1.0, "{}", node.log());
    assert_eq!(node.replicas("small"), 1);
    assert_eq!(owner_io(&node, "read", "ok"), 1.0);
    assert_eq!(owner_io(&node, "stage", "ok"), 0.0);
    assert!(node.get("small").unwrap() == small);

    // Above the inline limit with no region: the promotion fails (counted), the read did
    // not, and the object stays cold-only and readable.
    get_and_settle(&node, "big", &big);
    assert_eq!(promotions(&node, "failed"), 1.0, "{}", node.log());
    assert_eq!(node.replicas("big"), 0);
    let stat = node.ok(&["stat", "big"], None);
    assert_eq!(stat["cold"]["device_id"], DEVICE, "{stat}");
    assert!(node.get("big").unwrap() == big);
    assert_eq!(owner_io(&node, "stage", "ok"), 0.0);
}
