//! The rebuild gate of a node that just started (standalone) or was promoted (HA), and the
//! endpoints owners replay their ownership tables through (docs/rebuild.md).
//!
//! Object metadata is not journaled: after a restart or failover the object directory starts
//! empty and the storage owners replay what they hold. Until every expected owner (owners with
//! mounted segments in the journal) has completed, object operations answer UNAVAILABLE with
//! state REBUILDING; journaled control-plane operations are served at once. After the degraded
//! timeout the gate opens DEGRADED (visible in /healthz and metrics).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crescent_store::rebuild::{OperationClass, RebuildGate};
use crescent_store::ObjectDirectory;
use crescent_wire::rebuild::{
    check_version, GateStatus, RebuildCompleteReply, RebuildCompleteRequest, RebuildReplayReply,
    RebuildReplayRequest, REBUILD_WIRE_VERSION,
};
use crescent_wire::ApiError;

/// The gate and what it guards.
pub struct Rebuild {
    gate: Mutex<RebuildGate>,
    /// Fast path for object operations: true once the gate is SERVING or DEGRADED.
    open: AtomicBool,
    directory: Arc<ObjectDirectory>,
}

impl Rebuild {
    pub fn new(gate: RebuildGate, directory: Arc<ObjectDirectory>) -> Self {
        let me = Self {
            open: AtomicBool::new(false),
            gate: Mutex::new(gate),
            directory,
        };
        me.published(&me.lock());
        me
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RebuildGate> {
        self.gate.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Publishes the gate's state to the fast path and metrics; frees the replay ledger once
    /// nothing more is replayed.
    fn published(&self, gate: &RebuildGate) {
        let status = gate.status();
        self.directory.metrics().observe_gate(&status);
        let open = status.is_open();
        if open && !self.open.swap(true, Ordering::AcqRel) {
            tracing::info!(
                state = status.state.as_str(),
                owners_completed = status.owners_completed,
                owners_expected = status.owners_expected,
                "rebuild gate open"
            );
        }
    }

    /// Whether an object operation may run now (UNAVAILABLE, state REBUILDING, if not).
    pub fn admit_object(&self) -> Result<(), ApiError> {
        if self.open.load(Ordering::Acquire) {
            return Ok(());
        }
        self.lock()
            .admit(OperationClass::Object)
            .map_err(ApiError::from)
    }

    /// Whether the gate is open (SERVING or DEGRADED).
    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }

    /// What a read answers instead of NOT_FOUND while the gate is closed: the object may be
    /// held by an owner that has not replayed yet.
    pub fn not_yet(&self) -> ApiError {
        crescent_wire::rebuild::rebuilding_error(&self.status())
    }

    /// A read's result while rebuilding: found objects are served (their owner replayed
    /// them), NOT_FOUND becomes UNAVAILABLE/REBUILDING.
    pub fn read<T>(&self, was_open: bool, r: Result<T, ApiError>) -> Result<T, ApiError> {
        match r {
            Err(e) if !was_open && e.code == crescent_wire::ErrorCode::NotFound => {
                Err(self.not_yet())
            }
            other => other,
        }
    }

    pub fn status(&self) -> GateStatus {
        self.lock().status()
    }

    /// `POST /v1/rebuild/replay`.
    pub fn replay(
        &self,
        req: &RebuildReplayRequest,
        now_ms: i64,
    ) -> Result<RebuildReplayReply, ApiError> {
        check_version(req.version)?;
        let span = tracing::info_span!("rebuild.replay", owner = %req.owner_id, entries = req.entries.len());
        let _g = span.enter();
        let outcomes = self
            .directory
            .rebuild_replay(&req.owner_id, req.term, &req.entries, now_ms)
            .map_err(ApiError::from)?;
        let mut gate = self.lock();
        gate.record_replay(&outcomes);
        self.published(&gate);
        Ok(RebuildReplayReply {
            version: REBUILD_WIRE_VERSION,
            outcomes,
            gate: gate.status(),
        })
    }

    /// `POST /v1/rebuild/complete`.
    pub fn complete(
        &self,
        req: &RebuildCompleteRequest,
        now_ms: i64,
    ) -> Result<RebuildCompleteReply, ApiError> {
        check_version(req.version)?;
        let mut gate = self.lock();
        let state = gate
            .complete(&req.owner_id, req.term, req.counts, now_ms)
            .map_err(ApiError::from)?;
        tracing::info!(owner = %req.owner_id, state = state.as_str(), "owner completed its rebuild replay");
        self.published(&gate);
        self.finish_if_serving(&gate);
        Ok(RebuildCompleteReply {
            version: REBUILD_WIRE_VERSION,
            gate: gate.status(),
        })
    }

    /// The periodic check (housekeeping): the degraded timeout.
    pub fn poll(&self, now_ms: i64) {
        let mut gate = self.lock();
        gate.poll(now_ms);
        self.published(&gate);
        self.finish_if_serving(&gate);
    }

    /// An expected owner expired before completing.
    pub fn owner_lost(&self, owner_id: &str, now_ms: i64) {
        let mut gate = self.lock();
        gate.owner_lost(owner_id, now_ms);
        self.published(&gate);
    }

    fn finish_if_serving(&self, gate: &RebuildGate) {
        if gate.state() == crescent_wire::rebuild::GateState::Serving {
            self.directory.finish_rebuild();
        }
    }
}
