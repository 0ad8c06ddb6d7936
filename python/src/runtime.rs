//! The one tokio runtime of the extension, and the bridge from a Python call to it: the GIL is
//! released while a call waits on the network, so other Python threads run meanwhile.

use std::future::Future;
use std::sync::OnceLock;

use pyo3::prelude::*;
use tokio::runtime::Runtime;

static RUNTIME: OnceLock<Runtime> = OnceLock::new();

/// Worker threads: the client's background work (RPC readers, the owner's transfer server and
/// heartbeats) is light; the calls themselves run on the calling Python threads.
const WORKERS: usize = 2;

/// The process's runtime, started on first use.
pub fn runtime() -> &'static Runtime {
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(WORKERS)
            .thread_name("crescent-py")
            .enable_all()
            .build()
            .expect("a tokio runtime (threads, timers, IO) can be built")
    })
}

/// Runs the future `make` builds to completion on the runtime, with the GIL released. The
/// future is built inside the released section so that only its inputs must be `Send`.
pub fn block<F, Fut>(py: Python<'_>, make: F) -> Fut::Output
where
    F: FnOnce() -> Fut + Send,
    Fut: Future,
    Fut::Output: Send,
{
    py.allow_threads(move || runtime().block_on(make()))
}
