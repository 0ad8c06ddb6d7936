//! Batch restores (docs/cold-tier.md, "Restore on read": "Batch restores group requests by owner,
//! cold device, and backend"): the cold-only items of one batch get are grouped by (owner, device)
//! with duplicates of one backing merged (`crescent_cold::restore::group_by_device`); each group is
//! read in one pass in locator order, with at most `parallelism` reads in flight, each verified
//! before its bytes answer any item. A failed read fails only the items it answers.
//!
//! The restored bytes travel inline in the one batch reply, whose frame a client bounds
//! (`MAX_REPLY_FRAME_BYTES`, 64 MiB). So a batch restores at most [`MAX_BATCH_INLINE_BYTES`] (distinct backings, in
//! order); the items past it answer BUSY ("get it again"), which fails only them, where an
//! oversized reply would have failed the whole batch.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crescent_cold::restore::{group_by_device, RestoreRequest};
use crescent_cold::route::ObjectRoute;
use crescent_cold::ColdError;
use crescent_wire::store::{GetReply, ObjectId};

use super::context::ColdContext;
use super::restore::{cold_only_route, inline_reply, offer_promotion};
use super::ColdTier;

/// Restored bytes one batch reply carries at most: three quarters of the reply frame a client
/// accepts, the rest left for the other items' descriptors.
pub const MAX_BATCH_INLINE_BYTES: u64 = (crescent_wire::rpc::MAX_REPLY_FRAME_BYTES as u64 / 4) * 3;

/// A verified payload, or why there is none.
type ReadResult = Result<Arc<Vec<u8>>, ColdError>;

/// One cold-only item of the batch.
struct Asked {
    index: usize,
    id: ObjectId,
    reply: GetReply,
    route: ObjectRoute,
}

/// Restores the items `(batch index, id, directory reply)` whose object is cold-only; other
/// items come back with their reply unchanged. Answers in no particular order.
pub fn restore_batch(
    state: &ColdContext,
    tier: &ColdTier,
    items: Vec<(usize, ObjectId, GetReply)>,
) -> Vec<(usize, Result<GetReply, ColdError>)> {
    let _span = tracing::debug_span!("cold.restore_batch", items = items.len()).entered();
    let mut answered = Vec::with_capacity(items.len());
    let mut asked = Vec::new();
    let mut requests = Vec::new();
    for (index, id, reply) in items {
        let route = match cold_only_route(state, &id) {
            Err(e) => {
                answered.push((index, Err(e)));
                continue;
            }
            Ok(None) => {
                answered.push((index, Ok(reply)));
                continue;
            }
            Ok(Some(route)) => route,
        };
        let Some(request) = restore_request(&route) else {
            answered.push((
                index,
                Err(ColdError::NotFound {
                    what: "materialized cold backing of",
                    id: route.key.clone(),
                }),
            ));
            continue;
        };
        requests.push(request);
        asked.push(Some(Asked {
            index,
            id,
            reply,
            route,
        }));
    }
    let mut inline_budget = MAX_BATCH_INLINE_BYTES;
    for group in group_by_device(&requests) {
        let _group_span = tracing::debug_span!(
            "cold.restore_group",
            device = %group.device_id,
            reads = group.reads.len()
        )
        .entered();
        // The route of each distinct read: that of its first asker.
        let mut read_routes: Vec<Option<ObjectRoute>> = vec![None; group.reads.len()];
        let mut uses = vec![0usize; group.reads.len()];
        for &(request, read) in &group.answers {
            uses[read] += 1;
            if read_routes[read].is_none() {
                let a = asked[request].as_ref().expect("each request answered once");
                read_routes[read] = Some(a.route.clone());
                offer_promotion(tier, &a.id, &a.route);
            }
        }
        let routes: Vec<ObjectRoute> = read_routes
            .into_iter()
            .map(|r| r.expect("every read has an asker"))
            .collect();
        // The reads that fit in the reply are read; the others answer BUSY.
        let fitting = fitting_reads(&routes, &mut inline_budget);
        let mut read = read_group(tier, &routes[..fitting], tier.restore.parallelism).into_iter();
        let mut results: Vec<Option<ReadResult>> = (0..routes.len())
            .map(|i| match i < fitting {
                true => read.next(),
                false => Some(Err(over_budget())),
            })
            .collect();
        for &(request, read) in &group.answers {
            let a = asked[request].take().expect("each request answered once");
            uses[read] -= 1;
            // The last asker of a read takes its bytes; earlier ones copy them.
            let result = if uses[read] == 0 {
                results[read].take().expect("read answered")
            } else {
                results[read].clone().expect("read answered")
            };
            answered.push((a.index, result.map(|bytes| inline_reply(a.reply, bytes))));
        }
    }
    answered
}

/// How many of `routes`, in order, fit in what is left of the reply's inline budget (taken
/// from it). The first read of a batch always fits, so one object larger than the budget
/// still gets its (lone) answer.
fn fitting_reads(routes: &[ObjectRoute], budget: &mut u64) -> usize {
    let mut fitting = 0;
    for route in routes {
        let first_of_batch = *budget == MAX_BATCH_INLINE_BYTES;
        if route.length > *budget && !first_of_batch {
            break;
        }
        *budget = budget.saturating_sub(route.length);
        fitting += 1;
    }
    fitting
}

fn over_budget() -> ColdError {
    ColdError::Backpressure {
        queue: "batch restore",
        reason: format!(
            "the batch's restored objects exceed {} MiB in one reply: get this item again",
            MAX_BATCH_INLINE_BYTES >> 20
        ),
    }
}

/// The restore request of a cold-only route (`None` unless its backing is materialized).
fn restore_request(route: &ObjectRoute) -> Option<RestoreRequest> {
    let m = route.materialized()?;
    Some(RestoreRequest {
        object_key: route.key.clone(),
        owner: m.owner.to_string(),
        key: m.restore_key(),
        length: m.length,
        checksum: m.checksum,
    })
}

/// Reads the routes' backings (verified, single-flighted with concurrent gets), at most
/// `parallelism` at once; the calling thread is one of the readers.
fn read_group(tier: &ColdTier, routes: &[ObjectRoute], parallelism: usize) -> Vec<ReadResult> {
    let readers = parallelism.clamp(1, routes.len().max(1));
    if readers == 1 {
        return routes.iter().map(|r| tier.read_verified(r)).collect();
    }
    let next = AtomicUsize::new(0);
    let slots: Vec<Mutex<Option<ReadResult>>> = routes.iter().map(|_| Mutex::new(None)).collect();
    let read_all = || loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        let Some(route) = routes.get(i) else {
            break;
        };
        let result = tier.read_verified(route);
        *slots[i].lock().expect("restore slot") = Some(result);
    };
    std::thread::scope(|s| {
        for _ in 1..readers {
            s.spawn(read_all);
        }
        read_all();
    });
    slots
        .into_iter()
        .map(|slot| {
            slot.into_inner()
                .expect("restore slot")
                .expect("every read ran")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(length: u64) -> ObjectRoute {
        ObjectRoute {
            key: "default//k".into(),
            version: 1,
            content_op: 1,
            length,
            checksum: 0,
            replicas: Vec::new(),
            cold: None,
        }
    }

    #[test]
    fn a_batch_reads_what_fits_in_one_reply_and_a_lone_large_object_still_gets_read() {
        let mib = 1u64 << 20;
        let four = vec![route(4 * mib); 16];
        let mut budget = MAX_BATCH_INLINE_BYTES;
        assert_eq!(
            fitting_reads(&four, &mut budget),
            12,
            "48 MiB of 4 MiB objects"
        );
        assert_eq!(budget, 0);
        // A later group gets nothing once the budget is spent.
        assert_eq!(fitting_reads(&four[..2], &mut budget), 0);
        // One object above the budget is read alone (its own limit is the frame's).
        let mut budget = MAX_BATCH_INLINE_BYTES;
        let big = [route(60 * mib), route(1)];
        assert_eq!(fitting_reads(&big, &mut budget), 1);
        assert!(matches!(over_budget(), ColdError::Backpressure { .. }));
    }
}
