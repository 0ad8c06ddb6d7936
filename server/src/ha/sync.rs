//! Keeps the commit mode and the etcd replication marker in step with the standby.
//!
//! Order matters for "no acknowledged write lost" (docs/ha.md, "Which acks count"):
//! - before commit stops waiting for a silent standby, etcd records it out of sync (so it may
//!   not take over);
//! - before any ack of a standby counts toward commit, etcd names that standby (out of sync
//!   at first), which also removes the one named before; sync commit waits meanwhile;
//! - before etcd records a standby in sync, commit already waits for it and it holds
//!   everything committed.

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
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        if ha.stepped_down() {
            return;
        }
        match ha.tracker.mode() {
            CommitMode::Sync => sync_round(&ha, &elector, timeout).await,
            CommitMode::Local => {
                if mode == ReplicationMode::Sync {
                    local_round(&ha, &elector).await;
                }
            }
        }
        ha.publish_state();
    }
}

/// Sync mode: commit waits for the named standby.
async fn sync_round(ha: &ActiveHa, elector: &Elector, timeout: Duration) {
    let tracker: &CommitTracker = &ha.tracker;
    let session = tracker.session();
    let marked = ha.marked();
    let held = tracker.held_for();
    if held.is_some_and(|h| h >= timeout) || session.is_none() && held.is_some() {
        commit_alone(ha, elector).await;
    } else if let Some(s) = session.filter(|s| marked.node.as_ref() != Some(&s.node)) {
        // A new or different standby: its acks count only once etcd names it (which also
        // takes the old one's right to take over away). Commit waits meanwhile, and the
        // timeout above applies if that takes too long.
        name_standby(ha, elector, &s.node).await;
    } else if !marked.in_sync && tracker.standby_caught_up() {
        if let Some(name) = &marked.node {
            let seq = tracker.commit().get();
            match elector.mark_in_sync(name, seq).await {
                Ok(()) => {
                    tracing::info!(standby = %name, seq, "standby in sync");
                    ha.set_marked(name, true);
                }
                Err(e) => tracing::warn!(error = %e, "cannot mark the standby in sync"),
            }
        }
    }
}

/// Local mode with sync replication configured: a connected standby that has caught up with
/// local durability joins sync commit once etcd names it; it is recorded in sync on a later
/// round, once it has everything.
async fn local_round(ha: &ActiveHa, elector: &Elector) {
    let Some(session) = ha.tracker.session() else {
        return;
    };
    if session.acked < ha.durable_seq() {
        return;
    }
    if ha.marked().node.as_ref() != Some(&session.node)
        && !name_standby(ha, elector, &session.node).await
    {
        return;
    }
    ha.tracker.require_standby();
}

/// Writes the marker naming `node` out of sync; from then on its acks count. Returns whether
/// the write succeeded.
async fn name_standby(ha: &ActiveHa, elector: &Elector, node: &str) -> bool {
    let previous = ha.marked().node;
    let seq = ha.tracker.commit().get();
    match elector.mark_out_of_sync(node, seq).await {
        Ok(()) => {
            tracing::info!(standby = %node, previous = ?previous, seq, "standby named in etcd; its acks count from now on");
            ha.set_marked(node, false);
            true
        }
        Err(e) => {
            tracing::warn!(standby = %node, error = %e, "cannot name the standby in etcd; its acks do not count");
            false
        }
    }
}

/// The standby is silent or gone: record it out of sync, then commit alone. The write is
/// skipped only when this term never named a standby: an in-sync write whose answer was lost
/// may have landed, so "named" is enough to write again.
async fn commit_alone(ha: &ActiveHa, elector: &Elector) {
    let seq = ha.tracker.commit().get();
    if let Some(name) = ha.marked().node {
        if let Err(e) = elector.mark_out_of_sync(&name, seq).await {
            // Not allowed to commit alone: keep waiting (the lease will tell if this node is
            // cut off from etcd).
            tracing::warn!(error = %e, "cannot mark the standby out of sync");
            return;
        }
        ha.set_marked(&name, false);
    }
    tracing::warn!(standby = ?ha.marked().node, seq, "standby marked out of sync; committing alone");
    ha.tracker.release_standby();
    ha.metrics_out_of_sync();
}
