//! The admission gate of store requests (docs/tenants.md, "Soft isolation").
//!
//! `scheduling.max_concurrent_requests` slots run store requests (HTTP and the RPC fast path
//! alike). A request that finds a free slot and nobody waiting runs at once: one atomic
//! compare-and-swap and no task hop, so an uncontended node pays nearly nothing. Otherwise it
//! waits in its tenant's queue of a [`crescent_sched::FairQueue`], and every slot that frees is
//! handed to the next request in weighted round-robin turns with the configured item and byte
//! budgets: a tenant flooding the node takes at most its budget per turn while another tenant
//! has a request waiting.

mod batch_len;
mod metrics;
pub mod thread_turns;
pub mod ticket;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Mutex;
use std::time::Instant;

use crescent_sched::{Budget, FairQueue};
use tokio::sync::oneshot;
use tracing::Instrument;

pub use metrics::SchedMetrics;
pub use thread_turns::ConnectionTurns;
pub use ticket::Ticket;

/// A queued request: told through its channel when a slot is its own.
struct Waiter {
    handed: oneshot::Sender<()>,
}

struct Queue {
    fair: FairQueue<Waiter>,
    /// The turn of the last request let in (to count turns by tenant).
    last_turn: u64,
}

pub struct Gate {
    free: AtomicUsize,
    /// Requests in `queue` (cancelled ones until they are popped): non-zero sends new
    /// requests to the queue too, so they do not overtake those waiting.
    waiting: AtomicUsize,
    queue: Mutex<Queue>,
    metrics: SchedMetrics,
    /// For the RPC threads' turns (`thread_turns`).
    budget: Budget,
    weights: HashMap<String, u32>,
}

/// A slot, held while the request runs; dropping it hands the slot on.
#[must_use]
pub struct Permit<'a> {
    gate: &'a Gate,
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        self.gate.release();
    }
}

impl Gate {
    /// A gate of `slots` (at least 1) with per-turn `budget` and tenant `weights`.
    pub fn new(
        slots: usize,
        budget: Budget,
        weights: HashMap<String, u32>,
        registry: &prometheus::Registry,
    ) -> prometheus::Result<Self> {
        let named: HashSet<String> = weights.keys().cloned().collect();
        Ok(Self {
            free: AtomicUsize::new(slots.max(1)),
            waiting: AtomicUsize::new(0),
            queue: Mutex::new(Queue {
                fair: FairQueue::new(budget, weights.clone()),
                last_turn: 0,
            }),
            metrics: SchedMetrics::register(registry, named)?,
            budget,
            weights,
        })
    }

    /// Takes a slot for a request: at once when one is free and nobody waits, else after
    /// waiting for a turn of `ticket()`'s tenant (only then is the ticket computed).
    pub async fn admit(&self, ticket: impl FnOnce() -> Ticket) -> Permit<'_> {
        if self.waiting.load(SeqCst) == 0 && self.take_free() {
            return Permit { gate: self };
        }
        self.enter(ticket()).await
    }

    fn take_free(&self) -> bool {
        self.free
            .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }

    async fn enter(&self, ticket: Ticket) -> Permit<'_> {
        let span = tracing::debug_span!(
            "sched.wait",
            tenant = %ticket.tenant,
            items = ticket.cost.items,
            bytes = ticket.cost.bytes
        );
        let started = Instant::now();
        let handed = self.enqueue(ticket);
        let mut waiting = Waiting {
            gate: self,
            handed: Some(handed),
        };
        async {
            if let Some(handed) = waiting.handed.as_mut() {
                // The sender is dropped only with the gate, which outlives this borrow.
                let _ = handed.await;
            }
        }
        .instrument(span)
        .await;
        waiting.handed = None;
        self.metrics.waited(started.elapsed().as_secs_f64());
        Permit { gate: self }
    }

    /// Queues `ticket`, then lets in whoever's turn it is if a slot is free.
    fn enqueue(&self, ticket: Ticket) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        let mut queue = self.queue.lock().expect("gate mutex");
        // Counted before the free slots are looked at, while `release` counts a free slot
        // before it looks at this (both SeqCst): one of the two sees the other.
        self.waiting.fetch_add(1, SeqCst);
        self.metrics.queued(&ticket.tenant);
        queue
            .fair
            .push(&ticket.tenant, ticket.cost, Waiter { handed: tx });
        self.dispatch(&mut queue);
        rx
    }

    fn release(&self) {
        self.free.fetch_add(1, SeqCst);
        if self.waiting.load(SeqCst) > 0 {
            let mut queue = self.queue.lock().expect("gate mutex");
            self.dispatch(&mut queue);
        }
    }

    /// Hands free slots to queued requests in the scheduler's order. A request whose caller
    /// went away gives its slot straight back.
    fn dispatch(&self, queue: &mut Queue) {
        while !queue.fair.is_empty() && self.take_free() {
            let Some(next) = queue.fair.pop() else {
                self.free.fetch_add(1, SeqCst);
                return;
            };
            self.waiting.fetch_sub(1, SeqCst);
            self.metrics
                .dequeued(&next.tenant, next.turn != queue.last_turn);
            queue.last_turn = next.turn;
            if next.value.handed.send(()).is_err() {
                self.free.fetch_add(1, SeqCst);
            }
        }
    }
}

/// A request waiting in the queue. If its future is dropped (the connection went away) after
/// a slot was handed to it, the slot is given back.
struct Waiting<'a> {
    gate: &'a Gate,
    handed: Option<oneshot::Receiver<()>>,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if let Some(mut handed) = self.handed.take() {
            handed.close();
            if handed.try_recv().is_ok() {
                self.gate.release();
            }
        }
    }
}

#[cfg(test)]
mod tests;
