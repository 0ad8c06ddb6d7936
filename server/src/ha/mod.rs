//! crescentd as one node of an HA pair (docs/ha.md).
//!
//! A node starts as a standby: it follows the active's journal, replays it, answers clients
//! with NOT_LEADER, and campaigns in etcd (or Redis) when the marker allows. Elected, it fences
//! its journal at the new term, restores every aggregate from its journal, starts the replication
//! listener and serves. When its term ends (lease lost, deadline passed, key gone) it stops
//! writing at once (appends are fenced, waiting replies fail, the standby is told), stops
//! serving, closes its journal and re-executes itself ([`restart`]): the fresh process rejoins
//! as a standby from its journal. Replacing the process, rather than turning back into a
//! standby in-process, guarantees that no state of the lost term (actors, caches, pending
//! replies) survives. With `ha.restart_in_place = false`, or if the re-exec fails, it exits
//! with [`DEPOSED_EXIT_CODE`] instead and its supervisor restarts it.

pub mod active;
pub mod identity;
pub mod quarantine_repair;
pub mod reseed;
pub mod reseed_fetch;
pub mod restart;
pub mod rewind;
pub mod standby;
pub mod sync;
mod tls_relay;

use std::sync::Arc;

use crescent_ha::{Elector, ElectorConfig, HaMetrics, Role};

use crate::config::Config;
use crate::error::ServerError;
use crate::node::{Leadership, Node, NodeState, OpenedJournal};

/// Exit code of an active that lost its term (restart it: it comes back as a standby).
pub const DEPOSED_EXIT_CODE: i32 = 75;

/// Runs an HA node until it is deposed, or SIGTERM/SIGINT: prepare the data dir, campaign as a
/// standby, promote once elected, serve the term.
pub async fn run(config: Config) -> Result<(), ServerError> {
    if let Some((reason, count)) = restart::previous_restart() {
        tracing::info!(reason, count, "restarted in place; rejoining as a standby");
    }
    // A staged reseed replaces the whole data dir (and any rewind request in it).
    let reseeded = reseed::apply_pending(&config)?;
    rewind::apply_pending(&config)?;
    let opened = Node::open_journal(&config)?;
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

/// Starts campaigning in etcd (or Redis) as `node`, held back while the journal's tail is
/// quarantined and starting terms above the journal's.
async fn start_elector(
    config: &Config,
    opened: &OpenedJournal,
    node: &str,
) -> Result<Arc<Elector>, ServerError> {
    let metrics = HaMetrics::register(&opened.metrics.registry)
        .map_err(|e| ServerError::Recovery(format!("ha metrics: {e}")))?;
    let elector_config = ElectorConfig::with_coordination(
        config.ha.coordination(),
        config.ha.cluster.clone(),
        node.to_string(),
        // With [tls] the leader key carries the scheme, so clients and the standby following
        // etcd reach this node with TLS (docs/security.md, "TLS").
        match config.tls.enabled() {
            true => format!("https://{}", config.ha.advertise),
            false => config.ha.advertise.clone(),
        },
    )
    .with_lease_ttl(config.ha.lease_ttl())
    .with_campaign_hold({
        // A node that quarantined a damaged tail does not lead ahead of a peer that may hold
        // the record (docs/ha.md, "A quarantined journal tail").
        let journal = opened.journal.clone();
        let dir = opened.dir.journal_dir();
        move || crate::journal_health::campaign_hold(&dir, journal.last_seq())
    })
    .with_term_floor({
        // A backend that lost its term counter (Redis without persistence) starts the next
        // term above the highest this node's journal has seen (docs/ha.md, "Redis").
        let journal = opened.journal.clone();
        move || journal.term()
    });
    Ok(Arc::new(
        Elector::start(elector_config, metrics)
            .await
            .map_err(|e| ServerError::Recovery(format!("election: {e}")))?,
    ))
}

/// The term this node was elected for; a standby that must rewind or reseed its journal
/// restarts instead (and does not return).
async fn await_election(
    config: &Config,
    opened: &OpenedJournal,
    elector: &Arc<Elector>,
    outcome: Result<standby::Outcome, ServerError>,
) -> Result<u64, ServerError> {
    let (reason, exit_code) = match outcome {
        Ok(standby::Outcome::Elected(term)) => return Ok(term),
        Ok(standby::Outcome::MustRewind) => {
            (restart::RestartReason::Rewind, rewind::REWIND_EXIT_CODE)
        }
        Ok(standby::Outcome::MustReseed) => {
            (restart::RestartReason::Reseed, reseed::RESEED_EXIT_CODE)
        }
        Err(e) => {
            resign(elector.clone()).await;
            return Err(e);
        }
    };
    resign(elector.clone()).await;
    opened.journal.shutdown()?;
    if matches!(reason, restart::RestartReason::Rewind) {
        tracing::warn!("restarting to rewind the journal");
    }
    restart::rejoin_as_standby(reason, config.ha.restart_in_place, exit_code);
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
    let started = match state.quotas.bootstrap(&config.tenants).await {
        Ok(()) => crate::cold::start_active(&state, config).await,
        Err(e) => Err(e),
    };
    let started = match started {
        Ok(()) if config.ha.embedded_segment => crate::embedded::mount_embedded(&state).await,
        other => other,
    };
    // In a mesh: published and routing before the first request is answered.
    let started = match started {
        Ok(()) => match crate::mesh::join(config, &state.metrics.registry).await {
            Ok(role) => {
                if let Some(role) = role {
                    let _ = state.mesh.set(role);
                }
                Ok(())
            }
            Err(e) => Err(e),
        },
        other => other,
    };
    if let Err(e) = started {
        ha.step_down();
        Node::stop(&state);
        resign(elector.clone()).await;
        return Err(e);
    }
    Ok((ha, state))
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

async fn resign(elector: Arc<Elector>) {
    match Arc::try_unwrap(elector) {
        Ok(e) => {
            if let Err(err) = e.resign().await {
                tracing::warn!(error = %err, "resign failed");
            }
        }
        Err(_) => tracing::debug!("elector still shared; it resigns when dropped"),
    }
}
