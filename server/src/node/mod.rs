//! A crescentd node: the state every handler shares ([`NodeState`]), and starting and
//! stopping it ([`Node`], standalone or as the active of an HA pair).
//!
//! Startup order: validate the data dir; open the journal (recovering its tail under the
//! configured mode); restore every aggregate from the newest valid snapshot plus the journal
//! tail; start the actor runtime seeded with that state; start the shadow-replay snapshotter
//! from a copy of it; then listen. Nothing is served before recovery has finished.
//!
//! Shutdown (SIGTERM/SIGINT): actix-web stops accepting, lets in-flight requests finish (up to
//! `http.shutdown_timeout_secs`), then the snapshotter stops and the journal flushes and closes.

mod ha_start;
mod handles;
mod recover;
mod start;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};

use crescent_actors::segment_registry::SegmentRegistry;
use crescent_actors::{AggregateRegistry, Runtime};
use crescent_journal::Journal;
use crescent_snapshot::{SnapshotInfo, Snapshotter};
use crescent_store::ObjectDirectory;
use crescent_transport::TransportMetrics;

use crate::config::StoreSettings;
use crate::embedded::EmbeddedCell;
use crate::error::ServerError;
pub use crate::journal_open::OpenedJournal;
use crate::liveness::OwnerLiveness;
use crate::metrics::ServerMetrics;
use crate::rpc::RpcServer;
use crate::segment_mirror::SegmentMirror;
pub use start::{Leadership, Node};

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
    pub mirror: Arc<SegmentMirror>,
    pub liveness: Arc<OwnerLiveness>,
    pub store_settings: StoreSettings,
    /// Listener bounds (`[net]`).
    pub net_settings: crate::config::net::NetConfig,
    pub transport_metrics: TransportMetrics,
    /// The embedded segment, while this node serves one (the cold tier shares the cell).
    pub embedded: Arc<EmbeddedCell>,
    /// The periodic housekeeping task, while it runs.
    pub housekeeping_task: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The RPC fast path's listener, while it runs.
    pub rpc: Mutex<Option<RpcServer>>,
    /// Set when this node is the active of an HA pair.
    pub ha: OnceLock<Arc<crate::ha::active::ActiveHa>>,
    /// Set when this node's cluster serves in a mesh (`[mesh]`): object requests are checked
    /// against the mesh's routing (docs/scale-out.md).
    pub mesh: OnceLock<Arc<crate::mesh::MeshRole>>,
    /// With `mesh`: the exchange of tenants' quota with the other clusters (docs/tenants.md,
    /// "Quota across a mesh").
    pub mesh_quota: OnceLock<Arc<crate::mesh::quota::MeshQuota>>,
    /// The rebuild gate of this start or promotion.
    pub rebuild: Arc<crate::rebuild::Rebuild>,
    /// Removes wait here until what they removed from owners' segments is journaled.
    pub removals: Arc<crate::removals::DurableRemovals>,
    /// Tenant quota roots (docs/tenants.md).
    pub quotas: Arc<crate::quotas::TenantQuotas>,
    /// The tenants' usage, journaled write-behind and reconciled after the rebuild.
    pub usage_journal: Arc<crate::quota_usage::UsageJournal>,
    /// Managed weight revisions (registries, workflows, group guard).
    pub weights: Arc<crate::weights::WeightService>,
    /// The cold tier, once [`crate::cold::start`] has reconciled it (the cell is
    /// `cold_context`'s).
    pub cold: Arc<OnceLock<Arc<crate::cold::ColdTier>>>,
    /// The node's parts the cold tier uses, with the recovered `ColdDevice` states until the
    /// tier takes them.
    pub cold_context: Arc<crate::cold::ColdContext>,
    /// Credentials, the authorization guard's state and the revocation list.
    pub auth: Arc<crate::auth::AuthState>,
    /// `[tls]` loaded: HTTP, RPC and replication speak TLS only (docs/security.md "TLS").
    pub tls: Option<crate::config::tls::LoadedTls>,
    /// Admission of store requests by per-tenant turns (docs/tenants.md, "Soft isolation").
    pub gate: crate::sched::Gate,
}

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
