//! Background re-promotion of restored cold-only objects (docs/cold-tier.md, "Restore on read",
//! step 5: "Allocate a normal hot replica and CAS it into the route best-effort").
//!
//! A restore answers its reader first; the promotion is only *offered* here. The queue is
//! bounded by entries and by bytes (an offer beyond either is dropped and counted: the next
//! read restores again, which is correct, only slower), and single-flighted per (object, cold
//! operation, route version): a burst of reads of one object promotes it once, and a route
//! that moved on (overwritten, promoted, evicted again) is not promoted from an older version.
//! One worker thread runs the jobs: it re-reads the payload (verified, through the restore
//! single flight, usually from the page cache) rather than holding the reader's copy, so the
//! read path never copies its bytes for the promotion.
//!
//! The promotion must not slow the reads it serves (it re-reads, checks and copies the whole
//! payload: as much CPU as the restore itself). So it is deferred and runs at a lower
//! priority: a job waits until no restore has been offered for `quiet` (a burst of reads runs
//! first), but never longer than `max_defer` after it was queued (a tier read without pause
//! still promotes); the worker thread runs at nice +10, so on a busy host the readers' threads
//! go first.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crescent_cold::ids::ColdOpId;
use crescent_cold::metrics::ColdMetrics;
use crescent_cold::route::ObjectRoute;
use crescent_cold::ColdError;
use crescent_wire::store::ObjectId;

use super::context::ColdContext;
use super::hot::NodeHot;
use super::owner_staged::MAX_OWNER_INLINE_READ;
use super::ColdTier;

/// How often an idle worker looks at the stop flag.
const IDLE_POLL: Duration = Duration::from_millis(200);

/// What makes two promotions the same one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PromotionKey {
    pub object: ObjectId,
    pub cold_op: ColdOpId,
    pub route_version: u64,
}

/// One object to promote: the cold-only route it was restored at.
#[derive(Debug, Clone)]
pub struct PromotionJob {
    pub id: ObjectId,
    pub route: ObjectRoute,
}

impl PromotionJob {
    /// `None` unless the route is cold-only with a materialized backing.
    pub fn key(&self) -> Option<PromotionKey> {
        let m = self
            .route
            .materialized()
            .filter(|_| self.route.is_cold_only())?;
        Some(PromotionKey {
            object: self.id.clone(),
            cold_op: m.cold_op,
            route_version: m.route_version,
        })
    }
}

/// What became of an offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offered {
    Queued,
    /// The same backing at the same route version is already queued or running.
    Duplicate,
    /// The queue is full (entries or bytes), or the route is not a cold-only one.
    Dropped,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PromotionLimits {
    pub max_entries: usize,
    pub max_bytes: u64,
    /// A job waits until no restore was offered for this long (zero: runs at once)...
    pub quiet: Duration,
    /// ...but at most this long after it was queued.
    pub max_defer: Duration,
}

/// How much longer the job queued at `queued_at` waits, when the last restore was offered at
/// `last_offer` (`None`: it runs now). Pure: the worker passes the clock in.
pub fn promotion_wait(
    now: Instant,
    last_offer: Instant,
    queued_at: Instant,
    limits: &PromotionLimits,
) -> Option<Duration> {
    let until_quiet = (last_offer + limits.quiet).saturating_duration_since(now);
    let until_deadline = (queued_at + limits.max_defer).saturating_duration_since(now);
    Some(until_quiet.min(until_deadline)).filter(|d| !d.is_zero())
}

#[derive(Debug, Default)]
struct Pending {
    /// Jobs in order, each with when it was queued.
    queue: VecDeque<(PromotionKey, PromotionJob, Instant)>,
    /// When the last restore offered a job (queued or not).
    last_offer: Option<Instant>,
    /// Keys queued or running.
    keys: HashSet<PromotionKey>,
    /// Lengths of the objects queued or running.
    bytes: u64,
}

/// The bounded, single-flighted promotion queue.
#[derive(Debug)]
pub struct PromotionQueue {
    limits: PromotionLimits,
    pending: Mutex<Pending>,
    ready: Condvar,
}

impl PromotionQueue {
    pub fn new(limits: PromotionLimits) -> Self {
        Self {
            limits,
            pending: Mutex::new(Pending::default()),
            ready: Condvar::new(),
        }
    }

    /// Offers a job; never blocks.
    pub fn offer(&self, job: PromotionJob) -> Offered {
        let Some(key) = job.key() else {
            return Offered::Dropped;
        };
        let length = job.route.length;
        let now = Instant::now();
        let mut p = self.pending.lock().expect("promotion queue lock");
        p.last_offer = Some(now);
        if p.keys.contains(&key) {
            return Offered::Duplicate;
        }
        // One object larger than the byte bound is still taken when nothing else is held,
        // or it could never be promoted at all.
        let over_bytes = p.bytes.saturating_add(length) > self.limits.max_bytes && p.bytes > 0;
        if p.keys.len() >= self.limits.max_entries || over_bytes {
            return Offered::Dropped;
        }
        p.keys.insert(key.clone());
        p.bytes += length;
        p.queue.push_back((key, job, now));
        drop(p);
        self.ready.notify_one();
        Offered::Queued
    }

    /// The next job once its deferral is over (it stays counted until
    /// [`finish`](Self::finish)); `None` after `wait` with nothing ready.
    pub fn take(&self, wait: Duration) -> Option<(PromotionKey, PromotionJob)> {
        let give_up = Instant::now() + wait;
        let mut p = self.pending.lock().expect("promotion queue lock");
        loop {
            let now = Instant::now();
            let left = give_up.saturating_duration_since(now);
            let pause = match p.queue.front() {
                None => left,
                Some((_, _, queued_at)) => {
                    let last_offer = p.last_offer.unwrap_or(*queued_at);
                    match promotion_wait(now, last_offer, *queued_at, &self.limits) {
                        None => {
                            let (key, job, _) = p.queue.pop_front().expect("front exists");
                            return Some((key, job));
                        }
                        Some(d) => d.min(left),
                    }
                }
            };
            if pause.is_zero() {
                return None;
            }
            p = self
                .ready
                .wait_timeout(p, pause)
                .expect("promotion queue lock")
                .0;
        }
    }

    /// Ends a job taken by [`take`](Self::take).
    pub fn finish(&self, key: &PromotionKey, length: u64) {
        let mut p = self.pending.lock().expect("promotion queue lock");
        if p.keys.remove(key) {
            p.bytes -= length;
        }
    }

    /// Jobs queued or running.
    pub fn depth(&self) -> usize {
        self.pending
            .lock()
            .expect("promotion queue lock")
            .keys
            .len()
    }

    /// Offers a job and counts the outcome.
    pub fn offer_counted(&self, job: PromotionJob, metrics: &ColdMetrics) -> Offered {
        let offered = self.offer(job);
        let outcome = match offered {
            Offered::Queued => "queued",
            Offered::Duplicate => "duplicate",
            Offered::Dropped => "dropped",
        };
        metrics.promotions.with_label_values(&[outcome]).inc();
        metrics.promotion_queue_depth.set(self.depth() as i64);
        offered
    }
}

/// Starts the promotion worker of the node's cold tier.
pub fn spawn(state: Arc<ColdContext>) -> std::io::Result<()> {
    if state.cold.get().is_none() {
        return Ok(());
    }
    std::thread::Builder::new()
        .name("crescent-cold-promote".into())
        .spawn(move || {
            lower_thread_priority();
            run(&state)
        })
        .map(|_| ())
}

/// Promotion work yields the CPU to the readers: this thread runs at nice +10 (Linux sets
/// the nice value per thread). Best effort: a refusal leaves the default priority.
fn lower_thread_priority() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: gettid has no preconditions; setpriority only reads its arguments.
        #[allow(unsafe_code)]
        let refused = unsafe {
            let tid = libc::gettid();
            libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, PROMOTION_NICE)
        };
        if refused != 0 {
            tracing::debug!(error = %std::io::Error::last_os_error(),
                "the promotion worker keeps the default priority");
        }
    }
}

/// The promotion worker's nice value.
const PROMOTION_NICE: libc::c_int = 10;

fn run(state: &ColdContext) {
    let tier = state.cold.get().expect("cold tier").clone();
    while !tier.queue.stopped() {
        let Some((key, job)) = tier.promotions.take(IDLE_POLL) else {
            continue;
        };
        let outcome = match promote_job(state, &job) {
            Ok(true) => "done",
            Ok(false) => "stale",
            Err(e) => {
                tracing::debug!(key = %job.id.key, error = %e, "background promotion failed");
                "failed"
            }
        };
        tier.promotions.finish(&key, job.route.length);
        tier.metrics.promotions.with_label_values(&[outcome]).inc();
        tier.metrics
            .promotion_queue_depth
            .set(tier.promotions.depth() as i64);
    }
}

/// Promotes one restored object if its route is still the one it was restored at; `Ok(false)`
/// when the route moved on (nothing to do).
fn promote_job(state: &ColdContext, job: &PromotionJob) -> Result<bool, ColdError> {
    let _span =
        tracing::debug_span!("cold.promote_background", length = job.route.length).entered();
    let tier = state.cold.get().expect("cold tier");
    let current = state
        .directory
        .route(&job.id)
        .map_err(|e| ColdError::InvalidArgument {
            field: "id",
            reason: e.to_string(),
        })?;
    if current.as_ref() != Some(&job.route) {
        return Ok(false);
    }
    let bytes = promotion_payload(state, tier, &job.route)?;
    super::restore::promote(state, &job.id, &job.route, &bytes)?;
    Ok(true)
}

/// The verified payload to promote. A backing on a storage owner's device whose owner has a
/// staging region large enough is pulled from that region over the data plane, as a remote
/// reader would (`OwnerDeviceIo::read_staged`): no payload rides the owner's poll, so objects
/// above the inline limit are promoted too. Payloads below `staging_min_bytes` (one poll
/// round trip is cheaper than a stage, a transfer and a release), backings on an owner
/// without a region and on crescentd's own devices are re-read through the restore single
/// flight as before; so is a payload that fits the poll when the owner's region is saturated
/// (its readers go first).
fn promotion_payload(
    state: &ColdContext,
    tier: &ColdTier,
    route: &ObjectRoute,
) -> Result<Arc<Vec<u8>>, ColdError> {
    let Some(backing) = tier.owner_stageable(route)? else {
        return tier.read_verified(route);
    };
    let hot = NodeHot { state };
    let (length, checksum) = (backing.length, backing.checksum);
    match backing
        .owner
        .read_staged(&hot, backing.locator, length, checksum, state.now_ms())
    {
        Err(ColdError::Backpressure { .. }) if length <= MAX_OWNER_INLINE_READ => {
            tier.metrics
                .backpressure
                .with_label_values(&["owner_promotion_staging"])
                .inc();
            tier.read_verified(route)
        }
        read => read.map(Arc::new),
    }
}

#[cfg(test)]
#[path = "promotion_tests.rs"]
mod tests;
