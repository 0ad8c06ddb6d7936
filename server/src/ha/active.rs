//! The active phase: serve everything under the term won in etcd, replicate to the standby,
//! and step down (stop serving, fence the journal, exit) as soon as the term is lost.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crescent_actors::{EventVersions, StartAt};
use crescent_ha::LeaderFence;
use crescent_journal::replication::{
    CommitMode, CommitTracker, FollowHook, OfferedSnapshot, ReplicationSource, SnapshotSource,
    SourceConfig, SourceMetrics, SourceStatus, TermSource,
};
use crescent_journal::Journal;
use crescent_snapshot::SnapshotDir;
use prometheus::{IntCounter, IntGaugeVec, Opts};

use crate::auth::AuthState;
use crate::config::net::NetConfig;
use crate::error::ServerError;
use crate::metrics::ServerMetrics;

/// Where and how the active's replication listener runs.
pub struct ReplicationListener<'a> {
    pub listen: SocketAddr,
    /// The host standbys are told to connect to (with the bound port).
    pub advertise_host: &'a str,
    /// `replication_max_connections` and `replication_handshake_timeout_ms`.
    pub net: &'a NetConfig,
    /// The node's registry and its shared listener counters.
    pub metrics: &'a ServerMetrics,
    /// `[auth]` is on: a standby must prove a `peer` credential in its Hello.
    pub auth: bool,
    /// `[tls]`: the listener speaks TLS only, through [`super::tls_relay::AcceptRelay`].
    pub tls: Option<&'a crate::config::tls::LoadedTls>,
    /// `DATA_DIR/snapshots`: what a reseeding standby is sent (docs/ha.md, "Reseeding").
    pub snapshot_dir: std::path::PathBuf,
    /// `ha.reseed_chunk_bytes`.
    pub reseed_chunk_bytes: usize,
}

/// The newest snapshot in `dir` whose header reads, with a seq of at least the one asked for
/// (the replication source then checks its digest against the journal).
fn snapshot_source(dir: std::path::PathBuf) -> SnapshotSource {
    SnapshotSource::new(move |min_seq| {
        let snapshots = SnapshotDir::new(&dir);
        let entries = snapshots.list().map_err(|e| e.to_string())?;
        for entry in entries.iter().rev().take_while(|e| e.seq >= min_seq) {
            match SnapshotDir::read_header(&entry.path) {
                Ok(h) => {
                    return Ok(Some(OfferedSnapshot {
                        path: entry.path.clone(),
                        seq: h.position.seq,
                        term: h.position.term,
                        digest: h.position.digest,
                    }))
                }
                Err(e) => tracing::warn!(file = %entry.path.display(), error = %e,
                    "a snapshot not offered for a reseed: its header does not read"),
            }
        }
        Ok(None)
    })
}

/// What an active node's handlers and loops share about its HA state.
pub struct ActiveHa {
    pub node: String,
    pub term: u64,
    /// The runtime's term cell: set to 0 on step-down, so every later append is fenced.
    pub term_cell: Arc<AtomicU64>,
    pub tracker: CommitTracker,
    pub journal: Journal,
    pub source: Mutex<Option<ReplicationSource>>,
    /// With `[tls]`: the TLS front that owns the published address.
    tls_relay: Mutex<Option<super::tls_relay::AcceptRelay>>,
    /// Where standbys connect (advertised host, bound port).
    pub replication_address: String,
    stepped_down: AtomicBool,
    /// The node's credentials, once its state is restored ([`ActiveHa::set_auth`]): the
    /// replication listener checks standbys' tokens with them.
    peer_auth: Arc<OnceLock<Arc<AuthState>>>,
    /// What this active last wrote in the etcd marker about its standby.
    marked: Mutex<MarkedStandby>,
    metrics: Arc<SyncMetrics>,
    /// The event versions this active writes: shared with the runtime (docs/ha.md, "Event
    /// versions in a mixed pair").
    pub event_versions: EventVersions,
}

/// The standby the etcd replication marker names, as this active last wrote it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MarkedStandby {
    /// `None`: the marker names no standby (as claimed on taking office).
    pub node: Option<String>,
    /// Whether it is named in sync (it may take over).
    pub in_sync: bool,
}

/// Where the connected standby stands (the `state` label of `crescent_ha_standby_state`).
pub const STANDBY_STATES: [&str; 5] = ["none", "unnamed", "joining", "in_sync", "out_of_sync"];

struct SyncMetrics {
    out_of_sync_marks: IntCounter,
    standbys_named: IntCounter,
    state: IntGaugeVec,
    /// `crescent_ha_event_write_version{kind}`: one series per event kind the build can write
    /// at more than one version (none in a release without such a kind).
    event_version: IntGaugeVec,
}

impl SyncMetrics {
    fn register(registry: &prometheus::Registry) -> Self {
        let out_of_sync_marks = IntCounter::new(
            "crescent_ha_standby_out_of_sync_total",
            "Times the active marked its standby out of sync in etcd and committed alone",
        )
        .expect("valid metric");
        let standbys_named = IntCounter::new(
            "crescent_ha_standby_named_total",
            "Times the active named a new standby in etcd (before any of its acks count)",
        )
        .expect("valid metric");
        let state = IntGaugeVec::new(
            Opts::new(
                "crescent_ha_standby_state",
                "1 for the state of the connected standby: none, unnamed (its acks do not \
                 count yet), joining, in_sync, out_of_sync (the active commits alone)",
            ),
            &["state"],
        )
        .expect("valid metric");
        let event_version = IntGaugeVec::new(
            Opts::new(
                "crescent_ha_event_write_version",
                "The version the active writes of each event kind this build can write at more \
                 than one version: the newest its standby has said it reads",
            ),
            &["kind"],
        )
        .expect("valid metric");
        // A re-registration (never in one process's life) keeps the first.
        let _ = registry.register(Box::new(out_of_sync_marks.clone()));
        let _ = registry.register(Box::new(standbys_named.clone()));
        let _ = registry.register(Box::new(state.clone()));
        let _ = registry.register(Box::new(event_version.clone()));
        Self {
            out_of_sync_marks,
            standbys_named,
            state,
            event_version,
        }
    }

    fn publish_event_versions(&self, versions: &EventVersions) {
        for (kind, v) in versions.policy().negotiable() {
            self.event_version
                .with_label_values(&[kind])
                .set(i64::from(v.writes));
        }
    }
}

/// A new active's event versions, shown in its metrics: until a standby says what it reads,
/// every kind at its write floor, which the previous release reads too: it may be the next node
/// to join or to take over (docs/ha.md, "Event versions in a mixed pair").
fn starting_event_versions(registry: &prometheus::Registry) -> (EventVersions, Arc<SyncMetrics>) {
    let versions =
        EventVersions::new(crescent_domain::standard_world().event_version_policy(StartAt::Floor));
    let metrics = Arc::new(SyncMetrics::register(registry));
    metrics.publish_event_versions(&versions);
    (versions, metrics)
}

/// The listener's hook for a standby that starts following: raise the event versions written
/// to what it reads (never lowering one; docs/ha.md, "Event versions in a mixed pair").
fn follow_hook(versions: EventVersions, metrics: Arc<SyncMetrics>) -> FollowHook {
    FollowHook::new(move |standby, reads| {
        let raised = versions.follow(reads)?;
        for r in &raised {
            tracing::info!(%standby, kind = %r.kind, from = r.from, to = r.to,
                "the standby reads a newer event version: writing it from now on");
        }
        metrics.publish_event_versions(&versions);
        Ok(())
    })
}

/// Fences `journal` at `term`: nothing may be appended under an older term from here on, nor
/// under this one once the lease deadline has passed (checked under the journal's submission
/// lock). Returns the runtime's term cell and the replication source's view of the term.
fn fence_journal(journal: &Journal, term: u64, fence: LeaderFence) -> (Arc<AtomicU64>, TermSource) {
    journal.fence(term);
    let guard_fence = fence.clone();
    journal.set_append_guard(Some(Arc::new(move |t| {
        guard_fence.current_term() == Some(t)
    })));
    let term_cell = Arc::new(AtomicU64::new(term));
    let cell = term_cell.clone();
    let term_source = Arc::new(move || {
        let t = cell.load(Ordering::Acquire);
        (t != 0 && fence.current_term() == Some(t)).then_some(t)
    });
    (term_cell, term_source)
}

/// The TLS front on `listen` that relays to the replication source at `inner`.
fn tls_front(
    tls: &crate::config::tls::LoadedTls,
    listen: SocketAddr,
    inner: SocketAddr,
    net: &NetConfig,
    metrics: &ServerMetrics,
) -> Result<super::tls_relay::AcceptRelay, ServerError> {
    super::tls_relay::AcceptRelay::start(super::tls_relay::AcceptConfig {
        listen,
        inner,
        acceptor: crescent_tls::TlsAcceptor::from(tls.server.clone()),
        max_connections: net.replication_max_connections,
        handshake_timeout: net.replication_handshake_timeout(),
        metrics: metrics.clone(),
    })
    .map_err(|source| ServerError::Listen {
        addr: listen,
        source,
    })
}

impl ActiveHa {
    /// Starts the replication listener for an active at `term`.
    pub fn start(
        node: &str,
        term: u64,
        journal: Journal,
        fence: LeaderFence,
        listener: ReplicationListener<'_>,
    ) -> Result<Arc<Self>, ServerError> {
        let ReplicationListener {
            listen,
            advertise_host,
            net,
            metrics,
            auth,
            tls,
            snapshot_dir,
            reseed_chunk_bytes,
        } = listener;
        let registry = &metrics.registry;
        let (term_cell, term_source) = fence_journal(&journal, term, fence);
        let tracker = CommitTracker::start(journal.durable());
        let (versions, sync_metrics) = starting_event_versions(registry);
        let check = versions.clone();
        let peer_auth: Arc<OnceLock<Arc<AuthState>>> = Arc::default();
        let source_metrics = SourceMetrics::register(registry).ok().map(|m| {
            m.with_listener_counters(
                metrics.connections_closed.clone(),
                metrics.accept_failures.clone(),
            )
        });
        // With [tls] the source listens on loopback behind the TLS relay (tls_relay.rs).
        let source_listen = match tls {
            Some(_) => SocketAddr::from(([127, 0, 0, 1], 0)),
            None => listen,
        };
        let source = ReplicationSource::start(
            journal.clone(),
            source_listen,
            tracker.clone(),
            term_source,
            Arc::new(move |caps: &[(String, u16)]| check.check_reader(caps)),
            SourceConfig {
                node: node.to_string(),
                metrics: source_metrics,
                handshake_timeout: net.replication_handshake_timeout(),
                max_connections: net.replication_max_connections,
                peer_check: auth
                    .then(|| crate::auth::peer::replication_peer_check(peer_auth.clone())),
                snapshots: Some(snapshot_source(snapshot_dir)),
                on_follow: Some(follow_hook(versions.clone(), sync_metrics.clone())),
                reseed_chunk_bytes,
                ..SourceConfig::default()
            },
        )
        .map_err(|source| ServerError::Listen {
            addr: listen,
            source,
        })?;
        let relay = match tls {
            Some(tls) => Some(tls_front(tls, listen, source.local_addr(), net, metrics)?),
            None => None,
        };
        let port = match &relay {
            Some(r) => r.local_addr().port(),
            None => source.local_addr().port(),
        };
        let replication_address = format!("{advertise_host}:{port}");
        Ok(Arc::new(Self {
            node: node.to_string(),
            term,
            term_cell,
            tracker,
            journal,
            source: Mutex::new(Some(source)),
            tls_relay: Mutex::new(relay),
            replication_address,
            stepped_down: AtomicBool::new(false),
            peer_auth,
            marked: Mutex::new(MarkedStandby::default()),
            metrics: sync_metrics,
            event_versions: versions,
        }))
    }

    /// Hands the node's credentials to the replication listener: until then, with auth on,
    /// standbys are refused `UNAVAILABLE` (and try again).
    pub fn set_auth(&self, auth: Arc<AuthState>) {
        let _ = self.peer_auth.set(auth);
    }

    pub fn source_status(&self) -> SourceStatus {
        self.source
            .lock()
            .expect("source mutex")
            .as_ref()
            .map(|s| s.status())
            .unwrap_or_default()
    }

    /// The standby's lag behind this node's durable journal: (records, bytes).
    pub fn standby_lag(&self) -> (u64, u64) {
        let s = self.source_status();
        let durable = self.durable_seq();
        (
            durable.saturating_sub(s.acked_seq),
            s.window.lag_bytes(durable.saturating_sub(s.sent_seq)),
        )
    }

    pub fn durable_seq(&self) -> u64 {
        self.journal.durable().get()
    }

    pub fn stepped_down(&self) -> bool {
        self.stepped_down.load(Ordering::Acquire)
    }

    /// What the etcd marker says about the standby (as this active last wrote it).
    pub fn marked(&self) -> MarkedStandby {
        self.marked.lock().expect("marked mutex").clone()
    }

    /// The marker now names `node` (`in_sync` or not). A different node than before counts
    /// in `crescent_ha_standby_named_total`; only after this do its acks count toward commit.
    pub fn set_marked(&self, node: &str, in_sync: bool) {
        let mut marked = self.marked.lock().expect("marked mutex");
        if marked.node.as_deref() != Some(node) {
            self.metrics.standbys_named.inc();
        }
        *marked = MarkedStandby {
            node: Some(node.to_string()),
            in_sync,
        };
        drop(marked);
        self.tracker.name_standby(Some(node));
    }

    pub fn metrics_out_of_sync(&self) {
        self.metrics.out_of_sync_marks.inc();
    }

    /// Where the connected standby stands (one of [`STANDBY_STATES`]).
    pub fn standby_state(&self) -> &'static str {
        let Some(session) = self.tracker.session() else {
            return "none";
        };
        let marked = self.marked();
        if marked.node.as_deref() != Some(session.node.as_str()) {
            "unnamed"
        } else if marked.in_sync {
            "in_sync"
        } else if self.tracker.mode() == CommitMode::Sync {
            "joining"
        } else {
            "out_of_sync"
        }
    }

    /// Publishes [`ActiveHa::standby_state`] in `crescent_ha_standby_state`.
    pub fn publish_state(&self) {
        let now = self.standby_state();
        for state in STANDBY_STATES {
            self.metrics
                .state
                .with_label_values(&[state])
                .set(i64::from(state == now));
        }
    }

    /// Stops writing under this term: later appends are fenced, waiting replies fail, and the
    /// standby is told the term is over.
    pub fn step_down(&self) {
        if self.stepped_down.swap(true, Ordering::AcqRel) {
            return;
        }
        self.term_cell.store(0, Ordering::Release);
        self.journal.fence(self.term + 1);
        self.tracker.close();
        drop(self.tls_relay.lock().expect("relay mutex").take());
        if let Some(s) = self.source.lock().expect("source mutex").take() {
            s.stop();
        }
    }

    /// The HA part of `/healthz` and `crescent status`.
    pub fn status(&self) -> serde_json::Value {
        let s = self.source_status();
        let (lag_records, lag_bytes) = self.standby_lag();
        serde_json::json!({
            "node": self.node,
            "mode": format!("{:?}", self.tracker.mode()).to_lowercase(),
            "replication_address": self.replication_address,
            "standby": s.standby,
            "standby_connected": s.connected,
            "standby_in_sync": self.standby_state() == "in_sync",
            "standby_state": self.standby_state(),
            "marker_standby": self.marked().node,
            "commit_held_ms": self.tracker.held_for().map(|d| d.as_millis() as u64),
            "last_protocol_error": s.last_protocol_error.map(|(c, m)| serde_json::json!({"code": c, "message": m})),
            "standby_acked_seq": s.acked_seq,
            "standby_lag_records": lag_records,
            "standby_lag_bytes": lag_bytes,
            "standby_in_flight_bytes": s.window.in_flight_bytes(),
            "standby_sent_bytes": s.sent_bytes,
            "last_refusal": s.last_refusal.map(|(c, m)| serde_json::json!({"code": c, "message": m})),
            "event_versions": self.event_versions_json(),
        })
    }

    /// Each event kind this build can write at more than one version: the version written now
    /// and the range (`[]` when there is none to negotiate).
    pub fn event_versions_json(&self) -> serde_json::Value {
        let kinds: Vec<_> = self
            .event_versions
            .policy()
            .negotiable()
            .map(|(kind, v)| {
                serde_json::json!({
                    "kind": kind,
                    "writes": v.writes,
                    "oldest": v.oldest,
                    "newest": v.newest,
                })
            })
            .collect();
        serde_json::Value::Array(kinds)
    }
}
