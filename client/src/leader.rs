//! [`LeaderLocator`]: which crescentd the client talks to, and how it moves on after a
//! failover (docs/ha.md, "Clients").
//!
//! Sources, strongest first:
//! 1. a NOT_LEADER answer naming the active (`x-crescent-leader` header or the error body's
//!    `leader`): the standby knows who it follows right now;
//! 2. the etcd leader key (feature `etcd`, `leader_etcd.rs`), followed when the client was
//!    given etcd endpoints and a cluster name; a change is applied at once, without waiting
//!    for a request to fail, and only for a term at least as new as the newest seen;
//! 3. the static server list: after a connection failure, the next address in the list.
//!
//! Every switch starts a new *epoch*. A failure is resolved only against the epoch it
//! happened in, so 32 requests failing together move the client once, not 32 times, and an
//! operation pinned to the leader that started it (put_end) can tell that the leader changed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use tokio::sync::watch;

use crate::error::ClientError;
use crate::failover_metrics::{FailoverMetrics, LeaderSource};
use crate::leader_etcd::EtcdFollower;
use crate::server_conn::{Connector, ServerConn};

/// The server requests go to, and the epoch in which it became current.
#[derive(Debug, Clone)]
pub(crate) struct Current {
    pub conn: Arc<ServerConn>,
    pub epoch: u64,
}

#[derive(Debug, Default)]
struct State {
    current: Option<Arc<ServerConn>>,
    epoch: u64,
}

pub(crate) struct LeaderLocator {
    connector: Connector,
    /// The static list (`--server A,B`), as given; may be empty when etcd is configured.
    candidates: Vec<String>,
    state: Mutex<State>,
    epoch_tx: watch::Sender<u64>,
    /// The newest leader term seen in etcd: older records (a lagging watch) are ignored.
    pub(crate) known_term: AtomicU64,
    pub(crate) etcd: OnceLock<EtcdFollower>,
    pub(crate) metrics: FailoverMetrics,
    /// Some request has been answered: a refused connection from now on is a restart to
    /// ride out, not a wrong address.
    reached: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for LeaderLocator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        f.debug_struct("LeaderLocator")
            .field("candidates", &self.candidates)
            .field("current", &state.current.as_ref().map(|c| c.base.clone()))
            .field("epoch", &state.epoch)
            .field("etcd_cluster", &self.etcd.get().map(EtcdFollower::cluster))
            .finish()
    }
}

impl LeaderLocator {
    /// A locator over a static list (the first address is current). An empty list is allowed
    /// only when etcd is attached afterwards (`LeaderLocator::follow_watch`).
    pub fn new(
        candidates: Vec<String>,
        connector: Connector,
        metrics: FailoverMetrics,
    ) -> Result<Arc<Self>, ClientError> {
        let candidates: Vec<String> = candidates
            .into_iter()
            .map(|c| c.trim().to_string())
            .filter(|c| !c.is_empty())
            .collect();
        for c in &candidates {
            connector.base(c)?;
        }
        let current = match candidates.first() {
            Some(first) => Some(Arc::new(ServerConn::new(first, &connector)?)),
            None => None,
        };
        let (epoch_tx, _) = watch::channel(0);
        Ok(Arc::new(Self {
            connector,
            candidates,
            state: Mutex::new(State { current, epoch: 0 }),
            epoch_tx,
            known_term: AtomicU64::new(0),
            etcd: OnceLock::new(),
            metrics,
            reached: std::sync::atomic::AtomicBool::new(false),
        }))
    }

    /// What this locator's connections are made with (token, TLS).
    pub fn connector(&self) -> &Connector {
        &self.connector
    }

    /// A locator over the same static list, starting at the current server, whose
    /// connections use `connector` (another credential). It does not follow etcd.
    pub fn with_connector(&self, connector: Connector) -> Result<Arc<Self>, ClientError> {
        let mut candidates = self.candidates.clone();
        if let Some(current) = self.current() {
            let server = current.conn.server().to_string();
            candidates.retain(|c| self.connector.base(c).ok().as_ref() != Some(&current.conn.base));
            candidates.insert(0, server);
        }
        Self::new(candidates, connector, self.metrics.clone())
    }

    /// The server requests go to now, if any is known.
    pub fn current(&self) -> Option<Current> {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.current.as_ref().map(|conn| Current {
            conn: conn.clone(),
            epoch: state.epoch,
        })
    }

    /// A receiver that sees every new epoch (leader switch).
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.epoch_tx.subscribe()
    }

    /// Whether `epoch` is still the current one (an operation pinned to its leader).
    pub fn is_current(&self, epoch: u64) -> bool {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).epoch == epoch
    }

    pub fn metrics(&self) -> &FailoverMetrics {
        &self.metrics
    }

    /// What the client knows about where leaders are, for error messages.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(e) = self.etcd.get() {
            parts.push(e.describe());
        }
        if !self.candidates.is_empty() {
            parts.push(format!("servers {}", self.candidates.join(",")));
        }
        parts.join("; ")
    }

    /// Makes `address` current (unless it already is). With `from_epoch`, only if no other
    /// switch happened since that epoch. Returns whether it switched.
    pub(crate) fn switch_to(
        &self,
        from_epoch: Option<u64>,
        address: &str,
        source: LeaderSource,
    ) -> bool {
        let base = match self.connector.base(address) {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(%address, error = %e, "ignoring an unusable leader address");
                return false;
            }
        };
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if from_epoch.is_some_and(|e| e != state.epoch) {
            return false;
        }
        if state.current.as_ref().is_some_and(|c| c.base == base) {
            return false;
        }
        let conn = match ServerConn::new(address, &self.connector) {
            Ok(c) => Arc::new(c),
            Err(e) => {
                tracing::warn!(%address, error = %e, "ignoring an unusable leader address");
                return false;
            }
        };
        let from = state.current.as_ref().map(|c| c.base.clone());
        state.current = Some(conn);
        state.epoch += 1;
        let epoch = state.epoch;
        drop(state);
        self.metrics.leader_changed(source);
        tracing::info!(
            from = from.as_deref().unwrap_or("-"),
            to = %base,
            source = source.label(),
            epoch,
            "following another crescentd"
        );
        self.epoch_tx.send_replace(epoch);
        true
    }

    /// Whether waiting out the failover deadline after a refused connection can help: etcd
    /// is followed, the static list names another server, or the one server answered before
    /// (it is restarting). A client that never reached its one static server has a wrong
    /// address or a server that is not running, and is told so at once.
    pub fn can_move(&self) -> bool {
        self.etcd.get().is_some()
            || self.candidates.len() >= 2
            || self.reached.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A request was answered (by any server).
    pub fn mark_reached(&self) {
        self.reached
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// After a request to `failed` failed in a way that suggests another leader: moves to the
    /// leader named by `hint` (a NOT_LEADER answer), else to etcd's leader, else to the next
    /// static address. Does nothing if the client already moved on since `failed`'s epoch.
    /// Returns the source it switched by, if it switched.
    pub fn after_failure(&self, failed: &Current, hint: Option<&str>) -> Option<LeaderSource> {
        if let Some(hint) = hint {
            if self.switch_to(Some(failed.epoch), hint, LeaderSource::NotLeader) {
                return Some(LeaderSource::NotLeader);
            }
        }
        if let Some((address, term)) = self.etcd.get().and_then(EtcdFollower::leader) {
            if term >= self.known_term.load(Ordering::Acquire)
                && self.switch_to(Some(failed.epoch), &address, LeaderSource::Etcd)
            {
                return Some(LeaderSource::Etcd);
            }
        }
        let next = self.next_candidate(&failed.conn.base)?;
        self.switch_to(Some(failed.epoch), &next, LeaderSource::Static)
            .then_some(LeaderSource::Static)
    }

    /// The static address after `base` (wrapping), if there is another one.
    fn next_candidate(&self, base: &str) -> Option<String> {
        if self.candidates.is_empty() {
            return None;
        }
        let at = self
            .candidates
            .iter()
            .position(|c| self.connector.base(c).is_ok_and(|b| b == base));
        let next = match at {
            Some(i) => &self.candidates[(i + 1) % self.candidates.len()],
            // We were sent elsewhere (a hint or etcd): start over at the top of the list.
            None => &self.candidates[0],
        };
        (self.connector.base(next).ok()? != base).then(|| next.clone())
    }
}

impl Drop for LeaderLocator {
    fn drop(&mut self) {
        if let Some(e) = self.etcd.get() {
            e.stop();
        }
    }
}

#[cfg(test)]
#[path = "leader_tests.rs"]
mod tests;
