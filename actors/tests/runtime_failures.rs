//! A journal write failure is fatal: the fatal handler runs, no success reply is sent, and the
//! runtime answers nothing more from in-memory state.

mod runtime_support;

use std::process::Command;
use std::time::Duration;

use crescent_actors::runtime::{
    AggregateRegistry, CommandOutcome, ErrorClass, Runtime, RuntimeError, JOURNAL_FATAL_EXIT_CODE,
};
use crescent_journal::JournalError;
use futures::future::join_all;
use runtime_support::{eventually, Counter, CounterCmd, Fixture};

#[actix::test]
async fn a_write_failure_calls_the_fatal_handler_and_no_success_is_replied() {
    let fx = Fixture::new();
    let counters = AggregateRegistry::<Counter>::new(fx.runtime.clone());
    counters.execute("w", CounterCmd::Add(1)).await.unwrap();
    // Another instance that is already running when the journal fails.
    counters.execute("other", CounterCmd::Add(1)).await.unwrap();

    // Several commands in flight when the write fails.
    fx.backend.hold();
    let inflight: Vec<_> = (0..10)
        .map(|_| counters.execute("w", CounterCmd::Add(1)))
        .collect();
    let all = actix::spawn(join_all(inflight));
    assert!(eventually(Duration::from_secs(2), || fx.journal.last_seq() >= 3).await);
    fx.backend.fail_writes();
    fx.backend.release();

    for reply in all.await.unwrap() {
        // Every in-flight command learns the journal's verdict (not just "actor gone").
        let err = reply.expect_err("no command may succeed after the write failed");
        assert!(
            matches!(err, RuntimeError::Journal(JournalError::Fatal(_))),
            "{err}"
        );
        assert_eq!(err.class(), ErrorClass::Fatal);
    }
    let calls = fx.fatal_calls();
    assert_eq!(calls.len(), 1, "the fatal handler runs once: {calls:?}");
    assert!(calls[0].starts_with("test_counter/w: "), "{}", calls[0]);
    assert!(fx.runtime.has_failed());
    assert_eq!(
        fx.backend.records().len(),
        2,
        "only the first two writes were stored"
    );
    assert!(
        fx.runtime
            .metrics()
            .commands_total("test_counter", CommandOutcome::Fatal)
            >= 1
    );

    // Nothing more is answered: not the failed instance, not another running one, not a new one.
    let err = counters.execute("w", CounterCmd::Add(1)).await.unwrap_err();
    assert!(err.class() != ErrorClass::User, "{err}");
    let err = counters.read("w", |c| c.value).await.unwrap_err();
    assert!(err.class() != ErrorClass::User, "{err}");
    let err = counters.read("other", |c| c.value).await.unwrap_err();
    assert!(
        matches!(err, RuntimeError::Journal(JournalError::Fatal(_))),
        "{err}"
    );
    let err = counters
        .execute("new", CounterCmd::Add(1))
        .await
        .unwrap_err();
    assert!(matches!(err, RuntimeError::Stopped { .. }), "{err}");
    assert_eq!(fx.fatal_calls().len(), 1);

    // The failed instance's actor is gone and is not restarted with stale state.
    assert!(eventually(Duration::from_secs(2), || counters.addr("w").is_err()).await);
}

#[actix::test]
async fn a_submit_refused_as_fatal_stops_the_actor_without_touching_state() {
    let fx = Fixture::new();
    let counters = AggregateRegistry::<Counter>::new(fx.runtime.clone());
    counters.execute("s", CounterCmd::Add(1)).await.unwrap();
    // Poison the journal through another path: the next submit itself fails with Fatal.
    fx.backend.fail_writes();
    let direct = fx.journal.append(
        1,
        vec![crescent_journal::NewRecord {
            stream: crescent_journal::StreamId::new("other", "x"),
            event: crescent_journal::EventData {
                kind: "k".into(),
                version: 1,
                payload: vec![],
            },
            timestamp_ms: 0,
        }],
    );
    assert!(direct.await.is_err());

    let err = counters.execute("s", CounterCmd::Add(1)).await.unwrap_err();
    assert!(
        matches!(err, RuntimeError::Journal(JournalError::Fatal(_))),
        "{err}"
    );
    assert_eq!(fx.fatal_calls().len(), 1);
    assert_eq!(fx.backend.records().len(), 1);
}

/// Run in a child process by the test below: the production fatal handler exits the process.
#[test]
fn child_exits_with_the_fatal_exit_code() {
    if std::env::var_os("CRESCENT_RUNTIME_FATAL_CHILD").is_none() {
        return;
    }
    actix::System::new().block_on(async {
        let fx = Fixture::new();
        // Production defaults for the fatal handler.
        let runtime = Runtime::builder(fx.journal.clone()).term(1).build();
        let counters = AggregateRegistry::<Counter>::new(runtime);
        fx.backend.fail_writes();
        let _ = counters.execute("c", CounterCmd::Add(1)).await;
        // Unreachable when the handler exits; a plain exit code 0 here fails the parent test.
    });
}

#[test]
fn the_default_fatal_handler_exits_the_process_with_a_distinct_code() {
    let status = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_exits_with_the_fatal_exit_code",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("CRESCENT_RUNTIME_FATAL_CHILD", "1")
        .status()
        .expect("test binary runs");
    assert_eq!(status.code(), Some(JOURNAL_FATAL_EXIT_CODE));
}
