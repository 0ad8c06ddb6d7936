//! A model of one storage owner with one cold device, for the interleaving and crash tests:
//! the hot side (routes and DRAM contents) is modelled here; the cold side is the real
//! `ColdDevice` aggregate (journaled as encoded events), the real `local_dir` device and the
//! real driver. A crash makes the N-th ledger command fail without being persisted; recovery
//! rebuilds the aggregate from the persisted events alone and runs reconciliation.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crescent_actors::{Aggregate, Ctx, DomainEvent};
use crescent_cold::device::{
    ColdDevice, ColdDeviceCommand, ColdDeviceEvent, ColdOpState, DeviceKind,
};
use crescent_cold::driver::{self, DeviceLedger, HotSource, RouteAuthority};
use crescent_cold::local_dir::LocalDirDevice;
use crescent_cold::route::{ActiveColdBacking, HotReplica, ObjectRoute, RouteExpectation};
use crescent_cold::{payload_checksum, ColdError, ColdOpId, ReclaimId};

pub const DEVICE: &str = "dev1";
pub const CAPACITY: u64 = 64 << 20;

fn injected() -> ColdError {
    ColdError::Io {
        path: "<crash>".into(),
        kind: std::io::ErrorKind::Other,
        message: "injected crash".into(),
    }
}

pub fn is_crash(e: &ColdError) -> bool {
    matches!(e, ColdError::Io { message, .. } if message == "injected crash")
}

/// The ColdDevice actor: events are persisted encoded, as the journal would.
pub struct Ledger {
    pub state: ColdDevice,
    pub log: Vec<(String, u16, Vec<u8>)>,
    pub crash_in: Option<usize>,
    pub now_ms: i64,
}

impl Ledger {
    pub fn new() -> Self {
        Self {
            state: ColdDevice::default(),
            log: Vec::new(),
            crash_in: None,
            now_ms: 1_000,
        }
    }

    /// The state rebuilt from the persisted events alone.
    pub fn recover(&self) -> Self {
        let mut state = ColdDevice::default();
        for (kind, version, payload) in &self.log {
            state.apply_owned(ColdDeviceEvent::decode(kind, *version, payload).expect("decodable"));
        }
        check_accounting(&state);
        Self {
            state,
            log: self.log.clone(),
            crash_in: None,
            now_ms: self.now_ms,
        }
    }

    /// Events of this operation that release it (OperationCancelled or UsageReleased).
    pub fn releases_of(&self, op: ColdOpId) -> usize {
        self.log
            .iter()
            .map(|(k, v, p)| ColdDeviceEvent::decode(k, *v, p).unwrap())
            .filter(|e| match e {
                ColdDeviceEvent::OperationCancelled(c) => c.op_id == op,
                ColdDeviceEvent::UsageReleased(u) => u.op_id == op,
                _ => false,
            })
            .count()
    }

    pub fn planned_ops(&self) -> Vec<ColdOpId> {
        self.log
            .iter()
            .filter_map(
                |(k, v, p)| match ColdDeviceEvent::decode(k, *v, p).unwrap() {
                    ColdDeviceEvent::OperationPlanned(e) => Some(e.op_id),
                    _ => None,
                },
            )
            .collect()
    }
}

impl DeviceLedger for Ledger {
    fn device(&self) -> &ColdDevice {
        &self.state
    }

    fn execute(&mut self, cmd: ColdDeviceCommand) -> Result<(), ColdError> {
        if let Some(n) = self.crash_in {
            if n == 0 {
                return Err(injected());
            }
            self.crash_in = Some(n - 1);
        }
        self.now_ms += 1;
        let events = self.state.decide(&cmd, &Ctx::at(self.now_ms))?;
        for e in events {
            self.log
                .push((e.kind().to_string(), e.version(), e.encode()));
            self.state.apply(&e);
            check_accounting(&self.state);
        }
        Ok(())
    }
}

/// `reserved` and `used` equal the sums over the operations' states (so no saturating
/// arithmetic ever hid an underflow), and never exceed capacity.
pub fn check_accounting(d: &ColdDevice) {
    let (mut reserved, mut used) = (0u64, 0u64);
    for op in d.operations().values() {
        if op.state.holds_reservation() {
            reserved += op.expected_length;
        }
        if op.state == ColdOpState::UsageCommitted {
            used += op.expected_length;
        }
    }
    assert_eq!(
        d.reserved(),
        reserved,
        "reserved bytes match the operations"
    );
    assert_eq!(d.used(), used, "used bytes match the operations");
    assert!(d.used() + d.reserved() <= d.capacity().max(d.used() + d.reserved()).min(CAPACITY));
}

/// The store: routes and hot contents.
#[derive(Default)]
pub struct Store {
    pub routes: BTreeMap<String, ObjectRoute>,
    pub contents: Hot,
    pub fail_next_cas: bool,
    next_offset: u64,
}

impl RouteAuthority for Store {
    fn lookup(&self, key: &str) -> Option<ObjectRoute> {
        self.routes.get(key).cloned()
    }

    fn compare_and_set(
        &mut self,
        key: &str,
        expected: &RouteExpectation,
        new: ObjectRoute,
    ) -> Result<(), ColdError> {
        if std::mem::take(&mut self.fail_next_cas) {
            return Err(injected());
        }
        let current = self
            .routes
            .get(key)
            .ok_or_else(|| ColdError::RouteConflict {
                key: key.into(),
                reason: "gone".into(),
            })?;
        current.check(expected)?;
        self.routes.insert(key.to_string(), new);
        Ok(())
    }
}

/// DRAM contents by content operation.
#[derive(Default, Clone)]
pub struct Hot(pub HashMap<u64, Vec<u8>>);

impl HotSource for Hot {
    fn read_hot(&self, route: &ObjectRoute) -> Result<Vec<u8>, ColdError> {
        if route.replicas.is_empty() {
            return Err(ColdError::NotFound {
                what: "hot replica of",
                id: route.key.clone(),
            });
        }
        Ok(self.0[&route.content_op].clone())
    }
}

impl Store {
    pub fn replica(&mut self) -> HotReplica {
        self.next_offset += 1;
        HotReplica {
            segment_id: "dram".into(),
            offset: self.next_offset,
        }
    }
}

pub struct World {
    pub dir: tempfile::TempDir,
    pub io: LocalDirDevice,
    pub ledger: Ledger,
    pub store: Store,
    next_content: u64,
    next_id: u128,
    pub crashes: usize,
}

pub fn content(content_op: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i as u64)
                .wrapping_mul(content_op * 2 + 1)
                .wrapping_add(content_op) as u8
        })
        .collect()
}

impl World {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let io = LocalDirDevice::open(DEVICE, dir.path().join(DEVICE)).unwrap();
        let mut ledger = Ledger::new();
        ledger
            .execute(ColdDeviceCommand::Configure {
                device_id: DEVICE.into(),
                kind: DeviceKind::LocalDir,
                root: io.root().display().to_string(),
                capacity: CAPACITY,
                tags: vec![],
                schedulable: true,
            })
            .unwrap();
        Self {
            dir,
            io,
            ledger,
            store: Store::default(),
            next_content: 0,
            next_id: 0,
            crashes: 0,
        }
    }

    fn fresh(&mut self) -> u128 {
        self.next_id += 1;
        self.next_id
    }

    /// Put (or overwrite) `key` with `len` bytes on `replicas` hot replicas, optionally with a
    /// `PendingOffload` published together. The old materialized backing's reclaim is planned
    /// before the route CAS and run after it.
    pub fn put(
        &mut self,
        key: &str,
        len: usize,
        replicas: usize,
        offload: bool,
    ) -> Result<(), ColdError> {
        self.next_content += 1;
        let content_op = self.next_content;
        let bytes = content(content_op, len);
        let checksum = payload_checksum(&bytes);
        self.store.contents.0.insert(content_op, bytes);
        let old = self.store.lookup(key);
        let mut cold = None;
        if offload {
            let op_id = ColdOpId(uuid::Uuid::from_u128(self.fresh()));
            // Intent first: an op whose put CAS never happens is cancelled by reconciliation.
            self.ledger.execute(ColdDeviceCommand::PlanOffload {
                op_id,
                object_key: key.into(),
                content_op,
                expected_length: len as u64,
                expected_checksum: checksum,
            })?;
            cold = Some(ActiveColdBacking::PendingOffload {
                cold_op: op_id,
                content_op,
                owner: "o".into(),
                device_id: DEVICE.into(),
                expected_length: len as u64,
                expected_checksum: checksum,
            });
        }
        let reclaim = match &old {
            Some(r) => {
                let reclaim_id = ReclaimId(uuid::Uuid::from_u128(self.fresh()));
                driver::plan_obsolete_backing(&mut self.ledger, r, reclaim_id)?
            }
            None => None,
        };
        let new = ObjectRoute {
            key: key.into(),
            version: old.as_ref().map_or(1, |r| r.version + 1),
            content_op,
            length: len as u64,
            checksum,
            replicas: (0..replicas.max(1)).map(|_| self.store.replica()).collect(),
            cold,
        };
        match &old {
            Some(r) => self.store.compare_and_set(key, &r.expectation(), new)?,
            None => {
                self.store.routes.insert(key.into(), new);
            }
        }
        if let Some(reclaim_id) = reclaim {
            driver::run_reclaim(&mut self.ledger, &self.io, &self.store, reclaim_id)?;
        }
        Ok(())
    }

    pub fn delete(&mut self, key: &str) -> Result<(), ColdError> {
        let Some(old) = self.store.lookup(key) else {
            return Ok(());
        };
        let reclaim_id = ReclaimId(uuid::Uuid::from_u128(self.fresh()));
        let reclaim = driver::plan_obsolete_backing(&mut self.ledger, &old, reclaim_id)?;
        if std::mem::take(&mut self.store.fail_next_cas) {
            return Err(injected());
        }
        self.store.routes.remove(key);
        if let Some(reclaim_id) = reclaim {
            driver::run_reclaim(&mut self.ledger, &self.io, &self.store, reclaim_id)?;
        }
        Ok(())
    }

    /// Materializes `key` now: runs its pending offload, or attaches one first.
    pub fn offload(&mut self, key: &str) -> Result<(), ColdError> {
        let Some(route) = self.store.lookup(key) else {
            return Ok(());
        };
        let op_id = match &route.cold {
            Some(c) => c.cold_op(),
            None => {
                if route.replicas.is_empty() {
                    return Ok(());
                }
                let op_id = ColdOpId(uuid::Uuid::from_u128(self.fresh()));
                self.ledger.execute(ColdDeviceCommand::PlanOffload {
                    op_id,
                    object_key: key.into(),
                    content_op: route.content_op,
                    expected_length: route.length,
                    expected_checksum: route.checksum,
                })?;
                let next = route.attach_pending(&route.expectation(), op_id, "o", DEVICE)?;
                self.store
                    .compare_and_set(key, &route.expectation(), next)?;
                op_id
            }
        };
        if self.ledger.state.operation(&op_id).is_some() {
            let hot = self.store.contents.clone();
            driver::run_offload(&mut self.ledger, &self.io, &mut self.store, &hot, op_id)?;
        }
        Ok(())
    }

    /// A slow worker: runs the offload of `key` for at most `commands` ledger commands and
    /// pauses there (nothing is lost: the commands it did not get to are simply not decided).
    pub fn offload_partially(&mut self, key: &str, commands: usize) -> Result<(), ColdError> {
        let armed = self.ledger.crash_in.take();
        self.ledger.crash_in = Some(commands);
        let result = self.offload(key);
        self.ledger.crash_in = armed;
        match result {
            Err(e) if is_crash(&e) => Ok(()),
            other => other,
        }
    }

    /// Evicts one hot replica; a refusal of the last-hot rule is not an error of the test.
    pub fn evict(&mut self, key: &str) -> Result<(), ColdError> {
        let Some(route) = self.store.lookup(key) else {
            return Ok(());
        };
        let Some(replica) = route.replicas.first().cloned() else {
            return Ok(());
        };
        let allowed_before = route.replicas.len() > 1
            || matches!(&route.cold, Some(c) if c.is_materialized()
                && self.ledger.state.operation(&c.cold_op()).map(|o| o.state) == Some(ColdOpState::UsageCommitted));
        match driver::evict_hot(&self.ledger, &mut self.store, key, &replica) {
            Ok(_) => {
                assert!(
                    allowed_before,
                    "evicted a last hot replica without a usage-committed backing"
                );
                Ok(())
            }
            Err(ColdError::EvictionRefused { .. }) => {
                assert!(!allowed_before, "refused an allowed eviction");
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Reads `key` (hot first, else from cold with verification) and re-promotes a cold-only
    /// object best-effort.
    pub fn restore(&mut self, key: &str) -> Result<(), ColdError> {
        let Some(route) = self.store.lookup(key) else {
            return Ok(());
        };
        let bytes = self.read(&route);
        assert!(
            bytes == self.store.contents.0[&route.content_op],
            "{key} reads back its content"
        );
        if route.is_cold_only() {
            let replica = self.store.replica();
            let next = route.promote(&route.expectation(), replica)?;
            let _ = self.store.compare_and_set(key, &route.expectation(), next);
        }
        Ok(())
    }

    pub fn read(&self, route: &ObjectRoute) -> Vec<u8> {
        if !route.replicas.is_empty() {
            return self.store.contents.0[&route.content_op].clone();
        }
        driver::read_cold(&self.io, route)
            .unwrap_or_else(|e| panic!("cold-only {} unreadable: {e}", route.key))
    }

    /// Every route is readable: the last readable copy was never removed.
    pub fn check_readable(&self) {
        for route in self.store.routes.values() {
            let bytes = self.read(route);
            assert!(
                bytes == self.store.contents.0[&route.content_op],
                "{} reads back its content",
                route.key
            );
        }
        check_accounting(&self.ledger.state);
    }

    /// The process dies: the aggregate is rebuilt from its persisted events, a stale temp
    /// file of an interrupted write may be left, and reconciliation runs; pending offloads it
    /// hands back are resumed.
    pub fn crash_and_recover(&mut self, leave_temp: bool) {
        self.crashes += 1;
        self.ledger = self.ledger.recover();
        self.store.fail_next_cas = false;
        if leave_temp {
            std::fs::write(
                self.io.root().join("tmp").join("interrupted.tmp"),
                b"partial",
            )
            .unwrap();
        }
        self.reconcile();
    }

    pub fn reconcile(&mut self) {
        let hot = self.store.contents.clone();
        let report = driver::reconcile(&mut self.ledger, &self.io, &mut self.store, &hot, 3)
            .expect("reconcile");
        assert!(report.missing_payloads.is_empty(), "{report:?}");
        for op_id in report.to_offload {
            let hot = self.store.contents.clone();
            driver::run_offload(&mut self.ledger, &self.io, &mut self.store, &hot, op_id)
                .expect("resume");
        }
        self.check_readable();
    }

    /// After reconciliation: no reservation outstanding, usage equals the live materialized
    /// lengths, the device holds exactly the live payloads, every journaled cold route is the
    /// store's, and every planned operation was released at most once.
    pub fn check_converged(&self) {
        let d = &self.ledger.state;
        assert_eq!(d.reserved(), 0, "no reservation outstanding");
        assert_eq!(d.used(), d.live_materialized_bytes());
        let live: BTreeSet<ColdOpId> = d
            .operations()
            .values()
            .filter(|o| o.state == ColdOpState::UsageCommitted)
            .map(|o| o.op_id)
            .collect();
        let on_disk: BTreeSet<ColdOpId> = self
            .io
            .scan()
            .unwrap()
            .payloads
            .iter()
            .map(|p| p.op_id)
            .collect();
        assert_eq!(on_disk, live, "device files are exactly the live payloads");
        assert!(self.io.scan().unwrap().stale_temps.is_empty());
        let referenced: BTreeSet<ColdOpId> = self
            .store
            .routes
            .values()
            .filter_map(|r| r.cold.as_ref())
            .filter(|c| c.is_materialized())
            .map(|c| c.cold_op())
            .collect();
        assert_eq!(
            live, referenced,
            "every live payload is a route's backing and vice versa"
        );
        let rebuilt = driver::rebuild_cold_routes([&self.ledger.recover().state]);
        for route in self.store.routes.values() {
            if let Some(ActiveColdBacking::Materialized {
                cold_op, locator, ..
            }) = &route.cold
            {
                let journaled = &rebuilt[&route.key];
                assert_eq!(
                    (&journaled.op_id, &journaled.locator),
                    (cold_op, locator),
                    "journal serves {} without replay",
                    route.key
                );
                assert_eq!(journaled.content_op, route.content_op);
            }
        }
        assert_eq!(rebuilt.len(), referenced.len());
        for op in self.ledger.planned_ops() {
            let releases = self.ledger.releases_of(op);
            let state = d.operation(&op).map(|o| o.state);
            match state {
                Some(ColdOpState::Released) => assert_eq!(releases, 1, "{op} released once"),
                Some(ColdOpState::UsageCommitted) => assert_eq!(releases, 0),
                other => panic!("{op} did not converge: {other:?}"),
            }
        }
    }

    /// Deletes every object and checks the device returns to empty, every operation ending
    /// in exactly one `Released`.
    pub fn delete_all_and_check_empty(&mut self) {
        let keys: Vec<String> = self.store.routes.keys().cloned().collect();
        for k in keys {
            self.delete(&k).unwrap();
        }
        self.reconcile();
        let d = &self.ledger.state;
        assert_eq!(
            (
                d.used(),
                d.reserved(),
                d.active_operation_count(),
                d.active_reclaim_count()
            ),
            (0, 0, 0, 0)
        );
        for op in self.ledger.planned_ops() {
            assert_eq!(
                self.ledger.releases_of(op),
                1,
                "{op} ends in exactly one Released"
            );
        }
        assert!(self.io.scan().unwrap().payloads.is_empty());
    }
}
