//! A process-wide reserve of spare file descriptors for the files durability depends on (the
//! journal's segments and directory syncs, snapshot files).
//!
//! A flood of network connections can use up the process's descriptor limit (EMFILE); the
//! listeners then back off, but the journal must still be able to open its next segment and
//! the snapshotter its next file (docs/configuration.md, `net.fd_reserve`). So the process
//! holds a few descriptors open on `/dev/null`; an open that fails with EMFILE or ENFILE
//! releases them one at a time and retries. The reserve refills itself at the next open that
//! succeeds first time and from [`refill`], which housekeeping calls periodically.

use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static SPARES: Mutex<Vec<File>> = Mutex::new(Vec::new());
static TARGET: AtomicUsize = AtomicUsize::new(0);
static HELD: AtomicUsize = AtomicUsize::new(0);
static EXHAUSTIONS: AtomicU64 = AtomicU64::new(0);

/// The reserve's state, for metrics and status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReserveStats {
    /// Spares the process wants to hold.
    pub target: usize,
    /// Spares held now.
    pub available: usize,
    /// Opens that found the process out of descriptors since start.
    pub exhaustions: u64,
}

/// Sets how many spares to hold and takes them (as far as descriptors are free).
pub fn set_target(n: usize) {
    TARGET.store(n, Ordering::Release);
    let mut spares = SPARES.lock().unwrap_or_else(|p| p.into_inner());
    spares.truncate(n);
    HELD.store(spares.len(), Ordering::Release);
    drop(spares);
    refill();
}

/// Takes spares back up to the target, stopping at the first open that fails.
pub fn refill() {
    let target = TARGET.load(Ordering::Acquire);
    if HELD.load(Ordering::Acquire) >= target {
        return;
    }
    let mut spares = SPARES.lock().unwrap_or_else(|p| p.into_inner());
    while spares.len() < target {
        match File::open("/dev/null") {
            Ok(f) => spares.push(f),
            Err(_) => break,
        }
    }
    HELD.store(spares.len(), Ordering::Release);
}

pub fn stats() -> ReserveStats {
    ReserveStats {
        target: TARGET.load(Ordering::Acquire),
        available: HELD.load(Ordering::Acquire),
        exhaustions: EXHAUSTIONS.load(Ordering::Acquire),
    }
}

/// Whether `e` means the process (or the system) has no descriptor left.
pub fn is_exhausted(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE))
}

/// Runs `open`; when it fails for want of a descriptor, releases spares one at a time and
/// retries, so the journal and snapshotter keep working while listeners are flooded.
pub fn open_with_reserve<T>(mut open: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    let err = match open() {
        Ok(v) => {
            refill();
            return Ok(v);
        }
        Err(e) if is_exhausted(&e) => e,
        Err(e) => return Err(e),
    };
    EXHAUSTIONS.fetch_add(1, Ordering::AcqRel);
    tracing::warn!(error = %err, "out of descriptors: using the reserve (net.fd_reserve)");
    let mut spares = SPARES.lock().unwrap_or_else(|p| p.into_inner());
    let mut last = err;
    while let Some(spare) = spares.pop() {
        HELD.store(spares.len(), Ordering::Release);
        drop(spare);
        match open() {
            Ok(v) => return Ok(v),
            Err(e) if is_exhausted(&e) => last = e,
            Err(e) => return Err(e),
        }
    }
    Err(last)
}

/// How long an open the journal writer cannot do without waits for a descriptor once the
/// reserve is spent.
pub const WRITER_WAIT: Duration = Duration::from_secs(10);

/// [`open_with_reserve`]; then, if the reserve is spent too, retries every 2 ms until `wait`
/// has passed. Each open through the reserve keeps its spare for as long as the file stays
/// open, and a flood's accept loop takes the descriptor the file frees later, so a long flood
/// can drain the reserve; the listeners' timeouts close flood connections within seconds, and
/// this takes the first descriptor that frees instead of failing an append (which poisons the
/// journal). Blocks the calling thread: for the journal writer's own thread and startup.
pub fn open_waiting<T>(wait: Duration, mut open: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    let deadline = Instant::now() + wait;
    let mut last = match open_with_reserve(&mut open) {
        Err(e) if is_exhausted(&e) => e,
        other => return other,
    };
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
        match open() {
            Err(e) if is_exhausted(&e) => last = e,
            other => return other,
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exhausted_open_uses_a_spare_and_counts() {
        set_target(2);
        assert_eq!(stats().available, 2);
        let before = stats().exhaustions;
        let mut calls = 0;
        let got = open_with_reserve(|| {
            calls += 1;
            if calls == 1 {
                Err(io::Error::from_raw_os_error(libc::EMFILE))
            } else {
                Ok(7)
            }
        })
        .unwrap();
        assert_eq!((got, calls), (7, 2));
        assert_eq!(stats().exhaustions, before + 1);
        assert_eq!(stats().available, 1);
        // The next open that succeeds at once refills the reserve.
        open_with_reserve(|| Ok(())).unwrap();
        assert_eq!(stats().available, 2);
        let err = open_with_reserve::<()>(|| Err(io::Error::from_raw_os_error(libc::ENFILE)))
            .unwrap_err();
        assert!(is_exhausted(&err));
        assert_eq!(stats().available, 0);

        // With the reserve spent, a waiting open takes the first descriptor that frees.
        let mut calls = 0;
        let got = open_waiting(Duration::from_secs(5), || {
            calls += 1;
            if calls < 4 {
                Err(io::Error::from_raw_os_error(libc::EMFILE))
            } else {
                Ok(calls)
            }
        })
        .unwrap();
        assert_eq!(got, 4);
        let started = Instant::now();
        let err = open_waiting::<()>(Duration::from_millis(30), || {
            Err(io::Error::from_raw_os_error(libc::EMFILE))
        })
        .unwrap_err();
        assert!(is_exhausted(&err) && started.elapsed() >= Duration::from_millis(30));
        set_target(0);
    }
}
