//! The weights API contract (docs/weights.md, "Errors") through the public `WeightStore` against a
//! real crescentd: the error codes (NOT_FOUND, NOT_READY, STALE_GENERATION, BUSY, CONFLICT,
//! INVALID_ARGUMENT), same-value retries, weight_is_exist per state, list pagination, a lease
//! blocking deletion and the release of replicas (not their creation), upsert lineage and
//! generation checks with an idempotent retry and a rejected competitor, and the `[weights]`
//! configuration failing closed at startup.

mod weights_common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crescent_client::{ClientError, WeightStore};
use crescent_wire::weights::{self as w, routes};
use weights_common::*;

fn id(resource: &str, generation: u64) -> w::WeightId {
    w::WeightId::new("contract", resource, "main", generation)
}

fn hot_manual() -> Option<w::WeightPolicy> {
    Some(w::WeightPolicy::of(
        w::PreferredResidency::Hot,
        w::MigrationMode::Manual,
    ))
}

fn code<T: std::fmt::Debug>(r: Result<T, ClientError>) -> &'static str {
    match r {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => e.code_str(),
    }
}

/// Puts a small READY revision of `tensors` tensors of 4 KiB.
async fn put(store: &WeightStore, id: &w::WeightId, tensors: usize) -> w::WeightMetadata {
    let mut writer = store.weight_put(id.clone(), hot_manual()).await.unwrap();
    for t in 0..tensors {
        writer
            .add_tensor(&format!("t{t}"), &vec![t as u8; 4096])
            .await
            .unwrap();
    }
    writer.close().await.unwrap()
}

/// A revision lease taken through the HTTP API (what weight_get does internally).
async fn acquire(node: &Node, id: &w::WeightId) -> w::LeaseReply {
    let req = reqwest::Client::new().post(format!("http://{}{}", node.s(), routes::LEASE_ACQUIRE));
    let reply = common::as_client(req, &node.s())
        .json(&w::LeaseRequest {
            id: id.clone(),
            holder: "contract-test".into(),
            ttl_ms: 60_000,
            expected_metadata_generation: None,
        })
        .send()
        .await
        .unwrap();
    assert!(reply.status().is_success(), "{:?}", reply.text().await);
    reply.json().await.unwrap()
}

async fn release(node: &Node, id: &w::WeightId, lease_id: &str) {
    let req = reqwest::Client::new().post(format!("http://{}{}", node.s(), routes::LEASE_RELEASE));
    let reply = common::as_client(req, &node.s())
        .json(&w::LeaseReleaseRequest {
            id: id.clone(),
            lease_id: lease_id.into(),
        })
        .send()
        .await
        .unwrap();
    assert!(reply.status().is_success());
}

async fn wait_op(store: &WeightStore, op: &str, status: &str) -> w::OperationReply {
    let started = Instant::now();
    loop {
        let reply = store.weight_get_operation(op).await.unwrap();
        if reply.status == status {
            return reply;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "{reply:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_codes_retries_existence_and_pagination() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(dir.path(), "", &[]);
    // Publishing weights is an operator's call (docs/security.md: weight_write).
    let client = node.inner.admin_client();
    let store = WeightStore::new(&client);
    let a = id("a", 1);
    let meta = put(&store, &a, 3).await;
    assert_eq!(
        (meta.availability.as_str(), meta.residency.as_str()),
        ("READY", "HOT")
    );
    assert_eq!(store.weight_get_size(&a).await.unwrap(), 3 * 4096);

    // NOT_FOUND for what never existed.
    assert_eq!(
        code(store.weight_get_metadata(&id("a", 9)).await),
        "NOT_FOUND"
    );
    assert_eq!(code(store.weight_get_size(&id("a", 9)).await), "NOT_FOUND");
    assert_eq!(
        code(store.weight_get_operation("op-none").await),
        "NOT_FOUND"
    );
    assert!(!store.weight_is_exist(&id("a", 9)).await.unwrap());

    // An IMPORTING revision is invisible to existence and size.
    let importing = id("importing", 1);
    let writer = store
        .weight_put(importing.clone(), hot_manual())
        .await
        .unwrap();
    assert!(!store.weight_is_exist(&importing).await.unwrap());
    assert_eq!(code(store.weight_get_size(&importing).await), "NOT_READY");
    // The same identity begun again with another policy is a CONFLICT (no second group).
    let other = Some(w::WeightPolicy {
        preferred_residency: Some(w::PreferredResidency::Cold),
        ..w::WeightPolicy::default()
    });
    assert_eq!(
        code(store.weight_put(importing.clone(), other).await),
        "CONFLICT"
    );
    drop(writer);

    // Invalid identity components.
    assert_eq!(
        code(store.weight_get_metadata(&id("", 1)).await),
        "INVALID_ARGUMENT"
    );

    // Same-value retry: no new metadata generation; stale generation: refused.
    let g = meta.metadata_generation;
    let same = store
        .weight_update_policy(&w::UpdatePolicyRequest {
            id: a.clone(),
            policy: hot_manual().unwrap(),
            expected_metadata_generation: Some(g),
        })
        .await
        .unwrap();
    assert_eq!(same.metadata_generation, g);
    let mixed = w::WeightPolicy {
        preferred_residency: Some(w::PreferredResidency::Mixed),
        mixed_hot_ratio: Some(0.25),
        migration_mode: Some(w::MigrationMode::Manual),
    };
    let changed = store
        .weight_update_policy(&w::UpdatePolicyRequest {
            id: a.clone(),
            policy: mixed,
            expected_metadata_generation: Some(g),
        })
        .await
        .unwrap();
    assert_eq!(changed.metadata_generation, g + 1);
    let stale = w::UpdatePolicyRequest {
        id: a.clone(),
        policy: hot_manual().unwrap(),
        expected_metadata_generation: Some(g),
    };
    assert_eq!(
        code(store.weight_update_policy(&stale).await),
        "STALE_GENERATION"
    );
    let stale_migrate = w::MigrateRequest {
        id: a.clone(),
        to: w::PreferredResidency::Cold,
        hot_ratio: None,
        expected_metadata_generation: Some(g),
    };
    assert_eq!(
        code(store.weight_migrate(&stale_migrate).await),
        "STALE_GENERATION"
    );
    let stale_remove = w::RemoveWeightRequest {
        id: a.clone(),
        expected_metadata_generation: Some(g),
    };
    assert_eq!(
        code(store.weight_remove(&stale_remove).await),
        "STALE_GENERATION"
    );
    assert_eq!(
        store
            .weight_get_metadata(&a)
            .await
            .unwrap()
            .metadata_generation,
        g + 1,
        "a refused mutation changes nothing"
    );

    // Pagination: 5 revisions, pages of 2, in a stable order, each exactly once.
    for r in ["p0", "p1", "p2", "p3", "p4"] {
        put(&store, &id(r, 1), 1).await;
    }
    let mut seen = Vec::new();
    let mut page = w::WeightListRequest {
        namespace: Some("contract".into()),
        limit: Some(2),
        ..w::WeightListRequest::default()
    };
    let mut pages = 0;
    loop {
        let reply = store.weight_list(&page).await.unwrap();
        assert!(reply.revisions.len() <= 2);
        pages += 1;
        seen.extend(reply.revisions.iter().map(|m| m.id.resource_id.clone()));
        match reply.next {
            Some(next) => page.after = Some(next),
            None => break,
        }
    }
    // a, p0..p4 (the IMPORTING revision is not discoverable).
    assert_eq!(seen, vec!["a", "p0", "p1", "p2", "p3", "p4"]);
    assert_eq!(pages, 3);
    let filtered = store
        .weight_list_all(&w::WeightListRequest {
            namespace: Some("contract".into()),
            resource_id: Some("p3".into()),
            ..w::WeightListRequest::default()
        })
        .await
        .unwrap();
    assert_eq!(filtered.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_blocks_deletion_and_release_but_not_new_replicas() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(dir.path(), "", &[]);
    // Publishing weights is an operator's call (docs/security.md: weight_write).
    let client = node.inner.admin_client();
    let store = WeightStore::new(&client);
    let a = id("leased", 1);
    put(&store, &a, 4).await;
    let lease = acquire(&node, &a).await;
    let remove = w::RemoveWeightRequest {
        id: a.clone(),
        expected_metadata_generation: None,
    };
    assert_eq!(code(store.weight_remove(&remove).await), "BUSY");
    // A migration to COLD starts and copies (new cold replicas) but releases no memory
    // while the lease is held.
    let op = store
        .weight_migrate(&w::MigrateRequest {
            id: a.clone(),
            to: w::PreferredResidency::Cold,
            hot_ratio: None,
            expected_metadata_generation: None,
        })
        .await
        .unwrap();
    // A second migration meanwhile is BUSY.
    let again = w::MigrateRequest {
        id: a.clone(),
        to: w::PreferredResidency::Hot,
        hot_ratio: None,
        expected_metadata_generation: None,
    };
    assert_eq!(code(store.weight_migrate(&again).await), "BUSY");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let running = store.weight_get_operation(&op.operation_id).await.unwrap();
    assert_eq!(running.status, "RUNNING", "{running:?}");
    let m = store.weight_get_metadata(&a).await.unwrap();
    assert_eq!(
        m.residency, "HOT",
        "no memory released under the lease: {m:?}"
    );
    assert!(
        node.cold_usage().0 > 0,
        "the cold copies were created under the lease"
    );
    assert_eq!(code(store.weight_remove(&remove).await), "BUSY");
    release(&node, &a, &lease.lease_id).await;
    let done = wait_op(&store, &op.operation_id, "SUCCEEDED").await;
    assert_eq!(done.kind, "MIGRATING");
    assert_eq!(
        store.weight_get_metadata(&a).await.unwrap().residency,
        "COLD"
    );
    let removed = store.weight_remove(&remove).await.unwrap();
    wait_op(&store, &removed.operation_id, "SUCCEEDED").await;
    assert!(!store.weight_is_exist(&a).await.unwrap());
    assert_eq!(code(store.weight_get_size(&a).await), "NOT_FOUND");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upsert_checks_lineage_and_generation_and_rejects_a_competitor() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(dir.path(), "", &[]);
    // Publishing weights is an operator's call (docs/security.md: weight_write).
    let client = node.inner.admin_client();
    let store = WeightStore::new(&client);
    let base = id("up", 2);
    let meta = put(&store, &base, 2).await;
    let upsert = |target: u64, request: &str, expected: Option<u64>| w::UpsertRequest {
        base: base.clone(),
        target_generation: target,
        mode: w::UpsertMode::PutFirst,
        expected_base_metadata_generation: expected,
        request_id: Some(request.into()),
        policy: None,
    };
    // The target must be above the base; the base generation must be current.
    assert_eq!(
        code(store.weight_upsert(&upsert(2, "r0", None)).await),
        "INVALID_ARGUMENT"
    );
    assert_eq!(
        code(store.weight_upsert(&upsert(1, "r0", None)).await),
        "INVALID_ARGUMENT"
    );
    let stale = upsert(3, "r0", Some(meta.metadata_generation + 5));
    assert_eq!(code(store.weight_upsert(&stale).await), "STALE_GENERATION");
    let first = store
        .weight_upsert(&upsert(3, "r1", Some(meta.metadata_generation)))
        .await
        .unwrap();
    assert_eq!(first.next_step, "import_target", "{first:?}");
    // The same request again is the same claim (idempotent).
    let retry = store
        .weight_upsert(&upsert(3, "r1", Some(meta.metadata_generation)))
        .await
        .unwrap();
    assert_eq!(
        (retry.request_id, retry.phase),
        (first.request_id.clone(), first.phase)
    );
    // A competing successor is rejected while the claim is active.
    let competitor = upsert(4, "r2", Some(meta.metadata_generation));
    assert_eq!(code(store.weight_upsert(&competitor).await), "BUSY");
    // An import into the lineage outside the claim is refused.
    let outside = store.weight_put(id("up", 4), hot_manual()).await;
    let outside_code = code(outside);
    assert!(
        matches!(outside_code, "CONFLICT" | "BUSY"),
        "{outside_code}"
    );
    // The base is intact and still readable while the claim waits for its target.
    assert!(store.weight_is_exist(&base).await.unwrap());
}

#[test]
fn an_invalid_weights_configuration_fails_closed_at_startup() {
    let dir = tempfile::tempdir().unwrap();
    for (config, key) in [
        (
            "[weights]\ndefault_weight_mixed_hot_ratio = 1.5\n",
            "default_weight_mixed_hot_ratio",
        ),
        (
            "[weights]\nweight_migration_max_members_per_round = 0\n",
            "weight_migration_max_members_per_round",
        ),
        (
            "[weights]\ndefault_weight_preferred_residency = \"warm\"\n",
            "default_weight_preferred_residency",
        ),
        ("[weights]\nno_such_key = 1\n", "no_such_key"),
    ] {
        let path = dir.path().join("bad.toml");
        std::fs::write(&path, config).unwrap();
        let mut child = Command::new(crescentd_bin())
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--config")
            .arg(&path)
            .env_remove("CRESCENT_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let started = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if started.elapsed() > Duration::from_secs(30) {
                let _ = child.kill();
                panic!("crescentd started with {config:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let out = child.wait_with_output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!status.success(), "{config:?}: {text}");
        assert!(text.contains(key), "{config:?} names the key: {text}");
    }
}
