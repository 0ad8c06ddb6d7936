//! One storage owner never comes back after an HA failover (docs/rebuild.md), on a real etcd
//! (CRESCENT_TEST_ETCD, started by scripts/test.sh): two crescentd processes with a short
//! degraded timeout and two `crescent owner` processes following the leader through etcd.
//!
//! Owner 2 is SIGKILLed (its memory and its ownership table are gone), then the active. The new
//! active:
//! - serves owner 1's objects as soon as owner 1 has replayed, while its gate still waits for
//!   owner 2 (REBUILDING);
//! - answers owner 2's keys with UNAVAILABLE (REBUILDING), not NOT_FOUND, before the timeout;
//! - opens DEGRADED at the timeout, visible in /healthz (and /readyz answers 503), and keeps
//!   serving owner 1's objects.
//!
//! Before the failover, /readyz is 200 on the active and 503 on the standby.

use std::time::{Duration, Instant};

use crescent_client::{ClientOptions, CrescentClient, Placement, PutOptions};
use crescent_tests::auth::{with_token, DEFAULT_TENANT};
use crescent_tests::ha_pair::{
    assert_owners_recorded, health, readiness, wait_active, wait_gate, HaPair,
};
use crescent_tests::store_e2e::{check_value, object_value, OwnerProcess};

const DEGRADED_SECS: u64 = 8;
const OWNER_SEGMENT: u64 = 32 << 20;
const PER_OWNER: usize = 40;

/// An object put by the test: key, content index, length.
type Put = (String, u64, usize);

/// Puts `PER_OWNER` objects on `owner`'s segment (local_first with it as the preferred one).
async fn put_on(writer: &CrescentClient, owner: &OwnerProcess, first_index: u64) -> Vec<Put> {
    let opts = PutOptions {
        placement: Some(Placement::LocalFirst),
        preferred_segment: Some(owner.segment_id.clone()),
        ..PutOptions::default()
    };
    let mut out = Vec::new();
    for i in 0..PER_OWNER {
        let key = format!("{}/{i}", owner.owner_id);
        let index = first_index + i as u64;
        let len = 1 + (i * 7919) % 20_000;
        writer
            .put_with(&key, &object_value(index, len), &opts)
            .await
            .unwrap_or_else(|e| panic!("put {key}: {e}"));
        out.push((key, index, len));
    }
    out
}

async fn read_back(client: &CrescentClient, (key, index, len): &Put) {
    let value = client
        .get(key)
        .await
        .unwrap_or_else(|e| panic!("get {key}: {e}"));
    check_value(key, *index, *len, &value).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_owner_that_never_returns_opens_the_new_actives_gate_degraded_at_the_timeout() {
    let extra = format!("[store]\nrebuild_degraded_timeout_secs = {DEGRADED_SECS}\n");
    let mut pair = HaPair::start_with(true, &extra).await;
    let active = pair.wait_in_sync().await;
    let survivor = 1 - active;
    // Readiness: the active serves writes, the standby does not (both are alive).
    let (code, r) = readiness(pair.node(active).addr)
        .await
        .expect("active /readyz");
    assert_eq!(
        (code, &r["role"]),
        (200, &serde_json::json!("active")),
        "{r}"
    );
    let (code, r) = readiness(pair.node(survivor).addr)
        .await
        .expect("standby /readyz");
    assert_eq!(
        (code, &r["role"]),
        (503, &serde_json::json!("standby")),
        "{r}"
    );

    let owner1 = pair.start_owner("deg-owner-1", OWNER_SEGMENT);
    let mut owner2 = pair.start_owner("deg-owner-2", OWNER_SEGMENT);
    let writer = CrescentClient::connect(pair.client_options(DEFAULT_TENANT))
        .await
        .expect("a client following the leader through etcd");
    let on1 = put_on(&writer, &owner1, 0).await;
    let on2 = put_on(&writer, &owner2, 1000).await;
    assert_owners_recorded(&writer, (on1.len() + on2.len()) as u64);

    owner2.guard.sigkill();
    pair.node_mut(active).guard.sigkill();
    let node = pair.node(survivor);
    wait_active(node, Duration::from_secs(15)).await;
    let promoted_at = Instant::now();

    // Owner 1's objects come back as soon as it has replayed: the writer's read waits for
    // that by itself (the gate answers UNAVAILABLE, which it retries).
    read_back(&writer, &on1[0]).await;
    let h = health(node.addr).await.expect("health of the new active");
    if promoted_at.elapsed() < Duration::from_secs(DEGRADED_SECS - 2) {
        assert_eq!(h["gate"], "REBUILDING", "{h}");
        assert_eq!(h["rebuild"]["owners_expected"].as_u64(), Some(2), "{h}");
        // Owner 2's keys are not known yet: UNAVAILABLE (REBUILDING), not NOT_FOUND. A client
        // waits for the gate up to its failover deadline; one with a short deadline sees it.
        let options = ClientOptions::servers(&node.addr.to_string())
            .with_failover_timeout(Duration::from_millis(300));
        let impatient =
            CrescentClient::connect(with_token(options, Some(pair.client_token(DEFAULT_TENANT))))
                .await
                .unwrap();
        let err = impatient.get(&on2[0].0).await.unwrap_err().to_string();
        assert!(err.contains("REBUILDING"), "{err}");
    } else {
        eprintln!(
            "owner 1 replayed late ({:?}): the REBUILDING checks are skipped",
            promoted_at.elapsed()
        );
    }
    for put in &on1 {
        read_back(&writer, put).await;
    }

    // At the timeout the gate opens DEGRADED; owner 2's objects went with it.
    let h = wait_gate(node, "DEGRADED", Duration::from_secs(DEGRADED_SECS + 20)).await;
    assert!(promoted_at.elapsed() >= Duration::from_secs(DEGRADED_SECS - 1));
    assert_eq!(h["rebuild"]["owners_completed"].as_u64(), Some(1), "{h}");
    // DEGRADED serves, but a load balancer is told the node is not whole.
    let (code, r) = readiness(node.addr).await.expect("/readyz");
    assert_eq!(
        (code, &r["gate"]),
        (503, &serde_json::json!("DEGRADED")),
        "{r}"
    );
    let err = writer.get(&on2[0].0).await.unwrap_err().to_string();
    assert!(err.contains("NOT_FOUND"), "{err}");
    read_back(&writer, &on1[1]).await;
    drop(owner1);
}
