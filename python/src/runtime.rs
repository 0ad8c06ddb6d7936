//! The one tokio runtime of the extension, and the bridge from a Python call to it: the GIL is
//! released while a call waits on the network, so other Python threads run meanwhile.
//!
//! The runtime is a current-thread one, driven by whichever thread is inside a call: a Python
//! thread in a call drives the IO of its own request (no hand-off between threads per network
//! wake-up, as the `crescent` CLI's runtime does). Between calls a background driver thread
//! takes over, so a storage owner keeps serving its segment and heartbeating; a call asks it to
//! let go of the runtime, and it takes the runtime back only after [`DRIVER_IDLE`] without calls.

use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use tokio::runtime::Runtime;
use tokio::sync::Notify;

struct Shared {
    runtime: Runtime,
    /// Calls in progress.
    in_flight: AtomicUsize,
    /// When the last call ended, in µs since `epoch`.
    last_call_us: AtomicU64,
    epoch: Instant,
    /// Tells the driver to let go of the runtime.
    yield_now: Notify,
}

static SHARED: OnceLock<&'static Shared> = OnceLock::new();

/// How long the runtime may go without calls before the driver thread takes it back.
const DRIVER_IDLE: Duration = Duration::from_millis(1);

fn shared() -> &'static Shared {
    SHARED.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime (timers, IO) can be built");
        let s: &'static Shared = Box::leak(Box::new(Shared {
            runtime,
            in_flight: AtomicUsize::new(0),
            last_call_us: AtomicU64::new(0),
            epoch: Instant::now(),
            yield_now: Notify::new(),
        }));
        std::thread::Builder::new()
            .name("crescent-py-driver".into())
            .spawn(move || drive(s))
            .expect("the runtime's driver thread can be started");
        s
    })
}

/// The driver: runs the runtime (spawned tasks, IO, timers) while no call does.
fn drive(s: &'static Shared) {
    loop {
        let idle_for = |s: &Shared| {
            let last = Duration::from_micros(s.last_call_us.load(Ordering::Acquire));
            s.epoch.elapsed().saturating_sub(last)
        };
        while s.in_flight.load(Ordering::Acquire) > 0 || idle_for(s) < DRIVER_IDLE {
            std::thread::sleep(DRIVER_IDLE / 4);
        }
        s.runtime.block_on(s.yield_now.notified());
    }
}

/// Runs `future` to completion on the runtime, this thread driving it (the GIL as the caller
/// holds it: see [`block`]).
pub fn run<F: Future>(future: F) -> F::Output {
    let s = shared();
    s.in_flight.fetch_add(1, Ordering::AcqRel);
    s.yield_now.notify_one();
    let out = s.runtime.block_on(future);
    let now = s.epoch.elapsed().as_micros() as u64;
    s.last_call_us.store(now, Ordering::Release);
    s.in_flight.fetch_sub(1, Ordering::AcqRel);
    out
}

/// Runs the future `make` builds to completion on the runtime, with the GIL released. The
/// future is built inside the released section so that only its inputs must be `Send`.
pub fn block<F, Fut>(py: Python<'_>, make: F) -> Fut::Output
where
    F: FnOnce() -> Fut + Send,
    Fut: Future,
    Fut::Output: Send,
{
    py.detach(move || run(make()))
}
