//! Batch restores (seed 003 "Read and restore": "Batch restores group requests by owner, cold
//! device, and backend"): the cold-only items of one batch get are grouped by (owner,
//! device) with duplicates of one backing merged (`crescent_cold::restore::group_by_device`);
//! each group is read in one pass in locator order, with at most `parallelism` reads in
//! flight, each verified before its bytes answer any item. A failed read fails only the items
//! it answers.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crescent_cold::restore::{group_by_device, RestoreKey, RestoreRequest};
use crescent_cold::route::{ActiveColdBacking, ObjectRoute};
use crescent_cold::ColdError;
use crescent_wire::store::{GetReply, ObjectId};

use super::restore::{cold_only_route, inline_reply, offer_promotion};
use super::ColdTier;
use crate::node::NodeState;

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
    state: &NodeState,
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
        let mut results: Vec<Option<ReadResult>> =
            read_group(tier, &routes, tier.restore.parallelism)
                .into_iter()
                .map(Some)
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

/// The restore request of a cold-only route (`None` unless its backing is materialized).
fn restore_request(route: &ObjectRoute) -> Option<RestoreRequest> {
    match &route.cold {
        Some(ActiveColdBacking::Materialized {
            cold_op,
            owner,
            device_id,
            locator,
            length,
            checksum,
            ..
        }) => Some(RestoreRequest {
            object_key: route.key.clone(),
            owner: owner.clone(),
            key: RestoreKey {
                device_id: device_id.clone(),
                cold_op: *cold_op,
                locator: locator.clone(),
                route_version: route.version,
            },
            length: *length,
            checksum: *checksum,
        }),
        _ => None,
    }
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
