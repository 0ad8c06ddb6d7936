//! The cold tier's side of the data plane: a client-only TCP transport (no listener) on its
//! own small runtime, through which crescentd reads hot replicas from storage owners'
//! segments (to offload them) and writes restored values into them (promotion). With a
//! transfer engine configured (`[transport]`), segments mounted with transport
//! `transfer_engine` are reached through it ([`RoutedTransport`]).
//!
//! The cold driver runs synchronously (under a device lock, on blocking or HTTP/RPC worker
//! threads), so every transfer is handed to the data-plane runtime and waited for with a
//! plain channel: the caller's thread never needs a tokio context of its own.

use std::sync::{mpsc, Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use crescent_cold::ColdError;
use crescent_transport::ffi::{FfiConfig, FfiTransport};
use crescent_transport::tcp::{TcpConfig, TcpTransport};
use crescent_transport::{
    Grant, LocalHandle, RemoteSegment, RoutedTransport, SegmentMemory, TransferDescriptor,
    TransferOp, Transport, TransportMetrics,
};

/// Worker threads of the data-plane runtime (transfers are IO-bound; two keep one slow owner
/// from stalling every other).
const DATA_PLANE_THREADS: usize = 2;
/// Longest single descriptor; larger values are split (the listener's frame limit is 256 MiB).
const CHUNK_BYTES: u64 = 64 << 20;
/// How long a caller waits for a batch beyond the transport's own batch deadline.
const ANSWER_GRACE: Duration = Duration::from_secs(5);

/// A transfer's failure as a cold error: retryable (UNAVAILABLE), naming the replica.
fn transfer_error(what: &str, remote: &RemoteSegment, offset: u64, reason: String) -> ColdError {
    ColdError::Io {
        path: format!("{}@{}:{offset}", remote.segment_id, remote.endpoint),
        kind: std::io::ErrorKind::Other,
        message: format!("{what}: {reason}"),
    }
}

/// The client transport of the cold tier, started on first use and shared by the process.
pub struct ColdDataPlane {
    handle: tokio::runtime::Handle,
    transport: Arc<dyn Transport>,
    batch_timeout: Duration,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for ColdDataPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ColdDataPlane").finish_non_exhaustive()
    }
}

impl Drop for ColdDataPlane {
    fn drop(&mut self) {
        if let Some(s) = self.shutdown.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A per-node lazily started data plane (most nodes never read another owner's segment).
#[derive(Debug, Default)]
pub struct LazyDataPlane {
    cell: OnceLock<Result<Arc<ColdDataPlane>, String>>,
}

impl LazyDataPlane {
    pub const fn new() -> Self {
        Self {
            cell: OnceLock::new(),
        }
    }

    /// The data plane, started now if it was not yet (with `engine` beside TCP, if given).
    pub fn get(
        &self,
        metrics: &TransportMetrics,
        engine: Option<&FfiConfig>,
    ) -> Result<Arc<ColdDataPlane>, ColdError> {
        self.cell
            .get_or_init(|| ColdDataPlane::start(metrics.clone(), engine.cloned()).map(Arc::new))
            .clone()
            .map_err(|reason| ColdError::Io {
                path: "cold data plane".into(),
                kind: std::io::ErrorKind::Other,
                message: reason,
            })
    }
}

impl ColdDataPlane {
    /// Starts the runtime thread and a client-only TCP transport on it, routed beside
    /// `engine` when given.
    pub fn start(metrics: TransportMetrics, engine: Option<FfiConfig>) -> Result<Self, String> {
        let config = TcpConfig::default();
        let batch_timeout = Duration::from_millis(config.batch_timeout_ms);
        let (started_tx, started_rx) = mpsc::channel();
        let (shutdown_tx, shutdown_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("crescent-cold-dataplane".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(DATA_PLANE_THREADS)
                    .thread_name("crescent-cold-dataplane-worker")
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = started_tx.send(Err(format!("cold data-plane runtime: {e}")));
                        return;
                    }
                };
                let handle = rt.handle().clone();
                rt.block_on(async move {
                    match start_transport(config, engine, metrics).await {
                        Ok(t) => {
                            if started_tx.send(Ok((handle, t))).is_err() {
                                return;
                            }
                            let _ = shutdown_rx.await;
                        }
                        Err(e) => {
                            let _ = started_tx.send(Err(format!("cold data-plane transport: {e}")));
                        }
                    }
                });
            })
            .map_err(|e| format!("cannot start the cold data-plane thread: {e}"))?;
        match started_rx.recv() {
            Ok(Ok((handle, transport))) => Ok(Self {
                handle,
                transport,
                batch_timeout,
                shutdown: Some(shutdown_tx),
                thread: Some(thread),
            }),
            Ok(Err(reason)) => {
                let _ = thread.join();
                Err(reason)
            }
            Err(_) => {
                let _ = thread.join();
                Err("the cold data-plane thread stopped while starting".into())
            }
        }
    }

    /// Runs one batch of `op` between `remote` (from `offset`) and `memory` (whole), split
    /// into chunks, on the data-plane runtime; waits for it on this thread.
    fn transfer(
        &self,
        op: TransferOp,
        remote: &RemoteSegment,
        offset: u64,
        memory: Arc<SegmentMemory>,
        grant: Option<Grant>,
    ) -> Result<Arc<SegmentMemory>, ColdError> {
        let what = op.label();
        let fail = |reason: String| transfer_error(what, remote, offset, reason);
        let len = memory.len() as u64;
        let transport = self.transport.clone();
        let local: LocalHandle = transport
            .register(memory)
            .map_err(|e| fail(e.to_string()))?;
        let batch: Vec<TransferDescriptor> = (0..len)
            .step_by(CHUNK_BYTES as usize)
            .map(|at| TransferDescriptor {
                op,
                remote: remote.clone(),
                remote_offset: offset + at,
                local,
                local_offset: at,
                length: CHUNK_BYTES.min(len - at),
                grant,
            })
            .collect();
        let (tx, rx) = mpsc::channel();
        let t = transport.clone();
        self.handle.spawn(async move {
            let result = match t.submit(&batch).await {
                Ok(done) => done.into_result(),
                Err(e) => Err(e),
            };
            let _ = tx.send(result);
        });
        let answer = rx.recv_timeout(self.batch_timeout + ANSWER_GRACE);
        let memory = transport
            .unregister(local)
            .map_err(|e| fail(e.to_string()))?;
        match answer {
            Ok(Ok(())) => Ok(memory),
            Ok(Err(e)) => Err(fail(e.to_string())),
            Err(_) => Err(fail("the transfer did not complete in time".into())),
        }
    }

    /// Reads `length` bytes at `offset` of a remote segment.
    pub fn read(
        &self,
        remote: &RemoteSegment,
        offset: u64,
        length: u64,
        grant: Option<Grant>,
    ) -> Result<Vec<u8>, ColdError> {
        let _span = tracing::debug_span!("cold.dataplane_read", length).entered();
        if length == 0 {
            return Ok(Vec::new());
        }
        let memory = SegmentMemory::allocate(length as usize)
            .map_err(|e| transfer_error("read", remote, offset, e.to_string()))?;
        let memory = self.transfer(TransferOp::Read, remote, offset, Arc::new(memory), grant)?;
        let mut out = vec![0u8; length as usize];
        futures::executor::block_on(memory.read_at(0, &mut out))
            .map_err(|e| transfer_error("read", remote, offset, e.to_string()))?;
        Ok(out)
    }

    /// Writes `bytes` at `offset` of a remote segment.
    pub fn write(
        &self,
        remote: &RemoteSegment,
        offset: u64,
        bytes: &[u8],
        grant: Option<Grant>,
    ) -> Result<(), ColdError> {
        let _span = tracing::debug_span!("cold.dataplane_write", length = bytes.len()).entered();
        if bytes.is_empty() {
            return Ok(());
        }
        let memory = SegmentMemory::from_boxed_slice(bytes.to_vec().into_boxed_slice())
            .map_err(|e| transfer_error("write", remote, offset, e.to_string()))?;
        self.transfer(TransferOp::Write, remote, offset, Arc::new(memory), grant)
            .map(|_| ())
    }
}

/// TCP, with `engine` beside it when given.
async fn start_transport(
    config: TcpConfig,
    engine: Option<FfiConfig>,
    metrics: TransportMetrics,
) -> crescent_transport::Result<Arc<dyn Transport>> {
    let tcp: Arc<dyn Transport> = Arc::new(TcpTransport::start(config, metrics.clone()).await?);
    Ok(match engine {
        None => tcp,
        Some(engine) => {
            let engine = Arc::new(FfiTransport::load(engine, metrics)?);
            Arc::new(RoutedTransport::new(tcp, engine))
        }
    })
}
