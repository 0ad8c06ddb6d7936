use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use crescent_wire::store::ObjectId;

use super::*;

fn entry(key: &str) -> ReplayEntry {
    ReplayEntry {
        id: ObjectId::new(key),
        put_id: 1,
        segment_id: "o/seg0".into(),
        offset: 0,
        length: 1,
        checksum: None,
        data_type: Default::default(),
        grant: None,
    }
}

fn target(owner: &str) -> NoticeTarget {
    NoticeTarget {
        endpoint: Arc::from(format!("127.0.0.1:{}", owner.len())),
        owner_id: Arc::from(owner),
    }
}

fn quick() -> NotifyConfig {
    NotifyConfig {
        attempts: 3,
        initial_backoff: Duration::from_millis(1),
    }
}

/// Answers from a script of per-send results; counts sends and entries.
struct Scripted {
    script: Mutex<Vec<Result<Vec<NoticeOutcome>, SendFailure>>>,
    sends: AtomicUsize,
}

impl Scripted {
    fn new(script: Vec<Result<Vec<NoticeOutcome>, SendFailure>>) -> Arc<Self> {
        Arc::new(Self {
            script: Mutex::new(script),
            sends: AtomicUsize::new(0),
        })
    }
}

impl NoticeSender for Scripted {
    fn send<'a>(
        &'a self,
        _: &'a str,
        n: &'a OwnerNotice,
    ) -> BoxFuture<'a, Result<OwnerNoticeReply, SendFailure>> {
        self.sends.fetch_add(1, Ordering::SeqCst);
        let next = {
            let mut s = self.script.lock().unwrap();
            if s.is_empty() {
                Ok(vec![NoticeOutcome::Recorded; n.entries.len()])
            } else {
                s.remove(0)
            }
        };
        Box::pin(async move {
            next.map(|outcomes| OwnerNoticeReply {
                version: crescent_wire::rebuild::REBUILD_WIRE_VERSION,
                outcomes,
            })
        })
    }
}

fn tagged(owner: &str, keys: &[(usize, &str)]) -> TaggedEntries {
    let mut m = TaggedEntries::new();
    m.insert(
        target(owner),
        keys.iter().map(|(t, k)| (*t, entry(k))).collect(),
    );
    m
}

#[tokio::test]
async fn recorded_and_stale_entries_succeed_and_chunks_are_bounded() {
    let metrics = RebuildMetrics::unregistered();
    let sender = Scripted::new(vec![Ok(vec![
        NoticeOutcome::Recorded,
        NoticeOutcome::Stale,
    ])]);
    let n = Notifier::new(quick(), sender.clone(), metrics.clone());
    let failed = n.record(tagged("o", &[(0, "a"), (1, "b")])).await;
    assert!(failed.is_empty(), "{failed:?}");
    assert_eq!(metrics.count("notices", "recorded"), 1);
    assert_eq!(metrics.count("notices", "stale"), 1);

    let many: Vec<(usize, String)> = (0..MAX_REPLAY_BATCH + 5)
        .map(|i| (i, format!("k{i}")))
        .collect();
    let keys: Vec<(usize, &str)> = many.iter().map(|(i, k)| (*i, k.as_str())).collect();
    let sends = sender.sends.load(Ordering::SeqCst);
    assert!(n.record(tagged("o", &keys)).await.is_empty());
    assert_eq!(sender.sends.load(Ordering::SeqCst) - sends, 2, "two chunks");
}

#[tokio::test]
async fn a_retryable_failure_is_retried_then_fails_only_its_owners_tags() {
    let metrics = RebuildMetrics::unregistered();
    let down = || Err(SendFailure::Retryable("connection refused".into()));
    // The first owner's send fails once, then succeeds.
    let sender = Scripted::new(vec![down()]);
    let n = Notifier::new(quick(), sender.clone(), metrics.clone());
    assert!(n.record(tagged("o", &[(0, "a")])).await.is_empty());
    assert_eq!(sender.sends.load(Ordering::SeqCst), 2);

    // Down for every attempt: the tag fails, naming the owner; the counter says why.
    let sender = Scripted::new(vec![down(), down(), down()]);
    let n = Notifier::new(quick(), sender.clone(), metrics.clone());
    let failed = n.record(tagged("dead", &[(7, "a"), (8, "b")])).await;
    assert_eq!(sender.sends.load(Ordering::SeqCst), 3, "attempts bounded");
    assert_eq!(failed.len(), 2);
    assert_eq!(&*failed[&7].owner_id, "dead");
    assert!(failed[&7].detail.contains("connection refused"));
    assert_eq!(metrics.count("failed", "unreachable"), 2);
}

#[tokio::test]
async fn a_refusal_or_a_rejected_entry_fails_at_once() {
    let metrics = RebuildMetrics::unregistered();
    let sender = Scripted::new(vec![Err(SendFailure::Refused("no handler".into()))]);
    let n = Notifier::new(quick(), sender.clone(), metrics.clone());
    let failed = n.record(tagged("o", &[(0, "a")])).await;
    assert_eq!(sender.sends.load(Ordering::SeqCst), 1, "never retried");
    assert!(failed.contains_key(&0));
    assert_eq!(metrics.count("failed", "refused"), 1);

    let sender = Scripted::new(vec![Ok(vec![
        NoticeOutcome::Recorded,
        NoticeOutcome::Rejected,
    ])]);
    let n = Notifier::new(quick(), sender, metrics.clone());
    let failed = n.record(tagged("o", &[(0, "a"), (1, "b")])).await;
    assert_eq!(failed.keys().copied().collect::<Vec<_>>(), vec![1]);

    // An answer with the wrong number of outcomes is a refusal, not a guess.
    let sender = Scripted::new(vec![Ok(vec![])]);
    let n = Notifier::new(quick(), sender, metrics);
    assert!(n.record(tagged("o", &[(0, "a")])).await.contains_key(&0));
}
