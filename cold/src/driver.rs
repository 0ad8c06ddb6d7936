//! Drives cold operations and reclaim records through their state machines, resuming from
//! whatever state the journal holds: the offload worker, the reclaim cleaner and restart
//! reconciliation all use these functions. The server supplies three capabilities: the
//! `ColdDevice` actor ([`DeviceLedger`]), the route authority ([`RouteAuthority`], its
//! ObjectDirectory) and hot reads ([`HotSource`]).
//!
//! Each step first records intent in the ledger, then does the IO, then records the outcome,
//! so a crash between any two steps leaves a state the next run resumes from idempotently.

use std::collections::{BTreeMap, BTreeSet};

use sha2::{Digest, Sha256};

use crate::device::{
    ColdDevice, ColdDeviceCommand, ColdOpState, ColdOperation, ColdRoute, ReclaimState,
    ReleaseCause,
};
use crate::error::ColdError;
use crate::ids::{ColdOpId, ReclaimId};
use crate::local_dir::locator_for;
use crate::route::{
    check_cleanup, check_materialize, ActiveColdBacking, MaterializeCheck, ObjectRoute,
    RouteExpectation,
};

/// The `ColdDevice` actor of one device: decides, journals and applies a command.
pub trait DeviceLedger {
    fn device(&self) -> &ColdDevice;
    fn execute(&mut self, cmd: ColdDeviceCommand) -> Result<(), ColdError>;
}

/// The authoritative routes (the store's ObjectDirectory).
pub trait RouteAuthority {
    /// Exact lookup of the current route of `object_key`.
    fn lookup(&self, object_key: &str) -> Option<ObjectRoute>;
    /// Installs `new` if the current route still matches `expected`; `RouteConflict` if not.
    fn compare_and_set(
        &mut self,
        object_key: &str,
        expected: &RouteExpectation,
        new: ObjectRoute,
    ) -> Result<(), ColdError>;
}

pub use crate::io::{ColdIo, HotSource};

/// How an offload ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffloadOutcome {
    /// UsageCommitted: the route's backing is materialized.
    Materialized,
    /// Released before its payload was written (content replaced or cancelled).
    Cancelled,
    /// Its payload was orphaned and reclaimed.
    Reclaimed,
}

/// How a reclaim ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReclaimOutcome {
    Released,
    /// The route still references the locator: nothing deleted.
    Cancelled,
}

/// Most materialization CAS rebases before the attempt fails (retryable).
const MAX_REBASES: usize = 16;

/// The reclaim id of an orphaned payload: derived from its operation, so a repeated plan
/// after a crash is the same record.
pub fn orphan_reclaim_id(op_id: ColdOpId) -> ReclaimId {
    let mut h = Sha256::new();
    h.update(b"crescent-cold orphan reclaim v1");
    h.update(op_id.0.as_bytes());
    let digest: [u8; 32] = h.finalize().into();
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    ReclaimId(uuid::Builder::from_random_bytes(bytes).into_uuid())
}

fn op_state(ledger: &dyn DeviceLedger, op_id: &ColdOpId) -> Result<ColdOpState, ColdError> {
    ledger
        .device()
        .operation(op_id)
        .map(|op| op.state)
        .ok_or_else(|| ColdError::NotFound {
            what: "cold operation",
            id: op_id.to_string(),
        })
}

fn device_id(ledger: &dyn DeviceLedger) -> Result<String, ColdError> {
    ledger
        .device()
        .device_id()
        .map(str::to_string)
        .ok_or_else(|| ColdError::DeviceNotEligible {
            device_id: String::new(),
            reason: "not configured".into(),
        })
}

/// The route still carries this operation as its pending offload.
fn pending_for(route: Option<&ObjectRoute>, device_id: &str, op_id: ColdOpId) -> bool {
    matches!(route.and_then(|r| r.cold.as_ref()),
        Some(c @ ActiveColdBacking::PendingOffload { .. }) if c.cold_op() == op_id && c.device_id() == device_id)
}

/// Runs (or resumes) the offload of `op_id` to its end.
pub fn run_offload(
    ledger: &mut dyn DeviceLedger,
    io: &dyn ColdIo,
    routes: &mut dyn RouteAuthority,
    hot: &dyn HotSource,
    op_id: ColdOpId,
) -> Result<OffloadOutcome, ColdError> {
    let _span = tracing::debug_span!("cold_offload", op = %op_id).entered();
    let device = device_id(ledger)?;
    let mut rebases = 0;
    loop {
        let op = ledger
            .device()
            .operation(&op_id)
            .cloned()
            .ok_or_else(|| ColdError::NotFound {
                what: "cold operation",
                id: op_id.to_string(),
            })?;
        match op.state {
            ColdOpState::Planned | ColdOpState::Reserved => {
                let route = routes.lookup(&op.object_key);
                if !pending_for(route.as_ref(), &device, op_id) {
                    // Replaced before its payload was recorded: a file of an interrupted write
                    // may exist; delete it before the release so a crash leaves no leak.
                    io.delete(&locator_for(op_id))?;
                    ledger.execute(ColdDeviceCommand::Cancel {
                        op_id,
                        cause: ReleaseCause::Replaced,
                    })?;
                    continue;
                }
                if op.state == ColdOpState::Planned {
                    ledger.execute(ColdDeviceCommand::Reserve { op_id })?;
                    continue;
                }
                let route = route.expect("pending_for found a route");
                let receipt = io.write_offload(op_id, &route, hot)?;
                ledger.execute(ColdDeviceCommand::RecordPayloadWritten {
                    op_id,
                    locator: receipt.locator,
                    length: receipt.length,
                    checksum: receipt.checksum,
                    fingerprint: receipt.fingerprint,
                })?;
            }
            ColdOpState::PayloadWritten => {
                materialize(ledger, &mut *routes, &device, &op, &mut rebases)?
            }
            ColdOpState::RouteCommitted => {
                ledger.execute(ColdDeviceCommand::CommitUsage { op_id })?
            }
            ColdOpState::UsageCommitted => return Ok(OffloadOutcome::Materialized),
            ColdOpState::Reclaiming => {
                let reclaim_id = op.reclaim.expect("Reclaiming has a reclaim record");
                run_reclaim(ledger, io, &*routes, reclaim_id)?;
            }
            ColdOpState::Released => {
                return Ok(match op.release_cause {
                    Some(ReleaseCause::Reclaimed) => OffloadOutcome::Reclaimed,
                    _ => OffloadOutcome::Cancelled,
                })
            }
        }
    }
}

/// A written payload: materializes it in the object's route (rebasing a lost race up to
/// [`MAX_REBASES`] times), records an already materialized route, or plans the reclaim of a
/// payload whose route has moved on.
fn materialize(
    ledger: &mut dyn DeviceLedger,
    routes: &mut dyn RouteAuthority,
    device: &str,
    op: &ColdOperation,
    rebases: &mut usize,
) -> Result<(), ColdError> {
    let op_id = op.op_id;
    let payload = op
        .payload
        .as_ref()
        .expect("PayloadWritten records the payload");
    let route = routes.lookup(&op.object_key);
    match check_materialize(route.as_ref(), device, op_id) {
        MaterializeCheck::Pending(expected) => {
            let route = route.expect("pending route");
            let next = route.materialize(
                &expected,
                op_id,
                &payload.locator,
                payload.length,
                payload.checksum,
            )?;
            let version = next.version;
            match routes.compare_and_set(&op.object_key, &expected, next) {
                Ok(()) => ledger.execute(ColdDeviceCommand::CommitRoute {
                    op_id,
                    route_version: version,
                })?,
                Err(ColdError::RouteConflict { .. }) if *rebases < MAX_REBASES => *rebases += 1,
                Err(e) => return Err(e),
            }
        }
        MaterializeCheck::AlreadyMaterialized { version } => {
            ledger.execute(ColdDeviceCommand::CommitRoute {
                op_id,
                route_version: version,
            })?
        }
        MaterializeCheck::Obsolete => {
            let reclaim_id = orphan_reclaim_id(op_id);
            ledger.execute(ColdDeviceCommand::PlanReclaim { reclaim_id, op_id })?;
        }
    }
    Ok(())
}

/// Runs (or resumes) a reclaim to its end. Must not run while the overwrite/delete CAS the
/// reclaim was planned for is still undecided (its caller runs it after that CAS, or restart
/// reconciliation when none is in flight): the exact lookup is what proves obsolescence.
pub fn run_reclaim(
    ledger: &mut dyn DeviceLedger,
    io: &dyn ColdIo,
    routes: &dyn RouteAuthority,
    reclaim_id: ReclaimId,
) -> Result<ReclaimOutcome, ColdError> {
    let _span = tracing::debug_span!("cold_reclaim", reclaim = %reclaim_id).entered();
    let device = device_id(ledger)?;
    loop {
        let r = ledger
            .device()
            .reclaim(&reclaim_id)
            .cloned()
            .ok_or_else(|| ColdError::NotFound {
                what: "reclaim",
                id: reclaim_id.to_string(),
            })?;
        match r.state {
            ReclaimState::Planned => {
                let route = routes.lookup(&r.object_key);
                if check_cleanup(route.as_ref(), &r, &device).is_err() {
                    ledger.execute(ColdDeviceCommand::CancelReclaim { reclaim_id })?;
                    continue;
                }
                io.delete(&r.locator)?;
                ledger.execute(ColdDeviceCommand::RecordBackendDeleted { reclaim_id })?;
            }
            ReclaimState::BackendDeleted => ledger.execute(ColdDeviceCommand::ReleaseUsage {
                reclaim_id,
                op_id: r.op_id,
            })?,
            ReclaimState::UsageReleased => return Ok(ReclaimOutcome::Released),
            ReclaimState::Cancelled => return Ok(ReclaimOutcome::Cancelled),
        }
    }
}

/// Before an overwrite or delete route CAS: plans the reclaim of the route's materialized
/// backing on this device (a pending one needs none: its worker finds it obsolete). Returns
/// the reclaim to run after the CAS succeeds, or to cancel if it fails.
pub fn plan_obsolete_backing(
    ledger: &mut dyn DeviceLedger,
    route: &ObjectRoute,
    reclaim_id: ReclaimId,
) -> Result<Option<ReclaimId>, ColdError> {
    match route.materialized() {
        Some(m) if ledger.device().device_id() == Some(m.device_id) => {
            let cold_op = &m.cold_op;
            let state = op_state(ledger, cold_op)?;
            if state == ColdOpState::PayloadWritten {
                // The CAS materialized it but the ledger has not caught up: record that first.
                ledger.execute(ColdDeviceCommand::CommitRoute {
                    op_id: *cold_op,
                    route_version: route.version,
                })?;
            }
            ledger.execute(ColdDeviceCommand::PlanReclaim {
                reclaim_id,
                op_id: *cold_op,
            })?;
            Ok(Some(reclaim_id))
        }
        _ => Ok(None),
    }
}

/// Removes one hot replica under the last-hot rule (the store frees the allocator bytes only
/// after this returns `Ok`).
pub fn evict_hot(
    ledger: &dyn DeviceLedger,
    routes: &mut dyn RouteAuthority,
    object_key: &str,
    replica: &crate::route::HotReplica,
) -> Result<ObjectRoute, ColdError> {
    let route = routes
        .lookup(object_key)
        .ok_or_else(|| ColdError::NotFound {
            what: "object",
            id: object_key.to_string(),
        })?;
    let device = ledger.device();
    let (state, readable) = match &route.cold {
        Some(c) if device.device_id() == Some(c.device_id()) => (
            device.operation(&c.cold_op()).map(|op| op.state),
            device.readable(),
        ),
        _ => (None, false),
    };
    let expected = route.expectation();
    let next = route.evict_hot(&expected, replica, state, readable)?;
    routes.compare_and_set(object_key, &expected, next.clone())?;
    Ok(next)
}

/// Reads the materialized backing of `route` and verifies it (the local restore).
pub fn read_cold(io: &dyn ColdIo, route: &ObjectRoute) -> Result<Vec<u8>, ColdError> {
    match route.materialized() {
        Some(m) if m.device_id == io.device_id() => io.read(m.locator, m.length, m.checksum),
        _ => Err(ColdError::NotFound {
            what: "materialized cold backing of",
            id: route.key.clone(),
        }),
    }
}

/// What restart reconciliation did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReconcileReport {
    /// Planned/Reserved operations whose pending offload is still authoritative: to enqueue.
    pub to_offload: Vec<ColdOpId>,
    pub materialized: usize,
    pub cancelled: usize,
    pub reclaimed: usize,
    pub reclaims_cancelled: usize,
    pub orphan_files_deleted: usize,
    pub stale_temps_removed: usize,
    /// Operations with a committed route whose payload file is gone (data loss to report).
    pub missing_payloads: Vec<ColdOpId>,
}

/// Restart reconciliation of one device: resumes every non-terminal operation and reclaim
/// from its journaled state, then deletes payload files no operation holds. Run before the
/// offload worker starts on the device and with no overwrite/delete CAS in flight.
pub fn reconcile(
    ledger: &mut dyn DeviceLedger,
    io: &dyn ColdIo,
    routes: &mut dyn RouteAuthority,
    hot: &dyn HotSource,
    page: usize,
) -> Result<ReconcileReport, ColdError> {
    let _span = tracing::info_span!("cold_reconcile", device = %io.device_id()).entered();
    let device = device_id(ledger)?;
    let mut report = ReconcileReport {
        stale_temps_removed: io.remove_stale_temps()?,
        ..ReconcileReport::default()
    };
    let page = page.max(1);
    let mut after = None;
    loop {
        let batch: Vec<(ColdOpId, ColdOpState, String)> = ledger
            .device()
            .active_operations(after, page)
            .into_iter()
            .map(|op| (op.op_id, op.state, op.object_key.clone()))
            .collect();
        let Some(last) = batch.last() else { break };
        after = Some(last.0);
        for (op_id, state, key) in batch {
            let waiting = matches!(state, ColdOpState::Planned | ColdOpState::Reserved)
                && pending_for(routes.lookup(&key).as_ref(), &device, op_id);
            if waiting {
                report.to_offload.push(op_id);
                continue;
            }
            match run_offload(ledger, io, routes, hot, op_id)? {
                OffloadOutcome::Materialized => report.materialized += 1,
                OffloadOutcome::Cancelled => report.cancelled += 1,
                OffloadOutcome::Reclaimed => report.reclaimed += 1,
            }
        }
    }
    let mut after = None;
    loop {
        let batch: Vec<ReclaimId> = ledger
            .device()
            .active_reclaims(after, page)
            .iter()
            .map(|r| r.reclaim_id)
            .collect();
        let Some(last) = batch.last() else { break };
        after = Some(*last);
        for reclaim_id in batch {
            match run_reclaim(ledger, io, &*routes, reclaim_id)? {
                ReclaimOutcome::Released => report.reclaimed += 1,
                ReclaimOutcome::Cancelled => report.reclaims_cancelled += 1,
            }
        }
    }
    let scan = io.scan()?;
    let on_disk: BTreeSet<ColdOpId> = scan.payloads.iter().map(|p| p.op_id).collect();
    for file in &scan.payloads {
        let keep = ledger
            .device()
            .operation(&file.op_id)
            .is_some_and(|op| !op.state.is_terminal() && (op.state != ColdOpState::Planned));
        if !keep && io.delete(&file.locator)? {
            report.orphan_files_deleted += 1;
        }
    }
    for route in ledger.device().cold_routes() {
        if !on_disk.contains(&route.op_id) {
            report.missing_payloads.push(route.op_id);
        }
    }
    Ok(report)
}

/// The cold-only routes to serve after a failover or restart, from the devices' journaled
/// cold routes alone: per object, the route with the highest content operation.
pub fn rebuild_cold_routes<'a>(
    devices: impl IntoIterator<Item = &'a ColdDevice>,
) -> BTreeMap<String, ColdRoute> {
    let mut out: BTreeMap<String, ColdRoute> = BTreeMap::new();
    for device in devices {
        for route in device.cold_routes() {
            match out.get(&route.object_key) {
                Some(existing) if existing.content_op >= route.content_op => {}
                _ => {
                    out.insert(route.object_key.clone(), route);
                }
            }
        }
    }
    out
}
