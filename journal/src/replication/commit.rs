//! The commit watermark of an active with a standby: what actors wait on before replying.
//!
//! In `Local` mode commit follows the local durable watermark. In `Sync` mode it is
//! min(local durable, the standby's acknowledged durable seq), so an acknowledged command is on
//! both disks and an in-sync standby that takes over has it. Switching modes is the HA layer's
//! decision, in a safe order (docs/ha.md): before dropping to `Local` it records in etcd that
//! the standby is out of sync; after switching back to `Sync` it waits until the standby holds
//! everything committed so far ([`CommitTracker::standby_caught_up`]) before recording it in sync.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::round_timing::{self, Stage};
use crate::watermark::Watermark;

/// How commit follows durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitMode {
    /// Commit = local durable (standalone, async replication, or a standby marked out of sync).
    Local,
    /// Commit = min(local durable, standby acknowledged).
    Sync,
}

#[derive(Debug)]
struct TrackerState {
    mode: CommitMode,
    /// The standby's acknowledged durable seq (monotonic).
    acked: u64,
    /// Since when commit has been held back by the standby (Sync mode only).
    held_since: Option<Instant>,
}

#[derive(Debug)]
struct Inner {
    durable: Watermark,
    commit: Watermark,
    state: Mutex<TrackerState>,
}

/// Cheap to clone; every clone drives the same commit watermark.
#[derive(Debug, Clone)]
pub struct CommitTracker {
    inner: Arc<Inner>,
}

impl CommitTracker {
    /// A tracker over a journal's durable watermark, starting in `Local` mode. A thread follows
    /// `durable` until it closes or fails (the commit watermark then closes or fails too).
    pub fn start(durable: Watermark) -> Self {
        let initial = durable.get();
        let commit = Watermark::new(initial);
        let inner = Arc::new(Inner {
            durable: durable.clone(),
            commit,
            state: Mutex::new(TrackerState {
                mode: CommitMode::Local,
                acked: 0,
                held_since: None,
            }),
        });
        let follower = Arc::downgrade(&inner);
        std::thread::Builder::new()
            .name("commit-tracker".into())
            .spawn(move || {
                // From the value the commit watermark started at, not a fresh read: an advance
                // between construction and this thread starting must not be skipped.
                let mut next = initial + 1;
                loop {
                    match durable.wait_for_blocking(next) {
                        Ok(d) => {
                            let Some(inner) = follower.upgrade() else {
                                return;
                            };
                            Self::recompute(&inner);
                            next = d + 1;
                        }
                        Err(e) => {
                            if let Some(inner) = follower.upgrade() {
                                match durable.fault() {
                                    Some(reason) => inner.commit.fail(reason),
                                    None => inner.commit.close(),
                                }
                                tracing::debug!(error = %e, "commit tracker stops");
                            }
                            return;
                        }
                    }
                }
            })
            .expect("spawn the commit tracker thread");
        Self { inner }
    }

    /// The watermark actors wait on.
    pub fn commit(&self) -> Watermark {
        self.inner.commit.clone()
    }

    pub fn mode(&self) -> CommitMode {
        self.lock().mode
    }

    /// The standby's acknowledged durable seq.
    pub fn acked(&self) -> u64 {
        self.lock().acked
    }

    /// How long commit has been held back waiting for the standby (`None` when it is not).
    pub fn held_for(&self) -> Option<Duration> {
        self.lock().held_since.map(|t| t.elapsed())
    }

    /// The standby acknowledged everything up to `seq` as durable on its side.
    pub fn on_ack(&self, seq: u64) {
        {
            let mut st = self.lock();
            st.acked = st.acked.max(seq);
        }
        Self::recompute(&self.inner);
    }

    /// Commit waits for the standby from now on. Its earlier acks still count.
    pub fn require_standby(&self) {
        self.lock().mode = CommitMode::Sync;
        Self::recompute(&self.inner);
    }

    /// Commit follows local durability alone from now on. Call only after etcd records that
    /// the standby is out of sync.
    pub fn release_standby(&self) {
        {
            let mut st = self.lock();
            st.mode = CommitMode::Local;
            st.held_since = None;
        }
        Self::recompute(&self.inner);
    }

    /// Ends this tracker's commit (a deposed active): waiters for seqs not yet committed get
    /// `Closed`, and nothing commits any more.
    pub fn close(&self) {
        self.inner.commit.close();
    }

    /// In `Sync` mode: whether the standby holds everything durable here (so everything
    /// committed is on both sides).
    pub fn standby_caught_up(&self) -> bool {
        let st = self.lock();
        st.mode == CommitMode::Sync && st.acked >= self.inner.durable.get()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, TrackerState> {
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn recompute(inner: &Inner) {
        let mut st = inner.state.lock().unwrap_or_else(|p| p.into_inner());
        let durable = inner.durable.get();
        let target = match st.mode {
            CommitMode::Local => durable,
            CommitMode::Sync => durable.min(st.acked),
        };
        if st.mode == CommitMode::Sync && target < durable {
            st.held_since.get_or_insert_with(Instant::now);
        } else {
            st.held_since = None;
        }
        let sync = st.mode == CommitMode::Sync;
        drop(st);
        inner.commit.advance(target);
        if sync {
            round_timing::mark(Stage::Committed, target);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settle() {
        std::thread::sleep(Duration::from_millis(30));
    }

    #[test]
    fn local_mode_follows_durable() {
        let durable = Watermark::new(0);
        let t = CommitTracker::start(durable.clone());
        durable.advance(5);
        assert_eq!(t.commit().wait_for_blocking(5).unwrap(), 5);
        assert_eq!(t.held_for(), None);
    }

    #[test]
    fn sync_mode_waits_for_the_standby_and_release_lets_go() {
        let durable = Watermark::new(0);
        let t = CommitTracker::start(durable.clone());
        t.require_standby();
        durable.advance(10);
        settle();
        assert_eq!(t.commit().get(), 0, "not acked by the standby yet");
        assert!(t.held_for().is_some());
        assert!(!t.standby_caught_up());
        t.on_ack(4);
        assert_eq!(t.commit().get(), 4);
        t.on_ack(12); // the standby may be ahead of local durability
        assert_eq!(t.commit().get(), 10);
        assert!(t.standby_caught_up());
        assert_eq!(t.held_for(), None);
        durable.advance(20);
        let reached = t
            .commit()
            .wait_for_timeout(12, Duration::from_secs(10))
            .unwrap();
        assert_eq!(reached, Some(12));
        settle();
        assert_eq!(t.commit().get(), 12, "held at the standby's ack");
        t.release_standby();
        assert_eq!(t.commit().get(), 20);
        assert_eq!(t.mode(), CommitMode::Local);
        t.on_ack(3);
        assert_eq!(t.acked(), 12, "acks never go back");
    }

    #[test]
    fn a_failed_journal_fails_commit() {
        let durable = Watermark::new(0);
        let t = CommitTracker::start(durable.clone());
        durable.fail("disk gone");
        assert!(t.commit().wait_for_blocking(1).is_err());
    }
}
