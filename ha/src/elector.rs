//! The handle of one election candidate.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{oneshot, watch, Mutex};
use tracing::{info, instrument, Instrument};

use crate::config::{validate_name, ClusterKeys, ElectorConfig};
use crate::coordination::{Coordination, CoordinationEndpoint};
use crate::elector_task::{ElectorTask, PauseSwitch, TaskParts};
use crate::error::HaError;
use crate::etcd::connect;
use crate::etcd_backend::EtcdCoordination;
use crate::fence::LeaderFence;
use crate::metrics::HaMetrics;
use crate::records::ReplicationMarker;
use crate::redis_backend::{connect_redis, RedisCoordination};
use crate::role::Role;

/// The backend as the handle uses it (marker reads and writes); the election task is generic.
#[derive(Clone, Debug)]
enum Backend {
    /// Boxed: the etcd client is several kilobytes.
    Etcd(Box<EtcdCoordination>),
    Redis(RedisCoordination),
}

impl Backend {
    async fn connect(config: &ElectorConfig, keys: &ClusterKeys) -> Result<Self, HaError> {
        let timeout = config.request_timeout;
        Ok(match &config.coordination {
            CoordinationEndpoint::Etcd(endpoints) => Backend::Etcd(Box::new(
                EtcdCoordination::new(connect(endpoints).await?, keys.clone(), timeout),
            )),
            CoordinationEndpoint::Redis(url) => Backend::Redis(RedisCoordination::new(
                connect_redis(url, timeout)?,
                keys.clone(),
                timeout,
            )),
        })
    }

    fn name(&self) -> &'static str {
        match self {
            Backend::Etcd(_) => EtcdCoordination::NAME,
            Backend::Redis(_) => RedisCoordination::NAME,
        }
    }

    async fn read_marker(&self) -> Result<Option<ReplicationMarker>, HaError> {
        match self {
            Backend::Etcd(b) => b.read_marker().await,
            Backend::Redis(b) => b.read_marker().await,
        }
    }

    async fn write_marker(&self, term: u64, marker: &ReplicationMarker) -> Result<(), HaError> {
        match self {
            Backend::Etcd(b) => b.write_marker(term, marker).await,
            Backend::Redis(b) => b.write_marker(term, marker).await,
        }
    }

    /// Runs the election loop on this backend until shutdown.
    async fn run(self, parts: TaskParts) {
        match self {
            Backend::Etcd(b) => ElectorTask::new(parts, Arc::new(*b)).run().await,
            Backend::Redis(b) => ElectorTask::new(parts, Arc::new(b)).run().await,
        }
    }
}

/// Runs this node as a candidate for its cluster's leadership until [`Elector::resign`] (or
/// drop, which resigns in the background), on a thread of its own.
///
/// - [`Elector::subscribe`]: role changes (candidate, follower, leader, stepped down);
/// - [`Elector::fence`]: the synchronous "leader right now, under which term" check to make
///   before every append or acknowledgement;
/// - [`Elector::mark_in_sync`] / [`Elector::mark_out_of_sync`]: the leader's record of whether
///   its standby may take over.
pub struct Elector {
    node_name: String,
    cluster: String,
    role_rx: watch::Receiver<Role>,
    fence: LeaderFence,
    backend: Backend,
    /// Serializes marker writes of this node and remembers the last seq written per term, so
    /// that concurrent or late calls cannot reorder "in sync" after "out of sync".
    marker_writes: Arc<Mutex<Option<(u64, u64)>>>,
    pause: PauseSwitch,
    shutdown_tx: watch::Sender<bool>,
    /// Fires when the election thread has finished (its runtime is gone).
    done: Option<oneshot::Receiver<()>>,
    metrics: HaMetrics,
}

impl std::fmt::Debug for Elector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Elector")
            .field("node_name", &self.node_name)
            .field("role", &*self.role_rx.borrow())
            .finish_non_exhaustive()
    }
}

impl Elector {
    /// Validates `config`, connects to its backend (etcd or Redis) and starts campaigning on
    /// the elector's own thread. The backend need not be reachable yet: the elector retries
    /// until it is.
    ///
    /// The election loop and the backend client's connection tasks run on a dedicated OS
    /// thread with its own single-threaded tokio runtime, never on the caller's runtime:
    /// crescentd serves on a single-threaded actix runtime, and a promotion's restore or a
    /// burst of requests there once held the keep-alive back past the local deadline
    /// (docs/ha.md, "Holding leadership"). The handle itself works from any runtime.
    pub async fn start(config: ElectorConfig, metrics: HaMetrics) -> Result<Self, HaError> {
        config.validate()?;
        let keys = ClusterKeys::new(&config.cluster)?;
        let initial = Role::Candidate { blocked: None };
        metrics.set_role(&initial);
        let (role_tx, role_rx) = watch::channel(initial);
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let fence = LeaderFence::default();
        let pause = PauseSwitch::default();
        let node_name = config.node_name.clone();
        let cluster = config.cluster.clone();
        info!(cluster = %config.cluster, node = %node_name, advertise = %config.advertise,
              backend = config.coordination.backend(), ttl = ?config.lease_ttl,
              "starting HA elector");
        let (ready_tx, ready_rx) = oneshot::channel::<Result<Backend, HaError>>();
        let (done_tx, done_rx) = oneshot::channel::<()>();
        let parts = TaskParts {
            config,
            highest_term: Arc::new(AtomicU64::new(0)),
            role_tx,
            fence: fence.clone(),
            metrics: metrics.clone(),
            pause: pause.clone(),
            shutdown: shutdown_rx,
        };
        let parent_span = tracing::Span::current();
        std::thread::Builder::new()
            .name("crescent-elector".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(HaError::TaskFailed(format!(
                            "cannot build the election runtime: {e}"
                        ))));
                        return;
                    }
                };
                runtime.block_on(
                    async move {
                        let backend = match Backend::connect(&parts.config, &keys).await {
                            Ok(b) => b,
                            Err(e) => {
                                let _ = ready_tx.send(Err(e));
                                return;
                            }
                        };
                        if ready_tx.send(Ok(backend.clone())).is_err() {
                            return;
                        }
                        backend.run(parts).await;
                    }
                    .instrument(parent_span),
                );
                // Dropping the runtime ends the backend client's connection tasks too.
                drop(runtime);
                let _ = done_tx.send(());
            })
            .map_err(|e| HaError::TaskFailed(format!("cannot start the election thread: {e}")))?;
        let backend = ready_rx.await.map_err(|_| {
            HaError::TaskFailed("the election thread stopped while connecting".into())
        })??;
        Ok(Elector {
            node_name,
            cluster,
            role_rx,
            fence,
            backend,
            marker_writes: Arc::new(Mutex::new(None)),
            pause,
            shutdown_tx,
            done: Some(done_rx),
            metrics,
        })
    }

    pub fn node_name(&self) -> &str {
        &self.node_name
    }

    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    /// The role now.
    pub fn role(&self) -> Role {
        self.role_rx.borrow().clone()
    }

    /// A receiver of role changes. The channel closes when the elector has stopped.
    pub fn subscribe(&self) -> watch::Receiver<Role> {
        self.role_rx.clone()
    }

    /// The synchronous leadership check; clone it into whatever appends or acknowledges.
    pub fn fence(&self) -> LeaderFence {
        self.fence.clone()
    }

    /// Shorthand for `fence().current_term()`.
    pub fn leader_term(&self) -> Option<u64> {
        self.fence.current_term()
    }

    pub fn metrics(&self) -> &HaMetrics {
        &self.metrics
    }

    /// Records in the backend that `standby` holds every record committed up to `seq` and that this
    /// leader commits nothing more without its ack (until it calls
    /// [`Elector::mark_out_of_sync`]). From then on `standby` may campaign.
    pub async fn mark_in_sync(&self, standby: &str, seq: u64) -> Result<(), HaError> {
        self.write_marker(standby, true, seq).await
    }

    /// Records in the backend that `standby` may lack records from `seq` on, so it must not campaign.
    /// Call it, and wait for `Ok`, before committing anything the standby has not acked.
    pub async fn mark_out_of_sync(&self, standby: &str, seq: u64) -> Result<(), HaError> {
        self.write_marker(standby, false, seq).await
    }

    /// The marker as stored (`None`: fresh cluster).
    pub async fn replication_marker(&self) -> Result<Option<ReplicationMarker>, HaError> {
        self.backend.read_marker().await
    }

    /// The coordination backend's name (`etcd`, `redis`).
    pub fn backend(&self) -> &'static str {
        self.backend.name()
    }

    #[instrument(level = "info", skip(self), fields(node = %self.node_name))]
    async fn write_marker(&self, standby: &str, in_sync: bool, seq: u64) -> Result<(), HaError> {
        validate_name("standby name", standby)
            .map_err(|e| HaError::InvalidArgument(e.to_string()))?;
        if standby == self.node_name {
            return Err(HaError::InvalidArgument(format!(
                "{standby} is this node; the marker names the standby"
            )));
        }
        let state = if in_sync { "in_sync" } else { "out_of_sync" };
        let mut last = self.marker_writes.lock().await;
        // Checked after taking the lock: the term must still hold when the write is issued.
        let term = self.fence.current_term().ok_or(HaError::NotLeader)?;
        if let Some((last_term, last_seq)) = *last {
            if last_term == term && seq < last_seq {
                return Err(HaError::MarkerSeqRegression {
                    term,
                    seq,
                    current: last_seq,
                });
            }
        }
        let marker = ReplicationMarker::with_standby(&self.node_name, term, standby, in_sync, seq);
        let result = self.backend.write_marker(term, &marker).await;
        self.metrics
            .coordination(self.backend.name(), "write_marker", &result);
        match result {
            Ok(()) => {
                *last = Some((term, seq));
                self.metrics.marker_write(state, "ok");
                info!(term, standby, in_sync, seq, "replication marker written");
                Ok(())
            }
            Err(e) => {
                let outcome = if matches!(e, HaError::Fenced { .. }) {
                    "fenced"
                } else {
                    "error"
                };
                self.metrics.marker_write(state, outcome);
                Err(e)
            }
        }
    }

    /// Fault injection for tests and chaos drills: for `duration`, send no lease keep-alive,
    /// revoke nothing and do not campaign, as if etcd were unreachable. A leader therefore
    /// steps down at its local deadline while its key still exists in etcd. This can only
    /// shorten a leadership, never extend one.
    pub fn pause_keepalive_for_test(&self, duration: Duration) {
        self.pause.pause_for(duration);
    }

    /// Stops campaigning; a leader publishes `SteppedDown { reason: Resigned }`, stops serving
    /// and revokes its lease (its key disappears at once, so a peer wins without waiting for
    /// the TTL). Returns when the election task has finished.
    pub async fn resign(mut self) -> Result<(), HaError> {
        let _ = self.shutdown_tx.send(true);
        if let Some(done) = self.done.take() {
            done.instrument(tracing::info_span!("resign", node = %self.node_name))
                .await
                .map_err(|_| HaError::TaskFailed("the election thread panicked".into()))?;
        }
        Ok(())
    }
}

impl Drop for Elector {
    fn drop(&mut self) {
        // The task resigns on its own (the fence is cleared before anything else).
        let _ = self.shutdown_tx.send(true);
    }
}
