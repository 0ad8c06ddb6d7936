//! A monotonic sequence-number watermark that async and blocking callers can wait on.
//!
//! The journal publishes its durable watermark through one of these. The actor runtime waits on
//! a *commit* watermark: in standalone mode that is the durable watermark itself; the HA layer
//! derives it as min(local durable, in-sync standby durable).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::Thread;

use tokio::sync::watch;

use crate::error::JournalError;

#[derive(Debug, Clone, PartialEq, Eq)]
struct State {
    seq: u64,
    /// Set once when the writer fails; every waiter then gets [`JournalError::Fatal`].
    fault: Option<String>,
    closed: bool,
}

/// A thread parked in [`Watermark::wait_for_blocking`].
#[derive(Debug)]
struct Parked {
    seq: u64,
    thread: Thread,
    woken: Arc<AtomicBool>,
}

#[derive(Debug)]
struct Inner {
    tx: watch::Sender<State>,
    /// Blocking waiters, woken when the value reaches theirs (a targeted wake-up: hundreds of
    /// waiters must not stampede through one mutex on every advance).
    parked: Mutex<Vec<Parked>>,
    /// Waiters whose value was reached but who are not unparked yet. Waking hundreds of threads
    /// is hundreds of syscalls, so it is spread as a tree: the advancing thread (the journal
    /// writer, which should get back to its next sync) unparks [`WAKE_FANOUT`] of them and every
    /// woken waiter unparks up to [`WAKE_FANOUT`] more before it returns.
    to_wake: Mutex<Vec<Parked>>,
}

/// How many parked waiters each waker unparks.
const WAKE_FANOUT: usize = 2;

/// Cloneable handle; all clones see the same value.
#[derive(Debug, Clone)]
pub struct Watermark {
    inner: Arc<Inner>,
}

impl Watermark {
    pub fn new(initial: u64) -> Self {
        let (tx, _rx) = watch::channel(State {
            seq: initial,
            fault: None,
            closed: false,
        });
        Self {
            inner: Arc::new(Inner {
                tx,
                parked: Mutex::new(Vec::new()),
                to_wake: Mutex::new(Vec::new()),
            }),
        }
    }

    /// The current value.
    pub fn get(&self) -> u64 {
        self.inner.tx.borrow().seq
    }

    /// Raises the watermark to `seq` (never lowers it).
    pub fn advance(&self, seq: u64) {
        let changed = self.inner.tx.send_if_modified(|s| {
            if seq > s.seq {
                s.seq = seq;
                true
            } else {
                false
            }
        });
        if changed {
            self.wake_blocking(seq);
        }
    }

    /// Marks the watermark as failed: it will never advance again and every waiter errors.
    pub fn fail(&self, reason: impl Into<String>) {
        let reason = reason.into();
        self.inner.tx.send_modify(|s| {
            if s.fault.is_none() {
                s.fault = Some(reason);
            }
        });
        self.wake_blocking(u64::MAX);
    }

    /// Marks the watermark closed: waiters for values not yet reached get [`JournalError::Closed`].
    pub fn close(&self) {
        self.inner.tx.send_modify(|s| s.closed = true);
        self.wake_blocking(u64::MAX);
    }

    /// The fault, if the watermark has failed.
    pub fn fault(&self) -> Option<String> {
        self.inner.tx.borrow().fault.clone()
    }

    fn check(s: &State, seq: u64) -> Option<Result<u64, JournalError>> {
        if let Some(f) = &s.fault {
            return Some(Err(JournalError::Fatal(f.clone())));
        }
        if s.seq >= seq {
            return Some(Ok(s.seq));
        }
        if s.closed {
            return Some(Err(JournalError::Closed));
        }
        None
    }

    /// Waits until the watermark reaches `seq`; returns the value that satisfied the wait.
    pub async fn wait_for(&self, seq: u64) -> Result<u64, JournalError> {
        let mut rx = self.inner.tx.subscribe();
        loop {
            if let Some(r) = Self::check(&rx.borrow_and_update(), seq) {
                return r;
            }
            if rx.changed().await.is_err() {
                return Err(JournalError::Closed);
            }
        }
    }

    /// Blocking form of [`Watermark::wait_for`], for threads outside an async runtime.
    pub fn wait_for_blocking(&self, seq: u64) -> Result<u64, JournalError> {
        loop {
            if let Some(r) = Self::check(&self.inner.tx.borrow(), seq) {
                return r;
            }
            let woken = Arc::new(AtomicBool::new(false));
            {
                let mut parked = self.parked();
                // Checked again under the lock that wakers take after changing the state, so a
                // change between the check above and parking cannot be missed.
                if let Some(r) = Self::check(&self.inner.tx.borrow(), seq) {
                    return r;
                }
                parked.push(Parked {
                    seq,
                    thread: std::thread::current(),
                    woken: woken.clone(),
                });
            }
            // park() may return spuriously: only a waker's flag ends the wait.
            while !woken.load(Ordering::Acquire) {
                std::thread::park();
            }
            self.unpark_some();
        }
    }

    /// [`Watermark::wait_for_blocking`] giving up after `timeout`: `Ok(None)` when the time ran
    /// out first.
    pub fn wait_for_timeout(
        &self,
        seq: u64,
        timeout: std::time::Duration,
    ) -> Result<Option<u64>, JournalError> {
        let deadline = std::time::Instant::now() + timeout;
        if let Some(r) = Self::check(&self.inner.tx.borrow(), seq) {
            return r.map(Some);
        }
        let woken = Arc::new(AtomicBool::new(false));
        {
            let mut parked = self.parked();
            if let Some(r) = Self::check(&self.inner.tx.borrow(), seq) {
                return r.map(Some);
            }
            parked.push(Parked {
                seq,
                thread: std::thread::current(),
                woken: woken.clone(),
            });
        }
        while !woken.load(Ordering::Acquire) {
            let now = std::time::Instant::now();
            if now >= deadline {
                self.parked().retain(|p| !Arc::ptr_eq(&p.woken, &woken));
                break;
            }
            std::thread::park_timeout(deadline - now);
        }
        // Woken or not, pass the wake-up chain on (a waker may have queued us just now).
        self.unpark_some();
        match Self::check(&self.inner.tx.borrow(), seq) {
            Some(r) => r.map(Some),
            None => Ok(None),
        }
    }

    /// Unparks up to [`WAKE_FANOUT`] waiters queued in `to_wake`.
    fn unpark_some(&self) {
        let batch: Vec<Parked> = {
            let mut q = self.inner.to_wake.lock().unwrap_or_else(|p| p.into_inner());
            let keep = q.len().saturating_sub(WAKE_FANOUT);
            q.split_off(keep)
        };
        for p in batch {
            p.woken.store(true, Ordering::Release);
            p.thread.unpark();
        }
    }

    fn parked(&self) -> std::sync::MutexGuard<'_, Vec<Parked>> {
        self.inner.parked.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wakes the blocking waiters for values up to `upto` (`u64::MAX`: all of them).
    fn wake_blocking(&self, upto: u64) {
        {
            let mut parked = self.parked();
            if parked.is_empty() {
                return;
            }
            let mut to_wake = self.inner.to_wake.lock().unwrap_or_else(|p| p.into_inner());
            let mut i = 0;
            while i < parked.len() {
                if parked[i].seq <= upto {
                    to_wake.push(parked.swap_remove(i));
                } else {
                    i += 1;
                }
            }
        }
        self.unpark_some();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocking_waiters_wake_at_their_value_only() {
        let w = Watermark::new(0);
        let threads: Vec<_> = (1..=20u64)
            .map(|s| {
                let w = w.clone();
                std::thread::spawn(move || w.wait_for_blocking(s * 10))
            })
            .collect();
        for v in (0..=200).step_by(7) {
            w.advance(v);
        }
        w.advance(200);
        for t in threads {
            assert!(t.join().unwrap().unwrap() >= 10);
        }
        assert_eq!(w.get(), 200);
        w.advance(100);
        assert_eq!(w.get(), 200, "never lowered");
    }

    #[test]
    fn timed_waits_time_out_or_see_the_value() {
        use std::time::Duration;
        let w = Watermark::new(3);
        assert_eq!(w.wait_for_timeout(2, Duration::ZERO).unwrap(), Some(3));
        assert_eq!(
            w.wait_for_timeout(4, Duration::from_millis(30)).unwrap(),
            None
        );
        assert!(w.parked().is_empty(), "a timed-out waiter leaves no entry");
        let waiter = {
            let w = w.clone();
            std::thread::spawn(move || w.wait_for_timeout(9, Duration::from_secs(30)))
        };
        std::thread::sleep(Duration::from_millis(20));
        w.advance(9);
        assert_eq!(waiter.join().unwrap().unwrap(), Some(9));
        // plain waiters queued behind a timed one still wake
        let plain: Vec<_> = (0..5)
            .map(|_| {
                let w = w.clone();
                std::thread::spawn(move || w.wait_for_blocking(20))
            })
            .collect();
        let timed = {
            let w = w.clone();
            std::thread::spawn(move || w.wait_for_timeout(20, Duration::from_secs(30)))
        };
        std::thread::sleep(Duration::from_millis(20));
        w.advance(20);
        for t in plain {
            assert_eq!(t.join().unwrap().unwrap(), 20);
        }
        assert_eq!(timed.join().unwrap().unwrap(), Some(20));
    }

    #[test]
    fn fail_and_close_wake_everyone() {
        let w = Watermark::new(5);
        let waiter = {
            let w = w.clone();
            std::thread::spawn(move || w.wait_for_blocking(100))
        };
        std::thread::sleep(std::time::Duration::from_millis(20));
        w.fail("disk gone");
        assert!(matches!(
            waiter.join().unwrap(),
            Err(JournalError::Fatal(_))
        ));
        assert!(matches!(
            w.wait_for_blocking(1),
            Err(JournalError::Fatal(_))
        ));

        let w = Watermark::new(5);
        let waiter = {
            let w = w.clone();
            std::thread::spawn(move || w.wait_for_blocking(100))
        };
        std::thread::sleep(std::time::Duration::from_millis(20));
        w.close();
        assert!(matches!(waiter.join().unwrap(), Err(JournalError::Closed)));
        assert_eq!(
            w.wait_for_blocking(5).unwrap(),
            5,
            "reached values still succeed"
        );
    }

    #[tokio::test]
    async fn async_waiters_see_advances() {
        let w = Watermark::new(0);
        let w2 = w.clone();
        let t = tokio::spawn(async move { w2.wait_for(3).await });
        tokio::task::yield_now().await;
        w.advance(3);
        assert_eq!(t.await.unwrap().unwrap(), 3);
    }
}
