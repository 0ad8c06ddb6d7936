//! The promotion queue: bounds, single flight, order.

use super::*;
use crescent_cold::route::ActiveColdBacking;

fn route(key: &str, version: u64, length: u64) -> PromotionJob {
    PromotionJob {
        id: ObjectId {
            tenant: None,
            domain: None,
            key: key.into(),
        },
        route: ObjectRoute {
            key: format!("default//{key}"),
            version,
            content_op: 1,
            length,
            checksum: 0,
            replicas: Vec::new(),
            cold: Some(ActiveColdBacking::Materialized {
                cold_op: ColdOpId(uuid::Uuid::from_u128(u128::from(version))),
                content_op: 1,
                owner: "local".into(),
                device_id: "local0".into(),
                locator: "objects/00/x.cold".into(),
                length,
                checksum: 0,
            }),
        },
    }
}

fn queue(max_entries: usize, max_bytes: u64) -> PromotionQueue {
    PromotionQueue::new(PromotionLimits {
        max_entries,
        max_bytes,
        quiet: Duration::ZERO,
        max_defer: Duration::ZERO,
    })
}

#[test]
fn one_promotion_per_backing_and_route_version() {
    let q = queue(8, 1 << 20);
    assert_eq!(q.offer(route("a", 1, 10)), Offered::Queued);
    assert_eq!(q.offer(route("a", 1, 10)), Offered::Duplicate);
    // Another route version of the same object is another promotion.
    assert_eq!(q.offer(route("a", 2, 10)), Offered::Queued);
    let (key, job) = q.take(Duration::ZERO).unwrap();
    assert_eq!((job.id.key.as_str(), key.route_version), ("a", 1));
    // Still running: a repeat is a duplicate until it finishes.
    assert_eq!(q.offer(route("a", 1, 10)), Offered::Duplicate);
    q.finish(&key, 10);
    assert_eq!(q.offer(route("a", 1, 10)), Offered::Queued);
    assert_eq!(q.depth(), 2);
}

#[test]
fn offers_beyond_the_entry_or_byte_bound_are_dropped() {
    let q = queue(2, 100);
    assert_eq!(q.offer(route("a", 1, 10)), Offered::Queued);
    assert_eq!(q.offer(route("b", 1, 10)), Offered::Queued);
    assert_eq!(q.offer(route("c", 1, 10)), Offered::Dropped);
    let (key, _) = q.take(Duration::ZERO).unwrap();
    q.finish(&key, 10);
    assert_eq!(
        q.offer(route("d", 1, 95)),
        Offered::Dropped,
        "10 + 95 > 100"
    );
    assert_eq!(q.offer(route("d", 1, 90)), Offered::Queued);

    // One object above the byte bound still goes through an empty queue.
    let q = queue(4, 100);
    assert_eq!(q.offer(route("huge", 1, 1000)), Offered::Queued);
    assert_eq!(q.offer(route("small", 1, 1)), Offered::Dropped);
}

#[test]
fn only_cold_only_materialized_routes_are_taken_and_jobs_come_out_in_order() {
    let q = queue(8, 1 << 20);
    let mut hot = route("hot", 1, 10);
    hot.route.replicas.push(crescent_cold::route::HotReplica {
        segment_id: "s".into(),
        offset: 0,
    });
    assert_eq!(q.offer(hot), Offered::Dropped);
    let mut pending = route("pending", 1, 10);
    pending.route.cold = None;
    assert_eq!(q.offer(pending), Offered::Dropped);
    for k in ["x", "y", "z"] {
        assert_eq!(q.offer(route(k, 1, 1)), Offered::Queued);
    }
    let order: Vec<String> = std::iter::from_fn(|| q.take(Duration::ZERO))
        .map(|(_, j)| j.id.key)
        .collect();
    assert_eq!(order, ["x", "y", "z"]);
    assert!(q.take(Duration::from_millis(1)).is_none());
}

fn deferring(quiet_ms: u64, max_defer_ms: u64) -> PromotionLimits {
    PromotionLimits {
        max_entries: 8,
        max_bytes: 1 << 20,
        quiet: Duration::from_millis(quiet_ms),
        max_defer: Duration::from_millis(max_defer_ms),
    }
}

#[test]
fn a_promotion_waits_for_quiet_reads_but_not_past_its_deadline() {
    let t0 = Instant::now();
    let ms = Duration::from_millis;
    let limits = deferring(50, 200);
    // Queued at t0, last restore at t0 + 30: waits until t0 + 80.
    assert_eq!(
        promotion_wait(t0 + ms(40), t0 + ms(30), t0, &limits),
        Some(ms(40))
    );
    // Quiet long enough: runs.
    assert_eq!(promotion_wait(t0 + ms(80), t0 + ms(30), t0, &limits), None);
    // Reads never pause: the deadline (queued + 200) still runs it.
    assert_eq!(
        promotion_wait(t0 + ms(190), t0 + ms(189), t0, &limits),
        Some(ms(10))
    );
    assert_eq!(
        promotion_wait(t0 + ms(200), t0 + ms(199), t0, &limits),
        None
    );
    // No deferral configured: at once.
    assert_eq!(promotion_wait(t0, t0, t0, &deferring(0, 0)), None);
}

#[test]
fn the_worker_takes_a_job_only_after_the_reads_went_quiet() {
    let q = PromotionQueue::new(deferring(60, 5_000));
    assert_eq!(q.offer(route("a", 1, 10)), Offered::Queued);
    // Just offered: not ready within a short wait.
    assert!(q.take(Duration::from_millis(10)).is_none());
    assert_eq!(q.depth(), 1, "still queued");
    // After the quiet period it is handed out.
    let (key, job) = q.take(Duration::from_secs(5)).expect("ready once quiet");
    assert_eq!(job.id.key, "a");
    q.finish(&key, 10);
    assert_eq!(q.depth(), 0);
}
