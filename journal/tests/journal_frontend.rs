//! The journal front-end: group commit, shutdown and drop, async waits, metrics.

use std::sync::Arc;

use crescent_journal::file::{FileBackend, FileOptions};
use crescent_journal::memory::{MemoryBackend, MemoryStore};
use crescent_journal::{
    EventData, Journal, JournalError, JournalMetrics, JournalOptions, NewRecord, StreamId,
};

fn rec(n: u64) -> NewRecord {
    NewRecord {
        stream: StreamId::new("test", "s"),
        event: EventData {
            kind: "e".into(),
            version: 1,
            payload: n.to_le_bytes().to_vec(),
        },
        timestamp_ms: n as i64,
    }
}

fn mem(store: &MemoryStore, opts: JournalOptions) -> Journal {
    Journal::open(Box::new(MemoryBackend::new(store.clone())), opts).unwrap()
}

#[test]
fn dropping_the_last_clone_flushes_what_was_submitted() {
    let store = MemoryStore::new();
    let j = mem(&store, JournalOptions::default());
    let clone = j.clone();
    let mut last = None;
    for i in 0..100 {
        last = Some(clone.submit(1, vec![rec(i)]).unwrap());
    }
    drop(clone);
    let ticket = last.unwrap();
    drop(j);
    // the writer drained the queue before stopping
    assert_eq!(ticket.wait_blocking().unwrap().last_seq, 100);
    assert_eq!(store.len(), 100);
    let j = mem(&store, JournalOptions::default());
    assert_eq!(j.last_seq(), 100);
}

#[test]
fn submit_after_shutdown_is_closed_and_shutdown_is_idempotent() {
    let store = MemoryStore::new();
    let j = mem(&store, JournalOptions::default());
    j.append_blocking(1, vec![rec(1)]).unwrap();
    j.shutdown().unwrap();
    j.shutdown().unwrap();
    let err = j.submit(1, vec![rec(2)]).unwrap_err();
    assert!(matches!(err, JournalError::Closed));
    assert_eq!(
        j.read_from(1).unwrap().count(),
        1,
        "durable records stay readable"
    );
    assert!(matches!(
        j.durable().wait_for_blocking(2),
        Err(JournalError::Closed)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_appends_resolve_when_durable() {
    let store = MemoryStore::new();
    let j = mem(&store, JournalOptions::default());
    let mut tasks = Vec::new();
    for t in 0..4u64 {
        let j = j.clone();
        tasks.push(tokio::spawn(async move {
            let mut seqs = Vec::new();
            for i in 0..50 {
                let ack = j.append(1, vec![rec(t * 1000 + i)]).await.unwrap();
                assert!(j.durable().get() >= ack.last_seq);
                seqs.push(ack.last_seq);
            }
            seqs
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all.sort_unstable();
    assert_eq!(all, (1..=200).collect::<Vec<_>>());
    assert_eq!(j.durable().wait_for(200).await.unwrap(), 200);
}

#[test]
fn group_commit_shares_syncs_and_metrics_count_it() {
    let t = tempfile::tempdir().unwrap();
    let registry = prometheus::Registry::new();
    let metrics = JournalMetrics::register(&registry).unwrap();
    assert!(
        JournalMetrics::register(&registry).is_err(),
        "names are registered once"
    );
    let backend = FileBackend::open(
        t.path(),
        FileOptions {
            segment_bytes: 1 << 20,
            ..FileOptions::default()
        },
    )
    .unwrap();
    let j = Arc::new(
        Journal::open(
            Box::new(backend),
            JournalOptions {
                metrics: Some(metrics),
                ..JournalOptions::default()
            },
        )
        .unwrap(),
    );
    let threads: Vec<_> = (0..16u64)
        .map(|t| {
            let j = j.clone();
            std::thread::spawn(move || {
                for i in 0..50 {
                    j.append_blocking(2, vec![rec(t * 100 + i)]).unwrap();
                }
            })
        })
        .collect();
    for th in threads {
        th.join().unwrap();
    }
    assert!(matches!(
        j.submit(1, vec![rec(0)]),
        Err(JournalError::Fenced { .. })
    ));
    let families = registry.gather();
    let value = |name: &str| -> f64 {
        let fam = families
            .iter()
            .find(|f| f.name() == name)
            .unwrap_or_else(|| panic!("{name} missing"));
        let m = &fam.get_metric()[0];
        assert_eq!(m.get_label()[0].value(), "file");
        if fam.get_field_type() == prometheus::proto::MetricType::HISTOGRAM {
            m.get_histogram().get_sample_count() as f64
        } else if fam.get_field_type() == prometheus::proto::MetricType::GAUGE {
            m.get_gauge().get_value()
        } else {
            m.get_counter().get_value()
        }
    };
    assert_eq!(value("crescent_journal_appends_total"), 800.0);
    assert_eq!(value("crescent_journal_fenced_appends_total"), 1.0);
    assert_eq!(value("crescent_journal_durable_seq"), 800.0);
    let batches = value("crescent_journal_batches_total");
    assert!(
        batches < 800.0,
        "16 concurrent appenders must share syncs ({batches} batches)"
    );
    assert_eq!(value("crescent_journal_sync_seconds"), batches);
    assert!(value("crescent_journal_bytes_total") > 800.0 * 20.0);
}

#[test]
fn tiny_batch_cap_still_commits_everything_in_order() {
    let store = MemoryStore::new();
    let j = mem(
        &store,
        JournalOptions {
            max_batch_bytes: 1,
            ..JournalOptions::default()
        },
    );
    let tickets: Vec<_> = (0..50)
        .map(|i| j.submit(1, vec![rec(i), rec(i + 1000)]).unwrap())
        .collect();
    for (i, t) in tickets.into_iter().enumerate() {
        let ack = t.wait_blocking().unwrap();
        assert_eq!(
            (ack.first_seq, ack.last_seq),
            (2 * i as u64 + 1, 2 * i as u64 + 2)
        );
    }
    let seqs: Vec<_> = j.read_from(1).unwrap().map(|r| r.unwrap().seq).collect();
    assert_eq!(seqs, (1..=100).collect::<Vec<_>>());
}

#[test]
fn reads_stop_at_the_durable_watermark() {
    let store = MemoryStore::new();
    let j = mem(&store, JournalOptions::default());
    j.append_blocking(1, (0..10).map(rec).collect()).unwrap();
    store.fail_appends(true);
    let t = j.submit(1, vec![rec(11)]).unwrap();
    assert!(t.wait_blocking().is_err());
    assert_eq!(j.last_seq(), 11);
    assert_eq!(j.read_range(5, 100).unwrap().count(), 6);
    assert_eq!(j.read_from(11).unwrap().count(), 0);
}

#[test]
fn the_append_guard_fences_local_appends_but_not_replicated_ones() {
    let store = MemoryStore::new();
    let j = mem(&store, JournalOptions::default());
    let allowed = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let a = allowed.clone();
    j.set_append_guard(Some(Arc::new(move |term| {
        term == 4 && a.load(std::sync::atomic::Ordering::Acquire)
    })));
    j.append_blocking(4, vec![rec(1)]).unwrap();
    assert!(matches!(
        j.submit(5, vec![rec(2)]),
        Err(crescent_journal::JournalError::Fenced { .. })
    ));
    allowed.store(false, std::sync::atomic::Ordering::Release);
    assert!(matches!(
        j.submit(4, vec![rec(3)]),
        Err(crescent_journal::JournalError::Fenced { .. })
    ));
    assert_eq!(j.last_seq(), 1, "refused appends change nothing");
    j.set_append_guard(None);
    j.append_blocking(4, vec![rec(4)]).unwrap();
    assert_eq!(j.last_seq(), 2);
}

#[test]
fn the_durable_hook_sees_every_durable_advance_and_can_be_removed() {
    let store = MemoryStore::new();
    let j = mem(&store, JournalOptions::default());
    let seen: Arc<std::sync::Mutex<Vec<(u64, u64)>>> = Arc::default();
    {
        let (seen, durable) = (seen.clone(), j.durable());
        j.set_durable_hook(Some(Arc::new(move |seq| {
            // (seq told, durable watermark at that moment)
            seen.lock().unwrap().push((seq, durable.get()));
        })));
    }
    for i in 0..20 {
        j.append_blocking(1, vec![rec(i), rec(i + 100)]).unwrap();
    }
    // The hook runs right after the watermark moves, so after the append's waiter woke.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while seen.lock().unwrap().last().map(|t| t.0) != Some(40) {
        assert!(
            std::time::Instant::now() < deadline,
            "{:?}",
            seen.lock().unwrap()
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let told = seen.lock().unwrap().clone();
    for w in told.windows(2) {
        assert!(w[0].0 < w[1].0, "strictly increasing: {told:?}");
    }
    for (seq, watermark) in &told {
        assert!(watermark >= seq, "told after the watermark moved: {told:?}");
    }
    j.set_durable_hook(None);
    j.append_blocking(1, vec![rec(7)]).unwrap();
    assert_eq!(seen.lock().unwrap().last().map(|t| t.0), Some(40));
}
