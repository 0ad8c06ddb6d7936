//! The offload scheduler: a plain data structure (no threads, time passed in) that the
//! offload worker polls. Bounded by entries and bytes (queued, waiting to retry or in flight),
//! ordered FIFO or smallest-first within two classes (eviction-triggered work first: it frees
//! DRAM under pressure), rate-limited by a byte token bucket, retrying failures with
//! exponential backoff up to a maximum number of attempts, and refusing passthrough work
//! between the high watermark and the fall back under the low one.

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::error::ColdError;
use crate::ids::ColdOpId;

/// Order within a class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OffloadOrder {
    Fifo,
    /// Smallest payload first (FIFO among equals): more objects materialized per second.
    SizeAware,
}

/// Why a job was queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OffloadMode {
    /// A completed put queued for background materialization.
    Passthrough,
    /// Eviction materializes its victim before releasing DRAM: served first, and admitted
    /// above the high watermark (only the hard bounds refuse it).
    EvictTriggered,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SchedulerConfig {
    pub max_entries: usize,
    pub max_bytes: u64,
    pub order: OffloadOrder,
    /// Bytes per second dispatched; 0 = unlimited.
    pub rate_bytes_per_sec: u64,
    /// Token bucket depth in bytes.
    pub burst_bytes: u64,
    pub retry_base_ms: u64,
    pub retry_max_ms: u64,
    /// Attempts (the first included) before a job is given up.
    pub max_attempts: u32,
    /// Fractions of `max_bytes`: at or above `high`, passthrough work is refused until the
    /// held bytes fall to `low` or below.
    pub high_watermark: f64,
    pub low_watermark: f64,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            max_entries: 65_536,
            max_bytes: 8 << 30,
            order: OffloadOrder::Fifo,
            rate_bytes_per_sec: 0,
            burst_bytes: 256 << 20,
            retry_base_ms: 100,
            retry_max_ms: 30_000,
            max_attempts: 8,
            high_watermark: 0.9,
            low_watermark: 0.7,
        }
    }
}

impl SchedulerConfig {
    pub fn validate(&self) -> Result<(), ColdError> {
        let bad = ColdError::invalid;
        if self.max_entries == 0 {
            return Err(bad("max_entries", "must be > 0"));
        }
        if self.max_bytes == 0 {
            return Err(bad("max_bytes", "must be > 0"));
        }
        if self.rate_bytes_per_sec > 0 && self.burst_bytes == 0 {
            return Err(bad("burst_bytes", "must be > 0 when a rate is set"));
        }
        if self.retry_base_ms == 0 || self.retry_max_ms < self.retry_base_ms {
            return Err(bad("retry_base_ms", "must be > 0 and at most retry_max_ms"));
        }
        if self.max_attempts == 0 {
            return Err(bad("max_attempts", "must be > 0"));
        }
        let fraction = |x: f64| x > 0.0 && x <= 1.0;
        if !fraction(self.high_watermark) || !fraction(self.low_watermark) {
            return Err(bad("watermarks", "must be in (0, 1]"));
        }
        if self.low_watermark >= self.high_watermark {
            return Err(bad("low_watermark", "must be below high_watermark"));
        }
        Ok(())
    }
}

/// One offload to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffloadJob {
    pub op_id: ColdOpId,
    pub device_id: String,
    pub object_key: String,
    pub length: u64,
    pub mode: OffloadMode,
}

/// A job handed to the worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dispatch {
    pub job: OffloadJob,
    /// 1 for the first attempt.
    pub attempt: u32,
}

/// What happens to a failed job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryDecision {
    Retry {
        at_ms: i64,
    },
    /// `max_attempts` reached: the job left the scheduler; the caller cancels or reclaims.
    GiveUp {
        attempts: u32,
    },
}

#[derive(Debug, Clone)]
struct Held {
    job: OffloadJob,
    attempts: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Ready((u8, u64, u64)),
    Retry((i64, u64)),
    InFlight,
}

#[derive(Debug)]
pub struct OffloadScheduler {
    config: SchedulerConfig,
    ready: BTreeMap<(u8, u64, u64), Held>,
    retry: BTreeMap<(i64, u64), Held>,
    in_flight: HashMap<ColdOpId, Held>,
    place: HashMap<ColdOpId, Place>,
    seq: u64,
    bytes: u64,
    tokens: f64,
    refilled_at_ms: Option<i64>,
    pressured: bool,
}

impl OffloadScheduler {
    pub fn new(config: SchedulerConfig) -> Result<Self, ColdError> {
        config.validate()?;
        Ok(Self {
            tokens: config.burst_bytes as f64,
            config,
            ready: BTreeMap::new(),
            retry: BTreeMap::new(),
            in_flight: HashMap::new(),
            place: HashMap::new(),
            seq: 0,
            bytes: 0,
            refilled_at_ms: None,
            pressured: false,
        })
    }

    pub fn config(&self) -> &SchedulerConfig {
        &self.config
    }

    /// Jobs waiting to be dispatched (ready or waiting to retry).
    pub fn depth(&self) -> usize {
        self.ready.len() + self.retry.len()
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Bytes held: queued, waiting to retry and in flight.
    pub fn held_bytes(&self) -> u64 {
        self.bytes
    }

    /// Between the high watermark and the fall under the low one.
    pub fn is_pressured(&self) -> bool {
        self.pressured
    }

    pub fn contains(&self, op_id: &ColdOpId) -> bool {
        self.place.contains_key(op_id)
    }

    fn backpressure(reason: String) -> ColdError {
        ColdError::Backpressure {
            queue: "offload queue",
            reason,
        }
    }

    /// Queues a job; a job already held (same operation id) is left as it is.
    pub fn enqueue(&mut self, job: OffloadJob) -> Result<(), ColdError> {
        if self.place.contains_key(&job.op_id) {
            return Ok(());
        }
        let entries = self.place.len();
        if entries >= self.config.max_entries {
            return Err(Self::backpressure(format!(
                "{entries} entries held, at most {}",
                self.config.max_entries
            )));
        }
        // A job larger than the whole byte bound still runs when nothing else is held.
        if self.bytes > 0 && self.bytes.saturating_add(job.length) > self.config.max_bytes {
            return Err(Self::backpressure(format!(
                "{} + {} bytes exceed the bound of {}",
                self.bytes, job.length, self.config.max_bytes
            )));
        }
        if self.pressured && job.mode == OffloadMode::Passthrough {
            return Err(Self::backpressure(format!(
                "above the high watermark ({} bytes held); passthrough resumes below the low one",
                self.bytes
            )));
        }
        self.bytes += job.length;
        self.insert_ready(Held { job, attempts: 0 });
        self.update_pressure();
        Ok(())
    }

    fn insert_ready(&mut self, held: Held) {
        self.seq += 1;
        let class = match held.job.mode {
            OffloadMode::EvictTriggered => 0,
            OffloadMode::Passthrough => 1,
        };
        let primary = match self.config.order {
            OffloadOrder::Fifo => 0,
            OffloadOrder::SizeAware => held.job.length,
        };
        let key = (class, primary, self.seq);
        self.place.insert(held.job.op_id, Place::Ready(key));
        self.ready.insert(key, held);
    }

    fn update_pressure(&mut self) {
        let max = self.config.max_bytes as f64;
        let held = self.bytes as f64;
        if held >= self.config.high_watermark * max {
            self.pressured = true;
        } else if held <= self.config.low_watermark * max {
            self.pressured = false;
        }
    }

    fn refill(&mut self, now_ms: i64) {
        if self.config.rate_bytes_per_sec == 0 {
            return;
        }
        let elapsed = self.refilled_at_ms.map_or(0, |t| (now_ms - t).max(0));
        self.refilled_at_ms = Some(self.refilled_at_ms.map_or(now_ms, |t| t.max(now_ms)));
        let added = elapsed as f64 * self.config.rate_bytes_per_sec as f64 / 1000.0;
        self.tokens = (self.tokens + added).min(self.config.burst_bytes as f64);
    }

    /// The next job to run at `now_ms`, if any is due and the rate limit allows. A job larger
    /// than the tokens available runs once the bucket is positive, leaving it in debt, so
    /// large payloads are never starved and the long-run rate holds.
    pub fn next(&mut self, now_ms: i64) -> Option<Dispatch> {
        while let Some(entry) = self.retry.first_entry() {
            if entry.key().0 > now_ms {
                break;
            }
            let held = entry.remove();
            self.insert_ready(held);
        }
        self.refill(now_ms);
        if self.config.rate_bytes_per_sec > 0 && self.tokens <= 0.0 {
            return None;
        }
        let (_, mut held) = self.ready.pop_first()?;
        if self.config.rate_bytes_per_sec > 0 {
            self.tokens -= held.job.length as f64;
        }
        held.attempts += 1;
        let dispatch = Dispatch {
            job: held.job.clone(),
            attempt: held.attempts,
        };
        self.place.insert(held.job.op_id, Place::InFlight);
        self.in_flight.insert(held.job.op_id, held);
        Some(dispatch)
    }

    /// When `next` may return something it does not now: the earliest retry or the moment the
    /// token bucket turns positive. `None` when idle.
    pub fn next_wakeup_ms(&self, now_ms: i64) -> Option<i64> {
        let retry = self.retry.keys().next().map(|(due, _)| *due);
        let tokens = (!self.ready.is_empty()).then(|| {
            if self.config.rate_bytes_per_sec == 0 || self.tokens > 0.0 {
                now_ms
            } else {
                let ms =
                    (-self.tokens * 1000.0 / self.config.rate_bytes_per_sec as f64).ceil() as i64;
                now_ms + ms.max(1)
            }
        });
        match (retry, tokens) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn forget(&mut self, held: &Held) {
        self.place.remove(&held.job.op_id);
        self.bytes -= held.job.length;
        self.update_pressure();
    }

    /// The job finished (materialized, or found obsolete): it leaves the scheduler.
    pub fn complete(&mut self, op_id: &ColdOpId) -> bool {
        match self.in_flight.remove(op_id) {
            Some(held) => {
                self.forget(&held);
                true
            }
            None => false,
        }
    }

    /// The job's attempt failed at `now_ms`: schedule a retry after `base * 2^(attempts-1)`
    /// (capped) or give up after `max_attempts`.
    pub fn fail(&mut self, op_id: &ColdOpId, now_ms: i64) -> Option<RetryDecision> {
        let held = self.in_flight.remove(op_id)?;
        if held.attempts >= self.config.max_attempts {
            self.forget(&held);
            return Some(RetryDecision::GiveUp {
                attempts: held.attempts,
            });
        }
        let shift = (held.attempts - 1).min(32);
        let delay = self
            .config
            .retry_base_ms
            .saturating_mul(1u64 << shift)
            .min(self.config.retry_max_ms);
        let at_ms = now_ms.saturating_add(delay as i64);
        self.seq += 1;
        let key = (at_ms, self.seq);
        self.place.insert(*op_id, Place::Retry(key));
        self.retry.insert(key, held);
        Some(RetryDecision::Retry { at_ms })
    }

    /// Removes a job wherever it is (its operation was cancelled or replaced).
    pub fn cancel(&mut self, op_id: &ColdOpId) -> bool {
        let held = match self.place.get(op_id).copied() {
            None => return false,
            Some(Place::Ready(k)) => self.ready.remove(&k),
            Some(Place::Retry(k)) => self.retry.remove(&k),
            Some(Place::InFlight) => self.in_flight.remove(op_id),
        };
        match held {
            Some(h) => {
                self.forget(&h);
                true
            }
            None => false,
        }
    }
}
