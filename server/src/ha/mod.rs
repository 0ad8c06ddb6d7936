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
//!
//! The startup sequence itself starts a node, so it is the top layer's (`crate::node`'s
//! `ha_start`); this module holds the pieces it runs that need no node: the standby, the
//! election, the replication listener of an active, reseeds and rewinds.

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

use crescent_ha::{Elector, ElectorConfig, HaMetrics};

use crate::config::Config;
use crate::error::ServerError;
use crate::journal_open::OpenedJournal;

/// Exit code of an active that lost its term (restart it: it comes back as a standby).
pub const DEPOSED_EXIT_CODE: i32 = 75;

/// Starts campaigning in etcd (or Redis) as `node`, held back while the journal's tail is
/// quarantined and starting terms above the journal's.
pub(crate) async fn start_elector(
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
pub(crate) async fn await_election(
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

pub(crate) async fn resign(elector: Arc<Elector>) {
    match Arc::try_unwrap(elector) {
        Ok(e) => {
            if let Err(err) = e.resign().await {
                tracing::warn!(error = %err, "resign failed");
            }
        }
        Err(_) => tracing::debug!("elector still shared; it resigns when dropped"),
    }
}
