//! Residency migration against a real crescentd with its cold tier (the standalone default
//! `local0` device): HOT -> MIXED -> COLD -> HOT -> MIXED(0.25), each time read back
//! byte-identical through `crescent weights get`; bounded rounds; the default MIXED policy
//! converging after READY; deletion reclaiming every cold copy.

mod weights_common;

use serde_json::Value;
use weights_common::*;

/// Rounds of at most 4 members, so a 24-tensor revision moves in several rounds.
const SMALL_ROUNDS: &str = "[weights]\nweight_migration_max_members_per_round = 4\n";

fn meta(node: &Node, resource: &str, generation: u64) -> Value {
    node.ok(&refs(&weights_args("meta", resource, generation, &[])))
}

fn migrate(node: &Node, resource: &str, generation: u64, to: &str) -> Value {
    let op = node.ok(&refs(&weights_args(
        "migrate",
        resource,
        generation,
        &["--to", to],
    )));
    assert_eq!(op["kind"], "MIGRATING", "{op}");
    assert_eq!(op["status"], "SUCCEEDED", "{op}\n{}", node.log());
    op
}

#[test]
fn migrations_between_hot_mixed_and_cold_read_back_byte_identical() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(dir.path(), SMALL_ROUNDS, &[]);
    let model = model_safetensors(24, 3 << 20, 7);
    let src = model_dir(dir.path(), "src", &model);
    let out = dir.path().join("out");
    let put = node.ok(&refs(&weights_args(
        "put",
        "m",
        1,
        &["--policy", "hot", "--mode", "manual", src.to_str().unwrap()],
    )));
    assert_eq!(put["residency"], "HOT");
    let logical = payload_bytes(&model);
    assert_eq!(put["logical_bytes"], logical);
    assert!(get_model(&node, "m", 1, &out) == model);

    // MIXED at the default ratio: whole tensors, about half the bytes HOT.
    let op = migrate(&node, "m", 1, "mixed");
    assert!(op["rounds_completed"].as_u64().unwrap() >= 2, "{op}");
    let m = meta(&node, "m", 1);
    assert_eq!(m["residency"], "MIXED", "{m}");
    let ratio = m["observed_hot_ratio"].as_f64().unwrap();
    assert!((0.4..=0.6).contains(&ratio), "{m}");
    assert!(m["active_operation_id"].is_null(), "{m}");
    let (used, reserved, _) = node.cold_usage();
    assert_eq!(reserved, 0);
    assert!(used > 0 && used < logical + 65_536, "{used}");
    assert!(get_model(&node, "m", 1, &out) == model, "MIXED read");
    // A read does not change the residency (no promotion outside a migration).
    assert_eq!(
        meta(&node, "m", 1)["observed_hot_ratio"],
        m["observed_hot_ratio"]
    );

    // COLD: nothing HOT; the manifest keeps its memory replica and reads still work.
    let op = migrate(&node, "m", 1, "cold");
    assert_eq!(op["target"], "COLD", "{op}");
    let m = meta(&node, "m", 1);
    assert_eq!(m["residency"], "COLD", "{m}");
    assert_eq!(m["observed_hot_ratio"], 0.0);
    let (used, _, _) = node.cold_usage();
    assert!(
        used >= logical,
        "every payload has a cold copy: {used} < {logical}"
    );
    assert!(get_model(&node, "m", 1, &out) == model, "COLD read");
    assert_eq!(meta(&node, "m", 1)["residency"], "COLD");

    // Back to HOT: every payload promoted, verified.
    migrate(&node, "m", 1, "hot");
    let m = meta(&node, "m", 1);
    assert_eq!(m["residency"], "HOT", "{m}");
    assert_eq!(m["observed_hot_ratio"], 1.0);
    assert!(get_model(&node, "m", 1, &out) == model, "HOT read");

    // An override ratio: the HOT set is re-planned from the actual replicas.
    migrate(&node, "m", 1, "mixed:0.25");
    let m = meta(&node, "m", 1);
    assert_eq!(m["residency"], "MIXED");
    let ratio = m["observed_hot_ratio"].as_f64().unwrap();
    assert!((0.15..=0.35).contains(&ratio), "{m}");
    assert!(get_model(&node, "m", 1, &out) == model, "MIXED 0.25 read");

    // Removal reclaims every cold copy.
    let op = node.ok(&refs(&weights_args("rm", "m", 1, &[])));
    assert_eq!(op["status"], "SUCCEEDED", "{op}");
    assert_eq!(node.cold_usage(), (0, 0, 0), "{}", node.log());
}

#[test]
fn the_default_policy_is_published_hot_then_converges_to_mixed() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(dir.path(), "", &[]);
    let model = model_safetensors(12, 1 << 20, 11);
    let src = model_dir(dir.path(), "src", &model);
    let put = node.ok(&refs(&weights_args(
        "put",
        "d",
        1,
        &[src.to_str().unwrap()],
    )));
    // READY is published HOT, with the initial MIGRATING operation in the same mutation.
    assert_eq!(put["availability"], "READY", "{put}");
    assert_eq!(put["policy"]["preferred_residency"], "MIXED", "{put}");
    let op_id = put["active_operation_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no initial migration: {put}"))
        .to_string();
    node.wait_for("convergence to MIXED", || {
        let m = meta(&node, "d", 1);
        m["residency"] == "MIXED" && m["active_operation_id"].is_null()
    });
    let op = node.ok(&["weights", "op", &op_id]);
    assert_eq!(op["status"], "SUCCEEDED", "{op}");
    assert_eq!(op["trigger"], "initial", "{op}");
    let ratio = meta(&node, "d", 1)["observed_hot_ratio"].as_f64().unwrap();
    assert!((0.3..=0.7).contains(&ratio), "{ratio}");
    let out = dir.path().join("out");
    assert!(get_model(&node, "d", 1, &out) == model);
}

#[test]
fn cold_revisions_survive_a_restart_with_their_manifest_back_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    let model = model_safetensors(9, 1 << 20, 5);
    let src = model_dir(dir.path(), "src", &model);
    let out = dir.path().join("out");
    {
        let node = Node::start(dir.path(), "", &[]);
        node.ok(&refs(&weights_args(
            "put",
            "r",
            1,
            &[
                "--policy",
                "cold",
                "--mode",
                "manual",
                src.to_str().unwrap(),
            ],
        )));
        node.wait_for("convergence to COLD", || {
            let m = meta(&node, "r", 1);
            m["residency"] == "COLD" && m["active_operation_id"].is_null()
        });
        node.kill();
    }
    // The embedded segment's memory is gone; the cold copies and the journal are not.
    let node = Node::start(dir.path(), "", &[]);
    let m = meta(&node, "r", 1);
    assert_eq!(m["availability"], "READY");
    assert_eq!(m["residency"], "COLD");
    assert!(get_model(&node, "r", 1, &out) == model, "{}", node.log());
    // The members were adopted back into the revision's group: HOT again, then removed.
    migrate(&node, "r", 1, "hot");
    assert!(get_model(&node, "r", 1, &out) == model);
    let op = node.ok(&refs(&weights_args("rm", "r", 1, &[])));
    assert_eq!(op["status"], "SUCCEEDED");
    assert_eq!(node.cold_usage(), (0, 0, 0), "{}", node.log());
}
