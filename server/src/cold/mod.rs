//! The cold tier of crescentd (docs/cold-tier.md): one `ColdDevice` actor per configured device,
//! its `local_dir` IO, and the operations that drive the cold driver of `crescent-cold` against the
//! object directory (the route authority).
//!
//! Every driver call runs synchronously under its device's ledger lock (on a blocking thread
//! or an RPC thread, never on the actors' arbiter), so one device's operations, reclaims and
//! reconciliation never interleave and the ledger's copy of the device stays exact.

pub mod context;
pub mod dataplane;
pub mod devices;
pub mod hot;
pub mod ledger;
pub mod maintenance;
pub mod ops;
pub mod owner_device;
pub mod owner_io;
pub mod owner_staged;
pub mod promotion;
pub mod restore;
pub mod restore_batch;
pub mod staging;
pub mod weights;
pub mod worker;

use std::sync::{mpsc, Arc, Mutex};

use crescent_actors::AggregateRegistry;
use crescent_cold::device::{ColdDeviceCommand, DeviceKind};
use crescent_cold::driver::{self, DeviceLedger};
use crescent_cold::local_dir::LocalDirDevice;
use crescent_cold::metrics::ColdMetrics;
use crescent_cold::restore::{RestoreKey, SingleFlight};
use crescent_cold::{ColdDevice, ColdError};
use crescent_store::{parse_cold_object_key, DirectoryRoutes};

use crate::config::cold::ColdSettings;
use crate::error::ServerError;
pub use context::{ColdContext, ColdRecovered, EmbeddedHot};
use ledger::{from_runtime, ActorLedger};

/// Who answers a restore's waiters.
pub(crate) type RestoreWaiter = mpsc::Sender<Result<Arc<Vec<u8>>, ColdError>>;

/// Restores in flight at once (distinct backings), and waiters on one.
const MAX_RESTORE_FLIGHTS: usize = 1024;
const MAX_RESTORE_WAITERS: usize = 4096;
/// Operations reconciliation reads per page.
const RECONCILE_PAGE: usize = 256;

/// The cold tier of a node: its devices (`[cold]` or `[[cold.devices]]`), each with its own
/// `ColdDevice` actor, ledger and IO handle.
pub struct ColdTier {
    pub registry: AggregateRegistry<ColdDevice>,
    pub(crate) devices: devices::DeviceSet,
    pub metrics: ColdMetrics,
    pub(crate) flights: Mutex<SingleFlight<RestoreKey, RestoreWaiter>>,
    pub queue: worker::OffloadQueue,
    /// Background re-promotions of restored objects.
    pub promotions: promotion::PromotionQueue,
    pub restore: RestoreSettings,
}

/// How cold-only objects are restored on read (from `[cold]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestoreSettings {
    /// Name the backing to a reader that can read it itself.
    pub local_restore: bool,
    /// Offer restored objects to the background promotion.
    pub promote_on_read: bool,
    /// Reads in flight at once for one device's items of a batch get.
    pub parallelism: usize,
    /// The remote-restore staging pool (`staging.rs`; started with the embedded segment).
    pub staging: staging::StagingSettings,
}

/// Starts the cold tier of a standalone node from its configuration and recovered state.
pub async fn start_node(
    state: &Arc<ColdContext>,
    config: &crate::Config,
) -> Result<(), ServerError> {
    let (recovered, seq) = state
        .recovered
        .lock()
        .expect("cold recovered mutex")
        .take()
        .unwrap_or_default();
    start(state, &config.cold, &config.data_dir, recovered, seq).await
}

/// Starts the cold tier of an HA active, after its promotion (the replicated journal holds
/// every device's state). The device directory must be one both nodes mount at the same
/// path (a shared mount: NFS, a cluster filesystem), so the cold tier starts only with an
/// explicit `[cold] root`; the default `<data_dir>/cold/...` is local to one node and the
/// tier stays off. A directory not stamped for the device (`DEVICE`) while the journal
/// already knows the device means the shared mount is missing or another device's: refused
/// here, rather than reconciling an empty directory against the journal.
pub async fn start_active(
    state: &Arc<ColdContext>,
    config: &crate::Config,
) -> Result<(), ServerError> {
    let settings = &config.cold;
    if !settings.enabled {
        return Ok(());
    }
    let specs = settings.device_specs(&config.data_dir);
    if specs.iter().any(|d| !d.explicit_root) {
        tracing::info!(
            "cold tier off in HA mode: give every cold device a root ([cold] root or \
             [[cold.devices]] root) on a directory every node mounts at the same path"
        );
        return Ok(());
    }
    for spec in &specs {
        let journaled = state
            .recovered
            .lock()
            .expect("cold recovered mutex")
            .as_ref()
            .is_some_and(|(devices, _)| {
                devices
                    .get(&spec.device_id)
                    .is_some_and(|d| d.config().is_some())
            });
        check_shared_root(&spec.device_id, &spec.root, journaled)?;
    }
    start_node(state, config).await
}

/// The HA shared-mount check of a device root: stamped for this device (`DEVICE`), and
/// stamped at all when the journal already knows the device.
pub fn check_shared_root(
    device_id: &str,
    root: &std::path::Path,
    journaled: bool,
) -> Result<(), ServerError> {
    let opened = if journaled {
        LocalDirDevice::open_existing(device_id, root)
    } else {
        LocalDirDevice::open(device_id, root)
    };
    opened.map(drop).map_err(|e| {
        ServerError::Recovery(format!(
            "cold tier: device {device_id:?} at {}: {e} (in HA mode the cold directory must be \
             a shared mount, at the same path on every node, stamped for this device)",
            root.display()
        ))
    })
}

/// Starts the cold tier of a node: configures the device (journaled, a no-op when unchanged),
/// installs the cold-only routes from the journal into the directory (readable with no owner
/// replay), then reconciles the device (resumes every operation and reclaim, deletes orphan
/// files). Runs before the node serves and before the embedded segment is mounted.
pub async fn start(
    state: &Arc<ColdContext>,
    settings: &ColdSettings,
    data_dir: &std::path::Path,
    recovered: std::collections::BTreeMap<String, ColdDevice>,
    recovered_seq: u64,
) -> Result<(), ServerError> {
    if !settings.enabled {
        return Ok(());
    }
    let fail = |what: &str, e: ColdError| ServerError::Recovery(format!("cold tier: {what}: {e}"));
    let specs = settings.device_specs(data_dir);
    check_journaled_devices_configured(&recovered, &specs)?;
    let owner_devices = owner_devices(&recovered, &specs);
    let mut opened = Vec::with_capacity(specs.len());
    for spec in &specs {
        let io = LocalDirDevice::open(&spec.device_id, &spec.root)
            .map_err(|e| fail(&format!("open device {:?}", spec.device_id), e))?;
        opened.push(Arc::new(io));
    }
    let registry = AggregateRegistry::<ColdDevice>::builder(state.runtime.clone())
        .recovered(recovered, recovered_seq)
        .build();
    configure_devices(&registry, &specs).await?;
    let metrics = ColdMetrics::register(&state.registry)
        .map_err(|e| ServerError::Recovery(format!("cold metrics: {e}")))?;
    let scheduler = crescent_cold::scheduler::OffloadScheduler::new(settings.scheduler())
        .map_err(|e| fail("offload queue", e))?;
    let offload_mode = settings.offload_mode.mode();
    let promotion_limits = promotion::PromotionLimits {
        max_entries: settings.promotion_queue_entries,
        max_bytes: settings.promotion_queue_bytes,
        quiet: std::time::Duration::from_millis(settings.promotion_quiet_ms),
        max_defer: std::time::Duration::from_millis(settings.promotion_max_defer_ms),
    };
    let restore_settings = RestoreSettings {
        local_restore: settings.local_restore,
        promote_on_read: settings.promote_on_read,
        parallelism: settings.restore_parallelism,
        staging: settings.staging(),
    };
    let me = state.clone();
    let tier = tokio::task::spawn_blocking(move || -> Result<ColdTier, ColdError> {
        let devices = load_devices(&registry, opened, owner_devices, &metrics)?;
        let installed = install_journaled_routes(&me, &devices);
        for device in devices.values().filter(|d| d.owner_io.is_none()) {
            reconcile_device(&me, device)?;
        }
        tracing::info!(devices = devices.len(), installed, "cold tier reconciled");
        Ok(ColdTier {
            registry,
            devices: std::sync::RwLock::new(devices),
            metrics,
            flights: Mutex::new(SingleFlight::new(MAX_RESTORE_FLIGHTS, MAX_RESTORE_WAITERS)),
            queue: worker::OffloadQueue::new(offload_mode, scheduler),
            promotions: promotion::PromotionQueue::new(promotion_limits),
            restore: restore_settings,
        })
    })
    .await
    .map_err(|e| ServerError::Recovery(format!("cold tier start: {e}")))?
    .map_err(|e| fail("reconcile", e))?;
    tier.observe_devices();
    if state.cold.set(Arc::new(tier)).is_err() {
        return Err(ServerError::Recovery(
            "the cold tier was started twice".into(),
        ));
    }
    spawn_services(state, settings)
}

/// Hands the tier to the weights (COLD and MIXED residency) and starts the offload worker, the
/// promotion and the upkeep.
fn spawn_services(state: &Arc<ColdContext>, settings: &ColdSettings) -> Result<(), ServerError> {
    // Managed weights migrate to and from this tier (COLD and MIXED residency).
    state
        .weights
        .set_cold(Arc::new(weights::ColdWeights::new(state)))?;
    worker::spawn(state.clone())
        .map_err(|e| ServerError::Recovery(format!("cannot start the offload worker: {e}")))?;
    promotion::spawn(state.clone())
        .map_err(|e| ServerError::Recovery(format!("cannot start the cold promotion: {e}")))?;
    maintenance::spawn(state.clone(), settings.upkeep())
        .map_err(|e| ServerError::Recovery(format!("cannot start the cold upkeep: {e}")))?;
    Ok(())
}

/// Devices of storage owners come from the journal, not the config: they wait (not
/// connected, so neither placed nor read) until their owner registers again. As
/// `(device, owner, root)`.
fn owner_devices(
    recovered: &std::collections::BTreeMap<String, ColdDevice>,
    specs: &[crate::config::cold::DeviceSpec],
) -> Vec<(String, String, std::path::PathBuf)> {
    recovered
        .iter()
        .filter(|(id, _)| !specs.iter().any(|s| &s.device_id == *id))
        .filter_map(|(id, d)| {
            let owner = d.owner()?;
            let root = d.config()?.root.clone();
            Some((id.clone(), owner.owner_id.clone(), root.into()))
        })
        .collect()
}

/// Journals each configured device's settings (a no-op when unchanged).
async fn configure_devices(
    registry: &AggregateRegistry<ColdDevice>,
    specs: &[crate::config::cold::DeviceSpec],
) -> Result<(), ServerError> {
    for spec in specs {
        registry
            .execute(
                &spec.device_id,
                ColdDeviceCommand::Configure {
                    device_id: spec.device_id.clone(),
                    kind: DeviceKind::LocalDir,
                    root: spec.root.display().to_string(),
                    capacity: spec.capacity_bytes,
                    tags: spec.tags.clone(),
                    schedulable: spec.schedulable,
                },
            )
            .await
            .map_err(|e| {
                let what = format!("configure {:?}", spec.device_id);
                ServerError::Recovery(format!("cold tier: {what}: {}", from_runtime(e)))
            })?;
    }
    Ok(())
}

/// The tier's devices with their ledgers loaded from the journal: the configured local
/// directories, then the owners' devices (waiting for their owner).
fn load_devices(
    registry: &AggregateRegistry<ColdDevice>,
    opened: Vec<Arc<LocalDirDevice>>,
    owner_devices: Vec<(String, String, std::path::PathBuf)>,
    metrics: &ColdMetrics,
) -> Result<std::collections::BTreeMap<String, Arc<devices::TierDevice>>, ColdError> {
    let mut devices = std::collections::BTreeMap::new();
    for io in opened {
        let ledger = ActorLedger::load(registry.clone(), io.device_id())?;
        let root = io.root().to_path_buf();
        let io: Arc<dyn crescent_cold::io::ColdIo> = io;
        devices.insert(
            io.device_id().to_string(),
            Arc::new(devices::TierDevice::new(io, root, ledger)),
        );
    }
    for (device_id, owner_id, root) in owner_devices {
        let ledger = ActorLedger::load(registry.clone(), &device_id)?;
        let io = Arc::new(owner_io::OwnerDeviceIo::new(
            &device_id,
            &owner_id,
            metrics.owner_io.clone(),
        ));
        let device = devices::TierDevice::for_owner(io, root, ledger);
        owner_device::await_owner(&device);
        devices.insert(device_id, Arc::new(device));
    }
    Ok(devices)
}

/// Installs, per object, the journaled route with the highest content operation of any
/// device into the directory (readable with no owner replay); returns how many were new.
fn install_journaled_routes(
    state: &ColdContext,
    devices: &std::collections::BTreeMap<String, Arc<devices::TierDevice>>,
) -> usize {
    let now = state.now_ms();
    let mut installed = 0usize;
    let journaled_routes = {
        let ledgers: Vec<_> = devices
            .values()
            .map(|d| d.ledger.lock().expect("cold ledger lock"))
            .collect();
        driver::rebuild_cold_routes(ledgers.iter().map(|l| l.device()))
    };
    for (key, route) in journaled_routes {
        let Ok(id) = parse_cold_object_key(&key) else {
            tracing::warn!(key, "journaled cold route with an unparsable object key");
            continue;
        };
        let object_route = hot::route_from_journal(&route);
        match state.directory.install_cold_route(&id, &object_route, now) {
            Ok(true) => installed += 1,
            Ok(false) => {}
            Err(e) => tracing::warn!(key, error = %e, "cold route not installed"),
        }
    }
    installed
}

/// Reconciles one device (resumes every operation and reclaim from its journaled state,
/// deletes orphan files), runs the offloads still pending, and marks what may be evicted.
/// At start for crescentd's own devices; when its owner registers for an owner device.
pub(crate) fn reconcile_device(
    me: &ColdContext,
    device: &devices::TierDevice,
) -> Result<driver::ReconcileReport, ColdError> {
    let hot_source = hot::NodeHot { state: me };
    let now = me.now_ms();
    device.with_ledger(|ledger, io| {
        let mut routes = DirectoryRoutes {
            directory: &me.directory,
            now_ms: now,
        };
        let report = driver::reconcile(ledger, io, &mut routes, &hot_source, RECONCILE_PAGE)?;
        for op in &report.missing_payloads {
            tracing::error!(device = %device.device_id, op = %op,
                "committed cold payload is missing");
        }
        // Offloads whose pending route did not survive the restart (the directory is rebuilt
        // empty) were cancelled above; any still pending are run now.
        for op_id in &report.to_offload {
            let mut routes = DirectoryRoutes {
                directory: &me.directory,
                now_ms: now,
            };
            if let Err(e) = driver::run_offload(ledger, io, &mut routes, &hot_source, *op_id) {
                tracing::warn!(op = %op_id, error = %e, "resumed offload failed");
            }
        }
        mark_evictable(me, ledger);
        tracing::info!(device = %device.device_id, ?report, "cold device reconciled");
        Ok(report)
    })
}

/// A device the journal knows with live state (cold routes, operations or reclaims not yet
/// ended) must still be configured: dropping it from the config would make its objects
/// unreadable and its operations unresumable, so the start is refused and says which.
fn check_journaled_devices_configured(
    recovered: &std::collections::BTreeMap<String, ColdDevice>,
    specs: &[crate::config::cold::DeviceSpec],
) -> Result<(), ServerError> {
    for (id, device) in recovered {
        // A storage owner's device comes back with its owner, not from the config.
        if specs.iter().any(|s| &s.device_id == id) || device.owner().is_some() {
            continue;
        }
        let objects = device.cold_routes().count();
        let unfinished = device.active_operation_count() + device.active_reclaim_count();
        if objects + unfinished > 0 {
            return Err(ServerError::Recovery(format!(
                "cold tier: device {id:?} is in the journal with {} cold object(s) and {} \
                 unfinished operation(s) but is not configured; configure it again (same id \
                 and root) so its objects stay readable",
                objects, unfinished
            )));
        }
    }
    Ok(())
}

/// Tells the directory which materialized backings allow the last-hot eviction
/// (UsageCommitted on a readable device).
pub(crate) fn mark_evictable(state: &ColdContext, ledger: &ActorLedger) {
    let device = ledger.device();
    for route in device.cold_routes() {
        let ok =
            device.readable() && route.state == crescent_cold::device::ColdOpState::UsageCommitted;
        if let Ok(id) = parse_cold_object_key(&route.object_key) {
            let _ = state.directory.mark_cold_evictable(&id, route.op_id, ok);
        }
    }
}
