//! The model-shaped round trip through `crescent weights bench` against a real crescentd:
//! a generated safetensors file put HOT, migrated to MIXED, COLD and back to HOT, read back
//! byte-identical after each step, benchmarked against plain gets of the same bytes, upserted
//! to generation 2 (read back byte-identical) and removed, leaving nothing behind.
//!
//! Small by default (CI). The acceptance run (at least 1 GiB, a few hundred tensors):
//! `CRESCENT_WEIGHTS_MODEL_MIB=1024 CRESCENT_WEIGHTS_MODEL_TENSORS=300 cargo test --release
//! -p crescent-cli --test weights_model -- --nocapture` (the embedded segment is sized
//! for it here).

mod weights_common;

use weights_common::*;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn model_round_trip_and_weight_get_benchmark() {
    let mib = env_u64("CRESCENT_WEIGHTS_MODEL_MIB", 24);
    let tensors = env_u64("CRESCENT_WEIGHTS_MODEL_TENSORS", 60);
    let dir = tempfile::tempdir().unwrap();
    // Two generations at once (PUT_FIRST peak) plus the plain copies, with headroom.
    let segment = (mib * 4 + 256) << 20;
    let config = format!("[store]\nembedded_segment_bytes = {segment}\n");
    let node = Node::start(dir.path(), &config, &[]);
    let (mib_s, tensors_s) = (mib.to_string(), tensors.to_string());
    let report = node.ok(&[
        "weights",
        "bench",
        "--size-mib",
        &mib_s,
        "--tensors",
        &tensors_s,
        "--rounds",
        "3",
    ]);
    println!("{report}");
    assert_eq!(report["all_byte_identical"], true, "{report}");
    let steps: Vec<(String, String)> = report["lifecycle"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            assert_eq!(s["byte_identical"], true, "{s}");
            (
                s["step"].as_str().unwrap().to_string(),
                s["residency"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let expected = [
        ("put", "HOT"),
        ("migrate_mixed", "MIXED"),
        ("migrate_cold", "COLD"),
        ("migrate_hot", "HOT"),
        ("upsert", "HOT"),
    ];
    let expected: Vec<(String, String)> = expected
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    assert_eq!(steps, expected, "{report}");
    // Payload objects: one per tensor plus the alignment hole.
    assert_eq!(report["payload_objects"], tensors + 1);
    assert!(report["payload_bytes"].as_u64().unwrap() >= (mib << 20) * 9 / 10);
    for key in [
        "weight_get_gib_s",
        "plain_get_gib_s",
        "ratio",
        "first_weight_get_gib_s",
    ] {
        assert!(report[key].as_f64().unwrap() > 0.0, "{key}: {report}");
    }
    // Nothing is left: both generations deleted, no cold copy, no plain object.
    let listed = node.ok(&["weights", "ls", "--namespace", "crescent-bench"]);
    for r in listed["revisions"].as_array().unwrap() {
        assert_eq!(r["availability"], "DELETED", "{r}");
    }
    node.wait_for("reclaims", || node.cold_usage() == (0, 0, 0));
    let plain = node.ok(&["ls", "crescent-weights-bench/"]);
    assert!(
        plain.as_array().is_none_or(|a| a.is_empty())
            && plain["keys"].as_array().is_none_or(|a| a.is_empty()),
        "{plain}"
    );
}
