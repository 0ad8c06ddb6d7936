//! Publishing this cluster in its mesh's membership record when it starts serving
//! (docs/scale-out.md, "Joining a mesh"): one [`crescent_mesh::next_publish`] step per
//! compare-and-set, re-read and re-planned when another update landed first, until the record
//! lists the cluster serving under its current leader address and weight. Then the record is
//! followed and object requests are checked against it ([`super::MeshRole`]).

use std::sync::Arc;
use std::time::Duration;

use crescent_ha::{HaError, MembershipStore, MembershipWatch, StoredMembership};
use crescent_mesh::{next_publish, Membership, SelfEntry};
use tokio::time::{sleep, Instant};
use tracing::Instrument;

use super::{MeshMetrics, MeshRole};
use crate::config::Config;
use crate::error::ServerError;

/// Bound of each request to the coordination backend.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// How long publishing may take before the start fails (the backend unreachable).
const PUBLISH_DEADLINE: Duration = Duration::from_secs(20);
/// Pause after a lost race or a failed request.
const RETRY: Duration = Duration::from_millis(100);

/// With `[mesh]`: publishes this cluster and starts following the record; the node installs
/// the returned [`MeshRole`] before it serves. Without: `None`. Its metrics go to `registry`.
pub async fn join(
    config: &Config,
    registry: &prometheus::Registry,
) -> Result<Option<Arc<MeshRole>>, ServerError> {
    let Some(mesh) = config.mesh.name.as_deref() else {
        return Ok(None);
    };
    let span = tracing::info_span!("mesh.join", mesh = %mesh, cluster = %config.ha.cluster);
    async {
        let endpoint = config.ha.coordination();
        let failed = |e: HaError| ServerError::Recovery(format!("mesh {mesh}: {} ({e})", e.code()));
        let store = MembershipStore::connect(&endpoint, mesh, REQUEST_TIMEOUT)
            .await
            .map_err(failed)?;
        let me = SelfEntry {
            name: config.ha.cluster.clone(),
            leader: match config.tls.enabled() {
                true => format!("https://{}", config.ha.advertise),
                false => config.ha.advertise.clone(),
            },
            weight: config.mesh.weight,
        };
        let metrics = MeshMetrics::register(registry);
        let held = publish(&store, mesh, &me, &metrics).await.map_err(failed)?;
        let watch = MembershipWatch::start(&endpoint, mesh, REQUEST_TIMEOUT)
            .await
            .map_err(failed)?;
        tracing::info!(generation = held.generation, weight = me.weight, leader = %me.leader,
            "serving in the mesh");
        Ok(Some(MeshRole::start(&me.name, &held, watch, metrics)))
    }
    .instrument(span)
    .await
}

/// Steps the record until it lists `me` as [`next_publish`] wants it; returns the record as
/// last read or written. A lost race or an unreachable backend is tried again until
/// [`PUBLISH_DEADLINE`].
async fn publish(
    store: &MembershipStore,
    mesh: &str,
    me: &SelfEntry,
    metrics: &MeshMetrics,
) -> Result<Membership, HaError> {
    let deadline = Instant::now() + PUBLISH_DEADLINE;
    loop {
        let e = match step(store, mesh, me).await {
            Ok(Step::Done(m)) => return Ok(m),
            Ok(Step::Written(m)) => {
                metrics.publishes.with_label_values(&["written"]).inc();
                tracing::info!(
                    generation = m.generation,
                    "published in the mesh membership"
                );
                continue;
            }
            Err(e) => e,
        };
        let stale = e.code() == "STALE_GENERATION";
        let outcome = if stale { "stale" } else { "error" };
        metrics.publishes.with_label_values(&[outcome]).inc();
        if e.class() != crescent_ha::ErrorClass::Retryable || Instant::now() >= deadline {
            return Err(e);
        }
        tracing::debug!(error = %e, code = e.code(), "publishing again");
        sleep(RETRY).await;
    }
}

enum Step {
    /// The record already lists `me` as wanted.
    Done(Membership),
    /// One step written; another may follow.
    Written(Membership),
}

/// Reads the record and writes the next step, if any.
async fn step(store: &MembershipStore, mesh: &str, me: &SelfEntry) -> Result<Step, HaError> {
    let current: Option<StoredMembership> = store.read().await?;
    let held = current.as_ref().map(|s| &s.membership);
    match next_publish(held, mesh, me) {
        None => Ok(Step::Done(
            held.cloned().expect("a step is planned without a record"),
        )),
        Some(next) => Ok(Step::Written(
            store
                .compare_and_set(current.as_ref(), next)
                .await?
                .membership,
        )),
    }
}
