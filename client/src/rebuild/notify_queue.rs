//! The writer's pending owner notices: replicas this process committed in other owners'
//! segments that the owners have not acknowledged yet. Pure (time is passed in), so the bounds
//! are testable:
//!
//! - bounded by entries and by estimated encoded bytes; when full, the oldest entry is dropped
//!   (counted), never the new write blocked;
//! - coalesced per (owner endpoint, object, segment): a newer put replaces an older one, a
//!   repeat changes nothing;
//! - retried with exponential backoff (100 ms doubling to 10 s), at most `max_attempts` times
//!   and for at most `lifetime` after the put; a dropped entry is counted, never reported as
//!   acknowledged;
//! - one round takes at most `max_batches_per_round` due batches of `batch_entries` each, so a
//!   dead owner costs one small message per backoff step, not a resend of everything.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crescent_wire::rebuild::{NoticeOutcome, ReplayEntry};
use crescent_wire::store::ObjectId;

/// Bounds and pacing of the notice queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotifyConfig {
    pub max_entries: usize,
    pub max_bytes: usize,
    pub batch_entries: usize,
    pub max_batches_per_round: usize,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    pub max_attempts: u32,
    pub lifetime: Duration,
}

impl Default for NotifyConfig {
    fn default() -> Self {
        Self {
            max_entries: 65_536,
            max_bytes: 64 << 20,
            batch_entries: 256,
            max_batches_per_round: 64,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(10),
            max_attempts: 12,
            lifetime: Duration::from_secs(300),
        }
    }
}

impl NotifyConfig {
    /// The wait after the `attempts`-th failure.
    pub fn backoff(&self, attempts: u32) -> Duration {
        let factor = 1u32 << attempts.saturating_sub(1).min(20);
        self.initial_backoff
            .saturating_mul(factor)
            .min(self.max_backoff)
    }
}

/// The owner a notice goes to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NoticeTarget {
    /// The owner's transfer endpoint (`HOST:PORT`).
    pub endpoint: Arc<str>,
    pub owner_id: Arc<str>,
}

type Key = (NoticeTarget, ObjectId, String);

#[derive(Debug)]
struct Pending {
    entry: ReplayEntry,
    bytes: usize,
    enqueued: Instant,
    attempts: u32,
    due: Instant,
    in_flight: bool,
    /// Insertion number (the oldest goes first when full).
    order: u64,
}

/// Entries taken for one send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoticeBatch {
    pub target: NoticeTarget,
    pub entries: Vec<ReplayEntry>,
}

/// Why entries left the queue without an acknowledgement (bounded metric labels).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// The queue was full (entries or bytes).
    Overflow,
    /// Out of attempts or past the lifetime.
    Expired,
    /// The owner cannot take notices (no handler, refused): retrying cannot help.
    Refused,
}

impl DropReason {
    pub fn label(self) -> &'static str {
        match self {
            DropReason::Overflow => "overflow",
            DropReason::Expired => "expired",
            DropReason::Refused => "refused",
        }
    }
}

/// What a finished send or a round did, for metrics.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct QueueEvents {
    pub acknowledged: Vec<NoticeOutcome>,
    pub dropped: Vec<(DropReason, usize)>,
}

#[derive(Debug)]
pub struct NotifyQueue {
    config: NotifyConfig,
    pending: HashMap<Key, Pending>,
    by_order: BTreeMap<u64, Key>,
    bytes: usize,
    next_order: u64,
}

/// Estimated encoded size of an entry (msgpack with field names), for the byte bound.
fn estimate(e: &ReplayEntry) -> usize {
    96 + e.id.key.len()
        + e.id.tenant.as_ref().map_or(0, String::len)
        + e.id.domain.as_ref().map_or(0, String::len)
        + e.segment_id.len()
}

impl NotifyQueue {
    pub fn new(config: NotifyConfig) -> Self {
        Self {
            config,
            pending: HashMap::new(),
            by_order: BTreeMap::new(),
            bytes: 0,
            next_order: 0,
        }
    }

    pub fn config(&self) -> &NotifyConfig {
        &self.config
    }

    pub fn len(&self) -> usize {
        self.pending.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    fn remove(&mut self, key: &Key) -> Option<Pending> {
        let p = self.pending.remove(key)?;
        self.by_order.remove(&p.order);
        self.bytes -= p.bytes;
        Some(p)
    }

    /// Queues a notice; never blocks and never fails. Returns what had to be dropped.
    pub fn push(&mut self, target: NoticeTarget, entry: ReplayEntry, now: Instant) -> QueueEvents {
        let mut events = QueueEvents::default();
        let key: Key = (target, entry.id.clone(), entry.segment_id.clone());
        if let Some(p) = self.pending.get(&key) {
            if p.entry.put_id >= entry.put_id {
                return events;
            }
            self.remove(&key);
        }
        let bytes = estimate(&entry);
        if bytes > self.config.max_bytes || self.config.max_entries == 0 {
            events.dropped.push((DropReason::Overflow, 1));
            return events;
        }
        let mut overflow = 0;
        while self.pending.len() >= self.config.max_entries
            || self.bytes + bytes > self.config.max_bytes
        {
            let (_, oldest) = self
                .by_order
                .pop_first()
                .expect("non-empty when over a bound");
            let p = self.pending.remove(&oldest).expect("indexed");
            self.bytes -= p.bytes;
            overflow += 1;
        }
        if overflow > 0 {
            events.dropped.push((DropReason::Overflow, overflow));
        }
        let order = self.next_order;
        self.next_order += 1;
        self.by_order.insert(order, key.clone());
        self.bytes += bytes;
        self.pending.insert(
            key,
            Pending {
                entry,
                bytes,
                enqueued: now,
                attempts: 0,
                due: now,
                in_flight: false,
                order,
            },
        );
        events
    }

    /// Takes due entries (not in flight) grouped by owner, and drops expired ones.
    pub fn take_due(&mut self, now: Instant) -> (Vec<NoticeBatch>, QueueEvents) {
        let mut events = QueueEvents::default();
        let expired: Vec<Key> = self
            .pending
            .iter()
            .filter(|(_, p)| !p.in_flight && now.duration_since(p.enqueued) >= self.config.lifetime)
            .map(|(k, _)| k.clone())
            .collect();
        if !expired.is_empty() {
            events.dropped.push((DropReason::Expired, expired.len()));
            for k in &expired {
                self.remove(k);
            }
        }
        let mut due: Vec<(&Key, &Pending)> = self
            .pending
            .iter()
            .filter(|(_, p)| !p.in_flight && p.due <= now)
            .collect();
        due.sort_by_key(|(k, p)| (&k.0, p.order));
        let mut batches: Vec<NoticeBatch> = Vec::new();
        let mut taken: Vec<Key> = Vec::new();
        for (key, p) in due {
            let joins = batches
                .last()
                .is_some_and(|b| b.target == key.0 && b.entries.len() < self.config.batch_entries);
            if joins {
                batches
                    .last_mut()
                    .expect("checked")
                    .entries
                    .push(p.entry.clone());
            } else if batches.len() >= self.config.max_batches_per_round {
                break;
            } else {
                batches.push(NoticeBatch {
                    target: key.0.clone(),
                    entries: vec![p.entry.clone()],
                });
            }
            taken.push(key.clone());
        }
        for k in taken {
            self.pending.get_mut(&k).expect("listed").in_flight = true;
        }
        (batches, events)
    }

    /// The earliest time something is due (for the sender's sleep).
    pub fn next_due(&self) -> Option<Instant> {
        self.pending
            .values()
            .filter(|p| !p.in_flight)
            .map(|p| p.due)
            .min()
    }

    /// The owner answered: each entry is settled (recorded, stale or rejected alike: the
    /// owner decided). An entry replaced by a newer put meanwhile stays queued.
    pub fn acknowledged(&mut self, batch: &NoticeBatch, outcomes: &[NoticeOutcome]) -> QueueEvents {
        let mut events = QueueEvents::default();
        for (e, &o) in batch.entries.iter().zip(outcomes) {
            let key: Key = (batch.target.clone(), e.id.clone(), e.segment_id.clone());
            match self.pending.get_mut(&key) {
                Some(p) if p.entry.put_id == e.put_id => {
                    self.remove(&key);
                    events.acknowledged.push(o);
                }
                Some(p) => p.in_flight = false,
                None => {}
            }
        }
        // Entries the answer did not cover (a short answer) go back for a retry.
        for e in batch.entries.iter().skip(outcomes.len()) {
            let key: Key = (batch.target.clone(), e.id.clone(), e.segment_id.clone());
            if let Some(p) = self.pending.get_mut(&key) {
                p.in_flight = false;
            }
        }
        events
    }

    /// The send failed. `retryable`: back off and retry (until attempts or lifetime run out);
    /// otherwise the owner cannot take notices and the entries are dropped.
    pub fn failed(&mut self, batch: &NoticeBatch, retryable: bool, now: Instant) -> QueueEvents {
        let mut events = QueueEvents::default();
        let (mut expired, mut refused) = (0, 0);
        for e in &batch.entries {
            let key: Key = (batch.target.clone(), e.id.clone(), e.segment_id.clone());
            let Some(p) = self.pending.get_mut(&key) else {
                continue;
            };
            p.in_flight = false;
            if p.entry.put_id != e.put_id {
                continue; // replaced by a newer put: that one has its own schedule
            }
            p.attempts += 1;
            let too_old = now.duration_since(p.enqueued) >= self.config.lifetime;
            if !retryable {
                refused += 1;
                self.remove(&key);
            } else if p.attempts >= self.config.max_attempts || too_old {
                expired += 1;
                self.remove(&key);
            } else {
                p.due = now + self.config.backoff(p.attempts);
            }
        }
        if expired > 0 {
            events.dropped.push((DropReason::Expired, expired));
        }
        if refused > 0 {
            events.dropped.push((DropReason::Refused, refused));
        }
        events
    }
}

#[cfg(test)]
#[path = "notify_queue_tests.rs"]
mod tests;
