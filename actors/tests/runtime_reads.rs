//! Reads never observe state the commit watermark has not covered.

mod runtime_support;

use std::time::Duration;

use crescent_actors::runtime::AggregateRegistry;
use crescent_journal::Watermark;
use runtime_support::{eventually, Counter, CounterCmd, Fixture};

#[actix::test]
async fn a_read_waits_for_the_commit_watermark_not_just_local_durability() {
    // The commit watermark is the test's (as in HA: min(local, standby)), not the journal's.
    let commit = Watermark::new(0);
    let fx = Fixture::with_commit(commit.clone());
    let counters = AggregateRegistry::<Counter>::new(fx.runtime.clone());

    let write = actix::spawn(counters.execute("r", CounterCmd::Add(5)));
    // Locally durable, but not committed.
    assert!(eventually(Duration::from_secs(2), || fx.journal.durable().get() == 1).await);
    let read = actix::spawn(counters.read("r", |c| c.value));
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !write.is_finished(),
        "a write was acknowledged before commit"
    );
    assert!(!read.is_finished(), "a read saw uncommitted state");

    commit.advance(1);
    assert_eq!(write.await.unwrap().unwrap().seqs, Some(1..=1));
    // The read was evaluated on the state including the write, and released with it.
    assert_eq!(read.await.unwrap().unwrap(), 5);
}

#[actix::test]
async fn a_read_of_committed_state_is_answered_at_once() {
    let commit = Watermark::new(0);
    let fx = Fixture::with_commit(commit.clone());
    let counters = AggregateRegistry::<Counter>::new(fx.runtime.clone());

    // A new instance has applied nothing: nothing to wait for.
    let v = tokio::time::timeout(Duration::from_secs(2), counters.read("fresh", |c| c.value))
        .await
        .expect("read of a new instance does not wait")
        .unwrap();
    assert_eq!(v, 0);

    let write = actix::spawn(counters.execute("fresh", CounterCmd::Add(1)));
    assert!(eventually(Duration::from_secs(2), || fx.journal.durable().get() == 1).await);
    commit.advance(1);
    write.await.unwrap().unwrap();
    let v = tokio::time::timeout(Duration::from_secs(2), counters.read("fresh", |c| c.value))
        .await
        .expect("read of committed state does not wait")
        .unwrap();
    assert_eq!(v, 1);
}

#[actix::test]
async fn a_read_behind_a_pending_write_of_another_instance_is_not_held_back() {
    let commit = Watermark::new(0);
    let fx = Fixture::with_commit(commit.clone());
    let counters = AggregateRegistry::<Counter>::new(fx.runtime.clone());

    let write = actix::spawn(counters.execute("busy", CounterCmd::Add(1)));
    assert!(eventually(Duration::from_secs(2), || fx.journal.last_seq() == 1).await);
    // "idle" never applied anything, so its (empty) state is committed already.
    let v = tokio::time::timeout(Duration::from_secs(2), counters.read("idle", |c| c.value))
        .await
        .expect("independent instance is readable")
        .unwrap();
    assert_eq!(v, 0);
    assert!(!write.is_finished());
    commit.advance(1);
    write.await.unwrap().unwrap();
}
