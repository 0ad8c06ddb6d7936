//! Lease releases waiting to ride on a later request of the same RPC pool.
//!
//! A get's lease is released once its copy is done, but sending one release frame per get
//! costs both sides a write and the server a dispatch on every get's critical path. Instead a
//! release is queued here and leaves with the pool's next request, as one batch_release frame
//! written in front of it (one write for both; the server runs the connection's frames in
//! order, so the request already sees the leases released):
//!
//! - a request that may depend on a lease being gone (remove, put, unmount-like operations:
//!   everything but the read-only ops in [`may_trail_releases`]) takes every queued release;
//! - a read-only request takes them once [`RELEASE_COALESCE`] are queued, so a run of gets
//!   sends one release frame per that many gets;
//! - a timer sends what is still queued [`RELEASE_LINGER`] after the first one was queued,
//!   and waits for the answer; requests that must follow releases wait for such a flush in
//!   flight ([`PendingReleases::gate`]), since it may run on another connection.
//!
//! `settle()` flushes the queue and waits for the answers, so `crescent get K; crescent rm K`
//! works across processes.

use std::sync::Mutex;
use std::time::Duration;

use crescent_wire::rpc::RpcOp;
use crescent_wire::store::ReleaseRequest;

/// How long a queued release may wait for a request to ride on before a timer sends it.
pub(crate) const RELEASE_LINGER: Duration = Duration::from_millis(2);
/// Queued releases at which even a read-only request takes them along.
pub(crate) const RELEASE_COALESCE: usize = 64;

#[derive(Default)]
struct Queue {
    items: Vec<ReleaseRequest>,
    /// A timer is armed to flush the queue.
    timer_armed: bool,
}

/// The pool's queued releases.
#[derive(Default)]
pub(crate) struct PendingReleases {
    queue: Mutex<Queue>,
    /// Held by a timer flush until its releases are answered; taken by requests that must
    /// follow every earlier release.
    pub gate: tokio::sync::Mutex<()>,
}

/// Whether `op` can be sent while releases of earlier gets are still queued: it only reads,
/// so a lease still held cannot change its answer.
pub(crate) fn may_trail_releases(op: RpcOp) -> bool {
    op.only_reads() || op.releases_leases() || op == RpcOp::Heartbeat
}

impl PendingReleases {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues releases; `true` when the caller must arm the flush timer.
    pub fn push(&self, releases: impl IntoIterator<Item = ReleaseRequest>) -> bool {
        let mut q = self.lock();
        let before = q.items.len();
        q.items.extend(releases);
        q.items.len() > before && !std::mem::replace(&mut q.timer_armed, true)
    }

    /// Whether `op` must wait for a timer flush in flight before it is sent.
    pub fn must_precede(&self, op: RpcOp) -> bool {
        !may_trail_releases(op)
    }

    /// The releases to send in front of `op` (empty when they may wait longer).
    pub fn take_for(&self, op: RpcOp) -> Vec<ReleaseRequest> {
        let mut q = self.lock();
        if q.items.is_empty() || (may_trail_releases(op) && q.items.len() < RELEASE_COALESCE) {
            return Vec::new();
        }
        std::mem::take(&mut q.items)
    }

    /// Every queued release, for the timer (which is then disarmed) or `settle()`.
    pub fn take_all(&self) -> Vec<ReleaseRequest> {
        let mut q = self.lock();
        q.timer_armed = false;
        std::mem::take(&mut q.items)
    }

    /// How many are queued.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().items.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crescent_wire::store::ObjectId;

    fn release(key: &str) -> ReleaseRequest {
        ReleaseRequest {
            id: ObjectId::new(key),
            put_id: 7,
            lease_until_ms: 1_000,
            staged_token: None,
        }
    }

    #[test]
    fn only_the_first_queued_release_arms_the_timer_until_it_fires() {
        let p = PendingReleases::default();
        assert!(p.push([release("a")]));
        assert!(!p.push([release("b")]));
        assert_eq!(p.take_all().len(), 2);
        assert!(
            p.push([release("c")]),
            "a fired timer is re-armed by the next release"
        );
    }

    #[test]
    fn reads_take_releases_only_once_enough_are_queued() {
        let p = PendingReleases::default();
        for i in 0..RELEASE_COALESCE - 1 {
            p.push([release(&format!("k{i}"))]);
        }
        assert!(p.take_for(RpcOp::Get).is_empty());
        assert!(p.take_for(RpcOp::BatchGet).is_empty());
        p.push([release("last")]);
        assert_eq!(p.take_for(RpcOp::Get).len(), RELEASE_COALESCE);
        assert_eq!(p.len(), 0);
    }

    #[test]
    fn writes_take_every_queued_release() {
        let p = PendingReleases::default();
        p.push([release("a")]);
        assert!(p.must_precede(RpcOp::Remove));
        assert!(p.must_precede(RpcOp::PutStart));
        assert!(!p.must_precede(RpcOp::Get));
        let taken = p.take_for(RpcOp::Remove);
        assert_eq!(taken, vec![release("a")]);
        assert!(p.take_for(RpcOp::Remove).is_empty());
    }
}
