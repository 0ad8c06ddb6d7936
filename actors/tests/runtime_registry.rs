//! The registry: one actor per instance on demand, recovered state, arbiters and timers.

mod runtime_support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crescent_actors::runtime::{AggregateRegistry, Runtime, RuntimeMetrics};
use crescent_journal::Watermark;
use runtime_support::{eventually, Counter, CounterCmd, Fixture, Lease, LeaseCmd, START_MS};

#[actix::test]
async fn actors_start_on_demand_one_per_instance() {
    let fx = Fixture::new();
    let counters = AggregateRegistry::<Counter>::new(fx.runtime.clone());
    assert!(counters.started_ids().is_empty());

    counters.execute("a", CounterCmd::Add(1)).await.unwrap();
    counters.execute("a", CounterCmd::Add(2)).await.unwrap();
    assert_eq!(counters.read("b", |c| c.value).await.unwrap(), 0);
    assert_eq!(
        counters.started_ids(),
        vec!["a".to_string(), "b".to_string()]
    );
    assert_eq!(counters.read("a", |c| c.value).await.unwrap(), 3);
    // One actor per instance: the same address every time.
    assert_eq!(counters.addr("a").unwrap(), counters.addr("a").unwrap());
}

#[actix::test]
async fn recovered_state_seeds_the_actors() {
    let commit = Watermark::new(0);
    let fx = Fixture::with_commit(commit.clone());
    let mut recovered = BTreeMap::new();
    recovered.insert(
        "x".to_string(),
        Counter {
            value: 100,
            last_change: None,
        },
    );
    let counters = AggregateRegistry::<Counter>::builder(fx.runtime.clone())
        .recovered(recovered, 7)
        .build();

    // The recovered state reflects the journal up to seq 7: it is not readable before the
    // commit watermark reaches 7 (a promoted node whose commit point lags).
    let read = actix::spawn(counters.read("x", |c| c.value));
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !read.is_finished(),
        "read served before the recovered seq was committed"
    );
    commit.advance(7);
    assert_eq!(read.await.unwrap().unwrap(), 100);

    // Unknown instances start empty.
    assert_eq!(counters.read("y", |c| c.value).await.unwrap(), 0);

    // New events build on the recovered state.
    let write = actix::spawn(counters.execute("x", CounterCmd::Add(1)));
    assert!(eventually(Duration::from_secs(2), || fx.journal.durable().get() == 1).await);
    // The journal restarts from seq 1 here (a test journal); the commit waits for it.
    commit.advance(8);
    write.await.unwrap().unwrap();
    assert_eq!(counters.read("x", |c| c.value).await.unwrap(), 101);
}

#[actix::test]
async fn a_loader_is_asked_once_per_instance() {
    let fx = Fixture::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let counters = AggregateRegistry::<Counter>::builder(fx.runtime.clone())
        .loader(
            move |id: &str| {
                counted.fetch_add(1, Ordering::SeqCst);
                (id == "known").then_some(Counter {
                    value: 9,
                    last_change: None,
                })
            },
            0,
        )
        .build();
    assert_eq!(counters.read("known", |c| c.value).await.unwrap(), 9);
    assert_eq!(counters.read("known", |c| c.value).await.unwrap(), 9);
    assert_eq!(counters.read("unknown", |c| c.value).await.unwrap(), 0);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[actix::test]
async fn actors_run_on_the_given_arbiter() {
    let fx = Fixture::new();
    let arbiter = actix::Arbiter::new();
    let counters = AggregateRegistry::<Counter>::builder(fx.runtime.clone())
        .arbiter(arbiter.handle())
        .build();
    counters.execute("t", CounterCmd::Add(1)).await.unwrap();
    let actor_thread = counters
        .read("t", |_| std::thread::current().id())
        .await
        .unwrap();
    assert_ne!(actor_thread, std::thread::current().id());
    arbiter.stop();
}

#[actix::test]
async fn timer_commands_carry_the_runtime_clock() {
    let fx = Fixture::new();
    let leases = AggregateRegistry::<Lease>::new(fx.runtime.clone());
    leases
        .execute(
            "l",
            LeaseCmd::Acquire {
                holder: "h".into(),
                ttl_ms: 500,
            },
        )
        .await
        .unwrap();
    let timer = leases.every("l", Duration::from_millis(10), || LeaseCmd::Tick);

    // Real time passes but the runtime clock does not: the lease holds, ticks journal nothing.
    tokio::time::sleep(Duration::from_millis(80)).await;
    assert_eq!(
        leases.read("l", |l| l.holder.clone()).await.unwrap(),
        Some("h".into())
    );
    assert_eq!(fx.journal.last_seq(), 1);

    // The clock passes the expiry: a tick expires the lease at the clock's time.
    fx.clock.advance(600);
    let mut expired = None;
    for _ in 0..200 {
        expired = leases.read("l", |l| l.expired_at_ms).await.unwrap();
        if expired.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(expired, Some(START_MS + 600));
    let records = fx.backend.records();
    assert_eq!(records.len(), 2);
    assert_eq!(records[1].event.kind, "lease_expired");
    assert_eq!(records[1].timestamp_ms, START_MS + 600);

    // Cancelled: a new lease is not expired any more.
    timer.cancel();
    assert!(timer.is_cancelled());
    leases
        .execute(
            "l",
            LeaseCmd::Acquire {
                holder: "g".into(),
                ttl_ms: 10,
            },
        )
        .await
        .unwrap();
    fx.clock.advance(1_000);
    tokio::time::sleep(Duration::from_millis(80)).await;
    assert_eq!(
        leases.read("l", |l| l.holder.clone()).await.unwrap(),
        Some("g".into())
    );
}

#[actix::test]
async fn metrics_count_commands_by_kind_and_outcome() {
    let fx = Fixture::new();
    let registry = prometheus::Registry::new();
    let metrics = RuntimeMetrics::register(&registry).unwrap();
    // Registering twice in one registry is refused, not silently duplicated.
    assert!(RuntimeMetrics::register(&registry).is_err());
    let runtime = Runtime::builder(fx.journal.clone())
        .term(1)
        .metrics(metrics)
        .build();
    let counters = AggregateRegistry::<Counter>::new(runtime);
    counters.execute("m", CounterCmd::Add(1)).await.unwrap();
    counters
        .execute("m", CounterCmd::Add(-1))
        .await
        .unwrap_err();
    counters.read("m", |c| c.value).await.unwrap();

    let families = registry.gather();
    let family = |name: &str| {
        families
            .iter()
            .find(|f| f.name() == name)
            .unwrap_or_else(|| panic!("{name} missing"))
    };
    let commands = family("crescent_actor_commands_total");
    let mut seen: Vec<(String, String, f64)> = commands
        .get_metric()
        .iter()
        .map(|m| {
            let label = |n: &str| {
                m.get_label()
                    .iter()
                    .find(|l| l.name() == n)
                    .map(|l| l.value().to_string())
                    .unwrap_or_default()
            };
            (
                label("aggregate"),
                label("outcome"),
                m.get_counter().get_value(),
            )
        })
        .collect();
    seen.sort_by(|a, b| a.1.cmp(&b.1));
    assert_eq!(
        seen,
        vec![
            ("test_counter".into(), "committed".into(), 1.0),
            ("test_counter".into(), "rejected".into(), 1.0),
        ]
    );
    assert_eq!(
        family("crescent_actor_command_duration_seconds").get_metric()[0]
            .get_histogram()
            .get_sample_count(),
        2
    );
    assert_eq!(
        family("crescent_actor_events_appended_total").get_metric()[0]
            .get_counter()
            .get_value(),
        1.0
    );
    assert_eq!(
        family("crescent_actor_read_wait_seconds").get_metric()[0]
            .get_histogram()
            .get_sample_count(),
        1
    );
    assert_eq!(
        family("crescent_actor_instances").get_metric()[0]
            .get_gauge()
            .get_value(),
        1.0
    );
    // No instance id ever becomes a label.
    for f in &families {
        for m in f.get_metric() {
            for l in m.get_label() {
                assert!(
                    l.name() == "aggregate" || l.name() == "outcome",
                    "{}",
                    l.name()
                );
            }
        }
    }
}
