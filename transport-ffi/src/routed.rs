//! `RoutedTransport`: one [`Transport`] over two, TCP and a transfer engine, for a process that
//! reaches segments of both kinds (docs/transport.md, "Transfer-engine segments").
//!
//! Each descriptor goes where its segment is served ([`crate::RemoteSegment::via`]); the two parts of
//! a batch run concurrently and their statuses come back in submission order. Local buffers are
//! registered with both transports (this transport's handle is the TCP one). Serving segments
//! is left to the TCP transport: an owner that serves through the engine holds its own
//! [`crate::ffi::FfiTransport`].

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use crate::error::{Result, TransportError};
use crate::memory::SegmentMemory;
use crate::transport::{
    BatchCompletion, BoxFuture, LocalHandle, TransferDescriptor, Transport, TransportKind,
};

/// TCP plus a transfer engine, chosen per descriptor.
pub struct RoutedTransport {
    tcp: Arc<dyn Transport>,
    engine: Arc<dyn Transport>,
    /// TCP handle (ours) -> the engine's handle of the same buffer.
    engine_handles: RwLock<HashMap<LocalHandle, LocalHandle>>,
}

impl std::fmt::Debug for RoutedTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RoutedTransport").finish_non_exhaustive()
    }
}

impl RoutedTransport {
    pub fn new(tcp: Arc<dyn Transport>, engine: Arc<dyn Transport>) -> Self {
        Self {
            tcp,
            engine,
            engine_handles: RwLock::default(),
        }
    }

    /// `batch` in two parts, TCP's and the engine's (local handles translated), each with
    /// the positions of its descriptors in `batch`.
    fn split(&self, batch: &[TransferDescriptor]) -> [(Vec<usize>, Vec<TransferDescriptor>); 2] {
        let handles = self
            .engine_handles
            .read()
            .unwrap_or_else(|p| p.into_inner());
        let mut parts: [(Vec<usize>, Vec<TransferDescriptor>); 2] = Default::default();
        for (i, d) in batch.iter().enumerate() {
            let (part, local) = match d.remote.via {
                // An unknown handle stays unknown: the engine reports UnknownHandle for it.
                TransportKind::Ffi => (1, handles.get(&d.local).copied().unwrap_or(LocalHandle(0))),
                TransportKind::Tcp => (0, d.local),
            };
            parts[part].0.push(i);
            parts[part]
                .1
                .push(TransferDescriptor { local, ..d.clone() });
        }
        parts
    }

    async fn run(&self, batch: &[TransferDescriptor]) -> Result<BatchCompletion> {
        if batch.iter().all(|d| d.remote.via == TransportKind::Tcp) {
            return self.tcp.submit(batch).await;
        }
        let [(tcp_at, tcp_part), (engine_at, engine_part)] = self.split(batch);
        let (tcp_done, engine_done) = futures::join!(
            statuses_of(&*self.tcp, &tcp_part),
            statuses_of(&*self.engine, &engine_part)
        );
        let mut statuses: Vec<Option<Result<()>>> = vec![None; batch.len()];
        let positions = tcp_at.into_iter().chain(engine_at);
        for (at, status) in positions.zip(tcp_done.into_iter().chain(engine_done)) {
            statuses[at] = Some(status);
        }
        Ok(BatchCompletion {
            statuses: statuses
                .into_iter()
                .map(|s| s.expect("one status per descriptor"))
                .collect(),
        })
    }
}

/// One status per descriptor of `part` (a part refused as a whole: that error for each).
async fn statuses_of(transport: &dyn Transport, part: &[TransferDescriptor]) -> Vec<Result<()>> {
    if part.is_empty() {
        return Vec::new();
    }
    match transport.submit(part).await {
        Ok(done) => done.statuses,
        Err(e) => vec![Err(e); part.len()],
    }
}

impl Transport for RoutedTransport {
    fn kind(&self) -> TransportKind {
        TransportKind::Tcp
    }

    fn local_endpoint(&self) -> Option<String> {
        self.tcp.local_endpoint()
    }

    fn register(&self, memory: Arc<SegmentMemory>) -> Result<LocalHandle> {
        let engine = self.engine.register(memory.clone())?;
        let tcp = match self.tcp.register(memory) {
            Ok(h) => h,
            Err(e) => {
                let _ = self.engine.unregister(engine);
                return Err(e);
            }
        };
        self.engine_handles
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(tcp, engine);
        Ok(tcp)
    }

    fn unregister(&self, handle: LocalHandle) -> Result<Arc<SegmentMemory>> {
        let engine = self
            .engine_handles
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&handle)
            .ok_or(TransportError::UnknownHandle(handle.0))?;
        let memory = self.tcp.unregister(handle)?;
        self.engine.unregister(engine)?;
        Ok(memory)
    }

    fn serve_segment(&self, segment_id: &str, memory: Arc<SegmentMemory>) -> Result<()> {
        self.tcp.serve_segment(segment_id, memory)
    }

    fn withdraw_segment(&self, segment_id: &str) -> Result<Arc<SegmentMemory>> {
        self.tcp.withdraw_segment(segment_id)
    }

    fn submit<'a>(
        &'a self,
        batch: &'a [TransferDescriptor],
    ) -> BoxFuture<'a, Result<BatchCompletion>> {
        Box::pin(self.run(batch))
    }
}
