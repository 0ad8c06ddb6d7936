//! [`ColdResidency`] over this node's cold tier: what the weight migration and deletion
//! workflows ask of it, object by object (keys of the weights domain).
//!
//! - copy to cold: an offload of the current content (resumed if pending, left alone if
//!   materialized), then a verified read-back of the cold copy (length and CRC32C): a copy is
//!   "validated" only once it has been read back whole.
//! - copy to memory: a cold-only object is read and verified, written into a fresh slot of a
//!   memory segment (the embedded one first, else a storage owner's, over the transport) and
//!   added to its route (promote CAS); the new replica is read back and checked against the
//!   object's checksum.
//! - release memory: every hot replica is evicted under the last-hot rule (materialized,
//!   UsageCommitted, device readable); a store read lease still held by a recent reader is
//!   waited out.
//! - remove member: the group member is removed with its cold copy's reclaim planned before
//!   and run after (`with_reclaim`), so usage is released exactly once and no copy resurrects
//!   the object at the next restart.
//!
//! Each call runs on the blocking pool (the cold driver is synchronous, under the device lock).

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crescent_cold::driver::{HotSource, OffloadOutcome};
use crescent_cold::route::ObjectRoute;
use crescent_cold::{ColdError, ColdOpId};
use crescent_store::GroupId;
use crescent_wire::store::ObjectId;
use futures::future::BoxFuture;

use super::context::ColdContext;
use super::hot::NodeHot;
use super::ColdTier;
use crate::weights::workflows::object_id;
use crate::weights::ColdResidency;

/// Longest a release waits for store read leases of recent readers to end.
const LEASE_WAIT: Duration = Duration::from_secs(60);
const LEASE_POLL: Duration = Duration::from_millis(50);

/// The weights' view of the cold tier. Holds the tier's context weakly (the context holds the
/// weight service, which owns this).
pub struct ColdWeights {
    node: Weak<ColdContext>,
}

impl ColdWeights {
    pub fn new(node: &Arc<ColdContext>) -> Self {
        Self {
            node: Arc::downgrade(node),
        }
    }

    /// Runs `f` for each key on the blocking pool with the node and its tier.
    fn each<T: Send + 'static>(
        &self,
        what: &'static str,
        keys: Vec<String>,
        f: fn(&ColdContext, &ColdTier, &ObjectId) -> Result<T, ColdError>,
    ) -> BoxFuture<'static, Result<Vec<T>, String>> {
        let node = self.node.clone();
        Box::pin(async move {
            let joined = tokio::task::spawn_blocking(move || {
                let state = node.upgrade().ok_or("the node is shutting down")?;
                let tier = state
                    .cold
                    .get()
                    .cloned()
                    .ok_or("the cold tier is not started")?;
                keys.iter()
                    .map(|key| {
                        f(&state, &tier, &object_id(key))
                            .map_err(|e| format!("{what} of {key:?}: {e}"))
                    })
                    .collect::<Result<Vec<T>, String>>()
            })
            .await;
            match joined {
                Ok(r) => r,
                Err(e) => Err(format!("{what}: the blocking task failed: {e}")),
            }
        })
    }
}

fn route_of(state: &ColdContext, id: &ObjectId) -> Result<ObjectRoute, ColdError> {
    state
        .directory
        .route(id)
        .map_err(|e| ColdError::InvalidArgument {
            field: "id",
            reason: e.to_string(),
        })?
        .ok_or_else(|| ColdError::NotFound {
            what: "object",
            id: id.key.clone(),
        })
}

/// Offloads (idempotent) and reads the cold copy back, verified.
fn copy_to_cold(state: &ColdContext, tier: &ColdTier, id: &ObjectId) -> Result<(), ColdError> {
    let route = route_of(state, id)?;
    if !route.cold.as_ref().is_some_and(|c| c.is_materialized()) {
        let op = ColdOpId::new(uuid::Uuid::new_v4());
        match tier.offload(state, id, op, true)? {
            OffloadOutcome::Materialized => {}
            OffloadOutcome::Cancelled | OffloadOutcome::Reclaimed => {
                return Err(ColdError::RouteConflict {
                    key: id.key.clone(),
                    reason: "the object changed while it was copied to cold".into(),
                })
            }
        }
    }
    let route = route_of(state, id)?;
    let bytes = tier.read_verified(&route)?;
    if bytes.len() as u64 != route.length {
        return Err(ColdError::LengthMismatch {
            locator: id.key.clone(),
            expected: route.length,
            actual: bytes.len() as u64,
        });
    }
    Ok(())
}

/// Restores a cold-only object into memory (a no-op when it has a memory replica), then
/// checks the new replica.
fn copy_to_memory(state: &ColdContext, tier: &ColdTier, id: &ObjectId) -> Result<(), ColdError> {
    let route = route_of(state, id)?;
    if route.replicas.is_empty() {
        let bytes = tier.read_verified(&route)?;
        super::restore::promote(state, id, &route, &bytes)?;
    }
    // The replica now in memory holds the object's content (checksum checked on read).
    NodeHot { state }.read_hot(&route_of(state, id)?)?;
    Ok(())
}

/// Evicts every memory replica; waits out store read leases of recent readers.
fn release_memory(state: &ColdContext, tier: &ColdTier, id: &ObjectId) -> Result<(), ColdError> {
    let started = Instant::now();
    loop {
        match tier.evict_hot(state, id) {
            Ok(_) => return Ok(()),
            Err(ColdError::Backpressure { .. }) if started.elapsed() < LEASE_WAIT => {
                std::thread::sleep(LEASE_POLL);
            }
            Err(e) => return Err(e),
        }
    }
}

impl ColdResidency for ColdWeights {
    fn copy_to_cold(&self, keys: Vec<String>) -> BoxFuture<'static, Result<(), String>> {
        let f = self.each("cold copy", keys, copy_to_cold);
        Box::pin(async move { f.await.map(|_| ()) })
    }

    fn copy_to_memory(&self, keys: Vec<String>) -> BoxFuture<'static, Result<(), String>> {
        let f = self.each("memory copy", keys, copy_to_memory);
        Box::pin(async move { f.await.map(|_| ()) })
    }

    fn release_memory(&self, keys: Vec<String>) -> BoxFuture<'static, Result<(), String>> {
        let f = self.each("memory release", keys, release_memory);
        Box::pin(async move { f.await.map(|_| ()) })
    }

    fn remove_member(
        &self,
        key: String,
        group: GroupId,
    ) -> BoxFuture<'static, Result<bool, String>> {
        let node = self.node.clone();
        Box::pin(async move {
            let joined = tokio::task::spawn_blocking(move || {
                let state = node.upgrade().ok_or("the node is shutting down")?;
                let id = object_id(&key);
                let now = state.now_ms();
                let remove = || state.directory.remove_group_member(&id, group, now);
                let removed = match state.cold.get() {
                    Some(tier) => tier
                        .with_reclaim(&state, &id, remove)
                        .map_err(|e| format!("reclaim of {key:?}: {e}"))?,
                    None => remove(),
                };
                removed.map_err(|e| format!("removal of {key:?}: {e}"))
            })
            .await;
            match joined {
                Ok(r) => r,
                Err(e) => Err(format!("member removal: the blocking task failed: {e}")),
            }
        })
    }
}
