use std::sync::atomic::AtomicUsize;

use crescent_wire::rebuild::NoticeOutcome;
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
    }
}

fn target() -> NoticeTarget {
    NoticeTarget {
        endpoint: Arc::from("127.0.0.1:9"),
        owner_id: Arc::from("o"),
    }
}

/// Never answers.
struct Hanging(Arc<AtomicUsize>);

impl NoticeSender for Hanging {
    fn send<'a>(
        &'a self,
        _: &'a str,
        _: &'a OwnerNotice,
    ) -> BoxFuture<'a, Result<OwnerNoticeReply, SendFailure>> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Box::pin(futures::future::pending())
    }
    fn alive(&self) -> bool {
        true
    }
}

/// Records everything.
struct Accepting;

impl NoticeSender for Accepting {
    fn send<'a>(
        &'a self,
        _: &'a str,
        n: &'a OwnerNotice,
    ) -> BoxFuture<'a, Result<OwnerNoticeReply, SendFailure>> {
        let outcomes = vec![NoticeOutcome::Recorded; n.entries.len()];
        Box::pin(async move {
            Ok(OwnerNoticeReply {
                version: crescent_wire::rebuild::REBUILD_WIRE_VERSION,
                outcomes,
            })
        })
    }
    fn alive(&self) -> bool {
        true
    }
}

#[tokio::test]
async fn writes_never_wait_for_a_stuck_owner() {
    let sent = Arc::new(AtomicUsize::new(0));
    let metrics = RebuildMetrics::unregistered();
    let n = Arc::new(Notifier::new(
        NotifyConfig {
            max_entries: 100,
            ..NotifyConfig::default()
        },
        Arc::new(Hanging(sent.clone())),
        metrics.clone(),
    ));
    n.enqueue(target(), vec![entry("first")]);
    // Let the sender task take the first batch and hang on it.
    while sent.load(Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    let started = Instant::now();
    for i in 0..1000 {
        n.enqueue(target(), vec![entry(&format!("k{i}"))]);
    }
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "enqueue must not block"
    );
    assert_eq!(n.pending(), 100, "bounded while the owner is stuck");
    assert_eq!(metrics.count("dropped", "overflow"), 901);
    assert_eq!(metrics.queue_depth(), 100);
}

#[tokio::test]
async fn acknowledged_notices_leave_the_queue() {
    let metrics = RebuildMetrics::unregistered();
    let n = Notifier::new(
        NotifyConfig::default(),
        Arc::new(Accepting),
        metrics.clone(),
    );
    {
        let mut q = n.lock();
        for i in 0..300 {
            q.push(target(), entry(&format!("k{i}")), Instant::now());
        }
    }
    assert_eq!(n.round().await, 2, "256 + 44 in two batches");
    assert_eq!(n.pending(), 0);
    assert_eq!(metrics.count("notices", "recorded"), 300);
    assert_eq!(metrics.queue_depth(), 0);
}
