//! Cold operations on one object: offload now, evict the hot replicas, stat, and the reclaim
//! around an overwrite or delete. Synchronous: callers run them on a blocking thread (HTTP) or
//! an RPC thread, never on the actors' arbiter.

use crescent_cold::device::ColdDeviceCommand;
use crescent_cold::driver::{self, DeviceLedger, OffloadOutcome, ReclaimOutcome};
use crescent_cold::io::ColdIo;
use crescent_cold::route::{ActiveColdBacking, ObjectRoute};
use crescent_cold::{ColdError, ColdOpId, ReclaimId};
use crescent_store::{cold_object_key, DirectoryRoutes, StoreError};
use crescent_wire::cold::{ColdBackingInfo, HotReplicaInfo, ObjectStat};
use crescent_wire::store::{ObjectId, RemovePrefixReply, RemovePrefixRequest};

use super::context::ColdContext;
use super::hot::{NodeHot, COLD_OWNER};
use super::{mark_evictable, ColdTier};

fn store_err(e: crescent_store::StoreError) -> ColdError {
    ColdError::InvalidArgument {
        field: "id",
        reason: e.to_string(),
    }
}

fn route_of(state: &ColdContext, id: &ObjectId) -> Result<ObjectRoute, ColdError> {
    state
        .directory
        .route(id)
        .map_err(store_err)?
        .ok_or_else(|| ColdError::NotFound {
            what: "object",
            id: id.key.clone(),
        })
}

impl ColdTier {
    /// `crescent stat KEY`: the route's replicas and cold backing (with its operation state).
    pub fn stat(&self, state: &ColdContext, id: &ObjectId) -> Result<ObjectStat, ColdError> {
        let route = route_of(state, id)?;
        let op_state = route.cold.as_ref().and_then(|c| {
            self.device(c.device_id()).ok()?.read_ledger(|device| {
                device
                    .operation(&c.cold_op())
                    .map(|op| op.state.as_str().to_string())
            })
        });
        Ok(stat_of(&route, op_state))
    }

    /// `crescent offload KEY`: plans an offload of the current content (intent first), attaches
    /// it to the route as pending, and runs it to its end now. An object already backed by a
    /// materialized copy answers as it is; a pending one is resumed.
    pub fn offload_now(&self, state: &ColdContext, id: &ObjectId) -> Result<ObjectStat, ColdError> {
        let _span = tracing::info_span!("cold.offload", key = %id.key).entered();
        let new_op = ColdOpId::new(uuid::Uuid::new_v4());
        match self.offload(state, id, new_op, true)? {
            OffloadOutcome::Materialized => self.stat(state, id),
            OffloadOutcome::Cancelled | OffloadOutcome::Reclaimed => {
                Err(ColdError::RouteConflict {
                    key: cold_object_key(id),
                    reason: "the content changed while it was offloaded".into(),
                })
            }
        }
    }

    /// Offloads the current content of `id` to its end: resumes the route's pending offload,
    /// or plans `new_op` (intent first) and attaches it; a materialized object is left alone.
    /// With `give_up`, a failure before the payload is recorded cancels the operation (the
    /// worker instead retries and gives up only after its last attempt).
    pub(crate) fn offload(
        &self,
        state: &ColdContext,
        id: &ObjectId,
        new_op: ColdOpId,
        give_up: bool,
    ) -> Result<OffloadOutcome, ColdError> {
        let object_key = cold_object_key(id);
        let hot = NodeHot { state };
        // A backing already names its device; a new offload is placed over the summaries
        // (checked again under the chosen device's lock by `check_placement`).
        let route = route_of(state, id)?;
        let device_id = match &route.cold {
            Some(ActiveColdBacking::Materialized { .. }) => {
                return Ok(OffloadOutcome::Materialized)
            }
            Some(c) => c.device_id().to_string(),
            None => self.place(route.length)?,
        };
        self.with_ledger(
            &device_id,
            |ledger, io| -> Result<OffloadOutcome, ColdError> {
                let route = route_of(state, id)?;
                let op_id = match &route.cold {
                    Some(ActiveColdBacking::Materialized { .. }) => {
                        return Ok(OffloadOutcome::Materialized)
                    }
                    Some(c) if c.device_id() != device_id => {
                        return Err(ColdError::RouteConflict {
                            key: object_key.clone(),
                            reason: format!(
                                "an offload to device {:?} was attached meanwhile",
                                c.device_id()
                            ),
                        })
                    }
                    Some(ActiveColdBacking::PendingOffload { cold_op, .. }) => *cold_op,
                    None => {
                        if state.directory.has_checksum(id).map_err(store_err)? != Some(true) {
                            return Err(ColdError::InvalidArgument {
                                field: "id",
                                reason: format!(
                                    "{:?} was stored without a checksum; a cold copy needs one \
                                 (restores are verified against it)",
                                    id.key
                                ),
                            });
                        }
                        ledger.device().check_placement(route.length)?;
                        let op_id = new_op;
                        ledger.execute(ColdDeviceCommand::PlanOffload {
                            op_id,
                            object_key: object_key.clone(),
                            content_op: route.content_op,
                            expected_length: route.length,
                            expected_checksum: route.checksum,
                        })?;
                        let expected = route.expectation();
                        let next = route.attach_pending(&expected, op_id, COLD_OWNER, &device_id);
                        let attached = next.and_then(|next| {
                            state.directory.compare_and_set_route(
                                id,
                                &expected,
                                next,
                                state.now_ms(),
                            )
                        });
                        if let Err(e) = attached {
                            // The route moved on: release the planned operation (nothing written).
                            ledger.execute(ColdDeviceCommand::Cancel {
                                op_id,
                                cause: crescent_cold::device::ReleaseCause::Cancelled,
                            })?;
                            return Err(e);
                        }
                        op_id
                    }
                };
                let mut routes = DirectoryRoutes {
                    directory: &state.directory,
                    now_ms: state.now_ms(),
                };
                let r = driver::run_offload(ledger, io, &mut routes, &hot, op_id);
                if let (Err(e), true) = (&r, give_up) {
                    self.give_up_pending(state, ledger, io, id, op_id, e);
                }
                let outcome = r?;
                if outcome == OffloadOutcome::Materialized {
                    if let Some(op) = ledger.device().operation(&op_id) {
                        self.metrics.materialized.inc();
                        self.metrics.materialized_bytes.inc_by(op.expected_length);
                    }
                }
                mark_evictable(state, ledger);
                Ok(outcome)
            },
        )?
    }

    /// The worker's last attempt failed: cancel the operation and drop its pending backing.
    pub(crate) fn give_up(
        &self,
        state: &ColdContext,
        id: &ObjectId,
        op_id: ColdOpId,
        e: &ColdError,
    ) {
        let pending_on = state.directory.route(id).ok().flatten().and_then(|r| {
            r.cold
                .filter(|c| c.cold_op() == op_id)
                .map(|c| c.device_id().to_string())
        });
        let device = match pending_on {
            Some(device_id) => self.device(&device_id).ok(),
            None => self.device_of_op(&op_id),
        };
        if let Some(device) = device {
            device.with_ledger(|ledger, io| self.give_up_pending(state, ledger, io, id, op_id, e));
            self.observe_devices();
        }
    }

    /// An offload that failed before its payload was recorded: cancel it and drop the pending
    /// backing, so the object can be offloaded again (the worker's `GiveUp`).
    pub(crate) fn give_up_pending(
        &self,
        state: &ColdContext,
        ledger: &mut dyn DeviceLedger,
        io: &dyn ColdIo,
        id: &ObjectId,
        op_id: ColdOpId,
        error: &ColdError,
    ) {
        let Some(op) = ledger.device().operation(&op_id) else {
            return;
        };
        if !matches!(
            op.state,
            crescent_cold::device::ColdOpState::Planned
                | crescent_cold::device::ColdOpState::Reserved
        ) {
            return;
        }
        tracing::warn!(key = %id.key, op = %op_id, %error, "offload failed; cancelling it");
        self.metrics.offload_given_up.inc();
        if let Ok(Some(route)) = state.directory.route(id) {
            let expected = route.expectation();
            if let Ok(next) = route.drop_pending(&expected) {
                let _ = state
                    .directory
                    .compare_and_set_route(id, &expected, next, state.now_ms());
            }
        }
        let _ = io.delete(&crescent_cold::local_dir::locator_for(op_id));
        let _ = ledger.execute(ColdDeviceCommand::Cancel {
            op_id,
            cause: crescent_cold::device::ReleaseCause::Cancelled,
        });
    }

    /// `crescent evict KEY --hot`: drops every hot replica, each a route CAS under the last-hot
    /// rule (refused unless the backing is materialized, UsageCommitted and readable); the
    /// allocator bytes are freed by the directory after each CAS.
    pub fn evict_hot(&self, state: &ColdContext, id: &ObjectId) -> Result<ObjectStat, ColdError> {
        let _span = tracing::info_span!("cold.evict_hot", key = %id.key).entered();
        let object_key = cold_object_key(id);
        // The last-hot rule reads the backing's device; without a backing any device's
        // ledger gives the same answer (only non-last replicas may go).
        let route = route_of(state, id)?;
        let device_id = match &route.cold {
            Some(c) => c.device_id().to_string(),
            None => self.device_ids().into_iter().next().unwrap_or_default(),
        };
        self.with_ledger(&device_id, |ledger, _| -> Result<(), ColdError> {
            let route = route_of(state, id)?;
            let mut routes = DirectoryRoutes {
                directory: &state.directory,
                now_ms: state.now_ms(),
            };
            for replica in &route.replicas {
                driver::evict_hot(ledger, &mut routes, &object_key, replica)?;
            }
            Ok(())
        })??;
        self.stat(state, id)
    }

    /// Runs `mutate` (an overwrite's put_end or a delete) with the reclaim of the route's
    /// materialized backing planned before it and run after it (cancelled if it failed), so
    /// the obsolete payload's usage is released exactly once and a locator the route still
    /// references is never deleted. The directory refuses (`ColdBacked`) to drop a
    /// materialized copy whose reclaim is not planned, so a copy materialized between the
    /// lookup and the mutation is caught and the mutation retried with its reclaim.
    pub fn with_reclaim<T>(
        &self,
        state: &ColdContext,
        id: &ObjectId,
        mut mutate: impl FnMut() -> Result<T, StoreError>,
    ) -> Result<Result<T, StoreError>, ColdError> {
        for _ in 0..MAX_RECLAIM_RETRIES {
            let route = state.directory.route(id).map_err(store_err)?;
            let Some(route) =
                route.filter(|r| r.cold.as_ref().is_some_and(|c| c.is_materialized()))
            else {
                match mutate() {
                    Err(StoreError::ColdBacked { .. }) => continue,
                    other => return Ok(other),
                }
            };
            let device_id = route
                .cold
                .as_ref()
                .map(|c| c.device_id().to_string())
                .unwrap_or_default();
            return self.with_ledger(&device_id, |ledger, io| {
                self.reclaim_around(state, ledger, io, id, &route, &mut mutate)
            })?;
        }
        Ok(mutate())
    }

    fn reclaim_around<T>(
        &self,
        state: &ColdContext,
        ledger: &mut dyn DeviceLedger,
        io: &dyn ColdIo,
        id: &ObjectId,
        route: &ObjectRoute,
        mutate: &mut dyn FnMut() -> Result<T, StoreError>,
    ) -> Result<Result<T, StoreError>, ColdError> {
        let reclaim_id = ReclaimId::new(uuid::Uuid::new_v4());
        let Some(reclaim_id) = driver::plan_obsolete_backing(ledger, route, reclaim_id)? else {
            return Ok(mutate());
        };
        let cold_op = route.cold.as_ref().map(|c| c.cold_op());
        if let Some(op) = cold_op {
            let _ = state.directory.allow_cold_drop(id, op, true);
        }
        let result = mutate();
        if let (Err(_), Some(op)) = (&result, cold_op) {
            let _ = state.directory.allow_cold_drop(id, op, false);
        }
        let routes = DirectoryRoutes {
            directory: &state.directory,
            now_ms: state.now_ms(),
        };
        // After a failed mutation the route still references the locator: the reclaim's
        // exact lookup sees it and cancels (restoring the journaled route).
        match driver::run_reclaim(ledger, io, &routes, reclaim_id) {
            Ok(ReclaimOutcome::Released) => {
                self.metrics.reclaims.with_label_values(&["released"]).inc()
            }
            Ok(ReclaimOutcome::Cancelled) => self
                .metrics
                .reclaims
                .with_label_values(&["cancelled"])
                .inc(),
            Err(e) => {
                // Left Planned/BackendDeleted in the journal: reconciliation resumes it.
                self.metrics.reclaims.with_label_values(&["failed"]).inc();
                tracing::warn!(key = %id.key, reclaim = %reclaim_id, error = %e,
                    "reclaim did not finish; reconciliation resumes it");
            }
        }
        Ok(result)
    }
}

/// `remove_prefix` with the cold tier: the directory removes what it can at once; the objects
/// it skipped only for their cold backing are then removed one by one, each with its reclaim
/// planned before and run after (like a single remove), and counted as removed.
pub fn remove_prefix(
    state: &ColdContext,
    req: &RemovePrefixRequest,
    now_ms: i64,
) -> Result<RemovePrefixReply, StoreError> {
    let _span = tracing::debug_span!("cold.remove_prefix").entered();
    let mut reply = state.directory.remove_prefix(req, now_ms)?;
    let Some(tier) = state.cold.get() else {
        return Ok(reply);
    };
    for id in state.directory.cold_backed_under_prefix(req, now_ms)? {
        let removed = tier.with_reclaim(state, &id, || {
            state.directory.remove(&id, false, state.now_ms())
        });
        match removed {
            Ok(Ok(())) => {
                reply.removed += 1;
                reply.skipped = reply.skipped.saturating_sub(1);
            }
            // Leased or re-put meanwhile: it stays, counted as skipped.
            Ok(Err(e)) => tracing::debug!(key = %id.key, error = %e, "cold-backed object kept"),
            Err(e) => tracing::warn!(key = %id.key, error = %e, "cold-backed object not removed"),
        }
    }
    Ok(reply)
}

/// Rounds of "a copy was materialized meanwhile" before an overwrite/delete gives up (BUSY).
const MAX_RECLAIM_RETRIES: usize = 4;

fn stat_of(route: &ObjectRoute, op_state: Option<String>) -> ObjectStat {
    ObjectStat {
        key: route.key.clone(),
        size: route.length,
        checksum: route.checksum,
        route_version: route.version,
        content_op: route.content_op,
        replicas: route
            .replicas
            .iter()
            .map(|r| HotReplicaInfo {
                segment_id: r.segment_id.clone(),
                offset: r.offset,
            })
            .collect(),
        cold: route.cold.as_ref().map(|c| ColdBackingInfo {
            state: match c {
                ActiveColdBacking::PendingOffload { .. } => "pending_offload",
                ActiveColdBacking::Materialized { .. } => "materialized",
            }
            .to_string(),
            device_id: c.device_id().to_string(),
            op_id: c.cold_op().to_string(),
            op_state,
            locator: c.locator().map(str::to_string),
            length: route.length,
            checksum: route.checksum,
        }),
    }
}
