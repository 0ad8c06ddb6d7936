//! Managed weights at run time, without a restart (docs/weights.md, "Run-time checks"): a
//! storage owner SIGKILLed while it holds a READY revision's only replicas makes the revision
//! DEGRADED + ABSENT within the owner TTL; a revision degraded at a restart is repaired once
//! its late owner replays, without another restart; an AUTO revision above the store's high
//! watermark is demoted by crescentd with reason `memory_pressure`. Real crescentd, `crescent
//! owner` and CLI processes.

use std::time::{Duration, Instant};

use crescent_tests::binaries::ensure_workspace_binary;
use crescent_tests::crescentd::{log_tail, CrescentdProcess};
use crescent_tests::safetensors::safetensors;
use crescent_tests::store_e2e::{counter, crescent_cli, OwnerProcess};
use serde_json::Value;

const OWNER_SEGMENT: u64 = 16 << 20;

struct Node {
    crescentd: CrescentdProcess,
    dir: tempfile::TempDir,
}

impl Node {
    fn start(config: &str) -> Node {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("crescentd.toml");
        std::fs::write(&path, config).unwrap();
        let bin = ensure_workspace_binary("crescent-server", "crescentd");
        let args = vec!["--config".to_string(), path.display().to_string()];
        let crescentd = CrescentdProcess::start(
            &bin,
            &dir.path().join("data"),
            &dir.path().join("crescentd.log"),
            &args,
        )
        .unwrap_or_else(|e| panic!("starting crescentd: {e}"));
        Node { crescentd, dir }
    }

    /// SIGKILLs crescentd and starts it again on the same data dir and address.
    fn restart(&mut self) {
        self.crescentd.guard.sigkill();
        let bin = ensure_workspace_binary("crescent-server", "crescentd");
        let config = self.dir.path().join("crescentd.toml");
        let args = vec!["--config".to_string(), config.display().to_string()];
        self.crescentd = CrescentdProcess::start_at(
            &bin,
            &self.dir.path().join("data"),
            &self.dir.path().join("crescentd.log"),
            &args,
            self.crescentd.addr,
        )
        .unwrap_or_else(|e| panic!("restarting crescentd: {e}"));
    }

    /// `crescent --json weights CMD --namespace llm --resource R --revision main
    /// --generation 1 TAIL...` as admin (publishing weights is an operator's call).
    fn weights(&self, cmd: &str, resource: &str, tail: &[&str]) -> (i32, Value, String) {
        let server = self.crescentd.addr.to_string();
        let mut args = vec!["--json", "weights", cmd, "--namespace", "llm"];
        args.extend([
            "--resource",
            resource,
            "--revision",
            "main",
            "--generation",
            "1",
        ]);
        args.extend_from_slice(tail);
        let token = self.crescentd.admin_token();
        let (code, out, err) = crescent_cli(&server, token.as_deref(), &args);
        let value = serde_json::from_slice(&out).unwrap_or(Value::Null);
        (code, value, err)
    }

    fn put(&self, resource: &str, file: &[u8], policy: &str, mode: &str) -> Value {
        let src = self.dir.path().join(resource);
        std::fs::create_dir_all(&src).unwrap();
        std::fs::write(src.join("model.safetensors"), file).unwrap();
        let src = src.to_str().unwrap();
        let (code, put, err) =
            self.weights("put", resource, &["--policy", policy, "--mode", mode, src]);
        assert_eq!(code, 0, "put {resource}: {err}");
        assert_eq!(put["availability"], "READY", "{put}");
        put
    }

    fn meta(&self, resource: &str) -> Value {
        let (code, meta, err) = self.weights("meta", resource, &[]);
        assert_eq!(code, 0, "meta {resource}: {err}");
        meta
    }

    fn wait_meta(&self, resource: &str, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
        let started = Instant::now();
        loop {
            let meta = self.meta(resource);
            if ok(&meta) {
                return meta;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "{resource} never became {what}: {meta}\n{}",
                log_tail(&self.crescentd.log_path, 40)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    async fn counter(&self, name: &str, label: &str) -> u64 {
        counter(&self.crescentd.base_url(), name, label).await
    }
}

fn read_back(node: &Node, resource: &str) -> (i32, Option<Vec<u8>>, String) {
    let out = node.dir.path().join(format!("{resource}-out"));
    let (code, _, err) = node.weights("get", resource, &["-o", out.to_str().unwrap()]);
    (code, std::fs::read(out.join("model.safetensors")).ok(), err)
}

/// Payloads in a `crescent owner` (no embedded segment, no cold copies), owner TTL 1 s.
const OWNED: &str = "[store]\nembedded_segment_bytes = 0\nclient_ttl_secs = 1\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_killed_at_run_time_degrades_its_revision_without_a_restart() {
    let node = Node::start(OWNED);
    let mut owner = OwnerProcess::start(&node.crescentd, "weights-owner", OWNER_SEGMENT);
    let model = safetensors(6, 64 << 10, 7);
    let put = node.put("lost", &model, "hot", "manual");
    assert_eq!(put["residency"], "HOT", "{put}");
    assert!(read_back(&node, "lost").1 == Some(model));
    let generation = put["metadata_generation"].as_u64().unwrap();

    owner.guard.sigkill();
    let meta = node.wait_meta("lost", "DEGRADED", |m| m["availability"] == "DEGRADED");
    // Every payload was on the owner: nothing is left to read (ABSENT), journaled as one
    // more metadata generation; crescentd was never restarted.
    assert_eq!(meta["residency"], "ABSENT", "{meta}");
    assert_eq!(meta["metadata_generation"].as_u64(), Some(generation + 1));
    let (code, _, err) = read_back(&node, "lost");
    assert_ne!(code, 0, "a DEGRADED revision refuses reads");
    assert!(err.contains("NOT_READY"), "{err}");
    let transitions = "crescent_weight_availability_transitions_total";
    let by_owner_loss = "availability=\"DEGRADED\",reason=\"owner_lost\"";
    assert_eq!(node.counter(transitions, by_owner_loss).await, 1);
    // Found by the run-time check: the startup pass ran once, before the put.
    let log = std::fs::read_to_string(&node.crescentd.log_path).unwrap();
    assert!(log.contains("owner expired (heartbeat timeout)"), "{log}");
    let startup_passes = log
        .matches("weight revisions recovered and checked")
        .count();
    assert_eq!(startup_passes, 1, "{log}");
}

/// An embedded segment of 8 MiB whose high watermark a 1 MiB revision crosses; the cold tier
/// (on by default) takes the demoted payloads; no cooldown between migrations.
const PRESSURE: &str = "[store]\nembedded_segment_bytes = 8388608\nhigh_watermark = 0.05\n\n\
                        [weights]\nweight_migration_cooldown_ms = 0\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_pressure_demotes_an_auto_revision_step_by_step() {
    let node = Node::start(PRESSURE);
    let manual_model = safetensors(2, 16 << 10, 4);
    node.put("manual", &manual_model, "hot", "manual");
    let auto_model = safetensors(8, 128 << 10, 3);
    let put = node.put("auto", &auto_model, "hot", "auto");
    assert_eq!(put["residency"], "HOT", "{put}");

    // HOT -> MIXED -> COLD, each step a journaled migration with trigger memory_pressure.
    let meta = node.wait_meta("auto", "COLD", |m| m["residency"] == "COLD");
    assert_eq!(meta["availability"], "READY", "{meta}");
    let pressure = "outcome=\"succeeded\",trigger=\"memory_pressure\"";
    let done = node
        .counter("crescent_weight_operations_total", pressure)
        .await;
    assert_eq!(done, 2, "one demotion per step");
    // Only AUTO revisions are demoted: the MANUAL one keeps its residency.
    assert_eq!(node.meta("manual")["residency"], "HOT");
    // Still readable, byte-identical, from the cold copies.
    let (code, bytes, err) = read_back(&node, "auto");
    assert_eq!(code, 0, "{err}");
    assert!(bytes == Some(auto_model), "byte-identical after demotion");
}

/// The rebuild gate opens 1 s after a restart even without the owner (degraded timeout); the
/// owner TTL (10 s) is longer, so a late owner is still known when it comes back.
const LATE_OWNER: &str = "[store]\nembedded_segment_bytes = 0\nclient_ttl_secs = 10\n\
                          rebuild_degraded_timeout_secs = 1\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revision_degraded_at_restart_is_repaired_when_its_late_owner_replays() {
    let mut node = Node::start(LATE_OWNER);
    let mut owner = OwnerProcess::start(&node.crescentd, "late-owner", OWNER_SEGMENT);
    let model = safetensors(4, 64 << 10, 9);
    node.put("late", &model, "hot", "manual");

    // The owner is frozen across the restart: the gate opens without it and the startup
    // check finds every payload missing.
    owner.guard.signal(libc::SIGSTOP);
    node.restart();
    let meta = node.wait_meta("late", "DEGRADED", |m| m["availability"] == "DEGRADED");
    assert_eq!(meta["residency"], "ABSENT", "{meta}");
    let transitions = "crescent_weight_availability_transitions_total";
    let at_recovery = "availability=\"DEGRADED\",reason=\"recovery\"";
    assert_eq!(node.counter(transitions, at_recovery).await, 1);

    // It wakes up within its TTL and replays its table: the run-time check repairs the
    // revision, without another restart.
    owner.guard.signal(libc::SIGCONT);
    let meta = node.wait_meta("late", "READY", |m| m["availability"] == "READY");
    assert_eq!(meta["residency"], "HOT", "{meta}");
    let repaired = "availability=\"READY\",reason=\"repaired\"";
    assert_eq!(node.counter(transitions, repaired).await, 1);
    let (code, bytes, err) = read_back(&node, "late");
    assert_eq!(code, 0, "{err}");
    assert!(bytes == Some(model), "byte-identical after the repair");
}
