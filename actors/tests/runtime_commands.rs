//! Commands through the actor shell: replies only after durability, pipelining, domain errors,
//! no-ops and fencing.

mod runtime_support;

use std::time::Duration;

use crescent_actors::runtime::{AggregateRegistry, CommandOutcome, ErrorClass, RuntimeError};
use crescent_actors::DomainEvent;
use futures::future::join_all;
use futures::FutureExt;
use runtime_support::{Counter, CounterCmd, CounterError, CounterEvent, Fixture, START_MS};

#[actix::test]
async fn reply_is_sent_only_after_the_events_are_durable() {
    let fx = Fixture::new();
    let counters = AggregateRegistry::<Counter>::new(fx.runtime.clone());

    fx.backend.hold();
    let pending = {
        let counters = counters.clone();
        actix::spawn(async move { counters.execute("c1", CounterCmd::Add(5)).await })
    };
    // The events are submitted (seq assigned) but the write has not finished: no reply yet.
    assert!(
        runtime_support::eventually(Duration::from_secs(2), || fx.journal.last_seq() == 1).await
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !pending.is_finished(),
        "reply left before the write was durable"
    );
    assert_eq!(fx.journal.durable().get(), 0);

    fx.backend.release();
    let done = pending.await.unwrap().expect("command succeeds");
    assert!(fx.journal.durable().get() >= 1);
    assert_eq!(done.seqs, Some(1..=1));
    assert_eq!(done.committed_through, 1);
    assert_eq!(
        done.events,
        vec![CounterEvent::Added {
            by: 5,
            at_ms: START_MS,
            op: uuid::Uuid::from_u128(1)
        }]
    );

    // The journal holds exactly that event, on the instance's stream, with the clock's time.
    let records = fx.backend.records();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].stream.kind, "test_counter");
    assert_eq!(records[0].stream.id, "c1");
    assert_eq!(records[0].term, 1);
    assert_eq!(records[0].timestamp_ms, START_MS);
    assert_eq!(records[0].event.kind, "counter_added");
    let decoded = CounterEvent::decode(
        &records[0].event.kind,
        records[0].event.version,
        &records[0].event.payload,
    )
    .unwrap();
    assert_eq!(vec![decoded], done.events);
    assert_eq!(counters.read("c1", |c| c.value).await.unwrap(), 5);
    let m = fx.runtime.metrics();
    assert_eq!(
        m.commands_total("test_counter", CommandOutcome::Committed),
        1
    );
    assert_eq!(m.events_appended_total("test_counter"), 1);
}

#[actix::test]
async fn commands_pipeline_while_the_write_is_in_flight() {
    let fx = Fixture::new();
    let counters = AggregateRegistry::<Counter>::new(fx.runtime.clone());
    const N: usize = 64;

    fx.backend.hold();
    // Record, for each reply, the durable watermark at the moment the reply arrives.
    let journal = fx.journal.clone();
    let replies = (0..N).map(|i| {
        let journal = journal.clone();
        counters
            .execute("hot", CounterCmd::Add(i as i64 + 1))
            .map(move |r| (r, journal.durable().get()))
    });
    let all = actix::spawn(join_all(replies));

    // Every command is decided and submitted although none is durable yet: the actor does not
    // wait for the write before taking the next command.
    assert!(
        runtime_support::eventually(Duration::from_secs(5), || fx.journal.last_seq() == N as u64)
            .await,
        "only {} of {N} commands were submitted while the write was held",
        fx.journal.last_seq()
    );
    assert_eq!(fx.journal.durable().get(), 0);
    assert!(!all.is_finished());

    fx.backend.release();
    let replies = all.await.unwrap();
    let mut prev = 0;
    for (i, (reply, durable_at_reply)) in replies.into_iter().enumerate() {
        let done = reply.unwrap_or_else(|e| panic!("command {i} failed: {e}"));
        let seq = done.last_seq().unwrap();
        assert!(
            seq > prev,
            "seqs must increase in send order: {seq} after {prev}"
        );
        assert!(
            durable_at_reply >= seq,
            "reply for seq {seq} arrived at durable {durable_at_reply}"
        );
        prev = seq;
    }
    let expected: i64 = (1..=N as i64).sum();
    assert_eq!(counters.read("hot", |c| c.value).await.unwrap(), expected);
    // Group commit folded the held-back submissions into few writes.
    assert!(
        fx.backend.appends() < N as u64,
        "{} writes",
        fx.backend.appends()
    );
}

#[actix::test]
async fn several_events_from_one_command_get_contiguous_seqs() {
    let fx = Fixture::new();
    let counters = AggregateRegistry::<Counter>::new(fx.runtime.clone());
    counters.execute("a", CounterCmd::Add(1)).await.unwrap();
    let done = counters
        .execute("a", CounterCmd::AddEach(vec![2, 3, 4]))
        .await
        .unwrap();
    assert_eq!(done.seqs, Some(2..=4));
    let seqs: Vec<u64> = done.events_with_seqs().map(|(s, _)| s).collect();
    assert_eq!(seqs, vec![2, 3, 4]);
    assert_eq!(counters.read("a", |c| c.value).await.unwrap(), 10);
}

#[actix::test]
async fn domain_errors_reply_at_once_and_journal_nothing() {
    let fx = Fixture::new();
    let counters = AggregateRegistry::<Counter>::new(fx.runtime.clone());
    counters.execute("c", CounterCmd::Add(3)).await.unwrap();

    // Even with writes held, a refusal is answered at once: it does not wait for anything.
    fx.backend.hold();
    let err = tokio::time::timeout(
        Duration::from_secs(2),
        counters.execute("c", CounterCmd::AddEach(vec![1, -2])),
    )
    .await
    .expect("refusal is immediate")
    .unwrap_err();
    fx.backend.release();

    assert!(matches!(
        err,
        RuntimeError::Domain(CounterError::NotPositive(-2))
    ));
    assert_eq!(err.class(), ErrorClass::User);
    assert_eq!(fx.journal.last_seq(), 1);
    assert_eq!(fx.backend.records().len(), 1);
    assert_eq!(counters.read("c", |c| c.value).await.unwrap(), 3);
    assert_eq!(
        fx.runtime
            .metrics()
            .commands_total("test_counter", CommandOutcome::Rejected),
        1
    );
}

#[actix::test]
async fn a_noop_replies_ok_but_not_before_the_state_it_saw_is_durable() {
    let fx = Fixture::new();
    let counters = AggregateRegistry::<Counter>::new(fx.runtime.clone());

    fx.backend.hold();
    let first = {
        let counters = counters.clone();
        actix::spawn(async move { counters.execute("n", CounterCmd::Set(7)).await })
    };
    assert!(
        runtime_support::eventually(Duration::from_secs(2), || fx.journal.last_seq() == 1).await
    );
    // Set(7) again is a no-op against the (not yet durable) state value 7.
    let noop = {
        let counters = counters.clone();
        actix::spawn(async move { counters.execute("n", CounterCmd::Set(7)).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !noop.is_finished(),
        "no-op answered before the state it saw was durable"
    );
    assert_eq!(fx.journal.last_seq(), 1, "a no-op journals nothing");

    fx.backend.release();
    assert_eq!(first.await.unwrap().unwrap().seqs, Some(1..=1));
    let noop = noop.await.unwrap().unwrap();
    assert!(noop.is_noop());
    assert_eq!(noop.seqs, None);
    assert_eq!(noop.committed_through, 1);
    assert_eq!(fx.journal.last_seq(), 1);
}

#[actix::test]
async fn a_fenced_submit_leaves_the_state_untouched() {
    let fx = Fixture::new();
    let counters = AggregateRegistry::<Counter>::new(fx.runtime.clone());
    counters.execute("f", CounterCmd::Add(2)).await.unwrap();

    // A newer leader was observed: this runtime's term 1 is fenced.
    fx.journal.fence(5);
    let err = counters
        .execute("f", CounterCmd::Add(40))
        .await
        .unwrap_err();
    assert!(err.is_fenced(), "{err}");
    assert_eq!(err.class(), ErrorClass::User);
    assert_eq!(counters.read("f", |c| c.value).await.unwrap(), 2);
    assert_eq!(fx.journal.last_seq(), 1);
    assert!(
        fx.fatal_calls().is_empty(),
        "fencing is not a journal failure"
    );
    assert_eq!(
        fx.runtime
            .metrics()
            .commands_total("test_counter", CommandOutcome::Fenced),
        1
    );

    // The actor is still alive and, at the new term, the same command goes through on the
    // untouched state.
    fx.runtime.set_term(5);
    let done = counters.execute("f", CounterCmd::Add(40)).await.unwrap();
    assert_eq!(done.seqs, Some(2..=2));
    assert_eq!(counters.read("f", |c| c.value).await.unwrap(), 42);
    assert_eq!(fx.backend.records()[1].term, 5);
}
