//! Managed weight revisions in crescentd: the `WeightRevision` and `LineageClaim` actor
//! registries, the managed-group table shared with the object directory, the in-memory
//! indexes rebuilt at recovery, and the server-driven workflows (`workflows.rs`: import
//! commit, deletion, migration, upsert claims, lease expiry).
//!
//! Every mutation goes through [`WeightService::revision`] / [`WeightService::lineage`]:
//! they run the command on its actor and then update metrics and indexes from the committed
//! state, one mutation at a time (weight mutations are a low-rate control-plane path).

pub mod command_names;
pub mod convert;
pub mod error;
mod groups;
mod health;
mod migration;
mod recovery;
pub mod workflows;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};

use crescent_actors::{AggregateRegistry, Runtime, World};
use crescent_crash::points::{self, Stage};
use crescent_store::ObjectDirectory;
use crescent_weights::{
    GuardedOperation, LineageClaim, LineageClaimCommand, LineageId, RevisionIdentity, WeightConfig,
    WeightMetrics, WeightRevision, WeightRevisionCommand, WeightUnits,
};
use crescent_wire::{ApiError, ErrorCode};
use futures::future::BoxFuture;

use self::error::command;
pub use self::error::WeightServiceError;
use crate::error::ServerError;
pub use groups::GroupTable;

/// Store domain (under the default tenant) holding every manifest and payload object: keeps
/// them apart from ordinary keys of the default scope.
pub const WEIGHTS_DOMAIN: &str = "_weights";

/// The cold tier's part in migrations and deletions, over object keys of [`WEIGHTS_DOMAIN`].
/// The cold-tier integration implements it (`crate::cold::weights`) and installs it with
/// [`WeightService::set_cold`]; until a cold device is configured crescentd has none, and every
/// COLD or MIXED residency is refused with POLICY_UNSATISFIABLE. Every call is idempotent: a
/// driver resuming after a restart repeats the step it may have done already.
pub trait ColdResidency: Send + Sync {
    /// Creates cold copies of these objects and validates each by reading it back (length and
    /// checksum); their memory replicas stay.
    fn copy_to_cold(&self, keys: Vec<String>) -> BoxFuture<'static, Result<(), String>>;
    /// Creates a memory replica of each object that has none from its cold copy (read and
    /// verified first); the cold copies stay.
    fn copy_to_memory(&self, keys: Vec<String>) -> BoxFuture<'static, Result<(), String>>;
    /// Drops the memory replicas of these objects (after `RecordRoundReleased`); refused for
    /// an object whose cold copy is not validated (the last-hot rule).
    fn release_memory(&self, keys: Vec<String>) -> BoxFuture<'static, Result<(), String>>;
    /// Removes one member of `group` (the deletion workflow) and reclaims its cold copy, if
    /// any, exactly once. Ok(false) when the key is already gone.
    fn remove_member(
        &self,
        key: String,
        group: crescent_store::GroupId,
    ) -> BoxFuture<'static, Result<bool, String>>;
}

/// Identity lookups rebuilt from the recovered state and kept current by every mutation.
#[derive(Default)]
struct WeightIndex {
    /// lineage stream id -> generation -> identity (`weight_list`).
    lineages: BTreeMap<String, BTreeMap<u64, RevisionIdentity>>,
    /// operation id -> revision (`weight_get_operation`).
    operations: HashMap<String, RevisionIdentity>,
    /// Revisions holding at least one lease (the expiry timer's work list).
    leased: HashSet<String>,
    /// IMPORTING revisions (stream ids): invisible to discovery until READY.
    importing: HashSet<String>,
    /// DEGRADED revisions (stream ids): what the run-time repair check looks at.
    degraded: HashSet<String>,
}

pub struct WeightService {
    pub revisions: AggregateRegistry<WeightRevision>,
    pub lineages: AggregateRegistry<LineageClaim>,
    /// The affinity units of each committed revision (instance id = revision stream id).
    pub units: AggregateRegistry<WeightUnits>,
    pub directory: Arc<ObjectDirectory>,
    pub metrics: WeightMetrics,
    pub config: WeightConfig,
    pub groups: Arc<GroupTable>,
    cold: OnceLock<Arc<dyn ColdResidency>>,
    index: Mutex<WeightIndex>,
    /// One mutation at a time (keeps the before/after metrics exact).
    serial: tokio::sync::Mutex<()>,
    /// Revisions and lineages whose workflow is being driven right now.
    driving: Mutex<HashSet<String>>,
    /// An owner expired while a loss check was running: the check runs once more.
    loss_check_again: std::sync::atomic::AtomicBool,
}

fn world_states<A: crescent_actors::Aggregate + Clone>(world: &World) -> BTreeMap<String, A> {
    world
        .iter::<A>()
        .map(|(id, s)| (id.clone(), s.clone()))
        .collect()
}

impl WeightService {
    /// Builds the registries over the recovered world, rebuilds the indexes, interns every
    /// live group and installs the directory's group guard and skip counter.
    pub fn recover(
        runtime: &Runtime,
        world: &World,
        directory: Arc<ObjectDirectory>,
        config: WeightConfig,
        registry: &prometheus::Registry,
    ) -> Result<Arc<Self>, ServerError> {
        config
            .validate()
            .map_err(|e| ServerError::Recovery(format!("[weights] configuration: {e}")))?;
        let metrics = WeightMetrics::register(registry)
            .map_err(|e| ServerError::Recovery(format!("weight metrics: {e}")))?;
        let revisions: BTreeMap<String, WeightRevision> = world_states(world);
        let lineages: BTreeMap<String, LineageClaim> = world_states(world);
        let units: BTreeMap<String, WeightUnits> = world_states(world);
        let groups = Arc::new(GroupTable::default());
        let mut index = WeightIndex::default();
        let empty_revision = WeightRevision::default();
        for state in revisions.values() {
            metrics.observe_revision(&empty_revision, state, &[]);
            index_revision(&mut index, &groups, state);
        }
        let seq = world.last_seq();
        let revision_registry = AggregateRegistry::<WeightRevision>::builder(runtime.clone())
            .recovered(revisions, seq)
            .build();
        let lineage_registry = AggregateRegistry::<LineageClaim>::builder(runtime.clone())
            .recovered(lineages, seq)
            .build();
        let units_registry = AggregateRegistry::<WeightUnits>::builder(runtime.clone())
            .recovered(units, seq)
            .build();
        let guard_groups = groups.clone();
        directory.set_group_guard(Some(Arc::new(move |g| guard_groups.is_managed(g))));
        let name_groups = groups.clone();
        directory.set_group_namer(Some(Arc::new(move |g| name_groups.name(g))));
        let skip_metrics = metrics.clone();
        directory.set_managed_skip_hook(Some(Arc::new(move |operation, members| {
            let op = match operation {
                "evict" => GuardedOperation::Evict,
                "quota_evict" => GuardedOperation::QuotaEvict,
                "remove" => GuardedOperation::Remove,
                "prefix_remove" => GuardedOperation::PrefixRemove,
                _ => GuardedOperation::Cleanup,
            };
            skip_metrics.managed_group_skipped(op, members);
        })));
        Ok(Arc::new(Self {
            revisions: revision_registry,
            lineages: lineage_registry,
            units: units_registry,
            directory,
            metrics,
            config,
            groups,
            cold: OnceLock::new(),
            index: Mutex::new(index),
            serial: tokio::sync::Mutex::new(()),
            driving: Mutex::new(HashSet::new()),
            loss_check_again: std::sync::atomic::AtomicBool::new(false),
        }))
    }

    pub fn now_ms(&self) -> i64 {
        self.revisions.runtime().clock().now_ms()
    }

    /// Installs the cold tier (once, when the node's cold tier has started).
    pub fn set_cold(&self, cold: Arc<dyn ColdResidency>) -> Result<(), ServerError> {
        self.cold.set(cold).map_err(|_| {
            ServerError::Recovery("the weights' cold residency was installed twice".into())
        })
    }

    /// The cold tier, if this node has one.
    pub fn cold_tier(&self) -> Option<Arc<dyn ColdResidency>> {
        self.cold.get().cloned()
    }

    /// The cold tier, or POLICY_UNSATISFIABLE naming what needed it.
    pub fn cold(&self, needed_for: &str) -> Result<Arc<dyn ColdResidency>, ApiError> {
        self.cold_tier().ok_or_else(|| {
            ApiError::new(
                ErrorCode::PolicyUnsatisfiable,
                format!(
                    "{needed_for} needs a cold device and none is configured on this crescentd \
                     (use residency hot, or configure the cold tier)"
                ),
            )
        })
    }

    /// Runs a revision command and updates metrics and indexes. Returns the committed state.
    pub async fn revision(
        &self,
        identity: &RevisionIdentity,
        cmd: WeightRevisionCommand,
    ) -> Result<WeightRevision, WeightServiceError> {
        let id = identity.stream_id();
        let _serial = self.serial.lock().await;
        let before = self
            .revisions
            .read(&id, Clone::clone)
            .await
            .map_err(command)?;
        let name = command_names::revision_command_name(&cmd);
        crescent_crash::command(points::WEIGHTS, Stage::Before, name);
        let done = self.revisions.execute(&id, cmd).await.map_err(command)?;
        crescent_crash::command(points::WEIGHTS, Stage::After, name);
        let after = self
            .revisions
            .read(&id, Clone::clone)
            .await
            .map_err(command)?;
        if !done.is_noop() {
            self.metrics.observe_revision(&before, &after, &done.events);
        }
        let mut index = self.index.lock().expect("weight index");
        index_revision(&mut index, &self.groups, &after);
        Ok(after)
    }

    /// The revision's committed state (empty when it was never begun).
    pub async fn read_revision(
        &self,
        identity: &RevisionIdentity,
    ) -> Result<WeightRevision, WeightServiceError> {
        self.revisions
            .read(&identity.stream_id(), Clone::clone)
            .await
            .map_err(command)
    }

    /// Runs a lineage command; returns the committed state.
    pub async fn lineage(
        &self,
        lineage: &LineageId,
        cmd: LineageClaimCommand,
    ) -> Result<LineageClaim, WeightServiceError> {
        let id = lineage.stream_id();
        let _serial = self.serial.lock().await;
        let before = self
            .lineages
            .read(&id, Clone::clone)
            .await
            .map_err(command)?;
        let name = command_names::lineage_command_name(&cmd);
        crescent_crash::command(points::WEIGHTS, Stage::Before, name);
        let done = self.lineages.execute(&id, cmd).await.map_err(command)?;
        crescent_crash::command(points::WEIGHTS, Stage::After, name);
        if !done.is_noop() {
            self.metrics.observe_lineage(&before, &done.events);
        }
        self.lineages.read(&id, Clone::clone).await.map_err(command)
    }

    /// The recorded affinity units of a revision (None: committed by a build that did not
    /// record them, or not committed yet).
    pub async fn read_units(
        &self,
        identity: &RevisionIdentity,
    ) -> Result<Option<Vec<crescent_weights::AffinityUnit>>, WeightServiceError> {
        self.units
            .read(&identity.stream_id(), |u| u.units().map(<[_]>::to_vec))
            .await
            .map_err(command)
    }

    /// Runs a units command.
    pub async fn units_command(
        &self,
        identity: &RevisionIdentity,
        cmd: crescent_weights::WeightUnitsCommand,
    ) -> Result<(), WeightServiceError> {
        self.units
            .execute(&identity.stream_id(), cmd)
            .await
            .map_err(command)
            .map(|_| ())
    }

    pub async fn read_lineage(
        &self,
        lineage: &LineageId,
    ) -> Result<LineageClaim, WeightServiceError> {
        self.lineages
            .read(&lineage.stream_id(), Clone::clone)
            .await
            .map_err(command)
    }

    /// The revision of an operation id.
    pub fn operation_owner(&self, operation_id: &str) -> Option<RevisionIdentity> {
        let index = self.index.lock().expect("weight index");
        index.operations.get(operation_id).cloned()
    }

    /// Identities in listing order (lineage, then generation) after `after` (a stream id);
    /// IMPORTING ones only with `include_importing` (discovery never shows them).
    pub fn list_identities(
        &self,
        filter: impl Fn(&RevisionIdentity) -> bool,
        include_importing: bool,
        after: Option<&str>,
        limit: usize,
    ) -> (Vec<RevisionIdentity>, Option<String>) {
        let index = self.index.lock().expect("weight index");
        let filter = |i: &RevisionIdentity| {
            (include_importing || !index.importing.contains(&i.stream_id())) && filter(i)
        };
        // The page token is a stream id: `<lineage stream id>/<generation>`; positions compare
        // as (lineage, numeric generation), the order of the index.
        let after: Option<(String, u64)> = after.and_then(|a| {
            let (lineage, generation) = a.rsplit_once('/')?;
            Some((lineage.to_string(), generation.parse().ok()?))
        });
        let mut out = Vec::new();
        let mut next = None;
        for (lineage, generations) in &index.lineages {
            for (generation, identity) in generations {
                let passed = after
                    .as_ref()
                    .is_some_and(|(l, g)| (lineage, *generation) <= (l, *g));
                if passed || !filter(identity) {
                    continue;
                }
                if out.len() == limit {
                    next = out.last().map(RevisionIdentity::stream_id);
                    return (out, next);
                }
                out.push(identity.clone());
            }
        }
        next.take();
        (out, next)
    }

    fn leased_revisions(&self) -> Vec<RevisionIdentity> {
        self.indexed_revisions(|index, stream| index.leased.contains(stream))
    }

    fn degraded_revisions(&self) -> Vec<RevisionIdentity> {
        self.indexed_revisions(|index, stream| index.degraded.contains(stream))
    }

    fn indexed_revisions(
        &self,
        keep: impl Fn(&WeightIndex, &str) -> bool,
    ) -> Vec<RevisionIdentity> {
        let index = self.index.lock().expect("weight index");
        index
            .lineages
            .values()
            .flat_map(|g| g.values())
            .filter(|i| keep(&index, &i.stream_id()))
            .cloned()
            .collect()
    }

    /// Marks `key` as driven; false when another task already drives it.
    fn start_driving(&self, key: &str) -> bool {
        self.driving
            .lock()
            .expect("driving set")
            .insert(key.to_string())
    }

    fn stop_driving(&self, key: &str) {
        self.driving.lock().expect("driving set").remove(key);
    }
}

/// Records a revision's state in the indexes and the group table.
fn index_revision(index: &mut WeightIndex, groups: &GroupTable, state: &WeightRevision) {
    let Some(rec) = state.record() else {
        return;
    };
    let identity = &rec.identity;
    index
        .lineages
        .entry(identity.lineage().stream_id())
        .or_default()
        .insert(identity.weight_generation, identity.clone());
    for id in state.operations().keys() {
        index.operations.insert(id.clone(), identity.clone());
    }
    let stream = identity.stream_id();
    if rec.availability == crescent_weights::Availability::Importing {
        index.importing.insert(stream.clone());
    } else {
        index.importing.remove(&stream);
    }
    if rec.availability == crescent_weights::Availability::Degraded {
        index.degraded.insert(stream.clone());
    } else {
        index.degraded.remove(&stream);
    }
    if state.leases().is_empty() {
        index.leased.remove(&stream);
    } else {
        index.leased.insert(stream);
    }
    groups.intern(&rec.group_id);
}
