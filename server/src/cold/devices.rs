//! The device set of a node's cold tier: one [`TierDevice`] per configured device (its
//! `ColdDevice` ledger and its IO handle), looked up by the device id every backing names,
//! and placement of new offloads over their summaries.
//!
//! Each device has its own ledger lock, so offloads, reclaims and probes of different devices
//! run side by side; placement reads the per-device summaries (refreshed after every use of a
//! ledger) and never waits for a ledger held by a long offload.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex, RwLock};

use crescent_cold::device::{choose_device, ColdDevice, DeviceKind, DeviceSummary};
use crescent_cold::driver::DeviceLedger;
use crescent_cold::io::ColdIo;
use crescent_cold::ColdError;
use crescent_wire::cold::ColdDeviceInfo;

use super::ledger::ActorLedger;
use super::owner_io::OwnerDeviceIo;
use super::ColdTier;

/// One device of the tier.
pub struct TierDevice {
    pub device_id: String,
    /// Where the IO runs: this process (`LocalDirDevice`) or the device's storage owner.
    pub(crate) io: Arc<dyn ColdIo>,
    /// The device directory on the host that performs its IO (a local restore reads it
    /// there; the `DEVICE` stamp proves it is this device).
    pub(crate) root: PathBuf,
    pub(crate) ledger: Mutex<ActorLedger>,
    summary: Mutex<DeviceSummary>,
    /// The `cold ls` row as of the last use of the ledger (answered while the ledger is
    /// busy). Refreshed together with `summary`, so its figures are one consistent state:
    /// `used` never comes from a later state than `live_materialized_bytes`.
    last_info: Mutex<ColdDeviceInfo>,
    /// Failed health probes in a row (the upkeep thread's count).
    pub(crate) probe_failures: AtomicU32,
    /// The mailbox of a storage owner's device (`None`: crescentd performs the IO).
    pub(crate) owner_io: Option<Arc<OwnerDeviceIo>>,
}

impl TierDevice {
    pub(crate) fn new(io: Arc<dyn ColdIo>, root: PathBuf, ledger: ActorLedger) -> Self {
        let device_id = io.device_id().to_string();
        let summary = DeviceSummary::of(&device_id, ledger.device());
        let info = info_of(&device_id, ledger.device());
        Self {
            device_id,
            io,
            root,
            ledger: Mutex::new(ledger),
            summary: Mutex::new(summary),
            last_info: Mutex::new(info),
            probe_failures: AtomicU32::new(0),
            owner_io: None,
        }
    }

    /// A device whose IO its storage owner performs (`root` is on the owner's host).
    pub(crate) fn for_owner(io: Arc<OwnerDeviceIo>, root: PathBuf, ledger: ActorLedger) -> Self {
        let dyn_io: Arc<dyn ColdIo> = io.clone();
        Self {
            owner_io: Some(io),
            ..Self::new(dyn_io, root, ledger)
        }
    }

    pub(crate) fn summary(&self) -> DeviceSummary {
        self.summary.lock().expect("device summary").clone()
    }

    /// Runs `f` with the device's ledger (the device lock) and its IO handle, then refreshes
    /// the summary placement and the metrics read, and the `cold ls` row.
    pub(crate) fn with_ledger<T>(&self, f: impl FnOnce(&mut ActorLedger, &dyn ColdIo) -> T) -> T {
        let mut ledger = self.ledger.lock().expect("cold ledger lock");
        let r = f(&mut ledger, &*self.io);
        self.refresh(ledger.device());
        r
    }

    /// Reads the device's ledger state (its lock) without changing it: nothing derived from
    /// the ledger moved, so the summary and the `cold ls` row are not rebuilt.
    pub(crate) fn read_ledger<T>(&self, f: impl FnOnce(&ColdDevice) -> T) -> T {
        f(self.ledger.lock().expect("cold ledger lock").device())
    }

    /// `crescent cold ls` row of this device. Never waits for the ledger: while a long
    /// operation holds it (a reconciliation through a storage owner may take minutes), the
    /// row as of the ledger's last use is answered, marked `busy`. Every figure of a row
    /// comes from one state of the ledger (a row mixing a newer `used` with an older
    /// `live_materialized_bytes` would show a leak that is not there).
    pub(crate) fn info(&self) -> ColdDeviceInfo {
        match self.ledger.try_lock() {
            Ok(ledger) => {
                self.refresh(ledger.device());
                self.last_info.lock().expect("device info").clone()
            }
            Err(std::sync::TryLockError::WouldBlock) => ColdDeviceInfo {
                busy: true,
                ..self.last_info.lock().expect("device info").clone()
            },
            Err(std::sync::TryLockError::Poisoned(e)) => panic!("cold ledger lock: {e}"),
        }
    }

    fn refresh(&self, device: &ColdDevice) {
        *self.summary.lock().expect("device summary") = DeviceSummary::of(&self.device_id, device);
        *self.last_info.lock().expect("device info") = info_of(&self.device_id, device);
    }
}

/// The `cold ls` row of `d`, known as `device_id`.
fn info_of(device_id: &str, d: &ColdDevice) -> ColdDeviceInfo {
    ColdDeviceInfo {
        id: device_id.to_string(),
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
        owner_id: d.owner().map(|o| o.owner_id.clone()),
        busy: false,
    }
}

/// The devices of a tier, by id. Owner devices join while the node runs (an owner
/// registers), so the set is behind a lock; each entry is shared with the callers using it.
pub type DeviceSet = RwLock<BTreeMap<String, Arc<TierDevice>>>;

/// The error of a backing naming a device this node does not have (a device removed from
/// the config while the journal still routes to it is refused at start, so this is a
/// route from elsewhere or a race with a config change).
fn unknown_device(device_id: &str) -> ColdError {
    ColdError::DeviceNotEligible {
        device_id: device_id.to_string(),
        reason: "no such cold device on this node".into(),
    }
}

impl ColdTier {
    /// The device `device_id`.
    pub(crate) fn device(&self, device_id: &str) -> Result<Arc<TierDevice>, ColdError> {
        self.devices
            .read()
            .expect("cold device set")
            .get(device_id)
            .cloned()
            .ok_or_else(|| unknown_device(device_id))
    }

    /// Every device, in id order.
    pub(crate) fn all_devices(&self) -> Vec<Arc<TierDevice>> {
        self.devices
            .read()
            .expect("cold device set")
            .values()
            .cloned()
            .collect()
    }

    /// Every device id, in order.
    pub fn device_ids(&self) -> Vec<String> {
        self.devices
            .read()
            .expect("cold device set")
            .keys()
            .cloned()
            .collect()
    }

    /// Runs `f` with the ledger and IO handle of `device_id` (its lock), then republishes the
    /// device gauges.
    pub(crate) fn with_ledger<T>(
        &self,
        device_id: &str,
        f: impl FnOnce(&mut ActorLedger, &dyn ColdIo) -> T,
    ) -> Result<T, ColdError> {
        let r = self.device(device_id)?.with_ledger(f);
        self.observe_devices();
        Ok(r)
    }

    /// Sets the device gauges from the per-device summaries.
    pub(crate) fn observe_devices(&self) {
        let summaries: Vec<DeviceSummary> =
            self.all_devices().iter().map(|d| d.summary()).collect();
        self.metrics.observe_summaries(&summaries);
    }

    /// The device a new offload of `length` bytes goes to (`choose_device` over the
    /// summaries: healthy, schedulable, enough free bytes, most free wins).
    pub(crate) fn place(&self, length: u64) -> Result<String, ColdError> {
        let summaries: Vec<DeviceSummary> =
            self.all_devices().iter().map(|d| d.summary()).collect();
        choose_device(&summaries, length, None)
    }

    /// The IO handle of `device_id` for a read: refused (UNAVAILABLE, retryable) while the
    /// device is unavailable, so a read of a device that failed its probes says so rather
    /// than reporting a missing or damaged file.
    pub(crate) fn readable_io(&self, device_id: &str) -> Result<Arc<dyn ColdIo>, ColdError> {
        let device = self.device(device_id)?;
        // On every restore: read the two facts under the summary lock, no clone.
        let (configured, health) = {
            let summary = device.summary.lock().expect("device summary");
            (summary.configured, summary.health)
        };
        if !configured || !health.readable() {
            return Err(ColdError::DeviceNotEligible {
                device_id: device_id.to_string(),
                reason: format!("the device is {} and cannot be read", health.as_str()),
            });
        }
        Ok(device.io.clone())
    }

    /// The root a reader on this host may read `device_id` from itself (a local restore),
    /// while the device is readable.
    pub(crate) fn local_root(&self, device_id: &str) -> Option<PathBuf> {
        self.readable_io(device_id).ok()?;
        Some(self.device(device_id).ok()?.root.clone())
    }

    /// `crescent cold ls`: every device with its capacity accounting.
    pub fn devices(&self) -> Vec<ColdDeviceInfo> {
        let infos = self.all_devices().iter().map(|d| d.info()).collect();
        self.observe_devices();
        infos
    }

    /// The device of an operation no route names any more (a worker giving up after the
    /// object went away), found by looking in each device.
    pub(crate) fn device_of_op(&self, op_id: &crescent_cold::ColdOpId) -> Option<Arc<TierDevice>> {
        self.all_devices()
            .into_iter()
            .find(|d| d.read_ledger(|device| device.operation(op_id).is_some()))
    }
}
