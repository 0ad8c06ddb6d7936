//! The background sender of owner notices: takes due batches from the [`NotifyQueue`] under a
//! short lock, sends them outside it, and settles the answers. One task per client, started on
//! the first notice; it ends when its sender reports the client gone.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crescent_wire::rebuild::{OwnerNotice, OwnerNoticeReply, ReplayEntry};
use futures::future::{join_all, BoxFuture};

use super::notify_queue::{NoticeBatch, NoticeTarget, NotifyConfig, NotifyQueue, QueueEvents};
use crate::metrics::RebuildMetrics;

/// Why a notice could not be delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendFailure {
    /// The owner may answer later (unreachable, timed out).
    Retryable(String),
    /// The owner cannot take notices (no handler, refused the message).
    Refused(String),
}

/// Delivers one notice to an owner's endpoint.
pub trait NoticeSender: Send + Sync + 'static {
    fn send<'a>(
        &'a self,
        endpoint: &'a str,
        notice: &'a OwnerNotice,
    ) -> BoxFuture<'a, Result<OwnerNoticeReply, SendFailure>>;

    /// Whether the client this sender belongs to still exists (the task stops otherwise).
    fn alive(&self) -> bool;
}

/// Longest sleep of the sender task when nothing is due.
const IDLE_WAIT: Duration = Duration::from_secs(1);

pub struct Notifier {
    queue: Mutex<NotifyQueue>,
    wake: tokio::sync::Notify,
    sender: Arc<dyn NoticeSender>,
    metrics: RebuildMetrics,
    started: AtomicBool,
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifier")
            .field("pending", &self.lock().len())
            .finish_non_exhaustive()
    }
}

impl Notifier {
    pub fn new(
        config: NotifyConfig,
        sender: Arc<dyn NoticeSender>,
        metrics: RebuildMetrics,
    ) -> Self {
        Self {
            queue: Mutex::new(NotifyQueue::new(config)),
            wake: tokio::sync::Notify::new(),
            sender,
            metrics,
            started: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> MutexGuard<'_, NotifyQueue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Entries waiting for an owner's acknowledgement.
    pub fn pending(&self) -> usize {
        self.lock().len()
    }

    fn observe(&self, events: &QueueEvents, depth: usize) {
        for (reason, n) in &events.dropped {
            self.metrics.notices_dropped(*reason, *n as u64);
            tracing::warn!(
                reason = reason.label(),
                entries = n,
                "owner notices dropped unacknowledged"
            );
        }
        for o in &events.acknowledged {
            self.metrics.notice_settled(*o);
        }
        self.metrics.notify_queue_depth.set(depth as i64);
    }

    /// Queues notices for `target` and returns at once (never blocks a write). Starts the
    /// sender task on first use when called inside a tokio runtime.
    pub fn enqueue(self: &Arc<Self>, target: NoticeTarget, entries: Vec<ReplayEntry>) {
        if entries.is_empty() {
            return;
        }
        let now = Instant::now();
        let (events, depth) = {
            let mut q = self.lock();
            let mut all = QueueEvents::default();
            for e in entries {
                let ev = q.push(target.clone(), e, now);
                all.dropped.extend(ev.dropped);
            }
            (all, q.len())
        };
        self.observe(&events, depth);
        self.start();
        self.wake.notify_one();
    }

    fn start(self: &Arc<Self>) {
        if self.started.load(Ordering::Relaxed) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if !self.started.swap(true, Ordering::SeqCst) {
            runtime.spawn(run(self.clone()));
        }
    }

    /// One round: send what is due (outside the lock), settle the answers. Returns how many
    /// batches were sent.
    pub async fn round(&self) -> usize {
        let (batches, events) = self.lock().take_due(Instant::now());
        let depth = self.pending();
        self.observe(&events, depth);
        if batches.is_empty() {
            return 0;
        }
        let notices: Vec<OwnerNotice> = batches.iter().map(notice_of).collect();
        let sends = batches
            .iter()
            .zip(&notices)
            .map(|(b, n)| self.sender.send(&b.target.endpoint, n));
        let answers = join_all(sends).await;
        let now = Instant::now();
        let mut q = self.lock();
        let mut all = QueueEvents::default();
        for (b, answer) in batches.iter().zip(answers) {
            let ev = match answer {
                Ok(reply) => q.acknowledged(b, &reply.outcomes),
                Err(SendFailure::Retryable(why)) => {
                    tracing::debug!(endpoint = %b.target.endpoint, %why, "owner notice failed");
                    q.failed(b, true, now)
                }
                Err(SendFailure::Refused(why)) => {
                    tracing::warn!(endpoint = %b.target.endpoint, %why, "owner refused notices");
                    q.failed(b, false, now)
                }
            };
            all.acknowledged.extend(ev.acknowledged);
            all.dropped.extend(ev.dropped);
        }
        let depth = q.len();
        drop(q);
        self.observe(&all, depth);
        batches.len()
    }
}

fn notice_of(b: &NoticeBatch) -> OwnerNotice {
    OwnerNotice {
        version: crescent_wire::rebuild::REBUILD_WIRE_VERSION,
        owner_id: b.target.owner_id.to_string(),
        entries: b.entries.clone(),
    }
}

async fn run(notifier: Arc<Notifier>) {
    while notifier.sender.alive() {
        if notifier.round().await > 0 {
            continue;
        }
        let wait = notifier
            .lock()
            .next_due()
            .map_or(IDLE_WAIT, |due| {
                due.saturating_duration_since(Instant::now())
            })
            .min(IDLE_WAIT);
        tokio::select! {
            _ = notifier.wake.notified() => {}
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

#[cfg(test)]
#[path = "notifier_tests.rs"]
mod tests;
