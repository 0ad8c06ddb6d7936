//! [`OwnerDeviceIo`]: the [`ColdIo`] of a device on a storage owner. crescentd's driver calls
//! it exactly as it calls a local directory; each call becomes a work item in the device's
//! mailbox, which the owner takes with its next long poll (`POST
//! /v1/cold/owner_devices/poll`), performs on its host and answers on the poll after.
//!
//! Why the owner polls rather than crescentd calling the owner: the owner stays a plain
//! client (no new listener, no address crescentd must reach), a poll after a failover simply
//! goes to the new leader through the client's failover layer, and an owner that is gone is
//! seen as silence (health), never as a hung connection held by the driver. Every item is
//! idempotent (a write is keyed by the cold operation id and lands at its deterministic
//! locator), so an item lost with a crashed owner or an abandoned wait is simply asked again.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use crescent_cold::io::{ColdIo, HotSource};
use crescent_cold::local_dir::{DeviceScan, ScannedPayload, WriteReceipt};
use crescent_cold::route::ObjectRoute;
use crescent_cold::{ColdError, ColdOpId, PayloadFingerprint};
use crescent_store::parse_cold_object_key;
use crescent_wire::cold_owner::{OwnerIoError, OwnerIoItem, OwnerIoOutcome, OwnerIoWork};
use crescent_wire::store::ReplicaDesc;

/// How long a poll waits for work before answering empty.
pub const POLL_WAIT: Duration = Duration::from_millis(2_000);
/// An owner that has not polled for this long is gone: its device is not connected.
pub const OWNER_SILENCE: Duration = Duration::from_millis(6_000);
/// Longest the driver waits for one item's result (a large write or read included).
const ITEM_TIMEOUT: Duration = Duration::from_secs(120);
/// Items handed out per poll.
const ITEMS_PER_POLL: usize = 16;

/// The device's mailbox and what is known of its owner.
#[derive(Debug, Default)]
struct Mailbox {
    /// The connected owner incarnation (`None` until it registers).
    incarnation: Option<u64>,
    last_poll: Option<Instant>,
    probe_error: Option<String>,
    next_id: u64,
    queued: VecDeque<OwnerIoItem>,
    /// Items handed out or queued whose caller waits: id -> outcome once answered.
    waiting: BTreeMap<u64, Option<OwnerIoOutcome>>,
    /// Items handed to the current incarnation's last poll. The owner answers everything it
    /// took on its next poll (the wire contract), so one still unanswered then was lost with
    /// that poll's reply and is offered again (items are idempotent).
    handed_out: BTreeMap<u64, OwnerIoItem>,
}

impl Mailbox {
    /// What a waiting poll of `incarnation` answers now, or `None` to keep waiting.
    ///
    /// The incarnation is checked before anything is handed out: a poll of an incarnation
    /// superseded while it waited (the owner was restarted; that request's connection is most
    /// likely dead) must not take the new incarnation's work, or the item is lost and its
    /// caller waits out ITEM_TIMEOUT holding the device's ledger.
    fn answer_poll(&mut self, incarnation: u64, deadline_passed: bool) -> Option<Vec<OwnerIoItem>> {
        if self.incarnation != Some(incarnation) {
            return Some(Vec::new());
        }
        if !self.queued.is_empty() {
            let n = self.queued.len().min(ITEMS_PER_POLL);
            let items: Vec<OwnerIoItem> = self.queued.drain(..n).collect();
            for item in &items {
                self.handed_out.insert(item.id, item.clone());
            }
            return Some(items);
        }
        deadline_passed.then(Vec::new)
    }

    /// Records the results a poll of the current incarnation carries; the items its previous
    /// poll took and did not answer are queued again, first. Returns their work names.
    fn record_results(&mut self, results: Vec<(u64, OwnerIoOutcome)>) -> Vec<&'static str> {
        for (id, outcome) in results {
            self.handed_out.remove(&id);
            // An answer nobody waits for any more (timed out, superseded) is dropped.
            if let Some(slot) = self.waiting.get_mut(&id) {
                *slot = Some(outcome);
            }
        }
        let lost = std::mem::take(&mut self.handed_out);
        let mut redelivered = Vec::new();
        for item in lost.into_values().rev() {
            if self.waiting.get(&item.id).is_some_and(|o| o.is_none()) {
                redelivered.push(work_name(&item.work));
                self.queued.push_front(item);
            }
        }
        redelivered
    }
}

/// The IO of one owner device.
#[derive(Debug)]
pub struct OwnerDeviceIo {
    device_id: String,
    owner_id: String,
    mailbox: Mutex<Mailbox>,
    /// Woken when work is queued (polls wait on it) or a result arrives (callers wait).
    changed: Condvar,
    /// `crescent_cold_owner_io_total{work, outcome}`.
    counter: prometheus::IntCounterVec,
    /// Work that changes the device (a write, a delete, ...) went unanswered because the
    /// owner was not connected or went silent; the owner's return must resume it
    /// ([`OwnerDeviceIo::take_missed_work`]).
    missed_work: AtomicBool,
    /// The owner's staging region, if it registered one (`super::owner_staged`).
    pub(super) staging: super::owner_staged::OwnerStagingLink,
    /// Where an offload's owner reads the hot bytes, with read grants.
    pub(super) read_sources: ReadSources,
}

/// Describes an offload's hot replicas for the owner that writes it to its device: each
/// with its endpoint and read grant, so the owner reads over the data plane (an `owner`
/// token may not get objects). Set when the owner registers; unset, the owner reads with a
/// get (open mode needs nothing more).
#[derive(Default)]
pub struct ReadSources(std::sync::OnceLock<Box<DescribeReplicas>>);

/// Describes a route's hot replicas (see [`ReadSources`]).
type DescribeReplicas = dyn Fn(&ObjectRoute) -> Vec<ReplicaDesc> + Send + Sync;

impl std::fmt::Debug for ReadSources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ReadSources")
            .field(&self.0.get().is_some())
            .finish()
    }
}

impl ReadSources {
    /// Installs the describer (the first one stays: it reads the node, which never changes).
    pub fn set(&self, describe: impl Fn(&ObjectRoute) -> Vec<ReplicaDesc> + Send + Sync + 'static) {
        let _ = self.0.set(Box::new(describe));
    }

    fn describe(&self, route: &ObjectRoute) -> Vec<ReplicaDesc> {
        self.0.get().map(|d| d(route)).unwrap_or_default()
    }
}

fn not_connected(device_id: &str, owner_id: &str, why: &str) -> ColdError {
    ColdError::DeviceNotEligible {
        device_id: device_id.to_string(),
        reason: format!("its owner {owner_id:?} {why}"),
    }
}

impl OwnerDeviceIo {
    pub fn new(device_id: &str, owner_id: &str, counter: prometheus::IntCounterVec) -> Self {
        Self {
            device_id: device_id.to_string(),
            owner_id: owner_id.to_string(),
            mailbox: Mutex::new(Mailbox::default()),
            changed: Condvar::new(),
            counter,
            missed_work: AtomicBool::new(false),
            staging: Default::default(),
            read_sources: Default::default(),
        }
    }

    /// Whether work that changes the device went unanswered (not connected, silent) since
    /// the last call; clears the flag. The upkeep probe reconciles the device when this is
    /// set and the owner polls again under the same incarnation (a stall, which no
    /// registration follows); a registration reconciles anyway, and clears it.
    pub fn take_missed_work(&self) -> bool {
        self.missed_work.swap(false, Ordering::AcqRel)
    }

    /// What crescentd knows of the owner's staging region (set at each registration).
    pub fn staging(&self) -> &super::owner_staged::OwnerStagingLink {
        &self.staging
    }

    /// Sends `work` and waits for its outcome (the staging work of `super::owner_staged`).
    pub(super) fn call_work(&self, work: OwnerIoWork) -> Result<OwnerIoOutcome, ColdError> {
        self.call(work)
    }

    /// Queues `work` without waiting for its outcome (nobody waits: its answer is dropped,
    /// and it is not offered again if lost). Dropped at once when the owner is not connected.
    pub(super) fn post_work(&self, work: OwnerIoWork) {
        let name = work_name(&work);
        let mut m = self.mailbox.lock().expect("owner mailbox");
        if !Self::connected(&m) {
            self.counter
                .with_label_values(&[name, "not_connected"])
                .inc();
            return;
        }
        m.next_id += 1;
        let id = m.next_id;
        m.queued.push_back(OwnerIoItem { id, work });
        drop(m);
        self.changed.notify_all();
        self.counter.with_label_values(&[name, "posted"]).inc();
    }

    pub fn owner_id(&self) -> &str {
        &self.owner_id
    }

    /// The owner (re)registered with `incarnation`. A new incarnation fails every item the
    /// previous one had taken or was offered (its process is gone; the callers retry).
    pub fn connect(&self, incarnation: u64) {
        let mut m = self.mailbox.lock().expect("owner mailbox");
        if m.incarnation != Some(incarnation) {
            // The registration's reconciliation resumes whatever was missed.
            self.missed_work.store(false, Ordering::Release);
            m.queued.clear();
            m.handed_out.clear();
            for outcome in m.waiting.values_mut().filter(|o| o.is_none()) {
                *outcome = Some(OwnerIoOutcome::Failed(OwnerIoError {
                    kind: "io".into(),
                    message: "the owner restarted before answering".into(),
                    locator: String::new(),
                    expected: 0,
                    actual: 0,
                }));
            }
            m.incarnation = Some(incarnation);
        }
        m.last_poll = Some(Instant::now());
        drop(m);
        self.changed.notify_all();
    }

    fn connected(m: &Mailbox) -> bool {
        m.incarnation.is_some() && m.last_poll.is_some_and(|t| t.elapsed() < OWNER_SILENCE)
    }

    /// One poll of `incarnation`: records its results and probe, then waits up to `wait` for
    /// work. `NotFound` when this incarnation is not the registered one (register first).
    pub fn poll(
        &self,
        incarnation: u64,
        probe_error: Option<String>,
        results: Vec<(u64, OwnerIoOutcome)>,
        wait: Duration,
    ) -> Result<Vec<OwnerIoItem>, ColdError> {
        let deadline = Instant::now() + wait;
        let mut m = self.mailbox.lock().expect("owner mailbox");
        if m.incarnation != Some(incarnation) {
            return Err(ColdError::NotFound {
                what: "owner device registration of incarnation",
                id: incarnation.to_string(),
            });
        }
        m.last_poll = Some(Instant::now());
        m.probe_error = probe_error;
        let answered = !results.is_empty();
        for work in m.record_results(results) {
            self.counter.with_label_values(&[work, "redelivered"]).inc();
        }
        if answered {
            self.changed.notify_all();
        }
        loop {
            if let Some(items) = m.answer_poll(incarnation, Instant::now() >= deadline) {
                return Ok(items);
            }
            m = self
                .changed
                .wait_timeout(m, deadline.saturating_duration_since(Instant::now()))
                .expect("owner mailbox")
                .0;
            if m.incarnation == Some(incarnation) {
                m.last_poll = Some(Instant::now());
            }
        }
    }

    /// Sends `work` to the owner and waits for its outcome; fails at once (UNAVAILABLE)
    /// when the owner is not connected, and when it goes silent while we wait.
    fn call(&self, work: OwnerIoWork) -> Result<OwnerIoOutcome, ColdError> {
        let name = work_name(&work);
        let _span =
            tracing::debug_span!("cold.owner_io", device = %self.device_id, work = name).entered();
        let result = self.call_inner(work);
        let outcome = match &result {
            Ok(OwnerIoOutcome::Failed(_)) => "failed",
            Ok(_) => "ok",
            Err(_) => {
                // Reads and the staging of a read change nothing on the device.
                if !matches!(name, "read" | "stage" | "release_staged") {
                    self.missed_work.store(true, Ordering::Release);
                }
                "not_connected"
            }
        };
        self.counter.with_label_values(&[name, outcome]).inc();
        result
    }

    fn call_inner(&self, work: OwnerIoWork) -> Result<OwnerIoOutcome, ColdError> {
        let started = Instant::now();
        let mut m = self.mailbox.lock().expect("owner mailbox");
        if !Self::connected(&m) {
            return Err(not_connected(
                &self.device_id,
                &self.owner_id,
                "is not connected",
            ));
        }
        m.next_id += 1;
        let id = m.next_id;
        m.queued.push_back(OwnerIoItem { id, work });
        m.waiting.insert(id, None);
        self.changed.notify_all();
        let outcome = loop {
            if let Some(Some(_)) = m.waiting.get(&id) {
                break m.waiting.remove(&id).flatten();
            }
            if !Self::connected(&m) {
                break None;
            }
            if started.elapsed() >= ITEM_TIMEOUT {
                break None;
            }
            m = self
                .changed
                .wait_timeout(m, Duration::from_millis(250))
                .expect("owner mailbox")
                .0;
        };
        m.waiting.remove(&id);
        m.handed_out.remove(&id);
        m.queued.retain(|item| item.id != id);
        outcome.ok_or_else(|| {
            not_connected(
                &self.device_id,
                &self.owner_id,
                "did not answer (gone silent or too slow)",
            )
        })
    }

    fn failed(&self, e: OwnerIoError) -> ColdError {
        error_from_wire(&self.device_id, e)
    }

    fn unexpected(&self, what: &str, outcome: &OwnerIoOutcome) -> ColdError {
        ColdError::Io {
            path: self.device_id.clone(),
            kind: std::io::ErrorKind::InvalidData,
            message: format!("the owner answered a {what} with {outcome:?}"),
        }
    }
}

fn work_name(work: &OwnerIoWork) -> &'static str {
    match work {
        OwnerIoWork::Write { .. } => "write",
        OwnerIoWork::Read { .. } => "read",
        OwnerIoWork::Delete { .. } => "delete",
        OwnerIoWork::Scan => "scan",
        OwnerIoWork::RemoveStaleTemps => "remove_stale_temps",
        OwnerIoWork::Stage { .. } => "stage",
        OwnerIoWork::ReleaseStaged { .. } => "release_staged",
    }
}

/// A cold error from the owner's report, with the code the local path would give.
pub fn error_from_wire(device_id: &str, e: OwnerIoError) -> ColdError {
    match e.kind.as_str() {
        "checksum_mismatch" => ColdError::ChecksumMismatch {
            locator: e.locator,
            expected: e.expected as u32,
            actual: e.actual as u32,
        },
        "length_mismatch" => ColdError::LengthMismatch {
            locator: e.locator,
            expected: e.expected,
            actual: e.actual,
        },
        "corrupt_file" => ColdError::CorruptFile {
            locator: e.locator,
            reason: e.message,
        },
        "payload_missing" => ColdError::PayloadMissing { locator: e.locator },
        "conflict" => ColdError::Conflict {
            what: "owner device payload",
            id: e.locator,
            reason: e.message,
        },
        "invalid_argument" => ColdError::InvalidArgument {
            field: "owner device work",
            reason: e.message,
        },
        "busy" => ColdError::Backpressure {
            queue: "owner restore staging",
            reason: e.message,
        },
        _ => ColdError::Io {
            path: format!("{device_id}:{}", e.locator),
            kind: std::io::ErrorKind::Other,
            message: e.message,
        },
    }
}

impl ColdIo for OwnerDeviceIo {
    fn device_id(&self) -> &str {
        &self.device_id
    }

    fn write_offload(
        &self,
        op_id: ColdOpId,
        route: &ObjectRoute,
        _hot: &dyn HotSource,
    ) -> Result<WriteReceipt, ColdError> {
        let object = parse_cold_object_key(&route.key).map_err(|e| ColdError::InvalidArgument {
            field: "object_key",
            reason: e.to_string(),
        })?;
        let work = OwnerIoWork::Write {
            op_id: op_id.0.simple().to_string(),
            object,
            length: route.length,
            checksum: route.checksum,
            replicas: self.read_sources.describe(route),
        };
        match self.call(work)? {
            OwnerIoOutcome::Written {
                locator,
                length,
                checksum,
                fingerprint,
                already_present,
            } => {
                let fingerprint: [u8; 32] =
                    fingerprint
                        .as_slice()
                        .try_into()
                        .map_err(|_| ColdError::Io {
                            path: locator.clone(),
                            kind: std::io::ErrorKind::InvalidData,
                            message: "the owner reported a fingerprint that is not 32 bytes".into(),
                        })?;
                Ok(WriteReceipt {
                    locator,
                    length,
                    checksum,
                    fingerprint: PayloadFingerprint(fingerprint),
                    already_present,
                })
            }
            OwnerIoOutcome::Failed(e) => Err(self.failed(e)),
            other => Err(self.unexpected("write", &other)),
        }
    }

    fn read(
        &self,
        locator: &str,
        expected_length: u64,
        expected_checksum: u32,
    ) -> Result<Vec<u8>, ColdError> {
        let limit = super::owner_staged::MAX_OWNER_INLINE_READ;
        if expected_length > limit {
            // It would not fit the owner's poll body: refused here, named, rather than the
            // poll failing at crescentd's body limit and the read timing out.
            return Err(ColdError::TooLargeToCarry {
                what: format!(
                    "inline read of {locator} from owner device {} (larger payloads are \
                     restored through the owner's staging region, by a reader that accepts \
                     a staged payload)",
                    self.device_id
                ),
                length: expected_length,
                limit,
            });
        }
        let work = OwnerIoWork::Read {
            locator: locator.to_string(),
            length: expected_length,
            checksum: expected_checksum,
        };
        match self.call(work)? {
            // The owner verified it; checked again here so that no wrong byte crosses to a
            // reader even if the owner's answer was damaged on the way.
            OwnerIoOutcome::Read { bytes } => {
                super::owner_staged::check_arrived(
                    locator,
                    &bytes,
                    expected_length,
                    expected_checksum,
                )?;
                Ok(bytes)
            }
            OwnerIoOutcome::Failed(e) => Err(self.failed(e)),
            other => Err(self.unexpected("read", &other)),
        }
    }

    fn delete(&self, locator: &str) -> Result<bool, ColdError> {
        match self.call(OwnerIoWork::Delete {
            locator: locator.to_string(),
        })? {
            OwnerIoOutcome::Deleted { existed } => Ok(existed),
            OwnerIoOutcome::Failed(e) => Err(self.failed(e)),
            other => Err(self.unexpected("delete", &other)),
        }
    }

    fn scan(&self) -> Result<DeviceScan, ColdError> {
        match self.call(OwnerIoWork::Scan)? {
            OwnerIoOutcome::Scanned { payloads, .. } => {
                let mut scan = DeviceScan::default();
                for p in payloads {
                    let op_id =
                        uuid::Uuid::parse_str(&p.op_id)
                            .map(ColdOpId::new)
                            .map_err(|e| ColdError::Io {
                                path: p.locator.clone(),
                                kind: std::io::ErrorKind::InvalidData,
                                message: format!("the owner reported a bad op id: {e}"),
                            })?;
                    scan.payloads.push(ScannedPayload {
                        op_id,
                        locator: p.locator,
                        file_len: p.file_len,
                    });
                }
                Ok(scan)
            }
            OwnerIoOutcome::Failed(e) => Err(self.failed(e)),
            other => Err(self.unexpected("scan", &other)),
        }
    }

    fn remove_stale_temps(&self) -> Result<usize, ColdError> {
        match self.call(OwnerIoWork::RemoveStaleTemps)? {
            OwnerIoOutcome::TempsRemoved { count } => Ok(count as usize),
            OwnerIoOutcome::Failed(e) => Err(self.failed(e)),
            other => Err(self.unexpected("temp cleanup", &other)),
        }
    }

    /// The owner probes its device itself (reported with each poll); here the device is
    /// usable when its owner is connected and its last probe succeeded.
    fn probe(&self) -> Result<(), ColdError> {
        let m = self.mailbox.lock().expect("owner mailbox");
        if !Self::connected(&m) {
            return Err(not_connected(
                &self.device_id,
                &self.owner_id,
                "is not connected",
            ));
        }
        match &m.probe_error {
            None => Ok(()),
            Some(e) => Err(ColdError::Io {
                path: self.device_id.clone(),
                kind: std::io::ErrorKind::Other,
                message: format!("the owner's probe failed: {e}"),
            }),
        }
    }
}

#[cfg(test)]
#[path = "owner_io_tests.rs"]
mod tests;
