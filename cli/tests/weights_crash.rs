//! Kill -9 of crescentd in each phase of the weight workflows (crash points
//! `weights.after_<command>`, docs/testing.md: the node SIGKILLs itself just after the named
//! step is durable), then a restart on the same data
//! dir: the workflow resumes from its persisted phase with the same operation or request id,
//! its progress is not reset, and a lineage has at most one successor.
//!
//! The embedded segment's memory does not survive a restart, so these nodes run the cold tier
//! in `passthrough` mode: every completed put (payloads and manifest) is copied to the cold
//! device, and what was HOT before the crash comes back as cold-only objects, readable and
//! adopted back into their revision's group.

mod weights_common;

use serde_json::Value;
use weights_common::*;

const CONFIG: &str = "[cold]\noffload_mode = \"passthrough\"\n\n\
                      [weights]\nweight_migration_max_members_per_round = 4\n";
const KILL: &str = crescent_crash::CRASH_AT_ENV;

/// Puts `model` as `resource`/`generation` (HOT, MANUAL) and waits until passthrough has
/// copied every object of it to the cold device.
fn put_durable(node: &Node, resource: &str, generation: u64, model: &[u8], dir: &std::path::Path) {
    let src = model_dir(dir, &format!("{resource}-{generation}"), model);
    let put = node.ok(&refs(&weights_args(
        "put",
        resource,
        generation,
        &["--policy", "hot", "--mode", "manual", src.to_str().unwrap()],
    )));
    assert_eq!(put["availability"], "READY", "{put}");
    node.wait_cold_settled(payload_bytes(model));
}

fn op(node: &Node, id: &str) -> Value {
    node.ok(&["weights", "op", id])
}

fn wait_op_done(node: &Node, id: &str) -> Value {
    node.wait_for("the operation to finish", || {
        op(node, id)["status"] != "RUNNING"
    });
    op(node, id)
}

#[test]
fn migration_killed_between_copy_and_release_resumes_its_operation() {
    let dir = tempfile::tempdir().unwrap();
    let model = model_safetensors(20, 1 << 20, 21);
    let payloads = 21; // 20 tensors and the alignment hole
    let node = Node::start(
        dir.path(),
        CONFIG,
        &[(KILL, "weights.after_record_round_copied:2")],
    );
    put_durable(&node, "mig", 1, &model, dir.path());
    let (code, _, _) = node.cli(&refs(&weights_args("migrate", "mig", 1, &["--to", "cold"])));
    assert_ne!(code, 0, "the node died mid-migration");
    let log = node.log();
    node.wait_killed();
    let op_id = log_field(&log, "driving weight operation", "", "operation")
        .unwrap_or_else(|| panic!("no operation in the log:\n{log}"));

    let node = Node::start(dir.path(), CONFIG, &[]);
    // Durable progress survived: the totals of the first plan, round 2 copied (pending).
    let resumed = op(&node, &op_id);
    assert_eq!(resumed["kind"], "MIGRATING", "{resumed}");
    assert_eq!(resumed["members_total"], payloads, "{resumed}");
    assert!(
        resumed["rounds_completed"].as_u64().unwrap() >= 1,
        "{resumed}"
    );
    let done = wait_op_done(&node, &op_id);
    assert_eq!(done["status"], "SUCCEEDED", "{done}\n{}", node.log());
    assert_eq!(done["members_total"], payloads, "totals are not re-planned");
    assert!(done["rounds_completed"].as_u64().unwrap() >= 2, "{done}");
    assert_eq!(done["attempts"], 0, "{done}");
    assert!(node.log().contains("resuming weight operation"));
    let m = node.ok(&refs(&weights_args("meta", "mig", 1, &[])));
    assert_eq!(m["residency"], "COLD", "{m}");
    assert!(m["active_operation_id"].is_null());
    let out = dir.path().join("out");
    assert!(get_model(&node, "mig", 1, &out) == model);
}

#[test]
fn deletion_killed_after_its_first_batch_resumes_from_its_progress() {
    let dir = tempfile::tempdir().unwrap();
    // 100 tensors and the hole: two deletion batches (64 + 37).
    let model = model_safetensors(100, 1 << 20, 22);
    let node = Node::start(
        dir.path(),
        CONFIG,
        &[(KILL, "weights.after_record_deletion_batch:1")],
    );
    put_durable(&node, "del", 1, &model, dir.path());
    let (code, _, _) = node.cli(&refs(&weights_args("rm", "del", 1, &[])));
    assert_ne!(code, 0, "the node died mid-deletion");
    let log = node.log();
    node.wait_killed();
    let op_id = log_field(&log, "driving weight operation", "", "operation")
        .unwrap_or_else(|| panic!("no operation in the log:\n{log}"));

    let node = Node::start(dir.path(), CONFIG, &[]);
    let done = wait_op_done(&node, &op_id);
    assert_eq!(done["kind"], "DELETING", "{done}");
    assert_eq!(done["status"], "SUCCEEDED", "{done}\n{}", node.log());
    assert_eq!(done["members_total"], 101, "{done}");
    assert_eq!(done["members_done"], 101, "no member counted twice: {done}");
    assert_eq!(
        done["rounds_completed"], 2,
        "batch 1 before, batch 2 after: {done}"
    );
    let (code, m, _) = node.cli(&refs(&weights_args("meta", "del", 1, &[])));
    if code == 0 {
        assert_eq!(m["availability"], "DELETED", "{m}");
        assert_eq!(m["residency"], "ABSENT", "{m}");
    } else {
        assert_eq!(m["error"]["code"], "NOT_FOUND", "{m}");
    }
    // Every cold copy was reclaimed, the ones of batch 1 included.
    node.wait_for("reclaims", || node.cold_usage() == (0, 0, 0));
}

/// The production topology: crescentd holds metadata only, every payload lives in a
/// `crescent owner` process that survives crescentd's SIGKILL and replays its table to the
/// restarted node (same address). Recovery waits for that replay (the rebuild gate), and a
/// put commits only once the owner recorded its objects, so nothing committed is lost.
const OWNED: &str = "[store]\nembedded_segment_bytes = 0\n";

/// Kills the node at the crash point `weights.<point>` of an upsert 1 -> 2 in `mode` (payloads on a storage
/// owner), restarts it on the same address and checks one outcome: the claim resumed from
/// `phase` under its original request id to COMMITTED, the lineage has one successor
/// (generation 2 READY + HOT, generation 1 DELETED), nothing was degraded (the target's
/// metadata generation is that of a plain put), and generation 2 reads back byte-identical.
fn upsert_killed_at(mode: &str, point: &str, phase: &str) {
    let dir = tempfile::tempdir().unwrap();
    let resource = format!("{mode}-{point}");
    let base = model_safetensors(6, 256 << 10, 31);
    let target = model_safetensors(8, 320 << 10, 32);
    let armed = format!("weights.{point}");
    let node = Node::start(dir.path(), OWNED, &[(KILL, armed.as_str())]);
    let _owner = start_weights_owner(&node);
    let src = model_dir(dir.path(), "v1", &base);
    let put = node.ok(&refs(&weights_args(
        "put",
        &resource,
        1,
        &["--policy", "hot", "--mode", "manual", src.to_str().unwrap()],
    )));
    assert_eq!(put["availability"], "READY", "{put}");
    // What a committed HOT revision's metadata generation is: any later mutation (a loss
    // report, a repair) would raise the target's above it.
    let committed_generation = put["metadata_generation"].as_u64().unwrap();
    let v2 = model_dir(dir.path(), "v2", &target);
    let upsert = weights_args(
        "upsert",
        &resource,
        2,
        &[
            "--replacing",
            "1",
            "--upsert-mode",
            mode,
            "--policy",
            "hot",
            "--mode",
            "manual",
            v2.to_str().unwrap(),
        ],
    );
    let (code, out, err) = node.cli(&refs(&upsert));
    assert_ne!(code, 0, "{point}: the node died mid-upsert: {out} {err}");
    let addr = node.addr();
    node.wait_killed();

    let node = Node::restart(dir.path(), OWNED, addr);
    node.wait_recovered();
    // The claims are resumed (and logged) right after the recovery pass's own line.
    node.wait_for("the upsert claim to resume", || {
        node.this_run_log().contains("resuming upsert claim")
    });
    let run = node.this_run_log();
    let gate_open = run.find("rebuild gate open").expect("the gate opened");
    let recovered = run.find(RECOVERED).unwrap();
    assert!(
        gate_open < recovered,
        "recovery ran after the owner's replay:\n{run}"
    );
    assert!(
        !run.contains("is DEGRADED"),
        "{point}: nothing was lost:\n{run}"
    );
    let resumed_phase = log_field(&run, "resuming upsert claim", "", "phase");
    assert_eq!(resumed_phase.as_deref(), Some(phase), "{point}:\n{run}");
    let resumed_id = log_field(&run, "resuming upsert claim", "", "request_id");

    let reply = node.ok(&refs(&upsert));
    assert_eq!(reply["phase"], "COMMITTED", "{point}: {reply}\n{run}");
    assert_eq!(reply["watermark"], 2, "{reply}");
    assert_eq!(
        resumed_id.as_deref(),
        reply["request_id"].as_str(),
        "{point}: the claim resumed under its original request id"
    );

    // One successor: generation 2 READY, generation 1 deleted, nothing else.
    let listed = node.ok(&[
        "weights",
        "ls",
        "--namespace",
        "llm",
        "--resource",
        &resource,
    ]);
    let revisions = listed["revisions"].as_array().unwrap();
    let live: Vec<u64> = revisions
        .iter()
        .filter(|r| r["availability"] != "DELETED")
        .map(|r| r["id"]["generation"].as_u64().unwrap())
        .collect();
    assert_eq!(live, vec![2], "{point}: {listed}");
    assert!(revisions.len() <= 2, "{listed}");
    let m = node.ok(&refs(&weights_args("meta", &resource, 2, &[])));
    assert_eq!(m["availability"], "READY", "{point}: {m}");
    assert_eq!(m["residency"], "HOT", "{point}: {m}");
    assert_eq!(
        m["metadata_generation"], committed_generation,
        "{point}: {m}"
    );
    let (code, b, _) = node.cli(&refs(&weights_args("meta", &resource, 1, &[])));
    if code == 0 {
        assert_eq!(b["availability"], "DELETED", "{point}: {b}");
    } else {
        assert_eq!(b["error"]["code"], "NOT_FOUND", "{point}: {b}");
    }
    let out = dir.path().join("out");
    assert!(get_model(&node, &resource, 2, &out) == target, "{point}");
    // The owner replays the base's objects it still lists (crescentd's removals do not reach
    // its table): recovery removes those of a tombstone, a resumed deletion its own.
    let prefix = format!("weights/default/llm/{resource}/main/1/");
    let left = node.ok(&["--domain", "_weights", "ls", &prefix]);
    assert_eq!(left["count"], 0, "{point}: {left}");
    let kept = node.ok(&["--domain", "_weights", "ls", "weights/"]);
    assert_eq!(
        kept["count"].as_u64(),
        Some(target_objects(&target)),
        "{point}: {kept}"
    );
}

/// The objects of a revision of `file`: one per tensor, the alignment hole, the manifest.
fn target_objects(file: &[u8]) -> u64 {
    let header = u64::from_le_bytes(file[..8].try_into().unwrap()) as usize;
    let parsed: serde_json::Map<String, Value> =
        serde_json::from_slice(&file[8..8 + header]).unwrap();
    let tensors = parsed.keys().filter(|k| *k != "__metadata__").count() as u64;
    tensors + 1 + 1
}

#[test]
fn put_first_killed_after_the_claim_resumes_the_target_import() {
    upsert_killed_at("put-first", "after_begin_claim", "Claimed");
}

#[test]
fn put_first_killed_after_target_ready_resumes_the_base_retirement() {
    upsert_killed_at(
        "put-first",
        "after_advance_claim_target_ready",
        "TargetReady",
    );
}

#[test]
fn put_first_killed_after_base_retired_resumes_the_lease_drain() {
    upsert_killed_at(
        "put-first",
        "after_advance_claim_base_retired",
        "BaseRetired",
    );
}

#[test]
fn put_first_killed_after_base_drained_resumes_the_base_deletion() {
    upsert_killed_at(
        "put-first",
        "after_advance_claim_base_drained",
        "BaseDrained",
    );
}

#[test]
fn put_first_killed_after_base_deleted_resumes_the_watermark_commit() {
    upsert_killed_at(
        "put-first",
        "after_advance_claim_base_deleted",
        "BaseDeleted",
    );
}

#[test]
fn delete_first_killed_after_the_claim_resumes_the_base_retirement() {
    upsert_killed_at("delete-first", "after_begin_claim", "Claimed");
}

#[test]
fn delete_first_killed_after_base_retired_resumes_the_base_deletion() {
    upsert_killed_at(
        "delete-first",
        "after_advance_claim_base_retired",
        "BaseRetired",
    );
}

#[test]
fn delete_first_killed_after_base_deleted_resumes_the_target_import() {
    upsert_killed_at(
        "delete-first",
        "after_advance_claim_base_deleted",
        "BaseDeleted",
    );
}

#[test]
fn delete_first_killed_after_target_ready_resumes_the_watermark_commit() {
    upsert_killed_at(
        "delete-first",
        "after_advance_claim_target_ready",
        "TargetReady",
    );
}

/// The Prometheus text of the node.
fn metrics_text(node: &Node) -> String {
    let url = format!("http://{}/metrics", node.s());
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(async { reqwest::get(url).await?.text().await })
        .unwrap()
}

#[test]
fn a_hot_revision_lost_at_restart_is_degraded_absent_and_refuses_reads() {
    // No passthrough: the HOT payloads live only in the embedded segment's memory.
    let dir = tempfile::tempdir().unwrap();
    let model = model_safetensors(8, 256 << 10, 5);
    let node = Node::start(dir.path(), "", &[]);
    let src = model_dir(dir.path(), "lost", &model);
    let put = node.ok(&refs(&weights_args(
        "put",
        "lost",
        1,
        &["--policy", "hot", "--mode", "manual", src.to_str().unwrap()],
    )));
    assert_eq!(put["availability"], "READY", "{put}");
    let generation = put["metadata_generation"].as_u64().unwrap();
    assert!(get_model(&node, "lost", 1, &dir.path().join("out")) == model);
    node.kill();
    node.wait_killed();

    let node = Node::start(dir.path(), "", &[]);
    let meta = || node.ok(&refs(&weights_args("meta", "lost", 1, &[])));
    node.wait_for("the revision to be degraded", || {
        meta()["availability"] == "DEGRADED"
    });
    let m = meta();
    assert_eq!(m["residency"], "ABSENT", "{m}");
    assert_eq!(m["observed_hot_ratio"], 0.0, "{m}");
    assert!(
        m["metadata_generation"].as_u64().unwrap() > generation,
        "the correction is a journaled mutation: {m}"
    );
    // A read answers a clear code at once, never partial data.
    let out = dir.path().join("out2");
    let (code, v, err) = node.cli(&refs(&weights_args(
        "get",
        "lost",
        1,
        &["-o", out.to_str().unwrap()],
    )));
    assert_ne!(code, 0, "{v}");
    assert_eq!(v["error"]["code"], "NOT_READY", "{v}\n{err}");
    assert!(!out.join("model.safetensors").exists());
    let text = metrics_text(&node);
    assert!(
        text.lines()
            .any(|l| l.starts_with("crescent_weight_revisions{")
                && l.contains("availability=\"DEGRADED\"")
                && l.contains("residency=\"ABSENT\"")
                && l.ends_with(" 1")),
        "{}",
        text.lines()
            .filter(|l| l.starts_with("crescent_weight_revisions"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // A second restart finds the same loss: no new mutation.
    let settled = meta()["metadata_generation"].as_u64().unwrap();
    drop(node);
    let node = Node::start(dir.path(), "", &[]);
    let again = node.ok(&refs(&weights_args("meta", "lost", 1, &[])));
    assert_eq!(again["availability"], "DEGRADED", "{again}");
    node.wait_for("the resume pass", || {
        node.log()
            .contains("weight revisions recovered and checked for lost payloads")
    });
    let again = node.ok(&refs(&weights_args("meta", "lost", 1, &[])));
    assert_eq!(again["metadata_generation"], settled, "{again}");
    // The revision can still be removed: the tombstone replaces it.
    let rm = node.ok(&refs(&weights_args("rm", "lost", 1, &[])));
    let op_id = rm["operation_id"].as_str().unwrap().to_string();
    let done = wait_op_done(&node, &op_id);
    assert_eq!(done["status"], "SUCCEEDED", "{done}");
    let gone = node.ok(&refs(&weights_args("meta", "lost", 1, &[])));
    assert_eq!(gone["availability"], "DELETED", "{gone}");
}
