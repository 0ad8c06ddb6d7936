//! The removal log: put ids that removes took out of remote owners' segments, for the server
//! to journal before it acknowledges the removes, and the fence that keeps a replay from
//! bringing any of them back (docs/rebuild.md, "Removes are journaled").
//!
//! Why here: every remove ends in `ObjectDirectory::remove_entry`, deep under shard locks,
//! where nothing can wait for a journal. So a remove only appends to this log and takes a
//! number; the server journals what the log holds (many removes in one command: a group
//! commit) and answers each remove once the journal covers its number
//! ([`RemovalLog::recorded`] after the remove). The log is a leaf lock, like the release queues.
//!
//! The fence holds every put id removed and not yet settled: recorded by this run, or recovered
//! from the journal (`crescent_actors::removed_puts`). A replay entry of a fenced put id is
//! `Stale`, and the owner drops it.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};

use crate::tenants::HeldRefund;

/// Removed put ids by owner, waiting to be journaled.
pub type RemovedByOwner = BTreeMap<String, Vec<u64>>;

/// What [`RemovalLog::take`] took: journal `by_owner`, then settle `refunds`; or, when the
/// journal write fails, give both back with [`RemovalLog::restore`].
#[derive(Debug, Default)]
pub struct TakenRemovals {
    pub by_owner: RemovedByOwner,
    /// The quota of the removed versions among them (tenants get it back once durable).
    pub refunds: Vec<HeldRefund>,
    /// The removal number the journal covers once `by_owner` is journaled.
    pub reached: u64,
}

impl TakenRemovals {
    /// The removals are durable: their tenants' quota is free again.
    pub fn settle_refunds(&mut self) {
        for r in self.refunds.drain(..) {
            r.settle();
        }
    }
}

#[derive(Debug, Default)]
struct Pending {
    by_owner: RemovedByOwner,
    refunds: Vec<HeldRefund>,
    /// Put ids recorded so far (the number a remove waits for).
    recorded: u64,
}

#[derive(Debug, Default)]
pub struct RemovalLog {
    pending: Mutex<Pending>,
    /// put id -> the owners that may still hold it, for every removal not settled yet.
    fence: RwLock<HashMap<u64, Vec<Arc<str>>>>,
}

impl RemovalLog {
    /// Records that `put_id` was removed from `owner`'s segments (fenced at once).
    #[cfg(test)]
    pub(crate) fn record(&self, owner: &str, put_id: u64) {
        let _unrecorded = self.record_all(&[owner], put_id, None);
    }

    /// Records that `put_id` was removed from each of `owners`' segments (fenced at once),
    /// with the quota its removal holds, which goes to the journal write that covers it.
    /// Returns `refund` when nothing was recorded (no owner, or put id 0): nothing can replay
    /// such a version back, so the caller settles it at once.
    pub(crate) fn record_all(
        &self,
        owners: &[&str],
        put_id: u64,
        refund: Option<HeldRefund>,
    ) -> Option<HeldRefund> {
        if put_id == 0 || owners.is_empty() {
            return refund;
        }
        let mut fence = self.fence.write().unwrap_or_else(|p| p.into_inner());
        for owner in owners {
            fence_one(&mut fence, put_id, owner);
        }
        drop(fence);
        let mut p = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        for owner in owners {
            p.by_owner
                .entry(owner.to_string())
                .or_default()
                .push(put_id);
            p.recorded += 1;
        }
        p.refunds.extend(refund);
        None
    }

    /// How many removals were recorded so far: a remove that just ran is durable once the
    /// server has journaled up to this number.
    pub fn recorded(&self) -> u64 {
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .recorded
    }

    /// Takes what waits to be journaled, with the number it reaches.
    pub fn take(&self) -> TakenRemovals {
        let mut p = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        TakenRemovals {
            by_owner: std::mem::take(&mut p.by_owner),
            refunds: std::mem::take(&mut p.refunds),
            reached: p.recorded,
        }
    }

    /// Puts back what [`Self::take`] took when journaling it failed (retried by the next
    /// flush; the number is not counted again, and the refunds stay held).
    pub fn restore(&self, taken: TakenRemovals) {
        let mut p = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        for (owner, ids) in taken.by_owner {
            p.by_owner.entry(owner).or_default().extend(ids);
        }
        p.refunds.extend(taken.refunds);
    }

    /// Fences put ids recovered from the journal (removed by an earlier run, not settled).
    pub fn fence_recovered(&self, owner: &str, put_ids: impl IntoIterator<Item = u64>) {
        let mut f = self.fence.write().unwrap_or_else(|p| p.into_inner());
        for id in put_ids {
            fence_one(&mut f, id, owner);
        }
    }

    /// `owner` forgot these put ids: the fence of each lifts once no owner may hold it.
    pub fn settle(&self, owner: &str, put_ids: &[u64]) {
        self.drop_unjournaled(owner, put_ids);
        let mut f = self.fence.write().unwrap_or_else(|p| p.into_inner());
        for id in put_ids {
            if let Some(owners) = f.get_mut(id) {
                owners.retain(|o| &**o != owner);
                if owners.is_empty() {
                    f.remove(id);
                }
            }
        }
    }

    /// `owner` forgot these put ids before they were journaled (a replaced version waits for
    /// the next journal write): there is nothing left to journal for them.
    pub fn drop_unjournaled(&self, owner: &str, put_ids: &[u64]) {
        let mut p = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(ids) = p.by_owner.get_mut(owner) {
            let gone: std::collections::HashSet<u64> = put_ids.iter().copied().collect();
            ids.retain(|id| !gone.contains(id));
            if ids.is_empty() {
                p.by_owner.remove(owner);
            }
        }
    }

    /// `owner` forgot its put ids below `below` (all of them with `u64::MAX`).
    pub fn settle_below(&self, owner: &str, below: u64) {
        self.fence
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|id, owners| {
                if *id < below {
                    owners.retain(|o| &**o != owner);
                }
                !owners.is_empty()
            });
    }

    /// Whether a replay of `put_id` must be refused (it was removed).
    pub fn is_fenced(&self, put_id: u64) -> bool {
        self.fence
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(&put_id)
    }

    /// Fenced put ids.
    pub fn fenced(&self) -> usize {
        self.fence.read().unwrap_or_else(|p| p.into_inner()).len()
    }
}

fn fence_one(fence: &mut HashMap<u64, Vec<Arc<str>>>, put_id: u64, owner: &str) {
    let owners = fence.entry(put_id).or_default();
    if !owners.iter().any(|o| &**o == owner) {
        owners.push(Arc::from(owner));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_number_fence_and_settle() {
        let log = RemovalLog::default();
        log.record("a", 5);
        log.record("a", 0); // names no put
        log.record("b", 6);
        assert_eq!(log.recorded(), 2);
        assert!(log.is_fenced(5) && log.is_fenced(6) && !log.is_fenced(0));
        let taken = log.take();
        assert_eq!(taken.reached, 2);
        assert_eq!(taken.by_owner["a"], vec![5]);
        assert!(log.take().by_owner.is_empty(), "taken once");
        assert!(log.is_fenced(5), "journaling does not lift the fence");
        log.settle("b", &[5]);
        assert!(log.is_fenced(5), "only the owner's own put ids");
        log.settle("a", &[5]);
        assert!(!log.is_fenced(5));
        // Two owners held replicas of put 7: fenced until both forgot it.
        log.record("a", 7);
        log.record("b", 7);
        log.settle("a", &[7]);
        assert!(log.is_fenced(7));
        log.settle("b", &[7]);
        assert!(!log.is_fenced(7));
        let _ = log.take();
        log.restore(TakenRemovals {
            by_owner: RemovedByOwner::from([("a".to_string(), vec![7])]),
            ..TakenRemovals::default()
        });
        assert_eq!(
            log.take().by_owner["a"],
            vec![7],
            "restored for the next flush"
        );
        log.record("a", 8);
        log.record("a", 9);
        log.settle("a", &[8]);
        assert!(!log.is_fenced(8) && log.is_fenced(9));
        assert_eq!(
            log.take().by_owner["a"],
            vec![9],
            "a settled put id is not journaled"
        );
        log.settle("a", &[9]);
        log.fence_recovered("b", [1, 2]);
        log.settle_below("b", 2);
        assert!(!log.is_fenced(1) && log.is_fenced(2) && log.is_fenced(6));
        log.settle_below("b", u64::MAX);
        assert_eq!(log.fenced(), 0);
    }
}
