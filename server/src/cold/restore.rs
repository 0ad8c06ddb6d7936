//! Restore on read: a get of a cold-only object reads its payload from the device, verified
//! (length and CRC32C) before any byte is returned, then re-promotes it into a hot slot best
//! effort. Concurrent restores of one backing share one read (single flight).

use std::sync::{mpsc, Arc};
use std::time::Instant;

use crescent_cold::driver;
use crescent_cold::restore::{Joined, RestoreKey};
use crescent_cold::route::{ActiveColdBacking, ObjectRoute};
use crescent_cold::ColdError;
use crescent_wire::store::{GetReply, ObjectId};

use super::hot::NodeHot;
use super::ColdTier;
use crate::node::NodeState;

impl ColdTier {
    /// The verified payload of a materialized backing, read once however many ask at once.
    pub fn read_verified(&self, route: &ObjectRoute) -> Result<Arc<Vec<u8>>, ColdError> {
        let Some(ActiveColdBacking::Materialized {
            cold_op,
            device_id,
            locator,
            ..
        }) = &route.cold
        else {
            return Err(ColdError::NotFound {
                what: "materialized cold backing of",
                id: route.key.clone(),
            });
        };
        let key = RestoreKey {
            device_id: device_id.clone(),
            cold_op: *cold_op,
            locator: locator.clone(),
            route_version: route.version,
        };
        let (tx, rx) = mpsc::channel();
        let joined = self.flights.lock().expect("restore flights").join(&key, tx);
        match joined {
            Err(e) => {
                self.metrics
                    .backpressure
                    .with_label_values(&["restore_single_flight"])
                    .inc();
                Err(e)
            }
            Ok(Joined::Follower) => {
                self.metrics.single_flight_hits.inc();
                rx.recv().unwrap_or_else(|_| {
                    Err(ColdError::Backpressure {
                        queue: "restore single-flight",
                        reason: "the leading restore ended without an answer".into(),
                    })
                })
            }
            Ok(Joined::Leader) => {
                let started = Instant::now();
                let result = driver::read_cold(&self.io, route).map(Arc::new);
                self.metrics
                    .restore_finished(started.elapsed(), result.as_ref().map(|_| ()));
                let waiters = self.flights.lock().expect("restore flights").complete(&key);
                for w in waiters {
                    let _ = w.send(result.clone());
                }
                // The leader's own channel got its copy above (it joined as a waiter).
                rx.recv().unwrap_or(result)
            }
        }
    }
}

/// Completes a get whose object is cold-only: restores the payload, then tries to put it back
/// into a hot slot; answers with the new replica (and its lease) or, if the promotion did not
/// happen, with the verified bytes inline. A failed promotion never fails the read.
pub fn restore_get(
    state: &NodeState,
    tier: &ColdTier,
    id: &ObjectId,
    reply: GetReply,
) -> Result<GetReply, ColdError> {
    let _span = tracing::debug_span!("cold.restore_get").entered();
    let Some(route) = state
        .directory
        .route(id)
        .map_err(|e| ColdError::InvalidArgument {
            field: "id",
            reason: e.to_string(),
        })?
        .filter(ObjectRoute::is_cold_only)
    else {
        return Ok(reply);
    };
    let bytes = tier.read_verified(&route)?;
    // A managed weight payload's residency is its revision's, moved only by migrations: a
    // read of a COLD or MIXED revision is served inline and changes nothing in memory.
    // (The weights domain holds only manifests, kept in memory, and payloads.)
    let managed_payload = id.domain.as_deref() == Some(crate::weights::WEIGHTS_DOMAIN)
        && !id.key.ends_with("/manifest");
    if managed_payload {
        return Ok(GetReply {
            inline: Some(bytes.as_ref().clone()),
            replicas: Vec::new(),
            ..reply
        });
    }
    match promote(state, id, &route, &bytes) {
        Ok(()) => {
            if let Ok(promoted) = state.directory.get(id, state.now_ms()) {
                if !promoted.replicas.is_empty() {
                    return Ok(promoted);
                }
            }
        }
        Err(e) => tracing::debug!(key = %id.key, error = %e, "restore not promoted"),
    }
    Ok(GetReply {
        inline: Some(bytes.as_ref().clone()),
        replicas: Vec::new(),
        ..reply
    })
}

/// Re-promotion: a fresh slot (the embedded segment first, else any mounted owner's segment,
/// written over the transport), the bytes written into it, then the promote CAS; the slot is
/// given back on any failure. Best effort for reads; the weight migrations
/// (`super::weights`) require it.
pub(crate) fn promote(
    state: &NodeState,
    id: &ObjectId,
    route: &ObjectRoute,
    bytes: &[u8],
) -> Result<(), ColdError> {
    let _span = tracing::debug_span!("cold.promote", length = route.length).entered();
    let embedded = state
        .embedded
        .lock()
        .expect("embedded mutex")
        .as_ref()
        .map(|e| e.segment_id.clone());
    let slot = state
        .directory
        .allocate_promotion(route.length, embedded.as_deref())
        .map_err(|e| ColdError::Backpressure {
            queue: "promotion",
            reason: e.to_string(),
        })?;
    let hot = NodeHot { state };
    let result = hot
        .write(&slot.replica.segment_id, slot.replica.offset, bytes)
        .and_then(|()| {
            let expected = route.expectation();
            let next = route.promote(&expected, slot.replica.clone())?;
            state
                .directory
                .compare_and_set_route(id, &expected, next, state.now_ms())
        });
    if result.is_err() {
        state.directory.free_promotion(&slot);
    }
    result
}
