//! `Journal::append_replicated`: a standby's follower writing its batch on its own thread.
//!
//! What must hold whichever thread writes: every check (seq, term, chain digest) before
//! anything reaches the backend; the durable hook (which sends the standby's ack) only ever
//! told a seq the backend has already synced; batches reach the backend in seq order; and the
//! writer thread still takes what arrives while another thread writes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;
use std::time::Duration;

use crescent_journal::codec::EncodedBatch;
use crescent_journal::memory::{MemoryBackend, MemoryStore};
use crescent_journal::{
    EventData, Journal, JournalBackend, JournalError, JournalMetrics, JournalOptions, NewRecord,
    ReadSource, Record, RecordRef, Recovered, RecoveryMode, StreamId,
};

/// What the backend saw, shared with the test.
#[derive(Default)]
struct Seen {
    /// Last seq whose append (write and sync) returned.
    synced: AtomicU64,
    appends: AtomicU64,
    /// The thread of each append, in order.
    threads: Mutex<Vec<ThreadId>>,
}

/// A memory backend that takes `sync` per append and checks that batches come in seq order.
struct Observed {
    inner: MemoryBackend,
    seen: Arc<Seen>,
    sync: Duration,
}

impl JournalBackend for Observed {
    fn name(&self) -> &'static str {
        "memory"
    }
    fn recover(&mut self, mode: RecoveryMode) -> crescent_journal::Result<Recovered> {
        self.inner.recover(mode)
    }
    fn append(&mut self, batch: &EncodedBatch) -> crescent_journal::Result<()> {
        let first = batch.first_seq().expect("a non-empty batch");
        let synced = self.seen.synced.load(Ordering::Acquire);
        assert_eq!(first, synced + 1, "batches reach the backend in seq order");
        self.seen
            .threads
            .lock()
            .unwrap()
            .push(std::thread::current().id());
        std::thread::sleep(self.sync);
        self.inner.append(batch)?;
        self.seen.appends.fetch_add(1, Ordering::AcqRel);
        self.seen
            .synced
            .store(batch.last_seq().expect("non-empty"), Ordering::Release);
        Ok(())
    }
    fn truncate_prefix(&mut self, keep_from: u64) -> crescent_journal::Result<()> {
        self.inner.truncate_prefix(keep_from)
    }
    fn read_source(&self) -> Box<dyn ReadSource> {
        self.inner.read_source()
    }
}

fn standby(sync: Duration) -> (Journal, Arc<Seen>, prometheus::Registry) {
    let seen = Arc::new(Seen::default());
    let registry = prometheus::Registry::new();
    let backend = Observed {
        inner: MemoryBackend::new(MemoryStore::new()),
        seen: seen.clone(),
        sync,
    };
    let options = JournalOptions {
        metrics: Some(JournalMetrics::register(&registry).unwrap()),
        ..JournalOptions::default()
    };
    (
        Journal::open(Box::new(backend), options).unwrap(),
        seen,
        registry,
    )
}

/// Fails the test if the hook is ever told a seq the backend has not synced yet; returns
/// the (seq, thread) of each call.
fn checked_hook(journal: &Journal, seen: &Arc<Seen>) -> Arc<Mutex<Vec<(u64, ThreadId)>>> {
    let calls = Arc::new(Mutex::new(Vec::new()));
    let (seen, out) = (seen.clone(), calls.clone());
    journal.set_durable_hook(Some(Arc::new(move |seq| {
        let synced = seen.synced.load(Ordering::Acquire);
        assert!(seq <= synced, "told durable seq {seq} with {synced} synced");
        out.lock().unwrap().push((seq, std::thread::current().id()));
    })));
    calls
}

/// A source journal's history of `n` records (terms 1 then 2).
fn history(n: u64) -> Vec<Record> {
    let source = Journal::open(
        Box::new(MemoryBackend::new(MemoryStore::new())),
        JournalOptions::default(),
    )
    .unwrap();
    for i in 0..n {
        let record = NewRecord {
            stream: StreamId::new("test", "direct"),
            event: EventData {
                kind: "tick".into(),
                version: 1,
                payload: vec![i as u8; 16 + (i % 7) as usize],
            },
            timestamp_ms: i as i64,
        };
        let term = if i < n / 2 { 1 } else { 2 };
        source.append_blocking(term, vec![record]).unwrap();
    }
    let all: Vec<Record> = source
        .read_from(1)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    source.shutdown().unwrap();
    all
}

fn refs(records: &[Record]) -> Vec<RecordRef<'_>> {
    records.iter().map(Record::as_ref).collect()
}

fn direct_batches(registry: &prometheus::Registry) -> u64 {
    registry
        .gather()
        .iter()
        .filter(|f| f.name() == "crescent_journal_direct_batches_total")
        .flat_map(|f| f.get_metric())
        .map(|m| m.get_counter().get_value() as u64)
        .sum()
}

#[test]
fn an_idle_writer_leaves_the_batch_to_the_caller_which_returns_it_durable_and_acked() {
    let all = history(20);
    let (journal, seen, registry) = standby(Duration::from_millis(2));
    let calls = checked_hook(&journal, &seen);
    // Let the writer thread go idle first.
    std::thread::sleep(Duration::from_millis(20));
    let ticket = journal.append_replicated(&refs(&all[..8])).unwrap();
    assert_eq!((ticket.first_seq, ticket.last_seq), (1, 8));
    assert_eq!(
        journal.durable().get(),
        8,
        "durable on return: written here"
    );
    let me = std::thread::current().id();
    assert_eq!(*seen.threads.lock().unwrap(), vec![me]);
    assert_eq!(*calls.lock().unwrap(), vec![(8, me)], "the hook ran here");
    assert_eq!(direct_batches(&registry), 1);
    journal.append_replicated(&refs(&all[8..])).unwrap();
    assert_eq!(journal.durable().get(), 20);
    assert_eq!(journal.head().2, all[19].digest);
    journal.shutdown().unwrap();
}

#[test]
fn a_record_that_fails_a_check_is_refused_before_anything_is_written() {
    let all = history(12);
    let (journal, seen, _registry) = standby(Duration::ZERO);
    let calls = checked_hook(&journal, &seen);
    journal.append_replicated(&refs(&all[..5])).unwrap();
    let appends = seen.appends.load(Ordering::Acquire);

    // Altered content under its original digest: the chain does not extend.
    let mut forged = all[5].clone();
    forged.event.payload[0] ^= 1;
    let batch = [all[5].as_ref(), forged.as_ref()];
    assert!(matches!(
        journal.append_replicated(&[all[5].as_ref(), all[6].as_ref(), forged.as_ref()]),
        Err(JournalError::Gap { .. })
    ));
    assert!(matches!(
        journal.append_replicated(&[forged.as_ref()]),
        Err(JournalError::Diverged { seq: 6, .. })
    ));
    // The first record is fine, the second repeats its seq: the whole message is refused.
    assert!(matches!(
        journal.append_replicated(&batch),
        Err(JournalError::Gap { .. })
    ));
    // A lower term than the journal's last record.
    let mut lower = all[5].clone();
    lower.term = 0;
    lower.digest = lower.expected_digest(&all[4].digest);
    assert!(matches!(
        journal.append_replicated(&[lower.as_ref()]),
        Err(JournalError::Fenced { .. })
    ));
    assert_eq!(
        seen.appends.load(Ordering::Acquire),
        appends,
        "nothing written"
    );
    assert_eq!(journal.durable().get(), 5);
    assert_eq!(journal.last_seq(), 5);
    assert_eq!(calls.lock().unwrap().len(), 1, "nothing more acknowledged");
    journal.append_replicated(&refs(&all[5..])).unwrap();
    assert_eq!(journal.head().2, all[11].digest);
    journal.shutdown().unwrap();
}

#[test]
fn batches_reach_the_backend_in_order_whichever_thread_writes_them() {
    let all = Arc::new(history(400));
    let (journal, seen, registry) = standby(Duration::from_micros(300));
    let calls = checked_hook(&journal, &seen);
    // A second thread keeps the writer thread busy with truncations now and then.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let truncator = {
        let (journal, stop) = (journal.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Acquire) {
                let keep = journal.durable().get().saturating_sub(50).max(1);
                journal.truncate_prefix(keep).unwrap();
                std::thread::sleep(Duration::from_micros(700));
            }
        })
    };
    let mut at = 0;
    let mut step = 0;
    while at < all.len() {
        step += 1;
        let n = (1 + step % 7).min(all.len() - at);
        let chunk = refs(&all[at..at + n]);
        // Queued for the writer thread, or written here when it is idle.
        let ticket = if step % 3 == 0 {
            journal.submit_replicated(&chunk).unwrap()
        } else {
            journal.append_replicated(&chunk).unwrap()
        };
        assert_eq!(ticket.last_seq, (at + n) as u64);
        at += n;
    }
    journal
        .durable()
        .wait_for_blocking(all.len() as u64)
        .unwrap();
    stop.store(true, Ordering::Release);
    truncator.join().unwrap();
    assert_eq!(seen.synced.load(Ordering::Acquire), 400);
    let threads = seen.threads.lock().unwrap().clone();
    let me = std::thread::current().id();
    assert!(threads.contains(&me), "some batches were written here");
    assert!(
        threads.iter().any(|t| *t != me),
        "and some by the writer thread"
    );
    assert!(direct_batches(&registry) > 0);
    let told: Vec<u64> = calls.lock().unwrap().iter().map(|c| c.0).collect();
    assert!(told.windows(2).all(|w| w[0] < w[1]), "acks only go up");
    assert_eq!(told.last(), Some(&400));
    let first = journal.first_seq();
    let tail: Vec<Record> = journal
        .read_from(first)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(tail, all[first as usize - 1..].to_vec(), "the same history");
    journal.shutdown().unwrap();
}
