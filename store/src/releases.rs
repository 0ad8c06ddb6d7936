//! Release queues: the replicas crescentd gave back on each remote owner's segments, waiting
//! to be delivered to that owner on its heartbeat answer.
//!
//! Why: per-object metadata is not journaled; after a restart or failover crescentd rebuilds
//! it from what the owners replay (docs/rebuild.md). An owner only learns of removes its own
//! process makes, so without this a remove (or eviction, overwrite, reclaim) by anyone else
//! would come back at the next replay. Every place the directory frees an allocation ends in
//! `ObjectDirectory::free_replicas`, which records it here.
//!
//! Shape: one bounded FIFO per owner that has a remote segment mounted (the embedded segment
//! has no owner process to tell and is never queued). Entries carry a sequence that is above
//! every earlier run's (`begin` sets the floor from the incarnation, like put ids), so an
//! owner's acknowledgement from before a restart never covers a release of this run. An entry
//! leaves its queue only when the owner acknowledges its sequence (or when the queue
//! overflows: the oldest entry is dropped and counted; that replica may then come back at a
//! later replay, as before this queue existed).
//!
//! Locks: the owner map is read-locked on the hot path and each queue has its own mutex; both
//! are leaves (nothing else is locked while holding them), so recording under a shard lock
//! and the segment table lock is deadlock free.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use crescent_wire::store::{ReleasedReplica, RELEASE_WIRE_VERSION};
use prometheus::{IntCounter, IntCounterVec, IntGauge, Opts, Registry};

/// Default bound of one owner's queue, in entries (about 100 bytes each).
pub const DEFAULT_RELEASE_QUEUE_LIMIT: usize = 65_536;

/// Most releases one heartbeat answer carries; the rest follow on the next heartbeats.
pub const MAX_RELEASES_PER_HEARTBEAT: usize = 4096;

/// Counters of release delivery. Labels are fixed event names only.
#[derive(Clone, Debug)]
pub struct ReleaseMetrics {
    events: IntCounterVec,
    queued: IntCounter,
    acknowledged: IntCounter,
    overflow: IntCounter,
    pending: IntGauge,
}

impl ReleaseMetrics {
    pub(crate) fn unregistered() -> Self {
        let events = IntCounterVec::new(
            Opts::new(
                "crescent_store_releases_total",
                "Replica releases for owners by event (queued, delivered: acknowledged by the \
                 owner, dropped_overflow: dropped undelivered because the owner's queue was full).",
            ),
            &["event"],
        )
        .expect("valid metric");
        Self {
            queued: events.with_label_values(&["queued"]),
            acknowledged: events.with_label_values(&["delivered"]),
            overflow: events.with_label_values(&["dropped_overflow"]),
            events,
            pending: IntGauge::new(
                "crescent_store_releases_pending",
                "Replica releases queued for owners and not acknowledged yet.",
            )
            .expect("valid metric"),
        }
    }

    pub(crate) fn register(&self, registry: &Registry) -> prometheus::Result<()> {
        registry.register(Box::new(self.events.clone()))?;
        registry.register(Box::new(self.pending.clone()))
    }

    /// (queued, delivered, dropped by overflow), for tests and `/stats`.
    pub fn counts(&self) -> (u64, u64, u64) {
        (
            self.queued.get(),
            self.acknowledged.get(),
            self.overflow.get(),
        )
    }
}

/// One owner's undelivered releases, oldest first.
#[derive(Debug, Default)]
struct OwnerQueue {
    entries: VecDeque<ReleasedReplica>,
}

/// The per-owner release queues of one directory.
#[derive(Debug)]
pub struct ReleaseQueues {
    owners: RwLock<HashMap<Arc<str>, Arc<Mutex<OwnerQueue>>>>,
    next_seq: AtomicU64,
    limit: usize,
    metrics: ReleaseMetrics,
}

impl ReleaseQueues {
    /// Queues of at most `limit` entries each (at least 1).
    pub fn new(limit: usize, metrics: ReleaseMetrics) -> Self {
        Self {
            owners: RwLock::default(),
            next_seq: AtomicU64::new(1),
            limit: limit.max(1),
            metrics,
        }
    }

    pub fn metrics(&self) -> &ReleaseMetrics {
        &self.metrics
    }

    /// Raises the next sequence to at least `floor` (the first put id of a new incarnation, so
    /// sequences of this run are above every earlier run's).
    pub fn begin(&self, floor: u64) {
        self.next_seq.fetch_max(floor.max(1), Ordering::SeqCst);
    }

    /// Starts queueing releases for `owner_id` (it mounted a remote segment). Idempotent.
    pub fn track(&self, owner_id: &str) {
        let mut owners = self.owners.write().unwrap_or_else(|p| p.into_inner());
        owners.entry(Arc::from(owner_id)).or_default();
    }

    /// Stops queueing for `owner_id` and drops what it had (its last segment is gone: it
    /// forgets the segment's replicas itself when it mounts again).
    pub fn untrack(&self, owner_id: &str) {
        let removed = self
            .owners
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(owner_id);
        if let Some(q) = removed {
            let n = q.lock().unwrap_or_else(|p| p.into_inner()).entries.len();
            self.metrics.pending.sub(n as i64);
        }
    }

    /// Drops the queued releases of `segment_id` (unmounted: the owner forgets it whole).
    pub fn drop_segment(&self, owner_id: &str, segment_id: &str) {
        let Some(q) = self.queue(owner_id) else {
            return;
        };
        let mut q = q.lock().unwrap_or_else(|p| p.into_inner());
        let before = q.entries.len();
        q.entries.retain(|r| r.segment_id != segment_id);
        self.metrics.pending.sub((before - q.entries.len()) as i64);
    }

    /// Whether `owner_id` has a process to tell (a remote segment mounted).
    pub fn tracks(&self, owner_id: &str) -> bool {
        self.queue(owner_id).is_some()
    }

    fn queue(&self, owner_id: &str) -> Option<Arc<Mutex<OwnerQueue>>> {
        self.owners
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(owner_id)
            .cloned()
    }

    /// Records that the replica of `put_id` at `offset` of `segment_id` (owned by `owner_id`)
    /// was released. A put id of 0 names no committed allocation and an untracked owner has
    /// no process to tell: both are ignored. Returns whether it was queued.
    pub fn record(
        &self,
        owner_id: &str,
        segment_id: &str,
        offset: u64,
        length: u64,
        put_id: u64,
    ) -> bool {
        if put_id == 0 {
            return false;
        }
        let Some(q) = self.queue(owner_id) else {
            return false;
        };
        let mut q = q.lock().unwrap_or_else(|p| p.into_inner());
        // Taken under the queue lock so one queue's sequences are in order.
        let seq = self.next_seq.fetch_add(1, Ordering::SeqCst);
        if q.entries.len() >= self.limit {
            q.entries.pop_front();
            self.metrics.overflow.inc();
            self.metrics.pending.dec();
        }
        q.entries.push_back(ReleasedReplica {
            version: RELEASE_WIRE_VERSION,
            seq,
            segment_id: segment_id.to_string(),
            offset,
            length,
            put_id,
        });
        self.metrics.queued.inc();
        self.metrics.pending.inc();
        true
    }

    /// The heartbeat exchange: drops the entries `owner_id` acknowledged (sequence at most
    /// `applied`), then returns up to `max` of the rest, oldest first, still queued until a
    /// later acknowledgement. An unknown owner gets nothing.
    pub fn exchange(
        &self,
        owner_id: &str,
        applied: Option<u64>,
        max: usize,
    ) -> Vec<ReleasedReplica> {
        self.exchange_acked(owner_id, applied, max).1
    }

    /// [`Self::exchange`], also returning the put ids of the entries acknowledged now (the
    /// owner forgot them: their removals are settled).
    pub fn exchange_acked(
        &self,
        owner_id: &str,
        applied: Option<u64>,
        max: usize,
    ) -> (Vec<u64>, Vec<ReleasedReplica>) {
        let Some(q) = self.queue(owner_id) else {
            return (Vec::new(), Vec::new());
        };
        let mut q = q.lock().unwrap_or_else(|p| p.into_inner());
        let mut acked = Vec::new();
        if let Some(applied) = applied {
            while q.entries.front().is_some_and(|r| r.seq <= applied) {
                if let Some(r) = q.entries.pop_front() {
                    acked.push(r.put_id);
                }
            }
            self.metrics.acknowledged.inc_by(acked.len() as u64);
            self.metrics.pending.sub(acked.len() as i64);
        }
        (acked, q.entries.iter().take(max).cloned().collect())
    }

    /// Undelivered entries of `owner_id`.
    pub fn pending(&self, owner_id: &str) -> usize {
        self.queue(owner_id).map_or(0, |q| {
            q.lock().unwrap_or_else(|p| p.into_inner()).entries.len()
        })
    }
}

#[cfg(test)]
#[path = "releases_tests.rs"]
mod tests;
