//! Reader/writer locks over byte ranges of one memory region.
//!
//! Remote peers choose the ranges they read and write, so the data plane cannot trust that
//! concurrent transfers are disjoint. Overlapping unsynchronised access would be a data race (UB
//! in Rust), so every access to region memory first takes a range lock: any number of shared
//! holders, or one exclusive holder, per overlapping range. Disjoint ranges never wait on each
//! other, which is the common case (the allocator hands out disjoint replicas).
//!
//! Locks are async (a guard may be held across socket IO) and held for one transfer at a time.
//! The table is a small vector scanned linearly: there are as many entries as transfers in
//! flight on the region, and its capacity is reused, so the hot path does not allocate.

use std::sync::Mutex;

use tokio::sync::Notify;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct HeldRange {
    start: u64,
    end: u64,
    exclusive: bool,
}

impl HeldRange {
    fn conflicts(&self, other: &HeldRange) -> bool {
        (self.exclusive || other.exclusive) && self.start < other.end && other.start < self.end
    }
}

#[derive(Default)]
struct LockTable {
    held: Vec<HeldRange>,
    waiters: usize,
}

/// The lock table of one region.
#[derive(Default)]
pub(crate) struct RangeLocks {
    table: Mutex<LockTable>,
    released: Notify,
}

impl std::fmt::Debug for RangeLocks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RangeLocks").finish_non_exhaustive()
    }
}

/// Proof that `[start, end)` is locked; releases on drop.
#[derive(Debug)]
pub(crate) struct RangeLockGuard<'a> {
    locks: &'a RangeLocks,
    range: HeldRange,
}

impl RangeLocks {
    fn table(&self) -> std::sync::MutexGuard<'_, LockTable> {
        // A panic while holding this mutex cannot leave the table inconsistent (each update is
        // one push or one swap_remove), so a poisoned lock is still usable.
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until `[start, end)` can be held (shared or exclusive), then holds it.
    pub(crate) async fn lock(&self, start: u64, end: u64, exclusive: bool) -> RangeLockGuard<'_> {
        let wanted = HeldRange {
            start,
            end,
            exclusive,
        };
        loop {
            // Register interest before checking, so a release between the check and the await
            // is not missed (notify_waiters wakes every Notified created before it).
            let released = self.released.notified();
            {
                let mut table = self.table();
                if !table.held.iter().any(|h| h.conflicts(&wanted)) {
                    table.held.push(wanted);
                    return RangeLockGuard {
                        locks: self,
                        range: wanted,
                    };
                }
                table.waiters += 1;
            }
            // Counts this task as a waiter until it wakes or its future is dropped.
            let _waiting = WaiterMark(self);
            released.await;
        }
    }

    /// Holds `[start, end)` if that is possible without waiting.
    pub(crate) fn try_lock(
        &self,
        start: u64,
        end: u64,
        exclusive: bool,
    ) -> Option<RangeLockGuard<'_>> {
        let wanted = HeldRange {
            start,
            end,
            exclusive,
        };
        let mut table = self.table();
        if table.held.iter().any(|h| h.conflicts(&wanted)) {
            return None;
        }
        table.held.push(wanted);
        Some(RangeLockGuard {
            locks: self,
            range: wanted,
        })
    }

    #[cfg(test)]
    pub(crate) fn held_count(&self) -> usize {
        self.table().held.len()
    }
}

struct WaiterMark<'a>(&'a RangeLocks);

impl Drop for WaiterMark<'_> {
    fn drop(&mut self) {
        self.0.table().waiters -= 1;
    }
}

impl Drop for RangeLockGuard<'_> {
    fn drop(&mut self) {
        let wake = {
            let mut table = self.locks.table();
            if let Some(pos) = table.held.iter().position(|h| *h == self.range) {
                table.held.swap_remove(pos);
            }
            table.waiters > 0
        };
        if wake {
            self.locks.released.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[tokio::test]
    async fn shared_ranges_coexist_and_exclusive_waits() {
        let locks = Arc::new(RangeLocks::default());
        let a = locks.lock(0, 10, false).await;
        let b = locks.lock(5, 15, false).await;
        assert!(locks.try_lock(8, 9, true).is_none());
        assert!(
            locks.try_lock(15, 20, true).is_some(),
            "disjoint range must not wait"
        );
        let waiter = {
            let locks = locks.clone();
            tokio::spawn(async move {
                let _g = locks.lock(0, 20, true).await;
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            !waiter.is_finished(),
            "exclusive lock must wait for shared holders"
        );
        drop(a);
        drop(b);
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("waiter woken")
            .expect("no panic");
        assert_eq!(locks.held_count(), 0);
    }
}
