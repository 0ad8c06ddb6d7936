use super::*;

fn queues(limit: usize) -> ReleaseQueues {
    ReleaseQueues::new(limit, ReleaseMetrics::unregistered())
}

#[test]
fn only_tracked_owners_and_committed_puts_are_queued() {
    let q = queues(8);
    assert!(!q.record("a", "a/seg0", 0, 10, 7), "untracked owner");
    q.track("a");
    assert!(
        !q.record("a", "a/seg0", 0, 10, 0),
        "put id 0 is no allocation"
    );
    assert!(q.record("a", "a/seg0", 0, 10, 7));
    assert_eq!(q.pending("a"), 1);
    assert_eq!(q.pending("b"), 0);
    assert!(q.exchange("b", Some(u64::MAX), 10).is_empty());
}

#[test]
fn entries_stay_until_acknowledged_and_acks_are_idempotent() {
    let q = queues(8);
    q.track("a");
    for i in 0..3 {
        q.record("a", "a/seg0", i * 64, 10, 100 + i);
    }
    let first = q.exchange("a", None, 10);
    assert_eq!(first.len(), 3);
    assert_eq!(first[0].put_id, 100);
    assert!(first.windows(2).all(|w| w[0].seq < w[1].seq));
    // Not acknowledged: delivered again.
    assert_eq!(q.exchange("a", None, 10), first);
    // Limited per answer.
    assert_eq!(q.exchange("a", None, 2), first[..2].to_vec());
    // The owner applied the first two.
    let rest = q.exchange("a", Some(first[1].seq), 10);
    assert_eq!(rest, first[2..].to_vec());
    // The same acknowledgement again changes nothing.
    assert_eq!(q.exchange("a", Some(first[1].seq), 10), rest);
    assert!(q.exchange("a", Some(first[2].seq), 10).is_empty());
    assert_eq!(q.metrics().counts(), (3, 3, 0));
    assert_eq!(q.pending("a"), 0);
}

#[test]
fn overflow_drops_the_oldest_and_counts_it() {
    let q = queues(2);
    q.track("a");
    for i in 0..5 {
        q.record("a", "a/seg0", i * 64, 10, 1 + i);
    }
    let left = q.exchange("a", None, 10);
    assert_eq!(
        left.iter().map(|r| r.put_id).collect::<Vec<_>>(),
        vec![4, 5]
    );
    assert_eq!(q.metrics().counts(), (5, 0, 3));
    assert_eq!(q.metrics().pending.get(), 2);
}

#[test]
fn a_new_run_numbers_above_an_old_acknowledgement() {
    let old_run = queues(8);
    old_run.track("a");
    old_run.record("a", "a/seg0", 0, 10, 1);
    let old_ack = old_run.exchange("a", None, 10)[0].seq;
    // A restarted crescentd starts empty; its floor comes from the next incarnation.
    let new_run = queues(8);
    new_run.begin(crescent_wire::rebuild::compose_put_id(2, 1).unwrap());
    new_run.track("a");
    new_run.record("a", "a/seg0", 0, 10, 9);
    let delivered = new_run.exchange("a", Some(old_ack), 10);
    assert_eq!(
        delivered.len(),
        1,
        "an old acknowledgement covers nothing new"
    );
    assert!(delivered[0].seq > old_ack);
}

#[test]
fn dropping_a_segment_or_owner_discards_its_entries() {
    let q = queues(8);
    q.track("a");
    q.record("a", "a/seg0", 0, 10, 1);
    q.record("a", "a/seg1", 0, 10, 2);
    q.drop_segment("a", "a/seg0");
    let left = q.exchange("a", None, 10);
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].segment_id, "a/seg1");
    q.untrack("a");
    assert_eq!(q.pending("a"), 0);
    assert!(!q.record("a", "a/seg1", 64, 10, 3));
    assert_eq!(q.metrics().pending.get(), 0);
}
