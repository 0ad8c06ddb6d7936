//! Devices on storage owners (`crescent owner --cold-device ID=DIR`): registration and the
//! owner's long poll. crescentd journals the device (`Configure`, then `AssignOwner` with the
//! owner's id and endpoint), so it survives a restart or failover of crescentd as an owner
//! device waiting for its owner; it drives the cold state machines exactly as for its own
//! devices, and the owner performs the IO through [`OwnerDeviceIo`]. When the owner
//! registers (first start, restart, or after a crescentd restart), the device is reconciled:
//! its pending operations resume from their journaled states.

use std::sync::Arc;

use crescent_cold::device::{DeviceHealth, DeviceKind};
use crescent_cold::driver::DeviceLedger;
use crescent_cold::{ColdDeviceCommand, ColdError};
use crescent_transport::TransferOp;
use crescent_wire::cold_owner::{
    OwnerDevicePollReply, OwnerDevicePollRequest, RegisterOwnerDeviceReply,
    RegisterOwnerDeviceRequest, OWNER_DEVICE_WIRE_VERSION,
};

use crescent_wire::segments::TransportKind;
use crescent_wire::store::ReplicaDesc;

use super::context::ColdContext;
use super::devices::TierDevice;
use super::ledger::{from_runtime, ActorLedger};
use super::owner_io::{OwnerDeviceIo, POLL_WAIT};
use super::{mark_evictable, reconcile_device, ColdTier};

fn check_version(version: u32) -> Result<(), ColdError> {
    if version != OWNER_DEVICE_WIRE_VERSION {
        return Err(ColdError::InvalidArgument {
            field: "version",
            reason: format!(
                "owner device wire version {version} is not supported (this server speaks \
                 {OWNER_DEVICE_WIRE_VERSION})"
            ),
        });
    }
    Ok(())
}

/// A journaled owner device waits for its owner: it is not healthy until the owner
/// registered and the device reconciled (so placement leaves it alone meanwhile).
/// The IO of `device` when it is a device of storage owner `owner_id` (refused otherwise:
/// one of crescentd's own devices, or another owner's).
fn owner_io_of<'d>(
    device: &'d TierDevice,
    device_id: &str,
    owner_id: &str,
) -> Result<&'d Arc<OwnerDeviceIo>, ColdError> {
    let conflict = |reason: String| ColdError::Conflict {
        what: "device",
        id: device_id.to_string(),
        reason,
    };
    let io = device
        .owner_io
        .as_ref()
        .ok_or_else(|| conflict("it is one of crescentd's own devices".into()))?;
    if io.owner_id() != owner_id {
        return Err(conflict(format!(
            "its IO is performed by owner {:?}",
            io.owner_id()
        )));
    }
    Ok(io)
}

pub(crate) fn await_owner(device: &TierDevice) {
    device.with_ledger(|ledger, _| {
        if ledger.device().health() == DeviceHealth::Healthy {
            let cmd = ColdDeviceCommand::SetHealth {
                health: DeviceHealth::Degraded,
                reason: "waiting for its owner to register".into(),
            };
            if let Err(e) = ledger.execute(cmd) {
                tracing::warn!(device = %device.device_id, error = %e, "health not journaled");
            }
        }
    });
}

impl ColdTier {
    /// Some device's IO is performed by a storage owner. Such IO waits for the owner's next
    /// HTTP poll, so an HTTP route that may perform it (a remote restore, a reclaim's payload
    /// delete) must not run on an HTTP worker: it could block the very worker the poll
    /// needs, until the owner counts as silent (`api::objects::off_worker_if_owner_io`).
    pub fn has_owner_devices(&self) -> bool {
        self.devices
            .read()
            .expect("cold device set")
            .values()
            .any(|d| d.owner_io.is_some())
    }

    /// An owner registers its device (idempotent; every owner start does it). Synchronous
    /// (waits for the device actor): run on a blocking thread.
    pub fn register_owner_device(
        &self,
        state: &Arc<ColdContext>,
        req: &RegisterOwnerDeviceRequest,
    ) -> Result<RegisterOwnerDeviceReply, ColdError> {
        let _span = tracing::info_span!("cold.register_owner_device", device = %req.device_id,
            owner = %req.owner_id)
        .entered();
        check_version(req.version)?;
        let configure = ColdDeviceCommand::Configure {
            device_id: req.device_id.clone(),
            kind: DeviceKind::LocalDir,
            root: req.root.clone(),
            capacity: req.capacity,
            tags: req.tags.clone(),
            schedulable: req.schedulable,
        };
        configure.validate()?;
        let assign = ColdDeviceCommand::AssignOwner {
            owner_id: req.owner_id.clone(),
            endpoint: req.endpoint.clone(),
        };
        assign.validate()?;
        let device = match self.device(&req.device_id) {
            Ok(device) => {
                owner_io_of(&device, &req.device_id, &req.owner_id)?;
                device.with_ledger(|ledger, _| -> Result<(), ColdError> {
                    ledger.execute(configure)?;
                    ledger.execute(assign)
                })?;
                device
            }
            Err(_) => self.add_owner_device(req, configure, assign)?,
        };
        let io = device.owner_io.clone().expect("an owner device");
        let node = Arc::downgrade(state);
        io.read_sources.set(move |route| {
            node.upgrade()
                .map_or_else(Vec::new, |n| hot_sources(&n, route))
        });
        io.connect(req.incarnation);
        io.staging().set(&req.endpoint, req.staging.as_ref());
        self.observe_devices();
        // Reconcile with the owner's help once it polls (it does right after this reply).
        let me = state.clone();
        let spawned = std::thread::Builder::new()
            .name("crescent-cold-owner-reconcile".into())
            .spawn(move || settle_registered_device(&me, &device));
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "owner device reconciliation not started");
        }
        Ok(RegisterOwnerDeviceReply {
            version: OWNER_DEVICE_WIRE_VERSION,
            device_id: req.device_id.clone(),
            poll_wait_ms: POLL_WAIT.as_millis() as u64,
        })
    }

    fn add_owner_device(
        &self,
        req: &RegisterOwnerDeviceRequest,
        configure: ColdDeviceCommand,
        assign: ColdDeviceCommand,
    ) -> Result<Arc<TierDevice>, ColdError> {
        let mut set = self.devices.write().expect("cold device set");
        if let Some(device) = set.get(&req.device_id) {
            // Registered concurrently by another call of the same owner.
            return Ok(device.clone());
        }
        for cmd in [configure, assign] {
            futures::executor::block_on(self.registry.execute(&req.device_id, cmd))
                .map_err(from_runtime)?;
        }
        let ledger = ActorLedger::load(self.registry.clone(), &req.device_id)?;
        let io = Arc::new(OwnerDeviceIo::new(
            &req.device_id,
            &req.owner_id,
            self.metrics.owner_io.clone(),
        ));
        let device = Arc::new(TierDevice::for_owner(io, req.root.clone().into(), ledger));
        set.insert(req.device_id.clone(), device.clone());
        tracing::info!(device = %req.device_id, owner = %req.owner_id, root = %req.root,
            "owner cold device added");
        Ok(device)
    }

    /// One long poll of an owner for its device's IO work. Synchronous (waits up to
    /// [`POLL_WAIT`]): run on a blocking thread.
    pub fn poll_owner_device(
        &self,
        req: OwnerDevicePollRequest,
    ) -> Result<OwnerDevicePollReply, ColdError> {
        check_version(req.version)?;
        let device = self
            .device(&req.device_id)
            .map_err(|_| ColdError::NotFound {
                what: "owner cold device",
                id: req.device_id.clone(),
            })?;
        let io = owner_io_of(&device, &req.device_id, &req.owner_id)?.clone();
        let results = req.results.into_iter().map(|r| (r.id, r.outcome)).collect();
        let items = io.poll(req.incarnation, req.probe_error, results, POLL_WAIT)?;
        Ok(OwnerDevicePollReply {
            version: OWNER_DEVICE_WIRE_VERSION,
            items,
        })
    }
}

/// After a registration: reconcile the device through its owner, then declare it healthy
/// if the owner's probe agrees (the upkeep probes keep it so, or not, from then on).
fn settle_registered_device(state: &ColdContext, device: &TierDevice) {
    match reconcile_device(state, device) {
        Ok(report) => {
            tracing::info!(device = %device.device_id, ?report, "owner cold device reconciled")
        }
        Err(e) => {
            // Left as it is: the upkeep probe and the next registration try again.
            tracing::warn!(device = %device.device_id, error = %e,
                "owner cold device not reconciled");
            return;
        }
    }
    let healthy = device.io.probe().is_ok();
    device.with_ledger(|ledger, _| {
        if healthy && ledger.device().health() != DeviceHealth::Healthy {
            let cmd = ColdDeviceCommand::SetHealth {
                health: DeviceHealth::Healthy,
                reason: "its owner registered and the device reconciled".into(),
            };
            if let Err(e) = ledger.execute(cmd) {
                tracing::warn!(device = %device.device_id, error = %e, "health not journaled");
            }
        }
        mark_evictable(state, ledger);
    });
}

/// `route`'s hot replicas as an owner reads them for an offload: reachable over TCP, each
/// with a read grant when crescentd runs with `[auth]`.
fn hot_sources(state: &ColdContext, route: &crescent_cold::route::ObjectRoute) -> Vec<ReplicaDesc> {
    let mut out: Vec<ReplicaDesc> = route
        .replicas
        .iter()
        .filter_map(|r| state.directory.describe_hot_replica(r, route.length))
        .filter(|d| d.transport == TransportKind::Tcp && d.endpoint.is_some())
        .collect();
    if let Some(grants) = state.auth.grants() {
        grants.grant_replicas(&mut out, TransferOp::Read, state.now_ms(), [0; 16]);
    }
    out
}
