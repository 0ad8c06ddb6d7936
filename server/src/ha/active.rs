//! The active phase: serve everything under the term won in etcd, replicate to the standby,
//! and step down (stop serving, fence the journal, exit) as soon as the term is lost.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crescent_actors::World;
use crescent_ha::LeaderFence;
use crescent_journal::replication::{CommitTracker, ReplicationSource, SourceConfig, SourceStatus};
use crescent_journal::Journal;

use crate::error::ServerError;

/// What an active node's handlers and loops share about its HA state.
pub struct ActiveHa {
    pub node: String,
    pub term: u64,
    /// The runtime's term cell: set to 0 on step-down, so every later append is fenced.
    pub term_cell: Arc<AtomicU64>,
    pub tracker: CommitTracker,
    pub journal: Journal,
    pub source: Mutex<Option<ReplicationSource>>,
    /// Where standbys connect (advertised host, bound port).
    pub replication_address: String,
    stepped_down: AtomicBool,
    /// Whether etcd records the standby as in sync (it may take over).
    marked_in_sync: AtomicBool,
    pub out_of_sync_marks: prometheus::IntCounter,
}

impl ActiveHa {
    /// Starts the replication listener for an active at `term`.
    pub fn start(
        node: &str,
        term: u64,
        journal: Journal,
        fence: LeaderFence,
        listen: SocketAddr,
        advertise_host: &str,
        registry: &prometheus::Registry,
    ) -> Result<Arc<Self>, ServerError> {
        // Nothing may be appended under an older term from here on, nor under this one once
        // the lease deadline has passed (checked under the journal's submission lock).
        journal.fence(term);
        let guard_fence = fence.clone();
        journal.set_append_guard(Some(Arc::new(move |t| {
            guard_fence.current_term() == Some(t)
        })));
        let tracker = CommitTracker::start(journal.durable());
        let term_cell = Arc::new(AtomicU64::new(term));
        let cell = term_cell.clone();
        let term_source = Arc::new(move || {
            let t = cell.load(Ordering::Acquire);
            (t != 0 && fence.current_term() == Some(t)).then_some(t)
        });
        let written = crescent_domain::standard_world().event_schemas();
        let source = ReplicationSource::start(
            journal.clone(),
            listen,
            tracker.clone(),
            term_source,
            Arc::new(move |caps: &[(String, u16)]| World::can_replay(&written, caps)),
            SourceConfig {
                node: node.to_string(),
                ..SourceConfig::default()
            },
        )
        .map_err(|source| ServerError::Listen {
            addr: listen,
            source,
        })?;
        let replication_address = format!("{advertise_host}:{}", source.local_addr().port());
        let out_of_sync_marks = prometheus::IntCounter::new(
            "crescent_ha_standby_out_of_sync_total",
            "Times the active marked its standby out of sync in etcd and committed alone",
        )
        .expect("valid metric");
        let _ = registry.register(Box::new(out_of_sync_marks.clone()));
        Ok(Arc::new(Self {
            node: node.to_string(),
            term,
            term_cell,
            tracker,
            journal,
            source: Mutex::new(Some(source)),
            replication_address,
            stepped_down: AtomicBool::new(false),
            marked_in_sync: AtomicBool::new(false),
            out_of_sync_marks,
        }))
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

    pub fn marked_in_sync(&self) -> bool {
        self.marked_in_sync.load(Ordering::Acquire)
    }

    pub fn set_marked_in_sync(&self, in_sync: bool) {
        self.marked_in_sync.store(in_sync, Ordering::Release);
    }

    pub fn metrics_out_of_sync(&self) {
        self.out_of_sync_marks.inc();
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
            "standby_in_sync": self.marked_in_sync(),
            "standby_acked_seq": s.acked_seq,
            "standby_lag_records": lag_records,
            "standby_lag_bytes": lag_bytes,
            "standby_in_flight_bytes": s.window.in_flight_bytes(),
            "standby_sent_bytes": s.sent_bytes,
            "last_refusal": s.last_refusal.map(|(c, m)| serde_json::json!({"code": c, "message": m})),
        })
    }
}
