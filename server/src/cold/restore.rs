//! Restore on read: a get of a cold-only object reads its payload from the device, verified
//! (length and CRC32C) before any byte is returned, and answers with it (or, to a reader on
//! the device's host, with the backing's location: a local restore); the re-promotion into a
//! hot slot runs later in the background (`super::promotion`). Concurrent restores of one
//! backing share one read (single flight).

use std::sync::{mpsc, Arc};
use std::time::Instant;

use crescent_cold::device::DeviceKind;
use crescent_cold::driver;
use crescent_cold::io::ColdIo;
use crescent_cold::restore::Joined;
use crescent_cold::route::ObjectRoute;
use crescent_cold::ColdError;
use crescent_wire::cold::{ColdBackingRef, COLD_BACKING_REF_VERSION};
use crescent_wire::store::{GetReply, ObjectId};

use super::context::ColdContext;
use super::hot::NodeHot;
use super::promotion::PromotionJob;
use super::staging::NotStaged;
use super::ColdTier;

impl ColdTier {
    /// The verified payload of a materialized backing, read once however many ask at once.
    pub fn read_verified(&self, route: &ObjectRoute) -> Result<Arc<Vec<u8>>, ColdError> {
        let backing = route.require_materialized()?;
        let key = backing.restore_key();
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
                let result = self
                    .readable_io(backing.device_id)
                    .and_then(|io| driver::read_cold(&*io, route))
                    .map(Arc::new);
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

impl ColdTier {
    /// Where a reader on this host finds the materialized backing of `route` (a local
    /// restore), when it is on this tier's device.
    pub fn backing_ref(&self, route: &ObjectRoute) -> Option<ColdBackingRef> {
        let m = route.materialized()?;
        Some(ColdBackingRef {
            version: COLD_BACKING_REF_VERSION,
            device_id: m.device_id.to_string(),
            kind: DeviceKind::LocalDir.as_str().to_string(),
            root: self.local_root(m.device_id)?.display().to_string(),
            locator: m.locator.to_string(),
            length: m.length,
            checksum: m.checksum,
            route_version: m.route_version,
        })
    }
}

/// Completes a get whose object is cold-only (docs/cold-tier.md, "Restore on read"): answers at
/// once, and only offers the re-promotion to the background queue (it never delays or fails the
/// read). A reader that accepts it (`accept_backing`, a reader on this host) gets the backing's
/// location and reads and verifies the file itself (a local restore); a reader that accepts staging
/// (`accept_staged`) gets the payload read and verified into the staging pool and pulls it over the
/// data plane (`super::staging`); any other (or when the pool is saturated or off, or the payload
/// small) gets the payload read and verified here, inline.
pub fn restore_get(
    state: &ColdContext,
    tier: &ColdTier,
    id: &ObjectId,
    reply: GetReply,
    accept_backing: bool,
    accept_staged: bool,
) -> Result<GetReply, ColdError> {
    let _span = tracing::debug_span!("cold.restore_get", accept_backing, accept_staged).entered();
    let Some(route) = cold_only_route(state, id)? else {
        return Ok(reply);
    };
    if accept_backing && tier.restore.local_restore {
        if let Some(backing) = tier.backing_ref(&route) {
            tier.metrics.backing_refs.inc();
            offer_promotion(tier, id, &route);
            return Ok(GetReply {
                cold_backing: Some(backing),
                inline: None,
                replicas: Vec::new(),
                ..reply
            });
        }
    }
    if accept_staged {
        if let Some(staged) = stage_on_owner(state, tier, &route)? {
            offer_promotion(tier, id, &route);
            return Ok(staged_reply(reply, staged));
        }
    }
    if let (true, Some(io)) = (accept_staged, staging_io(tier, &route)) {
        if let Some(staging) = state.embedded_staging() {
            let started = Instant::now();
            let staged = staging.stage(&*io, &route, state.now_ms());
            if !matches!(staged, Ok(Err(_))) {
                // Read and verified here (into the pool), or failed: a restore either way.
                tier.metrics
                    .restore_finished(started.elapsed(), staged.as_ref().map(|_| ()));
            }
            match staged? {
                Ok(staged) => {
                    offer_promotion(tier, id, &route);
                    return Ok(staged_reply(reply, staged));
                }
                // Saturated: explicit backpressure, counted; this reader gets the bytes
                // inline (below) rather than a BUSY and a second round trip.
                Err(NotStaged::Busy) => {
                    tier.metrics
                        .backpressure
                        .with_label_values(&["restore_staging"])
                        .inc();
                }
                Err(NotStaged::Small) => {}
            }
        }
    }
    let bytes = tier.read_verified(&route)?;
    offer_promotion(tier, id, &route);
    Ok(inline_reply(reply, bytes))
}

/// A remote restore of a backing on a storage owner's device through the OWNER's staging
/// region (`super::owner_staged`): the owner reads and verifies the payload into its region
/// and the reader pulls it from the owner. `None`: not an owner device, no region on the
/// owner (or too small for it), or a payload below `staging_min_bytes`; the caller goes on
/// (inline). A saturated owner region is BUSY for a payload too large to carry inline (the
/// reader retries), otherwise counted and answered inline.
fn stage_on_owner(
    state: &ColdContext,
    tier: &ColdTier,
    route: &ObjectRoute,
) -> Result<Option<crescent_wire::store::StagedPayload>, ColdError> {
    let Some(backing) = tier.owner_stageable(route)? else {
        return Ok(None);
    };
    let length = backing.length;
    let _span = tracing::debug_span!("cold.stage_on_owner", length).entered();
    let started = Instant::now();
    let staged = backing
        .owner
        .stage(backing.locator, length, backing.checksum, state.now_ms());
    match staged {
        Ok(staged) => {
            tier.metrics.restore_finished(started.elapsed(), Ok(()));
            Ok(Some(staged))
        }
        Err(ColdError::Backpressure { queue, reason }) => {
            tier.metrics
                .backpressure
                .with_label_values(&["owner_restore_staging"])
                .inc();
            if length <= super::owner_staged::MAX_OWNER_INLINE_READ {
                return Ok(None);
            }
            Err(ColdError::Backpressure { queue, reason })
        }
        Err(e) => {
            tier.metrics.restore_finished(started.elapsed(), Err(&e));
            Err(e)
        }
    }
}

/// The IO of the readable device holding the route's materialized backing: what the
/// staging pool reads through. `None` (no such device, or not readable): the inline path
/// below reports why.
fn staging_io(tier: &ColdTier, route: &ObjectRoute) -> Option<Arc<dyn ColdIo>> {
    tier.readable_io(route.materialized()?.device_id).ok()
}

/// The route of `id` when it is cold-only.
pub(crate) fn cold_only_route(
    state: &ColdContext,
    id: &ObjectId,
) -> Result<Option<ObjectRoute>, ColdError> {
    Ok(state
        .directory
        .route(id)
        .map_err(|e| ColdError::InvalidArgument {
            field: "id",
            reason: e.to_string(),
        })?
        .filter(ObjectRoute::is_cold_only))
}

/// The reply carrying a verified payload inline (moved out when no one else holds it).
pub(crate) fn inline_reply(reply: GetReply, bytes: Arc<Vec<u8>>) -> GetReply {
    GetReply {
        inline: Some(Arc::try_unwrap(bytes).unwrap_or_else(|shared| shared.as_ref().clone())),
        replicas: Vec::new(),
        cold_backing: None,
        staged: None,
        ..reply
    }
}

/// The reply naming a staged payload (crescentd's pool or the device owner's region).
fn staged_reply(reply: GetReply, staged: crescent_wire::store::StagedPayload) -> GetReply {
    GetReply {
        staged: Some(staged),
        inline: None,
        replicas: Vec::new(),
        cold_backing: None,
        ..reply
    }
}

/// Offers the background re-promotion of a restored object, unless promotion is off or the
/// object is a managed weight payload: its residency is its revision's, moved only by
/// migrations, so a read of a COLD or MIXED revision changes nothing in memory. (The weights
/// domain holds only manifests, kept in memory, and payloads.)
pub(crate) fn offer_promotion(tier: &ColdTier, id: &ObjectId, route: &ObjectRoute) {
    let managed_payload = id.domain.as_deref() == Some(crate::weights::WEIGHTS_DOMAIN)
        && !id.key.ends_with("/manifest");
    if !tier.restore.promote_on_read || managed_payload {
        return;
    }
    tier.promotions.offer_counted(
        PromotionJob {
            id: id.clone(),
            route: route.clone(),
        },
        &tier.metrics,
    );
}

/// Re-promotion: a fresh slot (the embedded segment first, else any mounted owner's segment,
/// written over the transport), the bytes written into it, then the promote CAS; the slot is
/// given back on any failure. Best effort for reads (run by the background promotion
/// worker); the weight migrations (`super::weights`) require it.
pub(crate) fn promote(
    state: &ColdContext,
    id: &ObjectId,
    route: &ObjectRoute,
    bytes: &[u8],
) -> Result<(), ColdError> {
    let _span = tracing::debug_span!("cold.promote", length = route.length).entered();
    let embedded = state.embedded.memory().map(|(segment_id, _)| segment_id);
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
