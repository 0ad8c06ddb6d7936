//! Starting, serving and stopping a node: [`Node`] and the authority it writes under
//! ([`Leadership`]).

use std::sync::{Arc, Mutex, OnceLock};

use actix_web::{web, HttpServer};
use crescent_snapshot::SnapshotDir;

use super::recover::{
    open_gate, recover_cold, recover_services, recover_world, start_runtime, start_snapshotter,
    Recovered,
};
use super::NodeState;
use crate::config::Config;
use crate::error::ServerError;
use crate::journal_open::OpenedJournal;

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
    /// Validates the data dir and opens (recovers) its journal: the part of startup that HA
    /// and standalone share.
    pub fn open_journal(config: &Config) -> Result<OpenedJournal, ServerError> {
        crate::journal_open::open_journal(config)
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
        let snapshots = SnapshotDir::new(opened.dir.snapshot_dir());
        let world = recover_world(&snapshots, &opened.journal)?;
        let runtime = start_runtime(&opened.journal, &opened.metrics, leadership)?;
        let cold_recovered = recover_cold(&world);
        let services = recover_services(config, &opened.metrics, &world, runtime)?;
        let snapshotter =
            start_snapshotter(config, world, &opened.journal, snapshots, &opened.metrics)?;
        let gate = open_gate(config, &opened.metrics.registry)?;
        opened.metrics.up.set(1);
        let state = node_state(config, opened, services, snapshotter, gate, cold_recovered);
        Ok(Arc::new(state))
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
            .housekeeping_task
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
            return super::ha_start::run(config).await;
        }
        let state = Self::start(&config)?;
        if let Err(e) = state.quotas.bootstrap(&config.tenants).await {
            Self::stop(&state);
            return Err(e);
        }
        if let Err(e) = crate::cold::start_node(&state.cold_context, &config).await {
            Self::stop(&state);
            return Err(e);
        }
        if let Err(e) = state.mount_embedded().await {
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
        let housekeeping = crate::housekeeping::spawn(state.housekeeping());
        *state.housekeeping_task.lock().expect("housekeeping mutex") = Some(housekeeping);
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

/// The node's state over its opened journal and recovered services, with the cold tier's
/// parts (the tier itself starts later: `crate::cold::start_node`).
fn node_state(
    config: &Config,
    opened: OpenedJournal,
    services: Recovered,
    snapshotter: crescent_snapshot::Snapshotter,
    gate: crate::sched::Gate,
    cold_recovered: crate::cold::ColdRecovered,
) -> NodeState {
    let cold = Arc::new(OnceLock::new());
    let embedded = Arc::new(Mutex::new(None));
    let cold_context = Arc::new(services.cold_context(
        &opened.metrics.registry,
        cold.clone(),
        embedded.clone(),
        cold_recovered,
    ));
    let Recovered {
        runtime,
        segments,
        directory,
        rebuild,
        removals,
        quotas,
        usage_journal,
        liveness,
        mirror,
        weights,
        auth,
        tls,
        transport_metrics,
        // The cold tier's, in `cold_context` above.
        transfer_engine: _,
    } = services;
    NodeState {
        journal_dir: opened.dir.journal_dir(),
        journal: opened.journal,
        journal_backend: opened.backend_name,
        runtime,
        segments,
        metrics: opened.metrics,
        snapshotter: Mutex::new(Some(snapshotter)),
        directory,
        mirror,
        liveness,
        store_settings: config.store.clone(),
        net_settings: config.net.clone(),
        transport_metrics,
        embedded,
        housekeeping_task: Mutex::new(None),
        rpc: Mutex::new(None),
        ha: OnceLock::new(),
        mesh: OnceLock::new(),
        mesh_quota: OnceLock::new(),
        rebuild,
        removals,
        quotas,
        usage_journal,
        weights,
        cold,
        cold_context,
        auth,
        tls,
        gate,
    }
}
