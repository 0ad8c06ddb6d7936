//! crescentd as one cluster of a mesh (docs/scale-out.md): the active publishes its cluster in
//! the membership record ([`join`]), follows the record ([`MeshRole`]) and refuses object
//! requests whose authority under its newest generation is another cluster (`WRONG_CLUSTER`,
//! naming the generation and the authority). Outside a mesh `NodeState::mesh` is unset and the
//! object paths pay one branch.

mod batch;
mod join;
mod metrics;
pub mod quota;

use std::sync::{Arc, OnceLock, RwLock};

use crescent_ha::MembershipWatch;
use crescent_mesh::{Lineage, Membership, RouteKey, RouteTable};
use crescent_wire::store::ObjectId;
use crescent_wire::{ApiError, ErrorCode, Redirect};
use tokio::task::JoinHandle;
use tracing::Instrument;

pub use batch::Split;
pub use join::join;
pub use metrics::MeshMetrics;

/// What a mesh member needs on its object paths: its cluster name and the route table of the
/// newest membership generation it holds.
pub struct MeshRole {
    cluster: String,
    mesh: String,
    routes: RwLock<Arc<RouteTable>>,
    /// The record of the generation routed by (written under `routes`' write lock).
    membership: RwLock<Arc<Membership>>,
    metrics: MeshMetrics,
    /// Applies every newer generation of the watch to `routes` (it owns the watch).
    follower: OnceLock<JoinHandle<()>>,
}

impl std::fmt::Debug for MeshRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MeshRole")
            .field("cluster", &self.cluster)
            .field("generation", &self.generation())
            .finish_non_exhaustive()
    }
}

impl MeshRole {
    /// Routes by `held` (the record as this cluster published it), then by every newer
    /// generation `watch` sees.
    pub fn start(
        cluster: &str,
        held: &Membership,
        watch: MembershipWatch,
        metrics: MeshMetrics,
    ) -> Arc<MeshRole> {
        metrics.observe(held);
        let role = Arc::new(MeshRole {
            cluster: cluster.to_string(),
            mesh: held.mesh.clone(),
            routes: RwLock::new(Arc::new(RouteTable::new(held))),
            membership: RwLock::new(Arc::new(held.clone())),
            metrics,
            follower: OnceLock::new(),
        });
        let weak = Arc::downgrade(&role);
        let span = tracing::info_span!("mesh.follow", cluster = %cluster);
        let follower = tokio::spawn(
            async move {
                let mut rx = watch.subscribe();
                loop {
                    let seen = rx.borrow_and_update().clone();
                    let Some(role) = weak.upgrade() else { return };
                    if let Some(m) = seen {
                        role.apply(&m);
                    }
                    drop(role);
                    if rx.changed().await.is_err() {
                        return;
                    }
                }
            }
            .instrument(span),
        );
        let _ = role.follower.set(follower);
        role
    }

    /// Takes `m` if it is newer than the generation held.
    fn apply(&self, m: &Membership) {
        let mut routes = self.routes.write().unwrap_or_else(|p| p.into_inner());
        if m.generation <= routes.generation() {
            return;
        }
        tracing::info!(
            generation = m.generation,
            clusters = m.clusters.len(),
            "routing by a new mesh generation"
        );
        *routes = Arc::new(RouteTable::new(m));
        *self.membership.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(m.clone());
        self.metrics.observe(m);
    }

    /// The route table and the record of the generation routed by, consistent with each
    /// other.
    pub fn view(&self) -> (Arc<RouteTable>, Arc<Membership>) {
        let routes = self.routes.read().unwrap_or_else(|p| p.into_inner());
        let membership = self
            .membership
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        (routes.clone(), membership)
    }

    /// The mesh's name.
    pub fn mesh(&self) -> &str {
        &self.mesh
    }

    /// The generation routed by.
    pub fn generation(&self) -> u64 {
        self.routes
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .generation()
    }

    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    /// `Ok` when this cluster is the authority of `id`; else WRONG_CLUSTER naming the
    /// generation and the authority (UNAVAILABLE when no cluster serves). The objects of
    /// managed weight revisions are routed with their revision ([`Self::check_revision`]),
    /// not by key: they are created only through the weight routes, at the revision's
    /// authority, so the object paths take them wherever they are.
    pub fn check(&self, id: &ObjectId) -> Result<(), ApiError> {
        if id.domain.as_deref() == Some(crate::weights::WEIGHTS_DOMAIN) {
            return Ok(());
        }
        let key = RouteKey::object(id.tenant(), id.domain.as_deref(), id.key.as_bytes());
        self.check_key(key, || format!("object {}", id.key))
    }

    /// [`Self::check`] for a weight revision: its lineage routes every generation, manifest
    /// and payload of it to one cluster (docs/scale-out.md, "Authority by rendezvous").
    pub fn check_revision(&self, lineage: &Lineage<'_>) -> Result<(), ApiError> {
        let key = RouteKey::revision(lineage);
        self.check_key(key, || {
            format!(
                "weight revision {}/{}/{}",
                lineage.namespace, lineage.resource_id, lineage.revision
            )
        })
    }

    fn check_key(&self, key: RouteKey, what: impl FnOnce() -> String) -> Result<(), ApiError> {
        let routes = self
            .routes
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        match routes.route(key) {
            Ok(c) if c == self.cluster => Ok(()),
            Ok(c) => {
                self.metrics.redirects.inc();
                tracing::debug!(what = %what(), authority = c, generation = routes.generation(),
                    "redirected: another cluster's");
                Err(ApiError::wrong_cluster(Redirect {
                    generation: routes.generation(),
                    cluster: c.to_string(),
                }))
            }
            Err(e) => Err(ApiError::new(ErrorCode::Unavailable, e.to_string())),
        }
    }
}

impl Drop for MeshRole {
    fn drop(&mut self) {
        if let Some(f) = self.follower.get() {
            f.abort();
        }
    }
}
