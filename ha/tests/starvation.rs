//! A leader whose caller's runtime is starved keeps its lease: the elector renews on its own
//! thread. crescentd serves on a single-threaded actix runtime; a promotion's restore or a
//! burst of requests there once held the keep-alive back past the local deadline.

mod common;

use std::time::Duration;

use common::*;
use crescent_ha::{Role, StepDownReason};

/// The default test flavor is a current-thread runtime: the blocking sleep below stops every
/// task of it, as a long synchronous restore on crescentd's actix thread would.
#[tokio::test]
async fn a_leader_keeps_its_term_while_the_callers_runtime_is_blocked() {
    let cluster = cluster();
    let ttl_secs = 2;
    let leader = start(&cluster, "a", ttl_secs).await;
    let mut rx = leader.subscribe();
    let (role, _) = wait_role(&mut rx, Duration::from_secs(10), "leader", is_leader).await;
    let term = term_of(&role);
    let fence = leader.fence();

    // Block this runtime's only thread for longer than the whole TTL: far past the local
    // deadline (2/3 TTL) had the renewals depended on this runtime.
    std::thread::sleep(Duration::from_millis(2500));

    // Checked synchronously, before this runtime ran anything else.
    assert_eq!(
        fence.current_term(),
        Some(term),
        "the fence expired while the caller's runtime was blocked"
    );
    assert!(
        fence.remaining().unwrap() > Duration::from_millis(100),
        "{:?}",
        fence.remaining()
    );
    assert_eq!(leader.role(), Role::Leader { term });
    assert_eq!(
        leader.metrics().step_downs(StepDownReason::DeadlinePassed),
        0
    );
    let mut etcd = etcd().await;
    let key = format!("/crescent/{cluster}/leader");
    let resp = etcd.get(key.as_str(), None).await.unwrap();
    assert_eq!(resp.kvs()[0].create_revision() as u64, term);

    // Marker writes issued from this runtime go through the elector's connection.
    leader.mark_in_sync("b", 1).await.unwrap();
    leader.resign().await.unwrap();
}
