//! The promotion queue: bounds, single flight, order.

use super::*;

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
