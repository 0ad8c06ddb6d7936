//! Election against a real etcd: one winner, terms, step-down before lease expiry, resign.

mod common;

use std::time::{Duration, Instant};

use common::*;
use crescent_ha::{
    Elector, ElectorConfig, ErrorClass, HaError, LeaderRecord, Role, StepDownReason,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_of_two_electors_wins_and_the_term_is_the_keys_create_revision() {
    let cluster = cluster();
    let (leader, follower, term) = elected_pair(&cluster, 2).await;

    assert_eq!(leader.leader_term(), Some(term));
    assert_eq!(follower.leader_term(), None);
    assert_eq!(leader.metrics().elections_won(), 1);
    assert_eq!(follower.metrics().elections_won(), 0);
    match follower.role() {
        Role::Follower { leader: info } => {
            assert_eq!(info.address, format!("{}.example:7000", leader.node_name()));
        }
        other => panic!("follower role is {other:?}"),
    }

    // The stamped record: versioned JSON whose term is the key's create_revision.
    let mut etcd = etcd().await;
    let key = format!("/crescent/{cluster}/leader");
    let resp = etcd.get(key.as_str(), None).await.unwrap();
    let kv = &resp.kvs()[0];
    assert_eq!(kv.create_revision() as u64, term);
    assert_ne!(kv.lease(), 0, "the leader key is bound to a lease");
    let record = LeaderRecord::decode(&key, kv.value()).unwrap();
    assert_eq!(record.term, Some(term));
    assert_eq!(record.node, leader.node_name());

    // Staying leader across many renewals (TTL 2 s) without a spurious step-down.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(leader.role(), Role::Leader { term });
    assert_eq!(
        leader.metrics().step_downs(StepDownReason::DeadlinePassed),
        0
    );

    leader.resign().await.unwrap();
    follower.resign().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resign_lets_the_in_sync_peer_win_fast_with_a_greater_term() {
    let cluster = cluster();
    let (leader, follower, term1) = elected_pair(&cluster, 3).await;
    leader.mark_in_sync(follower.node_name(), 10).await.unwrap();

    let mut follower_rx = follower.subscribe();
    let mut old_rx = leader.subscribe();
    let resigned_at = Instant::now();
    leader.resign().await.unwrap();
    // The old leader's last word is SteppedDown(Resigned) under its term.
    assert_eq!(
        *old_rx.borrow_and_update(),
        Role::SteppedDown {
            term: term1,
            reason: StepDownReason::Resigned
        }
    );
    // Revoking the lease deletes the key at once: far faster than the 3 s TTL.
    let (role, won_at) = wait_role(
        &mut follower_rx,
        Duration::from_secs(10),
        "new leader",
        is_leader,
    )
    .await;
    let term2 = term_of(&role);
    assert!(term2 > term1, "term {term2} after {term1}");
    assert!(
        won_at - resigned_at < Duration::from_millis(2500),
        "took {:?} after resign",
        won_at - resigned_at
    );
    follower.resign().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_without_keepalives_steps_down_before_its_lease_expires() {
    let cluster = cluster();
    let (leader, follower, term1) = elected_pair(&cluster, 2).await;
    leader.mark_in_sync(follower.node_name(), 1).await.unwrap();
    let fence = leader.fence();
    assert_eq!(fence.current_term(), Some(term1));

    let mut etcd = etcd().await;
    let key = format!("/crescent/{cluster}/leader");
    let lease_id = etcd.get(key.as_str(), None).await.unwrap().kvs()[0].lease();

    let mut leader_rx = leader.subscribe();
    let mut follower_rx = follower.subscribe();
    let paused_at = Instant::now();
    leader.pause_keepalive_for_test(Duration::from_secs(8));
    let (role, stepped_at) = wait_role(&mut leader_rx, Duration::from_secs(5), "step-down", |r| {
        matches!(r, Role::SteppedDown { .. })
    })
    .await;
    assert_eq!(
        role,
        Role::SteppedDown {
            term: term1,
            reason: StepDownReason::DeadlinePassed
        }
    );
    // At the step-down, etcd still holds the key under the same term and a live lease: the
    // node gave up first.
    let resp = etcd.get(key.as_str(), None).await.unwrap();
    assert_eq!(resp.kvs().len(), 1, "the key expired before the step-down");
    assert_eq!(resp.kvs()[0].create_revision() as u64, term1);
    // etcd reports whole seconds left (rounded down, so under a second reads 0) and -1 for a
    // lease that no longer exists.
    let ttl = etcd.lease_time_to_live(lease_id, None).await.unwrap().ttl();
    assert!(ttl >= 0, "lease already expired at step-down (ttl {ttl})");
    assert_eq!(fence.current_term(), None);
    assert!(matches!(
        leader.mark_out_of_sync(follower.node_name(), 2).await,
        Err(HaError::NotLeader)
    ));
    assert!(
        stepped_at - paused_at < Duration::from_secs(2),
        "{:?}",
        stepped_at - paused_at
    );

    // The peer takes over only after the lease has expired, with a strictly greater term.
    let (role, won_at) = wait_role(
        &mut follower_rx,
        Duration::from_secs(10),
        "takeover",
        is_leader,
    )
    .await;
    let term2 = term_of(&role);
    assert!(term2 > term1, "term {term2} after {term1}");
    assert!(won_at > stepped_at);
    assert_eq!(
        leader.metrics().step_downs(StepDownReason::DeadlinePassed),
        1
    );

    // After the pause the old leader follows the new one; it never leads under term1 again.
    let (role, _) = wait_role(
        &mut leader_rx,
        Duration::from_secs(15),
        "rejoin as follower",
        |r| matches!(r, Role::Follower { .. }),
    )
    .await;
    assert_eq!(term_of(&role), term2);
    assert_eq!(leader.leader_term(), None);
    leader.resign().await.unwrap();
    follower.resign().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_leader_key_makes_the_leader_step_down() {
    let cluster = cluster();
    let a = start(&cluster, "a", 3).await;
    let mut rx = a.subscribe();
    let (role, _) = wait_role(&mut rx, Duration::from_secs(10), "leader", is_leader).await;
    let term1 = term_of(&role);

    let mut etcd = etcd().await;
    etcd.delete(format!("/crescent/{cluster}/leader"), None)
        .await
        .unwrap();
    let (role, _) = wait_role(&mut rx, Duration::from_secs(3), "step-down", |r| {
        matches!(r, Role::SteppedDown { .. })
    })
    .await;
    assert_eq!(
        role,
        Role::SteppedDown {
            term: term1,
            reason: StepDownReason::KeyLost
        }
    );
    // As the last leader it may campaign again, after its hold-off, under a new term.
    let (role, _) = wait_role(&mut rx, Duration::from_secs(10), "re-election", is_leader).await;
    assert!(term_of(&role) > term1);
    a.resign().await.unwrap();
}

#[tokio::test]
async fn a_lease_ttl_below_two_seconds_is_refused() {
    for ttl in [
        Duration::from_secs(1),
        Duration::from_millis(1500),
        Duration::ZERO,
    ] {
        let config = ElectorConfig::new(
            vec!["http://127.0.0.1:1".into()],
            "c",
            "a",
            "a.example:7000",
        )
        .with_lease_ttl(ttl);
        let err = Elector::start(config, metrics()).await.unwrap_err();
        assert!(matches!(err, HaError::InvalidConfig(_)), "{ttl:?}: {err}");
        assert_eq!(err.class(), ErrorClass::User);
        assert!(err.to_string().contains("minimum"), "{err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_etcd_leaves_a_candidate_that_still_resigns() {
    // A port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut config = ElectorConfig::new(
        vec![format!("http://127.0.0.1:{port}")],
        "c",
        "a",
        "a.example:7000",
    );
    config.request_timeout = Duration::from_millis(300);
    config.retry_interval = Duration::from_millis(50);
    let a = Elector::start(config, metrics()).await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(a.role(), Role::Candidate { blocked: None });
    assert_eq!(a.leader_term(), None);
    tokio::time::timeout(Duration::from_secs(5), a.resign())
        .await
        .expect("resign returns")
        .unwrap();
}
