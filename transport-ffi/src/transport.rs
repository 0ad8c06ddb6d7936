//! The `Transport` trait and the types a batch is made of.
//!
//! A batch is a slice of [`TransferDescriptor`]s; each moves `length` bytes between a remote
//! segment range (endpoint, segment id, offset) and a range of a locally registered buffer
//! (handle, offset). `Write` copies local -> remote, `Read` remote -> local. A batch completes
//! as a whole with one status per descriptor; a descriptor's failure never hides the others'
//! results.
//!
//! Ordering: descriptors to one endpoint take effect in submission order (a Write after a Read
//! into the same local range sends what the Read brought in). Descriptors to different
//! endpoints run concurrently, with no order between them. Concurrent batches touching
//! overlapping local ranges are serialised by range locks; a cycle among them (each waiting
//! on the other through a peer) is broken by the batch timeout.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use crate::error::{Result, TransportError};
use crate::grant::Grant;
use crate::memory::SegmentMemory;

/// A boxed, sendable future (keeps the trait object-safe).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Longest segment id accepted (the control plane's limit).
pub const MAX_SEGMENT_ID_LEN: usize = 256;

/// Which implementation moves the bytes (a metric label, so a closed set).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TransportKind {
    Tcp,
    Ffi,
}

impl TransportKind {
    pub fn label(self) -> &'static str {
        match self {
            TransportKind::Tcp => "tcp",
            TransportKind::Ffi => "ffi",
        }
    }
}

/// Direction of one transfer, seen from the local side.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TransferOp {
    /// Remote segment -> local buffer.
    Read,
    /// Local buffer -> remote segment.
    Write,
}

impl TransferOp {
    pub fn label(self) -> &'static str {
        match self {
            TransferOp::Read => "read",
            TransferOp::Write => "write",
        }
    }
}

/// A segment served by a storage owner: where to reach it and its id. Cheap to clone.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RemoteSegment {
    /// The owner's transfer listener, `host:port` (for a transfer-engine segment, the owner's
    /// registered endpoint: informational, the engine resolves the segment id itself).
    pub endpoint: Arc<str>,
    /// The segment id assigned by the control plane.
    pub segment_id: Arc<str>,
    /// Which transport serves it: what [`crate::RoutedTransport`] sends its transfers through.
    pub via: TransportKind,
}

impl RemoteSegment {
    /// A segment served by a TCP transfer listener.
    pub fn new(endpoint: impl Into<Arc<str>>, segment_id: impl Into<Arc<str>>) -> Self {
        Self {
            endpoint: endpoint.into(),
            segment_id: segment_id.into(),
            via: TransportKind::Tcp,
        }
    }

    /// A segment served by a transfer engine (mounted with transport `transfer_engine`).
    pub fn transfer_engine(endpoint: impl Into<Arc<str>>, segment_id: impl Into<Arc<str>>) -> Self {
        Self {
            via: TransportKind::Ffi,
            ..Self::new(endpoint, segment_id)
        }
    }
}

/// A registered local buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LocalHandle(pub u64);

/// One transfer of a batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransferDescriptor {
    pub op: TransferOp,
    pub remote: RemoteSegment,
    pub remote_offset: u64,
    pub local: LocalHandle,
    pub local_offset: u64,
    pub length: u64,
    /// The data-plane grant crescentd issued for this range (docs/security.md, "The data
    /// plane"); `None` where the listener requires none (crescentd without `[auth]`).
    pub grant: Option<Grant>,
}

/// The outcome of a batch: one status per descriptor, in submission order.
#[derive(Debug)]
pub struct BatchCompletion {
    pub statuses: Vec<Result<()>>,
}

impl BatchCompletion {
    /// True if every descriptor succeeded.
    pub fn all_ok(&self) -> bool {
        self.statuses.iter().all(|s| s.is_ok())
    }

    /// The first failure, if any, with its descriptor index.
    pub fn first_error(&self) -> Option<(usize, &TransportError)> {
        self.statuses
            .iter()
            .enumerate()
            .find_map(|(i, s)| s.as_ref().err().map(|e| (i, e)))
    }

    /// `Ok` if every descriptor succeeded, else the first error.
    pub fn into_result(self) -> Result<()> {
        self.statuses
            .into_iter()
            .find(|s| s.is_err())
            .unwrap_or(Ok(()))
    }
}

/// The data plane. Implementations: [`crate::tcp::TcpTransport`] (default) and
/// [`crate::ffi::FfiTransport`] (a dlopened transfer engine).
pub trait Transport: Send + Sync + 'static {
    /// Which implementation this is.
    fn kind(&self) -> TransportKind;

    /// The endpoint peers use to reach the segments this transport serves, if it serves any.
    fn local_endpoint(&self) -> Option<String>;

    /// Registers a local buffer (an owned region, or a caller buffer wrapped with
    /// [`SegmentMemory::from_raw_parts`]) as a source or destination of transfers.
    fn register(&self, memory: Arc<SegmentMemory>) -> Result<LocalHandle>;

    /// Forgets a registered buffer and gives it back. Batches already running keep their own
    /// reference until they complete.
    fn unregister(&self, handle: LocalHandle) -> Result<Arc<SegmentMemory>>;

    /// Serves `memory` to peers as segment `segment_id` (a storage owner mounting a segment).
    fn serve_segment(&self, segment_id: &str, memory: Arc<SegmentMemory>) -> Result<()>;

    /// Stops serving a segment and gives its memory back.
    fn withdraw_segment(&self, segment_id: &str) -> Result<Arc<SegmentMemory>>;

    /// Runs a batch. The outer error is for a batch refused as a whole (e.g. too large); every
    /// per-transfer problem is reported in its own status.
    fn submit<'a>(
        &'a self,
        batch: &'a [TransferDescriptor],
    ) -> BoxFuture<'a, Result<BatchCompletion>>;
}

/// Checks a segment id as the control plane does.
pub fn check_segment_id(segment_id: &str) -> Result<()> {
    if segment_id.is_empty() {
        return Err(TransportError::InvalidArgument(
            "segment id must not be empty".into(),
        ));
    }
    if segment_id.len() > MAX_SEGMENT_ID_LEN {
        return Err(TransportError::InvalidArgument(format!(
            "segment id of {} bytes, at most {MAX_SEGMENT_ID_LEN} allowed",
            segment_id.len()
        )));
    }
    Ok(())
}

/// Registered local buffers of one transport.
#[derive(Debug, Default)]
pub(crate) struct LocalRegistry {
    next: AtomicU64,
    buffers: RwLock<HashMap<u64, Arc<SegmentMemory>>>,
}

impl LocalRegistry {
    pub(crate) fn insert(&self, memory: Arc<SegmentMemory>) -> LocalHandle {
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        self.buffers
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, memory);
        LocalHandle(id)
    }

    pub(crate) fn remove(&self, handle: LocalHandle) -> Result<Arc<SegmentMemory>> {
        self.buffers
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&handle.0)
            .ok_or(TransportError::UnknownHandle(handle.0))
    }

    /// Resolves every descriptor's local buffer and checks the local and obvious remote
    /// arguments. One entry per descriptor: the buffer, or why the descriptor is refused.
    /// `only_tcp`: a segment served by a transfer engine is refused (TCP cannot reach it).
    pub(crate) fn resolve_batch(
        &self,
        batch: &[TransferDescriptor],
        max_transfer_len: u64,
        only_tcp: bool,
    ) -> Vec<Result<Arc<SegmentMemory>>> {
        let buffers = self.buffers.read().unwrap_or_else(|p| p.into_inner());
        batch
            .iter()
            .map(|d| {
                check_segment_id(&d.remote.segment_id)?;
                if only_tcp && d.remote.via == TransportKind::Ffi {
                    return Err(TransportError::InvalidArgument(format!(
                        "segment {} is served by a transfer engine and this process loaded \
                         none (set {} or configure one)",
                        d.remote.segment_id,
                        crate::ffi::LIBRARY_ENV
                    )));
                }
                if d.length > max_transfer_len {
                    return Err(TransportError::InvalidArgument(format!(
                        "transfer of {} bytes exceeds the limit of {max_transfer_len}",
                        d.length
                    )));
                }
                let memory = buffers
                    .get(&d.local.0)
                    .cloned()
                    .ok_or(TransportError::UnknownHandle(d.local.0))?;
                memory.check_range("local buffer", d.local_offset, d.length)?;
                d.remote_offset.checked_add(d.length).ok_or_else(|| {
                    TransportError::OutOfRange {
                        what: format!("segment {}", d.remote.segment_id),
                        offset: d.remote_offset,
                        length: d.length,
                        size: u64::MAX,
                    }
                })?;
                Ok(memory)
            })
            .collect()
    }
}
