use super::*;

fn target(n: u8) -> NoticeTarget {
    NoticeTarget {
        endpoint: Arc::from(format!("127.0.0.1:{}", 7000 + n as u16).as_str()),
        owner_id: Arc::from(format!("owner{n}").as_str()),
    }
}

fn entry(key: &str, put_id: u64) -> ReplayEntry {
    ReplayEntry {
        id: ObjectId::new(key),
        put_id,
        segment_id: "o/seg0".into(),
        offset: 0,
        length: 1,
        checksum: None,
        data_type: Default::default(),
    }
}

fn config() -> NotifyConfig {
    NotifyConfig {
        max_entries: 4,
        max_bytes: 1 << 20,
        batch_entries: 2,
        max_batches_per_round: 2,
        ..NotifyConfig::default()
    }
}

#[test]
fn bounded_by_entries_dropping_the_oldest() {
    let t0 = Instant::now();
    let mut q = NotifyQueue::new(config());
    for i in 0..4 {
        assert_eq!(
            q.push(target(0), entry(&format!("k{i}"), 1), t0),
            QueueEvents::default()
        );
    }
    let ev = q.push(target(0), entry("k4", 1), t0);
    assert_eq!(ev.dropped, vec![(DropReason::Overflow, 1)]);
    assert_eq!(q.len(), 4);
    let (batches, _) = q.take_due(t0);
    let keys: Vec<String> = batches
        .iter()
        .flat_map(|b| b.entries.iter().map(|e| e.id.key.clone()))
        .collect();
    assert_eq!(
        keys,
        vec!["k1", "k2", "k3", "k4"],
        "k0, the oldest, was dropped"
    );
}

#[test]
fn bounded_by_bytes() {
    let t0 = Instant::now();
    let one = estimate(&entry("k0", 1));
    let mut q = NotifyQueue::new(NotifyConfig {
        max_entries: 100,
        max_bytes: one * 3,
        ..config()
    });
    for i in 0..5 {
        q.push(target(0), entry(&format!("k{i}"), 1), t0);
    }
    assert_eq!(q.len(), 3);
    assert!(q.bytes() <= one * 3);
    let huge = entry(&"x".repeat(one * 4), 1);
    assert_eq!(
        q.push(target(0), huge, t0).dropped,
        vec![(DropReason::Overflow, 1)]
    );
    assert_eq!(q.len(), 3, "an entry larger than the bound evicts nothing");
}

#[test]
fn coalesces_per_object_and_keeps_the_newest_put() {
    let t0 = Instant::now();
    let mut q = NotifyQueue::new(config());
    q.push(target(0), entry("k", 5), t0);
    q.push(target(0), entry("k", 5), t0);
    q.push(target(0), entry("k", 3), t0);
    assert_eq!(q.len(), 1);
    q.push(target(0), entry("k", 7), t0);
    assert_eq!(q.len(), 1);
    q.push(target(1), entry("k", 7), t0);
    assert_eq!(q.len(), 2, "another owner is another notice");
    let (batches, _) = q.take_due(t0);
    assert_eq!(batches.len(), 2);
    assert_eq!(batches[0].entries[0].put_id, 7);
}

#[test]
fn backoff_doubles_from_100ms_to_10s() {
    let c = NotifyConfig::default();
    assert_eq!(c.backoff(1), Duration::from_millis(100));
    assert_eq!(c.backoff(2), Duration::from_millis(200));
    assert_eq!(c.backoff(5), Duration::from_millis(1600));
    assert_eq!(c.backoff(8), Duration::from_secs(10));
    assert_eq!(c.backoff(40), Duration::from_secs(10));
}

#[test]
fn failures_back_off_then_expire_after_max_attempts() {
    let t0 = Instant::now();
    let mut q = NotifyQueue::new(NotifyConfig {
        max_attempts: 3,
        ..config()
    });
    q.push(target(0), entry("k", 1), t0);
    let (b, _) = q.take_due(t0);
    assert!(q.take_due(t0).0.is_empty(), "in flight: not taken twice");
    assert!(q.failed(&b[0], true, t0).dropped.is_empty());
    assert!(q.take_due(t0 + Duration::from_millis(99)).0.is_empty());
    assert_eq!(q.next_due(), Some(t0 + Duration::from_millis(100)));
    let t1 = t0 + Duration::from_millis(100);
    let (b, _) = q.take_due(t1);
    assert_eq!(b.len(), 1);
    q.failed(&b[0], true, t1);
    let t2 = t1 + Duration::from_millis(200);
    assert!(q.take_due(t2 - Duration::from_millis(1)).0.is_empty());
    let (b, _) = q.take_due(t2);
    let ev = q.failed(&b[0], true, t2);
    assert_eq!(ev.dropped, vec![(DropReason::Expired, 1)]);
    assert!(q.is_empty());
}

#[test]
fn entries_expire_after_their_lifetime_even_between_attempts() {
    let t0 = Instant::now();
    let mut q = NotifyQueue::new(NotifyConfig {
        lifetime: Duration::from_secs(1),
        ..config()
    });
    q.push(target(0), entry("k", 1), t0);
    let (_, ev) = q.take_due(t0 + Duration::from_secs(1));
    assert_eq!(ev.dropped, vec![(DropReason::Expired, 1)]);
    assert!(q.is_empty());
}

#[test]
fn refusal_drops_and_acks_settle_but_spare_newer_puts() {
    let t0 = Instant::now();
    let mut q = NotifyQueue::new(config());
    q.push(target(0), entry("a", 1), t0);
    q.push(target(0), entry("b", 1), t0);
    let (b, _) = q.take_due(t0);
    // A newer put of b arrives while the batch is in flight.
    q.push(target(0), entry("b", 2), t0);
    let ev = q.acknowledged(&b[0], &[NoticeOutcome::Recorded, NoticeOutcome::Recorded]);
    assert_eq!(ev.acknowledged, vec![NoticeOutcome::Recorded]);
    assert_eq!(q.len(), 1);
    let (b, _) = q.take_due(t0);
    assert_eq!(b[0].entries[0].put_id, 2);
    assert_eq!(
        q.failed(&b[0], false, t0).dropped,
        vec![(DropReason::Refused, 1)]
    );
    assert!(q.is_empty());
}

#[test]
fn a_round_takes_a_bounded_number_of_small_batches() {
    let t0 = Instant::now();
    let mut q = NotifyQueue::new(NotifyConfig {
        max_entries: 100,
        ..config()
    });
    for i in 0..10 {
        q.push(target(0), entry(&format!("k{i}"), 1), t0);
    }
    let (b, _) = q.take_due(t0);
    assert_eq!(b.len(), 2);
    assert!(b.iter().all(|b| b.entries.len() == 2));
    let (b2, _) = q.take_due(t0);
    assert_eq!(b2.len(), 2, "the rest stays for the next rounds");
    assert_eq!(q.len(), 10);
}
