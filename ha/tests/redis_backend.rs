//! Redis-specific behaviour beyond the conformance suite: leader discovery by polling, a
//! replaced leader record, and terms after the counter is lost.

mod common;

use std::time::Duration;

use common::servers::{OwnedRedis, ServerUnderTest};
use common::{cluster, is_leader, term_of, wait_role};
use crescent_ha::redis::AsyncCommands;
use crescent_ha::{Elector, ElectorConfig, HaMetrics, LeaderWatch, Role, StepDownReason};

async fn start(redis: &OwnedRedis, cluster: &str, node: &str) -> Elector {
    let mut config = ElectorConfig::with_coordination(
        redis.endpoint(),
        cluster,
        node,
        format!("{node}.example:7000"),
    )
    .with_lease_ttl(Duration::from_secs(2));
    config.retry_interval = Duration::from_millis(100);
    Elector::start(config, HaMetrics::unregistered())
        .await
        .unwrap()
}

async fn raw(redis: &OwnedRedis) -> crescent_ha::redis::aio::MultiplexedConnection {
    crescent_ha::redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_watch_follows_the_leader_and_its_successor() {
    let redis = OwnedRedis::start();
    let cluster = cluster();
    let watch = LeaderWatch::start_redis(&redis.url(), &cluster).unwrap();
    let a = start(&redis, &cluster, "a").await;
    // The first win on this Redis takes office one TTL after winning; until then the record
    // reads as "taking office" and the watch shows no leader.
    let mut a_rx = a.subscribe();
    let (role, _) = wait_role(&mut a_rx, Duration::from_secs(10), "leader", is_leader).await;
    let seen = watch.wait_for_leader(Duration::from_secs(5)).await.unwrap();
    assert_eq!(seen.node, "a");
    assert_eq!(seen.address, "a.example:7000");
    assert_eq!(seen.term, term_of(&role));
    assert!(a.metrics().coordination_requests("redis", "campaign", "ok") >= 1);
    let b = start(&redis, &cluster, "b").await;
    let mut b_rx = b.subscribe();
    wait_role(&mut b_rx, Duration::from_secs(5), "follower", |r| {
        matches!(r, Role::Follower { .. })
    })
    .await;
    a.mark_in_sync("b", 1).await.unwrap();
    a.resign().await.unwrap();
    let next = watch
        .wait_for_new_leader(seen.term, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(next.node, "b");
    assert!(next.term > seen.term);
    b.resign().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_record_deposes_the_leader_and_a_lost_counter_keeps_terms_rising() {
    let redis = OwnedRedis::start();
    let cluster = cluster();
    let a = start(&redis, &cluster, "a").await;
    let mut a_rx = a.subscribe();
    let (role, _) = wait_role(&mut a_rx, Duration::from_secs(10), "leader", is_leader).await;
    let term1 = term_of(&role);

    // Someone else's record under the leader key: the next renewal finds it is not ours.
    let mut conn = raw(&redis).await;
    let leader_key = format!("/crescent/{cluster}/leader");
    let foreign = crescent_ha::LeaderRecord::new("x", "x:1", Some(term1 + 7)).encode();
    let _: () = conn.set(&leader_key, foreign).await.unwrap();
    let (role, _) = wait_role(&mut a_rx, Duration::from_secs(5), "step-down", |r| {
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

    // The node follows the foreign leader (and so learns its term)...
    wait_role(
        &mut a_rx,
        Duration::from_secs(10),
        "follower of x",
        |r| matches!(r, Role::Follower { leader } if leader.node == "x"),
    )
    .await;
    // ...then the counter and the foreign record vanish (as after data loss; the marker
    // stays, naming a as the last leader). The next term still exceeds every term a saw.
    let _: () = conn
        .del(&[leader_key.clone(), format!("/crescent/{cluster}/term")])
        .await
        .unwrap();
    let (role, _) = wait_role(
        &mut a_rx,
        Duration::from_secs(10),
        "leader again",
        is_leader,
    )
    .await;
    let term2 = term_of(&role);
    assert!(
        term2 > term1 + 7,
        "term {term2} after {term1} and a record of {}",
        term1 + 7
    );
    let counter: u64 = conn.get(format!("/crescent/{cluster}/term")).await.unwrap();
    assert_eq!(counter, term2);
    a.resign().await.unwrap();
}
