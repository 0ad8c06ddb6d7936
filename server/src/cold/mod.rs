//! The cold tier of crescentd (seed 003): one `ColdDevice` actor per configured device, its
//! `local_dir` IO, and the operations that drive the cold driver of `crescent-cold` against the
//! object directory (the route authority).
//!
//! Every driver call runs synchronously under its device's ledger lock (on a blocking thread
//! or an RPC thread, never on the actors' arbiter), so one device's operations, reclaims and
//! reconciliation never interleave and the ledger's copy of the device stays exact.

pub mod dataplane;
pub mod hot;
pub mod ledger;
pub mod maintenance;
pub mod ops;
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
use crescent_wire::cold::ColdDeviceInfo;

use crate::config_cold::ColdSettings;
use crate::error::ServerError;
use crate::node::NodeState;
use ledger::{from_runtime, ActorLedger};

/// Who answers a restore's waiters.
pub(crate) type RestoreWaiter = mpsc::Sender<Result<Arc<Vec<u8>>, ColdError>>;

/// Restores in flight at once (distinct backings), and waiters on one.
const MAX_RESTORE_FLIGHTS: usize = 1024;
const MAX_RESTORE_WAITERS: usize = 4096;
/// Operations reconciliation reads per page.
const RECONCILE_PAGE: usize = 256;

/// The cold tier of a node: its devices (one today: the `[cold]` device).
pub struct ColdTier {
    pub registry: AggregateRegistry<ColdDevice>,
    pub device_id: String,
    pub(crate) io: Arc<LocalDirDevice>,
    pub(crate) ledger: Mutex<ActorLedger>,
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

impl ColdTier {
    /// Runs `f` with the device's ledger (the device lock).
    pub(crate) fn with_ledger<T>(&self, f: impl FnOnce(&mut ActorLedger) -> T) -> T {
        let mut ledger = self.ledger.lock().expect("cold ledger lock");
        let r = f(&mut ledger);
        self.metrics.observe_devices([ledger.device()]);
        r
    }

    /// `crescent cold ls`: every device with its capacity accounting.
    pub fn devices(&self) -> Vec<ColdDeviceInfo> {
        self.with_ledger(|l| {
            let d = l.device();
            vec![ColdDeviceInfo {
                id: self.device_id.clone(),
                kind: d
                    .config()
                    .map_or(DeviceKind::LocalDir, |c| c.kind)
                    .as_str()
                    .to_string(),
                root: d.config().map(|c| c.root.clone()).unwrap_or_default(),
                capacity: d.capacity(),
                used: d.used(),
                reserved: d.reserved(),
                health: d.health().as_str().to_string(),
                schedulable: d.schedulable(),
                tags: d
                    .config()
                    .map(|c| c.tags.iter().cloned().collect())
                    .unwrap_or_default(),
                active_operations: d.active_operation_count() as u64,
                active_reclaims: d.active_reclaim_count() as u64,
                live_materialized_bytes: d.live_materialized_bytes(),
            }]
        })
    }
}

/// Starts the cold tier of a standalone node from its configuration and recovered state.
pub async fn start_node(state: &Arc<NodeState>, config: &crate::Config) -> Result<(), ServerError> {
    let (recovered, seq) = state
        .cold_recovered
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
    state: &Arc<NodeState>,
    config: &crate::Config,
) -> Result<(), ServerError> {
    let settings = &config.cold;
    if !settings.enabled {
        return Ok(());
    }
    let Some(root) = settings.root.as_deref() else {
        tracing::info!(
            "cold tier off in HA mode: set [cold] root to a directory every node mounts at \
             the same path"
        );
        return Ok(());
    };
    let journaled = state
        .cold_recovered
        .lock()
        .expect("cold recovered mutex")
        .as_ref()
        .is_some_and(|(devices, _)| {
            devices
                .get(&settings.device_id)
                .is_some_and(|d| d.config().is_some())
        });
    check_shared_root(&settings.device_id, root, journaled)?;
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
    state: &Arc<NodeState>,
    settings: &ColdSettings,
    data_dir: &std::path::Path,
    recovered: std::collections::BTreeMap<String, ColdDevice>,
    recovered_seq: u64,
) -> Result<(), ServerError> {
    if !settings.enabled {
        return Ok(());
    }
    let fail = |what: &str, e: ColdError| ServerError::Recovery(format!("cold tier: {what}: {e}"));
    let root = settings.root_under(data_dir);
    let io =
        Arc::new(LocalDirDevice::open(&settings.device_id, &root).map_err(|e| fail("open", e))?);
    let registry = AggregateRegistry::<ColdDevice>::builder(state.runtime.clone())
        .recovered(recovered, recovered_seq)
        .build();
    registry
        .execute(
            &settings.device_id,
            ColdDeviceCommand::Configure {
                device_id: settings.device_id.clone(),
                kind: DeviceKind::LocalDir,
                root: root.display().to_string(),
                capacity: settings.capacity_bytes,
                tags: settings.tags.clone(),
                schedulable: settings.schedulable,
            },
        )
        .await
        .map_err(|e| fail("configure", from_runtime(e)))?;
    let metrics = ColdMetrics::register(&state.metrics.registry)
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
    let device_id = settings.device_id.clone();
    let reg = registry.clone();
    let me = state.clone();
    let tier = tokio::task::spawn_blocking(move || -> Result<ColdTier, ColdError> {
        let mut ledger = ActorLedger::load(reg.clone(), &device_id)?;
        let now = me.now_ms();
        let mut installed = 0usize;
        for (key, route) in driver::rebuild_cold_routes([ledger.device()]) {
            let Ok(id) = parse_cold_object_key(&key) else {
                tracing::warn!(key, "journaled cold route with an unparsable object key");
                continue;
            };
            let object_route = hot::route_from_journal(&route);
            match me.directory.install_cold_route(&id, &object_route, now) {
                Ok(true) => installed += 1,
                Ok(false) => {}
                Err(e) => tracing::warn!(key, error = %e, "cold route not installed"),
            }
        }
        let hot_source = hot::NodeHot { state: &me };
        let mut routes = DirectoryRoutes {
            directory: &me.directory,
            now_ms: now,
        };
        let report = driver::reconcile(&mut ledger, &io, &mut routes, &hot_source, RECONCILE_PAGE)?;
        for op in &report.missing_payloads {
            tracing::error!(device = %device_id, op = %op, "committed cold payload is missing");
        }
        // Offloads whose pending route did not survive the restart (the directory is rebuilt
        // empty) were cancelled above; any still pending are run now.
        for op_id in &report.to_offload {
            let mut routes = DirectoryRoutes {
                directory: &me.directory,
                now_ms: now,
            };
            if let Err(e) = driver::run_offload(&mut ledger, &io, &mut routes, &hot_source, *op_id)
            {
                tracing::warn!(op = %op_id, error = %e, "resumed offload failed");
            }
        }
        mark_evictable(&me, &ledger);
        tracing::info!(device = %device_id, installed, ?report, "cold device reconciled");
        Ok(ColdTier {
            registry: reg,
            device_id,
            io,
            ledger: Mutex::new(ledger),
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
    tier.metrics
        .observe_devices([tier.ledger.lock().expect("ledger").device()]);
    if state.cold.set(Arc::new(tier)).is_err() {
        return Err(ServerError::Recovery(
            "the cold tier was started twice".into(),
        ));
    }
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

/// Tells the directory which materialized backings allow the last-hot eviction
/// (UsageCommitted on a readable device).
pub(crate) fn mark_evictable(state: &NodeState, ledger: &ActorLedger) {
    let device = ledger.device();
    for route in device.cold_routes() {
        let ok =
            device.readable() && route.state == crescent_cold::device::ColdOpState::UsageCommitted;
        if let Ok(id) = parse_cold_object_key(&route.object_key) {
            let _ = state.directory.mark_cold_evictable(&id, route.op_id, ok);
        }
    }
}
