//! Managed weights across an HA failover, on a real etcd (CRESCENT_TEST_ETCD, started
//! by scripts/test.sh): two crescentd processes in sync mode, the payloads in a `crescent
//! owner` process that follows the leader through etcd.
//!
//! A PUT_FIRST upsert 1 -> 2 runs until the base's deletion has deleted its first batch;
//! there the active SIGKILLs itself (crash point `weights.after_record_deletion_batch`, docs/testing.md:
//! just after the batch is durable, i.e. replicated to the standby). The new active waits for the owner's replay
//! (its rebuild gate), then resumes the claim from its persisted phase and the base's
//! deletion under its original operation id; the target's metadata is the one its commit
//! published, and it reads back byte-identical.

use std::time::{Duration, Instant};

use crescent_client::{ClientOptions, CrescentClient, WeightStore};
use crescent_tests::auth::with_token;
use crescent_tests::crescentd::log_tail;
use crescent_tests::ha_pair::{wait_active, wait_gate, HaPair};
use crescent_tests::store_e2e::OwnerProcess;
use crescent_wire::weights as w;

const OWNER_SEGMENT: u64 = 64 << 20;
/// The weights HA gates (docs/weights.md, "Policy and configuration"): weight and lineage mutations
/// are refused (UNAVAILABLE) on a replicated cluster until the operator confirms that every node
/// replays their records.
const GATES: &str = "\n[weights]\nweight_management_oplog_capability_confirmed = true\n\
                     weight_lineage_oplog_capability_confirmed = true\n";
/// The crash point, armed in both nodes' first start: only the
/// first active reaches it, since the base's payloads fit in one batch (the new active
/// goes on with the manifest).
const KILL_AT: &str = "weights.after_record_deletion_batch";
/// The variable that arms it (crate `crescent-crash`).
const CRASH_AT_ENV: &str = "CRESCENT_CRASH_AT";

/// The tests of this file run one at a time: two HA pairs and their owners at once overload a
/// small machine.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn id(generation: u64) -> w::WeightId {
    w::WeightId::new("llm", "ha-model", "main", generation)
}

fn hot_manual() -> Option<w::WeightPolicy> {
    Some(w::WeightPolicy::of(
        w::PreferredResidency::Hot,
        w::MigrationMode::Manual,
    ))
}

/// `count` tensors of a few KiB to a few hundred KiB, deterministic in `seed`.
fn tensors(count: usize, seed: u64) -> Vec<(String, Vec<u8>)> {
    let mut state = seed | 1;
    (0..count)
        .map(|t| {
            let len = 4096 + (t * 37_813) % 200_000;
            let bytes = (0..len)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state as u8
                })
                .collect();
            (format!("model.layers.{t}.mlp.up_proj.weight"), bytes)
        })
        .collect()
}

/// Writes `content` as one tensor per payload object and commits.
async fn write(mut writer: crescent_client::WeightWriter, content: &[(String, Vec<u8>)]) {
    for (name, bytes) in content {
        writer.add_tensor(name, bytes).await.expect("add_tensor");
    }
    writer.close().await.expect("commit");
}

async fn read_back(store: &WeightStore, generation: u64, content: &[(String, Vec<u8>)]) {
    let loaded = store
        .weight_get(&id(generation), "weights-ha-test")
        .await
        .expect("weight_get");
    assert_eq!(loaded.objects.len(), content.len());
    for (name, bytes) in content {
        assert!(
            loaded.object(name) == Some(bytes.as_slice()),
            "generation {generation}: {name} differs"
        );
    }
}

/// The value after `key=` on the last line of `log` holding `marker`.
fn log_field(log: &str, marker: &str, key: &str) -> Option<String> {
    let line = log.lines().rev().find(|l| l.contains(marker))?;
    let at = line.find(&format!("{key}="))? + key.len() + 1;
    let rest = &line[at..];
    let end = rest.find([' ', ',', '}']).unwrap_or(rest.len());
    Some(rest[..end].trim_matches('"').to_string())
}

/// A storage owner following the pair's leader through etcd, and a weight store on a client
/// that does the same. Publishing weights is an operator's call (docs/security.md:
/// `weight_write` is `admin` only), so the store's client holds the admin token.
async fn owner_and_store(pair: &HaPair, owner_id: &str) -> (OwnerProcess, WeightStore) {
    let owner = pair.start_owner(owner_id, OWNER_SEGMENT);
    let options = ClientOptions::etcd(&pair.etcd, &pair.cluster);
    let client = CrescentClient::connect(with_token(options, Some(pair.admin_token())))
        .await
        .expect("a client following the leader through etcd");
    (owner, WeightStore::new(&client))
}

/// A PUT_FIRST upsert of generation 1 to 2 (HOT, MANUAL), request id derived.
fn upsert_1_to_2() -> w::UpsertRequest {
    w::UpsertRequest {
        base: id(1),
        target_generation: 2,
        mode: w::UpsertMode::PutFirst,
        expected_base_metadata_generation: None,
        request_id: None,
        policy: hot_manual(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_upsert_killed_with_the_active_resumes_on_the_new_active() {
    let _serial = SERIAL.lock().await;
    // Armed in both crescentd processes' first start, not in their restarts.
    let pair = HaPair::start_with_env(false, GATES, &[(CRASH_AT_ENV, KILL_AT)]).await;
    let active = pair.wait_in_sync().await;
    let survivor = 1 - active;
    let (_owner, store) = owner_and_store(&pair, "weights-ha-owner").await;

    let base = tensors(12, 61);
    write(store.weight_put(id(1), hot_manual()).await.unwrap(), &base).await;
    read_back(&store, 1, &base).await;

    // The upsert: the client imports the target, crescentd then retires, drains and deletes
    // the base; the active dies just after the deletion's first batch.
    let target = tensors(16, 62);
    let req = upsert_1_to_2();
    let claim = store.weight_upsert(&req).await.expect("upsert");
    assert_eq!(claim.next_step, "import_target", "{claim:?}");
    let mut writer = store
        .weight_put_with(w::PutBeginRequest {
            id: id(2),
            policy: hot_manual(),
            request_id: Some(claim.request_id.clone()),
        })
        .await
        .unwrap();
    for (name, bytes) in &target {
        writer.add_tensor(name, bytes).await.unwrap();
    }
    let committed = writer
        .close()
        .await
        .expect("the target commits before the kill");
    assert_eq!(
        (
            committed.availability.as_str(),
            committed.residency.as_str()
        ),
        ("READY", "HOT")
    );

    let old_log = pair.node(active).log_path.clone();
    let started = Instant::now();
    while !log_tail(&old_log, 400).contains("crash point reached: SIGKILL") {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the active never reached {KILL_AT}:\n{}",
            log_tail(&old_log, 40)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let old = std::fs::read_to_string(&old_log).unwrap();
    let deletion = log_field(&old, "driving weight operation", "operation")
        .unwrap_or_else(|| panic!("no deletion started on the old active:\n{old}"));

    let node = pair.node(survivor);
    wait_active(node, Duration::from_secs(20)).await;
    wait_gate(node, "SERVING", Duration::from_secs(60)).await;

    // The claim resumes from its persisted phase and finishes on the new active.
    let status = w::UpsertStatusRequest {
        tenant: None,
        namespace: "llm".into(),
        resource_id: "ha-model".into(),
        revision: "main".into(),
        request_id: claim.request_id.clone(),
    };
    let started = Instant::now();
    let done = loop {
        let reply = store.weight_upsert_status(&status).await;
        if let Ok(r) = &reply {
            if r.phase == "COMMITTED" {
                break r.clone();
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the claim did not commit on the new active: {reply:?}\n{}",
            log_tail(&node.log_path, 40)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(done.watermark, Some(2), "{done:?}");
    let new_log = std::fs::read_to_string(&node.log_path).unwrap();
    let recovered = new_log
        .rfind("weight revisions recovered and checked for lost payloads")
        .expect("the recovery pass ran");
    let gate_open = new_log.rfind("rebuild gate open").expect("gate opened");
    assert!(
        gate_open < recovered,
        "recovery waited for the owner's replay"
    );
    assert!(!new_log.contains("is DEGRADED"), "nothing was lost");
    assert_eq!(
        log_field(&new_log, "resuming upsert claim", "request_id").as_deref(),
        Some(claim.request_id.as_str())
    );
    assert_eq!(
        log_field(&new_log, "resuming upsert claim", "phase").as_deref(),
        Some("BaseDrained"),
        "the claim resumed from its persisted phase"
    );
    // The base's deletion finished under the operation id the old active started.
    let op = store.weight_get_operation(&deletion).await.unwrap();
    assert_eq!(
        (op.kind.as_str(), op.status.as_str()),
        ("DELETING", "SUCCEEDED")
    );
    assert_eq!(op.id.generation, 1, "{op:?}");
    assert_eq!(op.members_done, base.len() as u64, "{op:?}");
    assert_eq!(op.rounds_completed, 1, "the batch is not repeated: {op:?}");

    // The target's metadata is what its commit published (no loss report, no repair).
    let meta = store.weight_get_metadata(&id(2)).await.unwrap();
    assert_eq!(meta.availability, committed.availability);
    assert_eq!(meta.residency, committed.residency);
    assert_eq!(meta.metadata_generation, committed.metadata_generation);
    assert_eq!(meta.active_operation_id, committed.active_operation_id);
    assert_eq!(meta.manifest_sha256, committed.manifest_sha256);
    read_back(&store, 2, &target).await;

    // One successor: generation 2 live, generation 1 a tombstone.
    let listed = store
        .weight_list_all(&w::WeightListRequest {
            tenant: None,
            namespace: Some("llm".into()),
            resource_id: Some("ha-model".into()),
            after: None,
            limit: None,
        })
        .await
        .unwrap();
    let live: Vec<u64> = listed
        .iter()
        .filter(|m| m.availability != "DELETED")
        .map(|m| m.id.generation)
        .collect();
    assert_eq!(live, vec![2], "{listed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_the_lineage_flag_an_upsert_fails_closed_on_a_replicated_cluster() {
    let _serial = SERIAL.lock().await;
    // Only the first gate: weight mutations pass, lineage mutations do not.
    let pair = HaPair::start_with(
        false,
        "\n[weights]\nweight_management_oplog_capability_confirmed = true\n",
    )
    .await;
    pair.wait_in_sync().await;
    let (_owner, store) = owner_and_store(&pair, "weights-gate-owner").await;
    let base = tensors(3, 71);
    write(store.weight_put(id(1), hot_manual()).await.unwrap(), &base).await;
    let before = store.weight_get_metadata(&id(1)).await.unwrap();

    let req = upsert_1_to_2();
    let err = store.weight_upsert(&req).await.unwrap_err();
    // crescentd answers UNAVAILABLE; the client cannot tell that UNAVAILABLE from a leader
    // change under a non-idempotent call, so it reports FAILOVER_INTERRUPTED with the
    // server's answer inside (docs/ha.md, "Clients").
    assert_eq!(err.code_str(), "FAILOVER_INTERRUPTED", "{err}");
    assert!(err.to_string().contains("UNAVAILABLE"), "{err}");
    assert!(
        err.to_string()
            .contains("weight_lineage_oplog_capability_confirmed"),
        "{err}"
    );
    // Nothing was claimed: the base is as it was and still reads back.
    let after = store.weight_get_metadata(&id(1)).await.unwrap();
    assert_eq!(after.metadata_generation, before.metadata_generation);
    assert_eq!(after.retired_by_generation, None);
    read_back(&store, 1, &base).await;
}
