//! The offload worker: one thread per node draining the [`OffloadScheduler`].
//!
//! - `passthrough`: every completed put is queued for materialization in the background
//!   (a put is refused with BUSY while the queue is above its high watermark).
//! - `evict_triggered`: while the hot tier is at its eviction watermark, the least recently
//!   used objects without a cold copy are queued first; eviction (which, in this mode, never
//!   drops an object without a cold copy) then drops their hot replicas once materialized.
//!
//! Jobs carry a fresh operation id; the operation is planned (journaled) when the job runs,
//! so a queued job lost in a crash leaves nothing behind. Failures are retried with backoff;
//! after the last attempt the operation is cancelled and its pending backing dropped.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crescent_cold::scheduler::{OffloadJob, OffloadMode, OffloadScheduler, RetryDecision};
use crescent_cold::{ColdError, ColdOpId};
use crescent_store::{cold_object_key, parse_cold_object_key};
use crescent_wire::store::ObjectId;
use crescent_wire::{ApiError, ErrorCode};

use super::context::ColdContext;

/// Longest the worker sleeps without being woken.
const IDLE_POLL: Duration = Duration::from_millis(200);
/// Victims queued per pass at the watermark.
const EVICT_TRIGGERED_BATCH: usize = 64;

/// The queue and the worker's wake-up.
pub struct OffloadQueue {
    pub mode: Option<OffloadMode>,
    scheduler: Mutex<OffloadScheduler>,
    wake: Condvar,
    stop: AtomicBool,
    /// The upkeep thread's sleep (woken by `stop`).
    upkeep: Mutex<()>,
    upkeep_wake: Condvar,
}

impl OffloadQueue {
    pub fn new(mode: Option<OffloadMode>, scheduler: OffloadScheduler) -> Self {
        Self {
            mode,
            scheduler: Mutex::new(scheduler),
            wake: Condvar::new(),
            stop: AtomicBool::new(false),
            upkeep: Mutex::new(()),
            upkeep_wake: Condvar::new(),
        }
    }

    /// Whether passthrough puts should be refused now (BUSY).
    pub fn pressured(&self) -> bool {
        self.mode == Some(OffloadMode::Passthrough)
            && self.scheduler.lock().expect("scheduler").is_pressured()
    }

    /// Queues the current content of `id` (`length` bytes). The device is chosen when the
    /// job runs (health and free space may change while it waits), so the job names none.
    pub fn enqueue(&self, id: &ObjectId, length: u64, mode: OffloadMode) -> Result<(), ColdError> {
        let job = OffloadJob {
            op_id: ColdOpId::new(uuid::Uuid::new_v4()),
            device_id: String::new(),
            object_key: cold_object_key(id),
            length,
            mode,
        };
        self.scheduler.lock().expect("scheduler").enqueue(job)?;
        self.wake.notify_one();
        Ok(())
    }

    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.wake.notify_all();
        let _guard = self.upkeep.lock().expect("upkeep lock");
        self.upkeep_wake.notify_all();
    }

    pub(crate) fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Sleeps up to `period` (woken early by `stop`); true once the tier is stopping.
    pub fn wait_stopped(&self, period: Duration) -> bool {
        let deadline = std::time::Instant::now() + period;
        let mut guard = self.upkeep.lock().expect("upkeep lock");
        while !self.stopped() {
            let now = std::time::Instant::now();
            if now >= deadline {
                return false;
            }
            guard = self
                .upkeep_wake
                .wait_timeout(guard, deadline - now)
                .expect("upkeep lock")
                .0;
        }
        true
    }
}

impl super::ColdTier {
    /// Passthrough backpressure: puts are refused (BUSY) while the offload queue is above
    /// its high watermark, rather than accepted and never offloaded.
    pub fn admit_put(&self) -> Result<(), ApiError> {
        if self.queue.pressured() {
            self.metrics
                .backpressure
                .with_label_values(&["offload_queue"])
                .inc();
            return Err(ApiError::new(
                ErrorCode::Busy,
                "the cold offload queue is above its high watermark; retry later",
            ));
        }
        Ok(())
    }

    /// Passthrough: queues a completed put for materialization.
    pub fn put_completed(&self, state: &ColdContext, id: &ObjectId) {
        if self.queue.mode != Some(OffloadMode::Passthrough) {
            return;
        }
        let Ok(size) = state.directory.get_size(id) else {
            return;
        };
        if let Err(e) = self.queue.enqueue(id, size, OffloadMode::Passthrough) {
            self.metrics
                .backpressure
                .with_label_values(&["offload_queue"])
                .inc();
            tracing::debug!(key = %id.key, error = %e, "passthrough offload not queued");
        }
    }
}

/// Starts the worker thread (a no-op without an offload mode).
pub fn spawn(state: Arc<ColdContext>) -> std::io::Result<()> {
    let Some(tier) = state.cold.get().cloned() else {
        return Ok(());
    };
    if tier.queue.mode.is_none() {
        return Ok(());
    }
    if tier.queue.mode == Some(OffloadMode::EvictTriggered) {
        state.directory.set_cold_first(true);
    }
    std::thread::Builder::new()
        .name("crescent-offload".into())
        .spawn(move || run(&state))
        .map(|_| ())
}

fn run(state: &ColdContext) {
    let tier = state.cold.get().expect("cold tier").clone();
    let queue = &tier.queue;
    tracing::info!(mode = ?queue.mode, "offload worker started");
    while !queue.stopped() {
        let now = state.now_ms();
        if queue.mode == Some(OffloadMode::EvictTriggered) && state.directory.above_high_watermark()
        {
            for (id, size) in state
                .directory
                .offload_candidates(EVICT_TRIGGERED_BATCH, now)
            {
                if let Err(e) = queue.enqueue(&id, size, OffloadMode::EvictTriggered) {
                    tier.metrics
                        .backpressure
                        .with_label_values(&["offload_queue"])
                        .inc();
                    tracing::debug!(error = %e, "eviction-triggered offload not queued");
                    break;
                }
            }
        }
        let next = {
            let mut s = queue.scheduler.lock().expect("scheduler");
            tier.metrics.observe_scheduler(&s);
            s.next(now)
        };
        let Some(dispatch) = next else {
            let s = queue.scheduler.lock().expect("scheduler");
            let wait = s
                .next_wakeup_ms(now)
                .map(|at| Duration::from_millis((at - now).clamp(1, 1000) as u64))
                .unwrap_or(IDLE_POLL)
                .min(IDLE_POLL);
            let _ = queue.wake.wait_timeout(s, wait).expect("scheduler");
            continue;
        };
        let job = dispatch.job;
        let Ok(id) = parse_cold_object_key(&job.object_key) else {
            queue
                .scheduler
                .lock()
                .expect("scheduler")
                .complete(&job.op_id);
            continue;
        };
        let _span =
            tracing::debug_span!("cold.offload_job", op = %job.op_id, attempt = dispatch.attempt)
                .entered();
        let result = tier.offload(state, &id, job.op_id, false);
        let mut s = queue.scheduler.lock().expect("scheduler");
        match result {
            Ok(_) => {
                s.complete(&job.op_id);
            }
            // The object went away, or the request can never succeed (no checksum, a
            // conflicting state): nothing to retry.
            Err(
                ColdError::NotFound { .. }
                | ColdError::InvalidArgument { .. }
                | ColdError::Conflict { .. }
                | ColdError::InvalidTransition { .. },
            ) => {
                s.complete(&job.op_id);
            }
            Err(e) => match s.fail(&job.op_id, state.now_ms()) {
                Some(RetryDecision::Retry { at_ms }) => {
                    tier.metrics.offload_retries.inc();
                    tracing::debug!(op = %job.op_id, error = %e, at_ms, "offload retried");
                }
                Some(RetryDecision::GiveUp { attempts }) => {
                    drop(s);
                    tracing::warn!(op = %job.op_id, attempts, error = %e, "offload given up");
                    tier.give_up(state, &id, job.op_id, &e);
                }
                None => {}
            },
        }
    }
    tracing::info!("offload worker stopped");
}
