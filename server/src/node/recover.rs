//! Recovery at startup: every aggregate restored from the newest valid snapshot plus the
//! journal tail, the actor runtime over the journal, this start's incarnation journaled, and
//! the object directory, removals, snapshotter and admission gate built from the recovered
//! state (docs/architecture.md, docs/rebuild.md).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};

use crescent_actors::runtime::RuntimeMetrics;
use crescent_actors::segment_registry::SegmentRegistry;
use crescent_actors::{AggregateRegistry, Runtime};
use crescent_journal::Journal;
use crescent_snapshot::{restore, SnapshotDir, SnapshotMetrics, Snapshotter};
use crescent_store::{ObjectDirectory, StoreMetrics};
use crescent_transport::TransportMetrics;

use super::Leadership;
use crate::config::Config;
use crate::error::ServerError;
use crate::liveness::OwnerLiveness;
use crate::metrics::ServerMetrics;
use crate::segment_mirror::SegmentMirror;

/// Journals this start's incarnation (one above the journal's last) through the runtime and
/// waits until it is durable: put ids of this run order after every replayed one.
fn begin_incarnation(
    runtime: &Runtime,
    world: &crescent_actors::World,
) -> Result<u32, ServerError> {
    use crescent_actors::incarnation::{IncarnationCommand, NodeIncarnation, INSTANCE_ID};
    let state = world
        .get::<NodeIncarnation>(INSTANCE_ID)
        .cloned()
        .unwrap_or_default();
    let (next, _) = runtime
        .execute_blocking(INSTANCE_ID, &state, &IncarnationCommand::Begin)
        .map_err(|e| match e {
            crescent_actors::RuntimeError::Journal(e) => ServerError::Journal(e),
            e => ServerError::Recovery(format!("incarnation: {e}")),
        })?;
    Ok(next.incarnation)
}

/// The journaled removes of earlier runs, fenced from owner replays, and the journaling of this
/// run's (docs/rebuild.md, "Removes are journaled").
pub(super) fn recover_removals(
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

/// What recovery rebuilt over the journal, before the node's state is assembled.
pub(super) struct Recovered {
    pub runtime: Runtime,
    pub segments: AggregateRegistry<SegmentRegistry>,
    pub directory: Arc<ObjectDirectory>,
    pub rebuild: Arc<crate::rebuild::Rebuild>,
    pub removals: Arc<crate::removals::DurableRemovals>,
    pub quotas: Arc<crate::quotas::TenantQuotas>,
    pub usage_journal: Arc<crate::quota_usage::UsageJournal>,
    pub liveness: Arc<OwnerLiveness>,
    pub mirror: Arc<SegmentMirror>,
    pub weights: Arc<crate::weights::WeightService>,
    pub auth: Arc<crate::auth::AuthState>,
    pub tls: Option<crate::config::tls::LoadedTls>,
    pub transport_metrics: TransportMetrics,
    /// The transfer engine crescentd loads beside TCP to reach segments mounted with
    /// transport `transfer_engine` (`[transport]`, else the environment).
    pub transfer_engine: Option<crescent_transport::ffi::FfiConfig>,
}

/// The services over the recovered `world`, under a newly journaled incarnation: segments,
/// credentials, the object directory and its rebuild gate, removals, quotas, owner liveness
/// and managed weights.
pub(super) fn recover_services(
    config: &Config,
    metrics: &ServerMetrics,
    world: &crescent_actors::World,
    runtime: Runtime,
) -> Result<Recovered, ServerError> {
    let (segments, recovered_registry) = recover_segments(&runtime, world);
    let auth = Arc::new(crate::auth::AuthState::new(
        &config.auth,
        &runtime,
        world,
        &metrics.registry,
    )?);
    let tls = config
        .tls
        .load()
        .map_err(|e| ServerError::Recovery(e.to_string()))?;
    let now_ms = runtime.clock().now_ms();
    let (directory, rebuild) = open_directory(
        config,
        world,
        &runtime,
        metrics,
        &recovered_registry,
        now_ms,
    )?;
    let removals = recover_removals(&runtime, world, directory.clone(), metrics)?;
    let quotas = Arc::new(crate::quotas::TenantQuotas::recover(
        &runtime,
        world,
        directory.clone(),
        &config.tenant_default,
        &metrics.registry,
    )?);
    let usage_journal =
        crate::quota_usage::UsageJournal::new(quotas.clone(), directory.clone(), &metrics.registry)
            .map(Arc::new)
            .map_err(|e| ServerError::Recovery(format!("quota usage metrics: {e}")))?;
    let liveness = Arc::new(OwnerLiveness::new(config.store.client_ttl_ms()));
    let mirror = SegmentMirror::new(segments.clone(), directory.clone(), liveness.clone());
    mirror.mirror_recovered(&recovered_registry, now_ms);
    let weights = crate::weights::WeightService::recover(
        &runtime,
        world,
        directory.clone(),
        config.weights.clone(),
        &metrics.registry,
    )?;
    let transport_metrics = TransportMetrics::register(&metrics.registry)
        .map_err(|e| ServerError::Recovery(format!("transport metrics: {e}")))?;
    Ok(Recovered {
        runtime,
        segments,
        directory,
        rebuild,
        removals,
        quotas,
        usage_journal,
        liveness,
        mirror: Arc::new(mirror),
        weights,
        auth,
        tls,
        transport_metrics,
        transfer_engine: config.transport.transfer_engine(),
    })
}

impl Recovered {
    /// The cold tier's parts of the node: these services, the node's metrics `registry`, the
    /// tier's cell, the embedded segment's cell and the recovered device states.
    pub(super) fn cold_context(
        &self,
        registry: &prometheus::Registry,
        cold: Arc<OnceLock<Arc<crate::cold::ColdTier>>>,
        embedded: Arc<crate::embedded::EmbeddedCell>,
        recovered: crate::cold::ColdRecovered,
    ) -> crate::cold::ColdContext {
        crate::cold::ColdContext {
            directory: self.directory.clone(),
            runtime: self.runtime.clone(),
            registry: registry.clone(),
            transport_metrics: self.transport_metrics.clone(),
            transfer_engine: self.transfer_engine.clone(),
            auth: self.auth.clone(),
            weights: self.weights.clone(),
            cold,
            recovered,
            embedded,
        }
    }
}

/// The recovered `ColdDevice` states by device id, with the seq they were recovered through,
/// until the cold tier takes them.
pub(super) fn recover_cold(world: &crescent_actors::World) -> crate::cold::ColdRecovered {
    let states: BTreeMap<String, crescent_cold::ColdDevice> = world
        .iter::<crescent_cold::ColdDevice>()
        .map(|(id, s)| (id.clone(), s.clone()))
        .collect();
    Mutex::new(Some((states, world.last_seq())))
}

/// Restores every aggregate: the newest valid snapshot plus the journal tail.
pub(super) fn recover_world(
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
pub(super) fn recover_segments(
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
pub(super) fn start_runtime(
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
pub(super) fn open_directory(
    config: &Config,
    world: &crescent_actors::World,
    runtime: &Runtime,
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
    let incarnation = begin_incarnation(runtime, world)?;
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
pub(super) fn start_snapshotter(
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
pub(super) fn open_gate(
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
