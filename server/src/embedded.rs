//! The embedded segment of a standalone crescentd: memory owned by crescentd itself, served by
//! a TCP transfer listener inside the process, so `crescent put` / `crescent get` work against a
//! fresh start with no separate storage owner.
//!
//! The transfer listener runs on its own small tokio runtime on a dedicated thread: the HTTP
//! workers stay free for the control plane, and the runtime is created and dropped on that
//! thread (dropping a runtime inside another runtime's context is not allowed).

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crescent_actors::segment_registry::{
    SegmentRegistry, SegmentRegistryCommand, TransportKind, INSTANCE_ID,
};
use crescent_actors::AggregateRegistry;
use crescent_transport::tcp::{TcpConfig, TcpTransport};
use crescent_transport::{SegmentMemory, Transport, TransportMetrics};

use crate::config::StoreSettings;
use crate::error::ServerError;

/// Owner id of the embedded segment in the registry (one per crescentd data dir).
pub use crescent_wire::segments::EMBEDDED_OWNER_ID;
/// Segment id of the embedded segment.
pub const EMBEDDED_SEGMENT_ID: &str = "crescentd-embedded-0";
/// Worker threads of the data-plane runtime.
const DATA_PLANE_THREADS: usize = 2;

/// A running embedded segment: its memory is served until [`EmbeddedSegment::stop`] (or drop).
pub struct EmbeddedSegment {
    pub owner_id: String,
    pub segment_id: String,
    /// The advertised transfer endpoint (`HOST:PORT`).
    pub endpoint: String,
    pub size: u64,
    /// The incarnation registered for this process's memory.
    pub incarnation: u64,
    /// The served memory (the cold tier reads offloads from it and writes restores into it).
    memory: Arc<SegmentMemory>,
    transport: Option<Arc<TcpTransport>>,
    /// The remote-restore staging pool, served by the same listener (`cold::staging`).
    pub staging: Option<Arc<crate::cold::staging::StagedRestores>>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for EmbeddedSegment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedSegment")
            .field("segment_id", &self.segment_id)
            .field("endpoint", &self.endpoint)
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

/// Zeroed memory the OS provides lazily: a large zeroed allocation is served by `calloc` from
/// fresh anonymous pages, which are only backed by RAM once touched.
fn lazy_zeroed(len: usize) -> Result<SegmentMemory, ServerError> {
    let buffer = vec![0u8; len].into_boxed_slice();
    SegmentMemory::from_boxed_slice(buffer)
        .map_err(|e| ServerError::Recovery(format!("embedded segment memory: {e}")))
}

impl EmbeddedSegment {
    /// Allocates the segment and starts serving it on `settings.transfer_listen`. Registering
    /// and mounting it is the caller's (through the segment mirror).
    pub fn start(settings: &StoreSettings, metrics: TransportMetrics) -> Result<Self, ServerError> {
        Self::start_bounded(settings, &crate::config::net::NetConfig::default(), metrics)
    }

    /// [`EmbeddedSegment::start`] with the listener's bounds from `net`.
    pub fn start_bounded(
        settings: &StoreSettings,
        net: &crate::config::net::NetConfig,
        metrics: TransportMetrics,
    ) -> Result<Self, ServerError> {
        let size = settings.embedded_segment_bytes;
        let memory = Arc::new(lazy_zeroed(size as usize)?);
        let config = TcpConfig {
            listen: Some(settings.transfer_listen.clone()),
            advertise: settings.transfer_advertise.clone(),
            max_connections: net.transfer_max_connections,
            ..TcpConfig::default()
        };
        let (started_tx, started_rx) = mpsc::channel();
        let (shutdown_tx, shutdown_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("crescent-dataplane".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(DATA_PLANE_THREADS)
                    .thread_name("crescent-dataplane-worker")
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = started_tx.send(Err(format!("data-plane runtime: {e}")));
                        return;
                    }
                };
                rt.block_on(async move {
                    match TcpTransport::start(config, metrics).await {
                        Ok(t) => {
                            let t = Arc::new(t);
                            if started_tx.send(Ok(t.clone())).is_err() {
                                return;
                            }
                            // Serve until told to stop (or the handle is dropped).
                            let _ = shutdown_rx.await;
                            drop(t);
                        }
                        Err(e) => {
                            let _ = started_tx.send(Err(e.to_string()));
                        }
                    }
                });
            })
            .map_err(|e| {
                ServerError::Recovery(format!("cannot start the data-plane thread: {e}"))
            })?;
        let transport = match started_rx.recv() {
            Ok(Ok(t)) => t,
            Ok(Err(reason)) => {
                let _ = thread.join();
                return Err(ServerError::Recovery(format!(
                    "embedded segment transfer listener on {}: {reason}",
                    settings.transfer_listen
                )));
            }
            Err(_) => {
                let _ = thread.join();
                return Err(ServerError::Recovery(
                    "the data-plane thread stopped while starting".into(),
                ));
            }
        };
        let endpoint = transport
            .local_endpoint()
            .ok_or_else(|| ServerError::Recovery("the transfer listener has no endpoint".into()))?;
        transport
            .serve_segment(EMBEDDED_SEGMENT_ID, memory.clone())
            .map_err(|e| ServerError::Recovery(format!("serving the embedded segment: {e}")))?;
        tracing::info!(segment = EMBEDDED_SEGMENT_ID, %endpoint, size, "embedded segment served");
        Ok(Self {
            owner_id: EMBEDDED_OWNER_ID.to_string(),
            segment_id: EMBEDDED_SEGMENT_ID.to_string(),
            endpoint,
            size,
            incarnation: 0,
            memory,
            transport: Some(transport),
            staging: None,
            shutdown: Some(shutdown_tx),
            thread: Some(thread),
        })
    }

    /// The transport serving the segment (tests read and write through it).
    pub fn transport(&self) -> Option<&Arc<TcpTransport>> {
        self.transport.as_ref()
    }

    /// The segment's memory.
    pub fn memory(&self) -> &Arc<SegmentMemory> {
        &self.memory
    }

    /// Stops the listener and frees the memory.
    pub fn stop(mut self) {
        self.shutdown_now();
    }

    fn shutdown_now(&mut self) {
        if let Some(staging) = self.staging.take() {
            staging.withdraw();
        }
        if let Some(t) = self.transport.take() {
            let _ = t.withdraw_segment(&self.segment_id);
        }
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                tracing::error!("the data-plane thread panicked");
            }
        }
    }
}

impl Drop for EmbeddedSegment {
    fn drop(&mut self) {
        self.shutdown_now();
    }
}

/// Where a node keeps its embedded segment while it serves one.
pub type EmbeddedCell = Mutex<Option<EmbeddedSegment>>;

/// The cold tier reads offloads from the segment's memory, writes restores into it and stages
/// remote restores on its listener.
impl crate::cold::EmbeddedHot for EmbeddedCell {
    fn memory(&self) -> Option<(String, Arc<SegmentMemory>)> {
        let guard = self.lock().expect("embedded mutex");
        guard
            .as_ref()
            .map(|e| (e.segment_id.clone(), e.memory().clone()))
    }

    fn staging(&self) -> Option<Arc<crate::cold::staging::StagedRestores>> {
        let guard = self.lock().expect("embedded mutex");
        guard.as_ref().and_then(|e| e.staging.clone())
    }
}

/// The node's parts mounting the embedded segment uses.
pub struct EmbeddedDeps<'a> {
    pub settings: &'a StoreSettings,
    /// Listener bounds (`[net]`).
    pub net: &'a crate::config::net::NetConfig,
    /// The segment registry's actors (the recovered incarnation of the embedded owner).
    pub segments: &'a AggregateRegistry<SegmentRegistry>,
    /// Journals the segment's owner and mount, keeping the directory in step.
    pub mirror: &'a crate::segment_mirror::SegmentMirror,
    pub liveness: &'a crate::liveness::OwnerLiveness,
    /// The cold tier's parts: its staging pool is served on the segment's listener, and its
    /// clock, grants, metrics and transport metrics are the node's.
    pub cold: &'a crate::cold::ColdContext,
    /// Where the mounted segment is kept.
    pub cell: &'a EmbeddedCell,
}

/// Starts the embedded segment (unless `store.embedded_segment_bytes` is 0) and journals it:
/// RegisterOwner with the transfer endpoint, then MountSegment over TCP. The memory is new on
/// every start, so the owner registers with the recovered registry's incarnation + 1, which
/// unmounts the previous run's segment (and drops whatever the directory had placed there).
pub async fn mount_embedded(deps: &EmbeddedDeps<'_>) -> Result<(), ServerError> {
    let settings = deps.settings;
    if settings.embedded_segment_bytes == 0 {
        return Ok(());
    }
    if deps.cell.lock().expect("embedded mutex").is_some() {
        return Ok(());
    }
    let mut segment =
        EmbeddedSegment::start_bounded(settings, deps.net, deps.cold.transport_metrics.clone())?;
    if let (Some(grants), Some(transport)) = (deps.cold.auth.grants(), segment.transport()) {
        // Before the segment is registered: nothing can be placed in it while it is open.
        transport.install_grant_key(grants.owner_key(EMBEDDED_OWNER_ID));
    }
    start_staging(deps.cold, &mut segment);
    let recovered = deps
        .segments
        .read(INSTANCE_ID, |r: &SegmentRegistry| {
            r.owner(EMBEDDED_OWNER_ID).map(|o| o.incarnation)
        })
        .await
        .map_err(|e| ServerError::Recovery(format!("reading the segment registry: {e}")))?;
    let incarnation = recovered.unwrap_or(0) + 1;
    deps.liveness.exempt(EMBEDDED_OWNER_ID);
    journal_mount(deps.mirror, &segment, incarnation).await?;
    segment.incarnation = incarnation;
    tracing::info!(owner = EMBEDDED_OWNER_ID, incarnation, endpoint = %segment.endpoint,
        size = segment.size, "embedded segment mounted");
    *deps.cell.lock().expect("embedded mutex") = Some(segment);
    Ok(())
}

/// Journals the segment's owner (at `incarnation`, with its transfer endpoint) and its mount.
async fn journal_mount(
    mirror: &crate::segment_mirror::SegmentMirror,
    segment: &EmbeddedSegment,
    incarnation: u64,
) -> Result<(), ServerError> {
    let journal_err = |e: crate::segment_mirror::MirrorError| {
        ServerError::Recovery(format!("journaling the embedded segment: {e}"))
    };
    mirror
        .execute(SegmentRegistryCommand::RegisterOwner {
            owner_id: EMBEDDED_OWNER_ID.to_string(),
            endpoint: segment.endpoint.clone(),
            incarnation,
        })
        .await
        .map_err(journal_err)?;
    mirror
        .execute(SegmentRegistryCommand::MountSegment {
            segment_id: EMBEDDED_SEGMENT_ID.to_string(),
            owner_id: EMBEDDED_OWNER_ID.to_string(),
            base: 0,
            size: segment.size,
            transport: TransportKind::Tcp,
        })
        .await
        .map_err(journal_err)?;
    Ok(())
}

/// Serves the cold tier's remote-restore staging region on the embedded segment's listener,
/// when the tier is on and `[cold] staging_bytes` is not 0. A failure only leaves remote
/// restores inline (logged).
fn start_staging(cold: &crate::cold::ColdContext, segment: &mut EmbeddedSegment) {
    let Some(tier) = cold.cold.get() else {
        return;
    };
    let settings = tier.restore.staging;
    let Some(transport) = segment.transport.clone() else {
        return;
    };
    if !settings.enabled() {
        return;
    }
    // Ids unique to this run: a token from an earlier run is unknown here, never another's.
    let first_id = (cold.now_ms().max(1) as u64) << 16;
    match crate::cold::staging::StagedRestores::start(
        settings,
        transport,
        segment.endpoint.clone(),
        &cold.registry,
        first_id,
    ) {
        Ok(staging) => segment.staging = Some(staging),
        Err(e) => tracing::warn!(error = %e, "remote restores stay inline: no staging region"),
    }
}
