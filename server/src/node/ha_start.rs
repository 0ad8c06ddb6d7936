//! The HA startup of a node (docs/ha.md): prepare the data dir, campaign as a standby
//! (`crate::ha::standby`), promote once elected (start the replication listener and the node
//! over the fenced journal), serve the term, and rejoin as a standby when it ends. It starts a
//! [`Node`], so it belongs to the top layer; the pieces that need no node stay in `crate::ha`.

use std::sync::Arc;

use crescent_ha::{Elector, Role};

use super::{Leadership, Node, NodeState};
use crate::config::Config;
use crate::error::ServerError;
use crate::ha::{
    active, await_election, identity, reseed, reseed_fetch, resign, restart, rewind, standby,
    start_elector, sync, DEPOSED_EXIT_CODE,
};
use crate::journal_open::OpenedJournal;

/// Runs an HA node until it is deposed, or SIGTERM/SIGINT: prepare the data dir, campaign as a
/// standby, promote once elected, serve the term.
pub async fn run(config: Config) -> Result<(), ServerError> {
    if let Some((reason, count)) = restart::previous_restart() {
        tracing::info!(reason, count, "restarted in place; rejoining as a standby");
    }
    // A staged reseed replaces the whole data dir (and any rewind request in it).
    let reseeded = reseed::apply_pending(&config)?;
    rewind::apply_pending(&config)?;
    let opened = crate::journal_open::open_journal(&config)?;
    // Bound before campaigning and held to the end of the active term, so a node that cannot
    // listen never leads and the port is never free during promotion
    // (`http_bounds::bind_listener`).
    let listener = crate::http_bounds::bind_listener(config.listen)?;
    let node = identity::node_name(opened.dir.root())?;
    let span = tracing::info_span!("ha", node = %node, cluster = %config.ha.cluster);
    let _g = span.enter();
    let reseed_metrics = reseed_fetch::ReseedMetrics::register(&opened.metrics.registry)
        .map_err(|e| ServerError::Recovery(format!("reseed metrics: {e}")))?;
    if reseeded.is_some() {
        reseed_metrics.count("installed");
    }
    let elector = start_elector(&config, &opened, &node).await?;
    let standby = standby::run(&config, &opened, &elector, &node, &listener, reseed_metrics);
    let term = await_election(&config, &opened, &elector, standby.await).await?;
    tracing::info!(
        term,
        last_seq = opened.journal.last_seq(),
        "elected: promoting to active"
    );
    let (ha, state) = promote(&config, opened, &elector, &node, term).await?;
    let deposed = serve_term(&config, &ha, &state, &elector, &listener, term).await?;
    resign(elector).await;
    if deposed {
        restart::rejoin_as_standby(
            restart::RestartReason::Deposed,
            config.ha.restart_in_place,
            DEPOSED_EXIT_CODE,
        );
    }
    Ok(())
}

/// Fences the journal at `term`, starts the replication listener and the node on it, then
/// `[[tenants]]` policies, the cold tier on a shared mount (docs/cold-tier.md, "HA"), the
/// embedded segment and, in a mesh, the join. Resigns on any failure.
async fn promote(
    config: &Config,
    opened: OpenedJournal,
    elector: &Arc<Elector>,
    node: &str,
    term: u64,
) -> Result<(Arc<active::ActiveHa>, Arc<NodeState>), ServerError> {
    let advertise_host = config
        .ha
        .advertise
        .rsplit_once(':')
        .map(|(h, _)| h.to_string())
        .unwrap_or_default();
    // The advertised host, not every interface, unless configured (docs/configuration.md).
    let listen = config.ha.replication_bind().map_err(ServerError::from);
    let tls = config
        .tls
        .load()
        .map_err(|e| ServerError::Recovery(e.to_string()));
    let (listen, tls) = match (listen, tls) {
        (Ok(listen), Ok(tls)) => (listen, tls),
        (Err(e), _) | (_, Err(e)) => {
            resign(elector.clone()).await;
            return Err(e);
        }
    };
    let ha = active::ActiveHa::start(
        node,
        term,
        opened.journal.clone(),
        elector.fence(),
        active::ReplicationListener {
            listen,
            advertise_host: &advertise_host,
            net: &config.net,
            metrics: &opened.metrics,
            auth: config.auth.enabled(),
            tls: tls.as_ref(),
            snapshot_dir: opened.dir.snapshot_dir(),
            reseed_chunk_bytes: config.ha.reseed_chunk_bytes as usize,
        },
    )?;
    let state = Node::start_on(
        config,
        opened,
        Leadership::Active {
            term: ha.term_cell.clone(),
            commit: ha.tracker.commit(),
            versions: ha.event_versions.clone(),
        },
    )?;
    let _ = state.ha.set(ha.clone());
    ha.set_auth(state.auth.clone());
    if let Err(e) = start_services(config, &state).await {
        ha.step_down();
        Node::stop(&state);
        resign(elector.clone()).await;
        return Err(e);
    }
    Ok((ha, state))
}

/// The services an active starts before it serves: `[[tenants]]` policies, the cold tier on a
/// shared mount, the embedded segment (`ha.embedded_segment`) and, in a mesh, the join
/// (published and routing before the first request is answered).
async fn start_services(config: &Config, state: &Arc<NodeState>) -> Result<(), ServerError> {
    state.quotas.bootstrap(&config.tenants).await?;
    crate::cold::start_active(&state.cold_context, config).await?;
    if config.ha.embedded_segment {
        state.mount_embedded().await?;
    }
    if let Some(role) = crate::mesh::join(config, &state.metrics.registry).await? {
        let parts = crate::mesh::quota::QuotaParts {
            directory: state.directory.clone(),
            quotas: state.quotas.clone(),
            rebuild: state.rebuild.clone(),
            auth: config.auth.clone(),
            tls_client: state.tls.as_ref().and_then(|t| t.client.clone()),
            registry: state.metrics.registry.clone(),
        };
        let quota = crate::mesh::quota::MeshQuota::start(role.clone(), parts)
            .map_err(ServerError::Recovery)?;
        let _ = state.mesh_quota.set(quota);
        let _ = state.mesh.set(role);
    }
    Ok(())
}

/// Serves until the term ends or the HTTP server stops (signal), then steps down and stops
/// the node. `Ok(true)` when the term was lost.
async fn serve_term(
    config: &Config,
    ha: &Arc<active::ActiveHa>,
    state: &Arc<NodeState>,
    elector: &Arc<Elector>,
    listener: &std::net::TcpListener,
    term: u64,
) -> Result<bool, ServerError> {
    let server = Node::serve(state, config, listener)?;
    let http = server.handle();
    let serving = actix_rt::spawn(server);
    let sync = actix_rt::spawn(sync::manage(
        ha.clone(),
        elector.clone(),
        config.ha.mode,
        config.ha.sync_timeout(),
    ));
    tracing::info!(listen = %config.listen, term, replication = %ha.replication_address, "crescentd serving (active)");
    let mut role = elector.subscribe();
    let fence = elector.fence();
    let deposed = loop {
        let lost = !matches!(&*role.borrow_and_update(), Role::Leader { term: t } if *t == term)
            || fence.current_term() != Some(term);
        if lost {
            break true;
        }
        tokio::select! {
            changed = role.changed() => if changed.is_err() { break true },
            // the fence's own deadline, checked even if the elector task is starved
            _ = tokio::time::sleep(std::time::Duration::from_millis(100)) => {}
            _ = wait_finished(&serving) => break false,
        }
    };
    if deposed {
        tracing::error!(term, role = ?elector.role(), "lost the leadership: fencing the journal and stopping");
    }
    ha.step_down();
    sync.abort();
    http.stop(!deposed).await;
    Node::stop(state);
    Ok(deposed)
}

async fn wait_finished<T>(handle: &actix_rt::task::JoinHandle<T>) {
    while !handle.is_finished() {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
