//! Keeps the commit mode and the etcd replication marker in step with the standby.
//!
//! Order matters for "no acknowledged write lost": before commit stops waiting for a silent
//! standby, etcd records it out of sync (so it may not take over); before etcd records a
//! standby in sync, commit already waits for it and it holds everything committed.

use std::sync::Arc;
use std::time::Duration;

use crescent_ha::Elector;
use crescent_journal::replication::{CommitMode, CommitTracker};

use super::active::ActiveHa;
use crate::config::ReplicationMode;

/// Runs until the node steps down.
pub async fn manage(
    ha: Arc<ActiveHa>,
    elector: Arc<Elector>,
    mode: ReplicationMode,
    timeout: Duration,
) {
    let tracker: &CommitTracker = &ha.tracker;
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        if ha.stepped_down() {
            return;
        }
        let status = ha.source_status();
        let standby = status.standby.clone();
        match tracker.mode() {
            CommitMode::Sync => {
                if tracker.held_for().is_some_and(|h| h >= timeout)
                    || !status.connected && tracker.held_for().is_some()
                {
                    let name = standby.clone().unwrap_or_default();
                    match elector.mark_out_of_sync(&name, tracker.acked()).await {
                        Ok(()) => {
                            tracing::warn!(standby = %name, acked = tracker.acked(), "standby marked out of sync; committing alone");
                            tracker.release_standby();
                            ha.set_marked_in_sync(false);
                            ha.metrics_out_of_sync();
                        }
                        // Not allowed to commit alone: keep waiting (the lease will tell if
                        // this node is cut off from etcd).
                        Err(e) => tracing::warn!(error = %e, "cannot mark the standby out of sync"),
                    }
                } else if !ha.marked_in_sync() && tracker.standby_caught_up() {
                    if let Some(name) = &standby {
                        match elector.mark_in_sync(name, tracker.acked()).await {
                            Ok(()) => {
                                tracing::info!(standby = %name, "standby in sync");
                                ha.set_marked_in_sync(true);
                            }
                            Err(e) => tracing::warn!(error = %e, "cannot mark the standby in sync"),
                        }
                    }
                }
            }
            CommitMode::Local => {
                // A connected standby that has caught up with local durability joins sync
                // commit; etcd hears of it on the next round, once it has everything.
                if mode == ReplicationMode::Sync
                    && status.connected
                    && status.acked_seq >= ha.durable_seq()
                {
                    tracker.require_standby();
                }
            }
        }
    }
}
