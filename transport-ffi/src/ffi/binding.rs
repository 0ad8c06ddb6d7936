//! `FfiTransport`: the [`Transport`] trait over a dlopened transfer engine.
//!
//! A batch runs in its own task that holds the local range locks until the engine reports a
//! final status for every task, even if the caller stopped waiting (batch timeout): the engine
//! may still be copying, so the memory must stay locked and alive until it says it is done.
//!
//! Served segments are read and written by the engine itself, outside Crescent's range locks:
//! a segment served through this transport must not also be served through `TcpTransport`.
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tracing::{info_span, warn, Instrument};

use super::abi::{
    Engine, EngineParams, TransferRequest, OPCODE_READ, OPCODE_WRITE, STATUS_CANCELED,
    STATUS_COMPLETED, STATUS_FAILED, STATUS_INVALID, STATUS_TIMEOUT,
};
use super::FfiConfig;
use crate::error::{Result, TransportError};
use crate::memory::{ReadGuard, SegmentMemory, WriteGuard};
use crate::metrics::TransportMetrics;
use crate::transport::{
    check_segment_id, BatchCompletion, BoxFuture, LocalHandle, LocalRegistry, TransferDescriptor,
    TransferOp, Transport, TransportKind,
};

/// The transfer-engine transport.
pub struct FfiTransport {
    engine: Arc<Engine>,
    config: FfiConfig,
    metrics: TransportMetrics,
    locals: LocalRegistry,
    served: Mutex<HashMap<String, Arc<SegmentMemory>>>,
    opened: Mutex<HashMap<Arc<str>, i32>>,
}

impl std::fmt::Debug for FfiTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FfiTransport")
            .field("library", &self.config.library)
            .finish_non_exhaustive()
    }
}

/// One transfer handed to the engine task (owns what it needs).
struct Work {
    index: usize,
    op: TransferOp,
    target: i32,
    segment_id: Arc<str>,
    remote_offset: u64,
    length: u64,
    local: Arc<SegmentMemory>,
    local_offset: u64,
}

enum Held<'a> {
    Read(ReadGuard<'a>),
    Write(WriteGuard<'a>),
}

impl Held<'_> {
    fn source(&mut self) -> *mut std::ffi::c_void {
        match self {
            Held::Read(g) => g.as_ptr().cast_mut().cast(),
            Held::Write(g) => g.as_mut_ptr().cast(),
        }
    }
}

impl FfiTransport {
    /// Loads the library named in `config` and creates an engine.
    pub fn load(config: FfiConfig, metrics: TransportMetrics) -> Result<Self> {
        let params = EngineParams {
            metadata_conn_string: &config.metadata_conn_string,
            local_server_name: &config.local_server_name,
            ip_or_host_name: &config.ip_or_host_name,
            rpc_port: config.rpc_port,
            protocol: &config.protocol,
        };
        let engine = Engine::open(&config.library, &params)?;
        Ok(Self {
            engine: Arc::new(engine),
            config,
            metrics,
            locals: LocalRegistry::default(),
            served: Mutex::default(),
            opened: Mutex::default(),
        })
    }

    fn open_segment(&self, id: &Arc<str>) -> Result<Option<i32>> {
        if let Some(&handle) = self
            .opened
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
        {
            return Ok(Some(handle));
        }
        let handle = self.engine.open_segment(id)?;
        if let Some(h) = handle {
            self.opened
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(id.clone(), h);
        }
        Ok(handle)
    }

    fn forget_segment(&self, id: &str) {
        if let Some(h) = self
            .opened
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id)
        {
            self.engine.close_segment(h);
        }
    }

    async fn run_batch(&self, batch: &[TransferDescriptor]) -> Result<BatchCompletion> {
        if batch.len() > self.config.max_batch {
            return Err(TransportError::BatchTooLarge {
                len: batch.len(),
                max: self.config.max_batch,
            });
        }
        let started = std::time::Instant::now();
        let timeout = Duration::from_millis(self.config.batch_timeout_ms);
        let resolved = self
            .locals
            .resolve_batch(batch, self.config.max_transfer_len, false);
        let mut statuses: Vec<Option<Result<()>>> = vec![None; batch.len()];
        let mut work = Vec::with_capacity(batch.len());
        for (index, (d, local)) in batch.iter().zip(resolved).enumerate() {
            let target = local.and_then(|local| match self.open_segment(&d.remote.segment_id)? {
                Some(target) => Ok((target, local)),
                None => Err(TransportError::SegmentNotFound {
                    endpoint: d.remote.endpoint.to_string(),
                    segment: d.remote.segment_id.to_string(),
                }),
            });
            match target {
                Ok((target, local)) => work.push(Work {
                    index,
                    op: d.op,
                    target,
                    segment_id: d.remote.segment_id.clone(),
                    remote_offset: d.remote_offset,
                    length: d.length,
                    local,
                    local_offset: d.local_offset,
                }),
                Err(e) => statuses[index] = Some(Err(e)),
            }
        }
        if !work.is_empty() {
            let task = tokio::spawn(execute(self.engine.clone(), work, timeout * 10));
            match tokio::time::timeout(timeout, task).await {
                Ok(Ok(results)) => {
                    for (index, status) in results {
                        if let Err(TransportError::Engine { .. }) = &status {
                            // The segment may be gone; open it afresh next time.
                            self.forget_segment(&batch[index].remote.segment_id);
                        }
                        statuses[index] = Some(status);
                    }
                }
                Ok(Err(join)) => warn!(error = %join, "transfer engine task failed"),
                Err(_) => {}
            }
        }
        let statuses: Vec<Result<()>> = statuses
            .into_iter()
            .map(|s| {
                s.unwrap_or_else(|| {
                    Err(TransportError::Timeout {
                        what: "transfer engine batch".into(),
                        after: timeout,
                    })
                })
            })
            .collect();
        let ops: Vec<TransferOp> = batch.iter().map(|d| d.op).collect();
        self.metrics.record_batch(
            TransportKind::Ffi,
            &ops,
            batch.iter().map(|d| d.length),
            &statuses,
            started.elapsed(),
        );
        Ok(BatchCompletion { statuses })
    }
}

/// Runs the transfers on the engine in as few engine batches as the local range locks allow
/// (a transfer whose local range conflicts with one already held starts a new engine batch
/// after the current one completes, so a batch never waits on itself).
async fn execute(
    engine: Arc<Engine>,
    work: Vec<Work>,
    give_up: Duration,
) -> Vec<(usize, Result<()>)> {
    let mut results = Vec::with_capacity(work.len());
    let mut chunk: Vec<(&Work, Held<'_>)> = Vec::new();
    for w in &work {
        let held = match try_hold(w) {
            Ok(Some(held)) => held,
            Ok(None) => {
                if !chunk.is_empty() {
                    run_chunk(&engine, &mut chunk, give_up, &mut results).await;
                }
                match hold(w).await {
                    Ok(held) => held,
                    Err(e) => {
                        results.push((w.index, Err(e)));
                        continue;
                    }
                }
            }
            Err(e) => {
                results.push((w.index, Err(e)));
                continue;
            }
        };
        chunk.push((w, held));
    }
    if !chunk.is_empty() {
        run_chunk(&engine, &mut chunk, give_up, &mut results).await;
    }
    results
}

fn try_hold(w: &Work) -> Result<Option<Held<'_>>> {
    Ok(match w.op {
        TransferOp::Write => w
            .local
            .try_lock_read("local buffer", w.local_offset, w.length)?
            .map(Held::Read),
        TransferOp::Read => w
            .local
            .try_lock_write("local buffer", w.local_offset, w.length)?
            .map(Held::Write),
    })
}

async fn hold(w: &Work) -> Result<Held<'_>> {
    Ok(match w.op {
        TransferOp::Write => Held::Read(
            w.local
                .lock_read("local buffer", w.local_offset, w.length)
                .await?,
        ),
        TransferOp::Read => Held::Write(
            w.local
                .lock_write("local buffer", w.local_offset, w.length)
                .await?,
        ),
    })
}

async fn run_chunk<'a>(
    engine: &Engine,
    chunk: &mut Vec<(&'a Work, Held<'a>)>,
    give_up: Duration,
    results: &mut Vec<(usize, Result<()>)>,
) {
    let batch = match submit_chunk(engine, chunk) {
        Ok(batch) => batch,
        Err(e) => {
            results.extend(chunk.iter().map(|(w, _)| (w.index, Err(e.clone()))));
            chunk.clear();
            return;
        }
    };
    let mut pending: Vec<usize> = (0..chunk.len()).collect();
    let started = tokio::time::Instant::now();
    let mut pause = Duration::from_micros(5);
    loop {
        let mut i = 0;
        while i < pending.len() {
            let task = pending[i];
            let w = chunk[task].0;
            let outcome = match engine.status(batch, task) {
                Ok(s) => final_status(w, s.status, s.transferred_bytes),
                Err(e) => Some(Err(e)),
            };
            match outcome {
                Some(result) => {
                    results.push((w.index, result));
                    pending.swap_remove(i);
                }
                None => i += 1,
            }
        }
        if pending.is_empty() {
            break;
        }
        if started.elapsed() > give_up {
            // The engine may still copy into these ranges: keep them locked and alive forever
            // rather than let anyone else touch memory the engine owns.
            warn!(
                tasks = pending.len(),
                "transfer engine never finished a batch; leaking its buffers"
            );
            for (w, _) in chunk.iter() {
                std::mem::forget(w.local.clone());
            }
            std::mem::forget(std::mem::take(chunk));
            return;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(1));
    }
    engine.free_batch(batch);
    chunk.clear();
}

/// Allocates an engine batch and submits the chunk to it (no await: raw pointers stay here).
fn submit_chunk(engine: &Engine, chunk: &mut [(&Work, Held<'_>)]) -> Result<u64> {
    let mut requests: Vec<TransferRequest> = chunk
        .iter_mut()
        .map(|(w, held)| TransferRequest {
            opcode: match w.op {
                TransferOp::Read => OPCODE_READ,
                TransferOp::Write => OPCODE_WRITE,
            },
            source: held.source(),
            target_id: w.target,
            target_offset: w.remote_offset,
            length: w.length,
        })
        .collect();
    let batch = engine.allocate_batch(requests.len())?;
    // SAFETY: every source points into a local range locked by its guard in `chunk` (shared
    // for writes, exclusive for reads) and kept alive by its Arc in the batch's work list; the
    // caller drops the guards only after the engine reports a final status for every task, or
    // leaks them with their memory if it never does.
    if let Err(e) = unsafe { engine.submit(batch, &mut requests) } {
        engine.free_batch(batch);
        return Err(e);
    }
    Ok(batch)
}

fn final_status(w: &Work, status: i32, transferred: u64) -> Option<Result<()>> {
    let segment = &w.segment_id;
    Some(match status {
        STATUS_COMPLETED if transferred == w.length => Ok(()),
        STATUS_COMPLETED => Err(TransportError::Engine {
            call: "getTransferStatus",
            reason: format!(
                "short transfer on segment {segment}: {transferred} of {} bytes",
                w.length
            ),
        }),
        STATUS_INVALID => Err(TransportError::InvalidArgument(format!(
            "transfer engine rejected range [{}, {}+{}) of segment {segment} (outside the segment)",
            w.remote_offset, w.remote_offset, w.length
        ))),
        STATUS_TIMEOUT => Err(TransportError::Timeout {
            what: format!("transfer engine task on segment {segment}"),
            after: Duration::ZERO,
        }),
        STATUS_CANCELED => Err(TransportError::unavailable(
            segment,
            "transfer canceled by the engine",
        )),
        STATUS_FAILED => Err(TransportError::Engine {
            call: "getTransferStatus",
            reason: format!("transfer on segment {segment} failed (segment gone or engine error)"),
        }),
        _ => return None, // WAITING / PENDING
    })
}

impl Transport for FfiTransport {
    fn kind(&self) -> TransportKind {
        TransportKind::Ffi
    }

    fn local_endpoint(&self) -> Option<String> {
        Some(self.config.local_server_name.clone())
    }

    fn register(&self, memory: Arc<SegmentMemory>) -> Result<LocalHandle> {
        self.engine
            .register(memory.clone(), &self.config.local_location, false)?;
        Ok(self.locals.insert(memory))
    }

    fn unregister(&self, handle: LocalHandle) -> Result<Arc<SegmentMemory>> {
        let memory = self.locals.remove(handle)?;
        self.engine.unregister(&memory)?;
        Ok(memory)
    }

    fn serve_segment(&self, segment_id: &str, memory: Arc<SegmentMemory>) -> Result<()> {
        check_segment_id(segment_id)?;
        let mut served = self.served.lock().unwrap_or_else(|p| p.into_inner());
        if served.contains_key(segment_id) {
            return Err(TransportError::InvalidArgument(format!(
                "segment {segment_id:?} is already served"
            )));
        }
        self.engine.register(memory.clone(), segment_id, true)?;
        served.insert(segment_id.to_owned(), memory);
        Ok(())
    }

    fn withdraw_segment(&self, segment_id: &str) -> Result<Arc<SegmentMemory>> {
        let mut served = self.served.lock().unwrap_or_else(|p| p.into_inner());
        let memory =
            served
                .get(segment_id)
                .cloned()
                .ok_or_else(|| TransportError::SegmentNotFound {
                    endpoint: self.config.local_server_name.clone(),
                    segment: segment_id.to_owned(),
                })?;
        self.engine.unregister(&memory)?;
        served.remove(segment_id);
        drop(served);
        self.forget_segment(segment_id);
        Ok(memory)
    }

    fn submit<'a>(
        &'a self,
        batch: &'a [TransferDescriptor],
    ) -> BoxFuture<'a, Result<BatchCompletion>> {
        let span = info_span!(
            "transport.submit",
            transport = "ffi",
            descriptors = batch.len()
        );
        Box::pin(self.run_batch(batch).instrument(span))
    }
}
