//! Starting and stopping a crescentd node (standalone mode).
//!
//! Startup order: validate the data dir; open the journal (recovering its tail under the
//! configured mode); restore every aggregate from the newest valid snapshot plus the journal
//! tail; start the actor runtime seeded with that state; start the shadow-replay snapshotter
//! from a copy of it; then listen. Nothing is served before recovery has finished.
//!
//! Shutdown (SIGTERM/SIGINT): actix-web stops accepting, lets in-flight requests finish (up to
//! `http.shutdown_timeout_secs`), then the snapshotter stops and the journal flushes and closes.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use actix_web::{web, HttpServer};
use crescent_actors::runtime::RuntimeMetrics;
use crescent_actors::segment_registry::SegmentRegistry;
use crescent_actors::{AggregateRegistry, Runtime};
use crescent_journal::file::{FileBackend, FileOptions};
use crescent_journal::metrics::JournalMetrics;
#[cfg(feature = "sled")]
use crescent_journal::sled_backend::SledBackend;
use crescent_journal::{Journal, JournalBackend, JournalOptions};
use crescent_snapshot::{restore, SnapshotDir, SnapshotInfo, SnapshotMetrics, Snapshotter};
use crescent_store::{ObjectDirectory, StoreMetrics};
use crescent_transport::TransportMetrics;

use crate::config::{Config, JournalBackendKind, StoreSettings};
use crate::datadir::DataDir;
use crate::embedded::EmbeddedSegment;
use crate::error::ServerError;
use crate::liveness::OwnerLiveness;
use crate::metrics::ServerMetrics;
use crate::rpc::RpcServer;
use crate::segment_mirror::SegmentMirror;

/// What every HTTP handler shares.
pub struct NodeState {
    pub journal: Journal,
    pub journal_backend: String,
    /// `DATA_DIR/journal` (its quarantine is reported in `/healthz`).
    pub journal_dir: std::path::PathBuf,
    pub runtime: Runtime,
    pub segments: AggregateRegistry<SegmentRegistry>,
    pub metrics: ServerMetrics,
    pub snapshotter: Mutex<Option<Snapshotter>>,
    /// Object metadata (in memory, not journaled).
    pub directory: Arc<ObjectDirectory>,
    /// Every segment command goes through here, keeping `directory` in step with `segments`.
    pub mirror: SegmentMirror,
    pub liveness: Arc<OwnerLiveness>,
    pub store_settings: StoreSettings,
    /// Listener bounds (`[net]`).
    pub net_settings: crate::config::net::NetConfig,
    pub transport_metrics: TransportMetrics,
    /// The transfer engine crescentd loads beside TCP to reach segments mounted with transport
    /// `transfer_engine` (`[transport]`, else the environment).
    pub transfer_engine: Option<crescent_transport::ffi::FfiConfig>,
    pub embedded: Mutex<Option<EmbeddedSegment>>,
    pub housekeeping: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The RPC fast path's listener, while it runs.
    pub rpc: Mutex<Option<RpcServer>>,
    /// Set when this node is the active of an HA pair.
    pub ha: std::sync::OnceLock<Arc<crate::ha::active::ActiveHa>>,
    /// Set when this node's cluster serves in a mesh (`[mesh]`): object requests are checked
    /// against the mesh's routing (docs/scale-out.md).
    pub mesh: std::sync::OnceLock<Arc<crate::mesh::MeshRole>>,
    /// The rebuild gate of this start or promotion.
    pub rebuild: Arc<crate::rebuild::Rebuild>,
    /// Removes wait here until what they removed from owners' segments is journaled.
    pub removals: Arc<crate::removals::DurableRemovals>,
    /// Tenant quota roots (docs/tenants.md).
    pub quotas: Arc<crate::quotas::TenantQuotas>,
    /// Managed weight revisions (registries, workflows, group guard).
    pub weights: Arc<crate::weights::WeightService>,
    /// The cold tier, once [`crate::cold::start`] has reconciled it.
    pub cold: std::sync::OnceLock<Arc<crate::cold::ColdTier>>,
    /// The recovered `ColdDevice` states (and their seq), until the cold tier takes them.
    pub cold_recovered: ColdRecovered,
    /// Credentials, the authorization guard's state and the revocation list.
    pub auth: Arc<crate::auth::AuthState>,
    /// `[tls]` loaded: HTTP, RPC and replication speak TLS only (docs/security.md "TLS").
    pub tls: Option<crate::config::tls::LoadedTls>,
    /// Admission of store requests by per-tenant turns (docs/tenants.md, "Soft isolation").
    pub gate: crate::sched::Gate,
}

/// Recovered `ColdDevice` states by device id, with the seq they were recovered through.
pub type ColdRecovered = Mutex<Option<(BTreeMap<String, crescent_cold::ColdDevice>, u64)>>;

impl NodeState {
    /// `Ok` unless this node's cluster is in a mesh that routes `id` to another cluster
    /// (WRONG_CLUSTER). Outside a mesh: one branch.
    #[inline]
    pub fn authority(
        &self,
        id: &crescent_wire::store::ObjectId,
    ) -> Result<(), crescent_wire::ApiError> {
        match self.mesh.get() {
            None => Ok(()),
            Some(mesh) => mesh.check(id),
        }
    }

    /// [`Self::authority`] for reads and removes: a cluster also answers for an object it
    /// still holds that the mesh now routes elsewhere (it was the object's authority before a
    /// join, docs/scale-out.md "Reads after a membership change").
    pub fn read_authority(
        &self,
        id: &crescent_wire::store::ObjectId,
    ) -> Result<(), crescent_wire::ApiError> {
        match self.mesh.get() {
            None => Ok(()),
            Some(mesh) => mesh.check(id).or_else(|e| match self.holds(id) {
                true => Ok(()),
                false => Err(e),
            }),
        }
    }

    /// This cluster's role in its mesh, if it serves in one.
    pub fn mesh_role(&self) -> Option<&crate::mesh::MeshRole> {
        self.mesh.get().map(|m| &**m)
    }

    /// Whether the directory holds a complete object `id`.
    pub fn holds(&self, id: &crescent_wire::store::ObjectId) -> bool {
        self.directory.exist(id, self.now_ms()).unwrap_or(false)
    }

    /// The server clock (ms since the Unix epoch): the one the aggregates' commands see.
    pub fn now_ms(&self) -> i64 {
        self.runtime.clock().now_ms()
    }

    /// Starts the RPC fast path on `addr` (port 0 picks one); returns the bound address.
    /// `max_body` bounds every frame, `[net]` the connections. Replaces (and stops) a listener
    /// started before.
    pub fn start_rpc(
        self: &Arc<Self>,
        addr: SocketAddr,
        max_body: usize,
        local_path: Option<&std::path::Path>,
    ) -> Result<SocketAddr, ServerError> {
        let limits = self.net_settings.rpc_limits(max_body);
        let server = RpcServer::start(self.clone(), addr, limits, local_path)?;
        let bound = server.local_addr();
        if let Some(old) = self.rpc.lock().expect("rpc mutex").replace(server) {
            old.stop();
        }
        Ok(bound)
    }

    /// Where the RPC fast path listens, if it runs.
    pub fn rpc_address(&self) -> Option<SocketAddr> {
        self.rpc
            .lock()
            .expect("rpc mutex")
            .as_ref()
            .map(RpcServer::local_addr)
    }

    /// Where the RPC fast path's local socket listens, if it does.
    pub fn rpc_local_path(&self) -> Option<std::path::PathBuf> {
        self.rpc
            .lock()
            .expect("rpc mutex")
            .as_ref()
            .and_then(|s| s.local_path().map(std::path::Path::to_path_buf))
    }

    /// The staging pool of this node's embedded segment, if it serves one.
    pub fn embedded_staging(&self) -> Option<Arc<crate::cold::staging::StagedRestores>> {
        self.embedded
            .lock()
            .expect("embedded mutex")
            .as_ref()
            .and_then(|e| e.staging.clone())
    }

    /// Updates gauges that are read rather than pushed.
    pub fn refresh_gauges(&self) {
        crate::journal_health::journal_health(&self.journal_dir, self.journal.metrics());
        self.metrics.term.set(self.runtime.term() as i64);
        self.metrics.last_seq.set(self.journal.last_seq() as i64);
        self.quotas.refresh_metrics();
        self.metrics.process.refresh();
        self.metrics
            .commit_seq
            .set(self.runtime.commit().get() as i64);
        if let Some(ha) = self.ha.get() {
            let (records, bytes) = ha.standby_lag();
            self.metrics.replication_lag_records.set(records as i64);
            self.metrics.replication_lag_bytes.set(bytes as i64);
        }
    }

    /// Catches the snapshotter up with the journal and writes a snapshot now (admin endpoint
    /// and tests). Runs on a blocking thread; never holds the lock across an await.
    pub async fn snapshot_now(self: &Arc<Self>) -> Result<SnapshotInfo, ServerError> {
        let me = self.clone();
        tokio::task::spawn_blocking(move || {
            let guard = me.snapshotter.lock().expect("snapshotter mutex poisoned");
            match guard.as_ref() {
                Some(s) => s.snapshot_now().map_err(ServerError::from),
                None => Err(ServerError::Recovery("the snapshotter is stopped".into())),
            }
        })
        .await
        .map_err(|e| ServerError::Recovery(format!("snapshot task failed: {e}")))?
    }

    /// The snapshotter's status for `/stats`.
    pub fn snapshot_status(&self) -> serde_json::Value {
        let guard = self.snapshotter.lock().expect("snapshotter mutex poisoned");
        let Some(s) = guard.as_ref() else {
            return serde_json::json!({"running": false});
        };
        let st = s.status();
        serde_json::json!({
            "running": !st.stopped,
            "applied_seq": st.applied.seq,
            "last_snapshot": st.last_snapshot.as_ref().map(|i| serde_json::json!({
                "path": i.path.display().to_string(),
                "seq": i.position.seq,
                "term": i.position.term,
                "bytes": i.bytes,
                "created_ms": i.created_ms,
            })),
            "last_error": st.last_error,
        })
    }
}

/// Journals this start's incarnation (one above the journal's last) and waits until it is
/// durable: put ids of this run order after every replayed one.
fn begin_incarnation(
    journal: &Journal,
    world: &crescent_actors::World,
    term: u64,
    now_ms: i64,
) -> Result<u32, ServerError> {
    use crescent_actors::incarnation::{IncarnationCommand, NodeIncarnation, INSTANCE_ID};
    use crescent_actors::Aggregate;
    let state = world
        .get::<NodeIncarnation>(INSTANCE_ID)
        .cloned()
        .unwrap_or_default();
    let ctx = crescent_actors::Ctx {
        now_ms,
        fresh_id: uuid::Uuid::new_v4(),
        term,
    };
    let events = state
        .decide(&IncarnationCommand::Begin, &ctx)
        .map_err(|e| ServerError::Recovery(format!("incarnation: {e}")))?;
    let records = events
        .iter()
        .map(|e| {
            crescent_actors::event_codec::new_record::<NodeIncarnation>(INSTANCE_ID, e, now_ms)
        })
        .collect();
    journal.append_blocking(term, records)?;
    let mut next = state;
    for e in &events {
        next.apply(e);
    }
    Ok(next.incarnation)
}

/// The journaled removes of earlier runs, fenced from owner replays, and the journaling of this
/// run's (docs/rebuild.md, "Removes are journaled").
fn recover_removals(
    runtime: &Runtime,
    world: &crescent_actors::World,
    directory: Arc<ObjectDirectory>,
    metrics: &ServerMetrics,
) -> Result<Arc<crate::removals::DurableRemovals>, ServerError> {
    use crescent_actors::removed_puts::{RemovedPuts, INSTANCE_ID};
    let states: BTreeMap<String, RemovedPuts> = world
        .iter::<RemovedPuts>()
        .map(|(id, s)| (id.clone(), s.clone()))
        .collect();
    let recovered = states.get(INSTANCE_ID).cloned().unwrap_or_default();
    let registry = AggregateRegistry::<RemovedPuts>::builder(runtime.clone())
        .recovered(states, world.last_seq())
        .build();
    crate::removals::DurableRemovals::new(registry, &recovered, directory, &metrics.registry)
        .map(Arc::new)
        .map_err(|e| ServerError::Recovery(format!("removal metrics: {e}")))
}

/// A data dir with its journal open (startup's first half).
pub struct OpenedJournal {
    pub dir: DataDir,
    pub journal: Journal,
    pub backend_name: String,
    pub metrics: ServerMetrics,
}

/// Under what authority a node writes.
pub enum Leadership {
    /// Alone: the journal's own highest term, commit = local durability.
    Standalone,
    /// The active of an HA pair: the term won in etcd (cleared on step-down) and the commit
    /// watermark of the replication layer.
    Active {
        term: Arc<std::sync::atomic::AtomicU64>,
        commit: crescent_journal::Watermark,
        /// The event versions it writes, raised by the replication listener as its standby
        /// allows (docs/ha.md, "Event versions in a mixed pair").
        versions: crescent_actors::EventVersions,
    },
}

/// A crescentd node.
pub struct Node;

impl Node {
    fn open_backend(
        config: &Config,
        dir: &DataDir,
    ) -> Result<(Box<dyn JournalBackend>, String), ServerError> {
        Ok(match config.journal.backend {
            JournalBackendKind::File => {
                let opts = FileOptions {
                    segment_bytes: config.journal.segment_bytes,
                    ..FileOptions::default()
                };
                (
                    Box::new(FileBackend::open(dir.journal_dir(), opts)?),
                    "file".to_string(),
                )
            }
            #[cfg(feature = "sled")]
            JournalBackendKind::Sled => (
                Box::new(SledBackend::open(dir.journal_dir().join("sled"))?),
                "sled".to_string(),
            ),
            // Config::validate refuses the setting in a build without the backend.
            #[cfg(not(feature = "sled"))]
            JournalBackendKind::Sled => {
                return Err(ServerError::Config(crate::config::invalid(
                    "journal.backend",
                    "\"sled\" needs a crescentd built with feature `sled`",
                )))
            }
        })
    }

    /// Validates the data dir and opens (recovers) its journal: the part of startup that HA
    /// and standalone share.
    pub fn open_journal(config: &Config) -> Result<OpenedJournal, ServerError> {
        let dir = DataDir::open_or_init(&config.data_dir, config.journal.backend.as_str())?;
        let metrics = ServerMetrics::new();
        let (backend, backend_name) = Self::open_backend(config, &dir)?;
        let journal_metrics = JournalMetrics::register(&metrics.registry)
            .map_err(|e| ServerError::Recovery(format!("journal metrics: {e}")))?;
        let journal = Journal::open(
            backend,
            JournalOptions {
                recovery_mode: config.journal.recovery_mode,
                max_record_bytes: config.journal.max_record_bytes as usize,
                metrics: Some(journal_metrics),
                ..JournalOptions::default()
            },
        )?;
        // Journal::open logged what recovery cut (once); the quarantine it left, and any
        // earlier one not yet cleared, shows in /healthz and the gauge from here on.
        crate::journal_health::journal_health(&dir.journal_dir(), journal.metrics());
        Ok(OpenedJournal {
            dir,
            journal,
            backend_name,
            metrics,
        })
    }

    /// Recovers state and builds everything the HTTP server needs, without listening
    /// (standalone).
    pub fn start(config: &Config) -> Result<Arc<NodeState>, ServerError> {
        let span = tracing::info_span!("node.start", data_dir = %config.data_dir.display());
        let _g = span.enter();
        crescent_journal::fd_reserve::set_target(config.net.fd_reserve);
        let opened = Self::open_journal(config)?;
        Self::start_on(config, opened, Leadership::Standalone)
    }

    /// Builds a node over an opened journal: restores every aggregate (newest valid snapshot
    /// plus the journal tail), starts the actor runtime under `leadership`, the snapshotter and
    /// the object directory.
    pub fn start_on(
        config: &Config,
        opened: OpenedJournal,
        leadership: Leadership,
    ) -> Result<Arc<NodeState>, ServerError> {
        let OpenedJournal {
            dir,
            journal,
            backend_name,
            metrics,
        } = opened;
        let snapshots = SnapshotDir::new(dir.snapshot_dir());
        let world = recover_world(&snapshots, &journal)?;
        let runtime = start_runtime(&journal, &metrics, leadership)?;
        let (segments, recovered_registry) = recover_segments(&runtime, &world);
        let cold_states: BTreeMap<String, crescent_cold::ColdDevice> = world
            .iter::<crescent_cold::ColdDevice>()
            .map(|(id, s)| (id.clone(), s.clone()))
            .collect();
        let cold_recovered = Mutex::new(Some((cold_states, world.last_seq())));
        let auth = Arc::new(crate::auth::AuthState::new(
            &config.auth,
            &runtime,
            &world,
            &metrics.registry,
        )?);
        let tls = config
            .tls
            .load()
            .map_err(|e| ServerError::Recovery(e.to_string()))?;
        let now_ms = runtime.clock().now_ms();
        let (directory, rebuild) = open_directory(
            config,
            (&journal, &world, &runtime),
            &metrics,
            &recovered_registry,
            now_ms,
        )?;
        let removals = recover_removals(&runtime, &world, directory.clone(), &metrics)?;
        let quotas = Arc::new(crate::quotas::TenantQuotas::recover(
            &runtime,
            &world,
            directory.clone(),
            &metrics.registry,
        )?);
        let liveness = Arc::new(OwnerLiveness::new(config.store.client_ttl_ms()));
        let mirror = SegmentMirror::new(segments.clone(), directory.clone(), liveness.clone());
        mirror.mirror_recovered(&recovered_registry, now_ms);
        let weights = crate::weights::WeightService::recover(
            &runtime,
            &world,
            directory.clone(),
            config.weights.clone(),
            &metrics.registry,
        )?;
        let transport_metrics = TransportMetrics::register(&metrics.registry)
            .map_err(|e| ServerError::Recovery(format!("transport metrics: {e}")))?;

        let snapshotter = start_snapshotter(config, world, &journal, snapshots, &metrics)?;
        let gate = open_gate(config, &metrics.registry)?;
        metrics.up.set(1);
        Ok(Arc::new(NodeState {
            journal,
            journal_backend: backend_name,
            journal_dir: dir.journal_dir(),
            runtime,
            segments,
            metrics,
            snapshotter: Mutex::new(Some(snapshotter)),
            directory,
            mirror,
            liveness,
            store_settings: config.store.clone(),
            net_settings: config.net.clone(),
            transport_metrics,
            transfer_engine: config.transport.transfer_engine(),
            embedded: Mutex::new(None),
            housekeeping: Mutex::new(None),
            rpc: Mutex::new(None),
            ha: std::sync::OnceLock::new(),
            mesh: std::sync::OnceLock::new(),
            rebuild,
            removals,
            quotas,
            weights,
            cold: std::sync::OnceLock::new(),
            cold_recovered,
            auth,
            tls,
            gate,
        }))
    }

    /// Stops the snapshotter and closes the journal (everything submitted becomes durable).
    pub fn stop(state: &NodeState) {
        state.metrics.up.set(0);
        if let Some(cold) = state.cold.get() {
            cold.queue.stop();
        }
        if let Some(rpc) = state.rpc.lock().expect("rpc mutex").take() {
            rpc.stop();
        }
        if let Some(h) = state
            .housekeeping
            .lock()
            .expect("housekeeping mutex")
            .take()
        {
            h.abort();
        }
        if let Some(e) = state.embedded.lock().expect("embedded mutex").take() {
            e.stop();
        }
        if let Some(s) = state
            .snapshotter
            .lock()
            .expect("snapshotter mutex poisoned")
            .take()
        {
            if let Err(e) = s.stop() {
                tracing::warn!(error = %e, "snapshotter stopped with an error");
            }
        }
        if let Err(e) = state.journal.shutdown() {
            tracing::error!(error = %e, "journal did not close cleanly");
        }
    }

    /// Runs a node until SIGTERM/SIGINT. Must be called inside an actix System.
    pub async fn run(config: Config) -> Result<(), ServerError> {
        crescent_journal::fd_reserve::set_target(config.net.fd_reserve);
        if config.ha.enabled() {
            return crate::ha::run(config).await;
        }
        let state = Self::start(&config)?;
        if let Err(e) = state.quotas.bootstrap(&config.tenants).await {
            Self::stop(&state);
            return Err(e);
        }
        if let Err(e) = crate::cold::start_node(&state, &config).await {
            Self::stop(&state);
            return Err(e);
        }
        if let Err(e) = crate::embedded::mount_embedded(&state).await {
            Self::stop(&state);
            return Err(e);
        }
        let listener = crate::http_bounds::bind_listener(config.listen)?;
        let server = Self::serve(&state, &config, &listener)?;
        tracing::info!(listen = %config.listen, data_dir = %config.data_dir.display(), "crescentd serving (standalone)");
        let result = server.await.map_err(ServerError::Http);
        tracing::info!("shutting down");
        Self::stop(&state);
        result
    }

    /// Starts housekeeping, the RPC fast path and the HTTP server of a node; the returned server
    /// runs until stopped (or SIGTERM/SIGINT). It serves on a duplicate of `listener`.
    pub fn serve(
        state: &Arc<NodeState>,
        config: &Config,
        listener: &std::net::TcpListener,
    ) -> Result<actix_web::dev::Server, ServerError> {
        crate::housekeeping::spawn(state);
        state.weights.spawn_lease_expiry();
        state.weights.resume_all(state.rebuild.clone());
        crate::auth::log_mode(config);
        if let Some(addr) = config.store.rpc_listen_addr(config.listen) {
            let local = config
                .store
                .rpc_local_path(&config.data_dir, state.tls.is_some());
            if let Err(e) = state.start_rpc(addr, config.http.max_body_bytes, local.as_deref()) {
                Self::stop(state);
                return Err(e);
            }
        }
        let data = web::Data::new(state.clone());
        let limits = crate::api::wire::BodyLimits::of(config);
        let mut server = HttpServer::new(move || crate::api::app(data.clone(), limits))
            .shutdown_timeout(config.http.shutdown_timeout_secs);
        let workers = match config.http.workers {
            0 => std::thread::available_parallelism().map_or(2, |n| n.get()),
            n => n,
        };
        server = crate::http_bounds::bounded_http_server!(server, &config.net, workers);
        let server =
            crate::http_bounds::listen_http!(server, listener, state.tls.as_ref(), &config.net)?;
        Ok(server.run())
    }
}

/// Restores every aggregate: the newest valid snapshot plus the journal tail.
fn recover_world(
    snapshots: &SnapshotDir,
    journal: &Journal,
) -> Result<crescent_actors::World, ServerError> {
    let restored = restore(snapshots, journal, crescent_domain::standard_world())?;
    tracing::info!(
        snapshot_seq = restored.snapshot.as_ref().map(|(_, p)| p.seq),
        replayed = restored.replayed,
        last_seq = restored.state.last_seq(),
        "state recovered"
    );
    Ok(restored.state)
}

/// The segment registry's actors, seeded with the recovered states, and the recovered
/// registry instance.
fn recover_segments(
    runtime: &Runtime,
    world: &crescent_actors::World,
) -> (AggregateRegistry<SegmentRegistry>, SegmentRegistry) {
    let states: BTreeMap<String, SegmentRegistry> = world
        .iter::<SegmentRegistry>()
        .map(|(id, s)| (id.clone(), s.clone()))
        .collect();
    let recovered = states
        .get(crescent_actors::segment_registry::INSTANCE_ID)
        .cloned()
        .unwrap_or_default();
    let segments = AggregateRegistry::<SegmentRegistry>::builder(runtime.clone())
        .recovered(states, world.last_seq())
        .build();
    (segments, recovered)
}

/// The actor runtime over `journal`, writing under `leadership`.
fn start_runtime(
    journal: &Journal,
    metrics: &ServerMetrics,
    leadership: Leadership,
) -> Result<Runtime, ServerError> {
    let runtime_metrics = RuntimeMetrics::register(&metrics.registry)
        .map_err(|e| ServerError::Recovery(format!("runtime metrics: {e}")))?;
    let builder = Runtime::builder(journal.clone()).metrics(runtime_metrics);
    Ok(match leadership {
        // Each standalone start writes under a fresh term, one above its journal's: owners
        // see it change in heartbeat answers and replay their tables (the rebuild gate).
        Leadership::Standalone => builder.term(journal.term() + 1),
        // An active writes under the term it won in etcd, and replies once its commit
        // watermark (local durable, and the standby's ack in sync mode) has passed.
        Leadership::Active {
            term,
            commit,
            versions,
        } => builder
            .shared_term(term)
            .commit_watermark(commit)
            .event_versions(versions),
    }
    .build())
}

/// The object directory of this start, under a newly journaled incarnation, and the rebuild
/// gate that waits for the owners of `recovered`'s mounted segments to replay into it.
fn open_directory(
    config: &Config,
    (journal, world, runtime): (&Journal, &crescent_actors::World, &Runtime),
    metrics: &ServerMetrics,
    recovered: &SegmentRegistry,
    now_ms: i64,
) -> Result<(Arc<ObjectDirectory>, Arc<crate::rebuild::Rebuild>), ServerError> {
    let store_metrics = StoreMetrics::register(&metrics.registry)
        .map_err(|e| ServerError::Recovery(format!("store metrics: {e}")))?;
    let directory = Arc::new(
        ObjectDirectory::with_metrics(config.store.store_config(), store_metrics, now_ms)
            .map_err(|e| ServerError::Recovery(format!("object directory: {e}")))?,
    );
    let incarnation = begin_incarnation(journal, world, runtime.term(), now_ms)?;
    directory
        .begin_incarnation(incarnation, runtime.term())
        .map_err(|e| ServerError::Recovery(format!("incarnation {incarnation}: {e}")))?;
    // Owners with mounted segments hold the objects: wait for their replays. The embedded
    // segment's memory is new on every start, so its owner has nothing to replay.
    let expected: std::collections::BTreeSet<String> = recovered
        .segments()
        .map(|(_, s)| s.owner_id.clone())
        .filter(|o| o != crate::embedded::EMBEDDED_OWNER_ID)
        .collect();
    tracing::info!(
        incarnation,
        term = runtime.term(),
        expected_owners = expected.len(),
        "rebuild gate"
    );
    let rebuild = Arc::new(crate::rebuild::Rebuild::new(
        crescent_store::RebuildGate::begin(
            runtime.term(),
            expected,
            now_ms,
            config.store.rebuild_degraded_timeout_ms(),
        ),
        directory.clone(),
    ));
    Ok((directory, rebuild))
}

/// The shadow-replay snapshotter, from the recovered `world`.
fn start_snapshotter(
    config: &Config,
    world: crescent_actors::World,
    journal: &Journal,
    snapshots: SnapshotDir,
    metrics: &ServerMetrics,
) -> Result<Snapshotter, ServerError> {
    let snapshot_metrics = SnapshotMetrics::new();
    snapshot_metrics
        .register(&metrics.registry)
        .map_err(|e| ServerError::Recovery(format!("snapshot metrics: {e}")))?;
    Ok(Snapshotter::start(
        world,
        journal.clone(),
        snapshots,
        config.snapshotter(),
        snapshot_metrics,
    )?)
}

/// The admission gate of `[scheduling]`, with the `[[tenants]]` weights.
fn open_gate(
    config: &Config,
    registry: &prometheus::Registry,
) -> Result<crate::sched::Gate, ServerError> {
    let weights = config
        .tenants
        .iter()
        .map(|t| (t.name.clone(), t.weight))
        .collect();
    let s = &config.scheduling;
    crate::sched::Gate::new(s.concurrent_requests(), s.budget(), weights, registry)
        .map_err(|e| ServerError::Recovery(format!("scheduler metrics: {e}")))
}
