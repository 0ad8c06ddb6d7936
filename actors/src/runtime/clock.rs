//! The runtime's sources of non-determinism: wall-clock time and fresh ids.
//!
//! Aggregates never read these themselves; the actor shell reads them once per command and hands
//! the values to `decide` in [`crate::Ctx`]. Production uses [`SystemClock`] and [`RandomIds`];
//! tests swap in [`ManualClock`] and [`SequentialIds`] to make every command reproducible.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use uuid::Uuid;

/// Wall-clock time as the runtime sees it.
pub trait Clock: Send + Sync + 'static {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;
}

/// The operating system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
            // A clock set before 1970 is reported as negative time rather than a panic.
            Err(e) => -i64::try_from(e.duration().as_millis()).unwrap_or(i64::MAX),
        }
    }
}

/// A clock that only moves when told to. Clones share one time.
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    now_ms: Arc<AtomicI64>,
}

impl ManualClock {
    pub fn new(now_ms: i64) -> Self {
        Self {
            now_ms: Arc::new(AtomicI64::new(now_ms)),
        }
    }

    /// Sets the time (it may go backwards: tests of clock skew need that).
    pub fn set(&self, now_ms: i64) {
        self.now_ms.store(now_ms, Ordering::SeqCst);
    }

    /// Moves the time forward by `delta_ms` and returns the new time.
    pub fn advance(&self, delta_ms: i64) -> i64 {
        self.now_ms.fetch_add(delta_ms, Ordering::SeqCst) + delta_ms
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.now_ms.load(Ordering::SeqCst)
    }
}

/// Where fresh ids (operation ids and the like) come from.
pub trait IdSource: Send + Sync + 'static {
    fn fresh_id(&self) -> Uuid;
}

/// Random version-4 UUIDs.
#[derive(Debug, Clone, Copy, Default)]
pub struct RandomIds;

impl IdSource for RandomIds {
    fn fresh_id(&self) -> Uuid {
        Uuid::new_v4()
    }
}

/// Deterministic ids 1, 2, 3, ... (as UUIDs), for tests. Clones share one counter.
#[derive(Debug, Clone, Default)]
pub struct SequentialIds {
    next: Arc<AtomicU64>,
}

impl SequentialIds {
    pub fn new() -> Self {
        Self::default()
    }
}

impl IdSource for SequentialIds {
    fn fresh_id(&self) -> Uuid {
        Uuid::from_u128(u128::from(self.next.fetch_add(1, Ordering::SeqCst)) + 1)
    }
}
