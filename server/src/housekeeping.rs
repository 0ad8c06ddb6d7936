//! Periodic housekeeping (every `store.housekeeping_interval_ms`, default 1 s): the directory's
//! tick (expired leases, stale puts, deferred frees), eviction above the high watermark,
//! expiry of owners that stopped heartbeating (journaled RemoveOwner, replicas dropped), the
//! run-time checks of managed weights (losses, repairs, AUTO demotion: docs/weights.md), and
//! the pruning of revocations whose tokens have expired (docs/security.md, "Revocation"), and
//! the tenants' usage records (docs/tenants.md, "Journaled usage and reconciliation").

use std::sync::Arc;
use std::time::Duration;

use crescent_store::{EvictReport, TickReport};
use tracing::Instrument;

use crescent_actors::Runtime;
use crescent_store::ObjectDirectory;

use crate::auth::AuthState;
use crate::liveness::OwnerLiveness;
use crate::metrics::ServerMetrics;
use crate::quota_usage::UsageJournal;
use crate::rebuild::Rebuild;
use crate::removals::DurableRemovals;
use crate::segment_mirror::SegmentMirror;
use crate::weights::WeightService;

/// The node's parts housekeeping uses (the node builds it, docs/architecture.md "Server
/// modules").
pub struct Housekeeping {
    pub directory: Arc<ObjectDirectory>,
    /// The actor runtime, for the server clock.
    pub runtime: Runtime,
    pub liveness: Arc<OwnerLiveness>,
    /// Owners removed for silence are journaled through it.
    pub mirror: Arc<SegmentMirror>,
    pub metrics: ServerMetrics,
    /// The rebuild gate of this start or promotion.
    pub rebuild: Arc<Rebuild>,
    pub removals: Arc<DurableRemovals>,
    pub weights: Arc<WeightService>,
    /// Revocations whose tokens have expired are pruned from it.
    pub auth: Arc<AuthState>,
    /// The tenants' usage, recorded and reconciled once the gate is open.
    pub usage_journal: Arc<UsageJournal>,
    /// Time between passes (`store.housekeeping_interval_ms`).
    pub period: Duration,
}

impl Housekeeping {
    /// The server clock (ms since the Unix epoch).
    pub fn now_ms(&self) -> i64 {
        self.runtime.clock().now_ms()
    }
}

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PassReport {
    pub tick: TickReport,
    pub evicted: EvictReport,
    /// Owners removed for silence.
    pub owners_expired: Vec<String>,
}

/// One housekeeping pass at `now_ms` (the periodic task passes the server clock; tests pass
/// any time to exercise TTLs without waiting).
pub async fn run_pass(state: &Housekeeping, now_ms: i64) -> PassReport {
    run_pass_inner(state, now_ms)
        .instrument(tracing::debug_span!("store.housekeeping"))
        .await
}

async fn run_pass_inner(state: &Housekeeping, now_ms: i64) -> PassReport {
    let directory = state.directory.clone();
    // Tick and eviction walk every shard: keep them off the async thread.
    let (tick, evicted) = match tokio::task::spawn_blocking(move || {
        let tick = directory.tick(now_ms);
        let evicted = directory.maybe_evict(now_ms);
        (tick, evicted)
    })
    .await
    {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(error = %e, "housekeeping task failed");
            Default::default()
        }
    };
    let mut report = PassReport {
        tick,
        evicted,
        owners_expired: Vec::new(),
    };
    for (owner_id, incarnation) in state.liveness.expired(now_ms) {
        match state
            .mirror
            .expire_owner(&owner_id, incarnation, now_ms)
            .await
        {
            Ok(true) => {
                state.metrics.owners_expired.inc();
                state.rebuild.owner_lost(&owner_id, now_ms);
                // Its segments are unmounted: it forgets its whole table.
                state.removals.drop_owner(&owner_id);
                report.owners_expired.push(owner_id);
            }
            Ok(false) => {}
            Err(e) => tracing::error!(owner = %owner_id, error = %e, "cannot expire owner"),
        }
    }
    state.rebuild.poll(now_ms);
    check_weights(state, &report);
    // Never before the gate opens: a partial directory is not the tenants' usage.
    if state.rebuild.is_open() {
        state.usage_journal.pass(now_ms).await;
    }
    match state
        .auth
        .prune_revocations((now_ms / 1000).max(0) as u64)
        .await
    {
        Ok(0) => {}
        Ok(n) => tracing::info!(pruned = n, "expired token revocations pruned"),
        Err(e) => tracing::warn!(error = %e, "cannot prune token revocations"),
    }
    // Removals no waiting remove journals (a managed revision's deletion) are journaled here.
    if let Err(e) = state.removals.wait_recorded().await {
        tracing::warn!(error = %e, "removed puts not journaled yet");
    }
    report
}

/// The run-time checks of managed weights (server/src/weights/health.rs), in the background:
/// losses after an owner expired, repairs of DEGRADED revisions, AUTO demotion above the high
/// watermark. Only once the rebuild gate is open: before, recovery's own check is pending and
/// replaying owners' objects would look lost.
fn check_weights(state: &Housekeeping, report: &PassReport) {
    if !state.rebuild.is_open() {
        return;
    }
    let weights = &state.weights;
    if !report.owners_expired.is_empty() {
        weights.check_after_owner_loss();
    }
    weights.recheck_degraded();
    let (used_bytes, capacity_bytes) = state.directory.usage();
    weights.relieve_memory_pressure(crescent_weights::pressure::MemoryUsage {
        used_bytes,
        capacity_bytes,
        high_watermark: state.directory.config().high_watermark,
    });
}

/// Starts the periodic task on the current (actix) runtime; the node keeps the handle and
/// aborts it when it stops.
pub fn spawn(me: Arc<Housekeeping>) -> tokio::task::JoinHandle<()> {
    let period = me.period;
    actix_rt::spawn(async move {
        let mut interval = tokio::time::interval(period);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        interval.tick().await;
        loop {
            interval.tick().await;
            let now = me.now_ms();
            let r = run_pass(&me, now).await;
            // Takes back spare descriptors a flood made the journal use (net.fd_reserve).
            crescent_journal::fd_reserve::refill();
            me.metrics.refresh_fd_reserve();
            if r.evicted.evicted_objects > 0 || !r.owners_expired.is_empty() {
                tracing::info!(
                    evicted = r.evicted.evicted_objects,
                    evicted_bytes = r.evicted.evicted_bytes,
                    owners_expired = r.owners_expired.len(),
                    "housekeeping"
                );
            }
        }
    })
}
