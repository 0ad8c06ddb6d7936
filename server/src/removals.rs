//! Durable removes: a remove is acknowledged only once the put ids it took out of remote
//! owners' segments are journaled (`crescent_actors::removed_puts`), so a crescentd that dies
//! before the owners heard of the remove cannot be handed the object back by their replays
//! (docs/rebuild.md, "Removes are journaled").
//!
//! Group commit: a remove appends to the directory's removal log and then waits here for the
//! number it reached ([`DurableRemovals::wait`]). One waiter at a time takes everything the
//! log holds and journals it as one command; the others queue behind it and usually find their
//! removals journaled when their turn comes. A failed journal write puts the removals back, so
//! nothing is reported durable that was not.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crescent_actors::removed_puts::{RemovedPuts, RemovedPutsCommand, INSTANCE_ID};
use crescent_actors::AggregateRegistry;
use crescent_crash::points;
use crescent_store::ObjectDirectory;
use crescent_wire::ApiError;
use prometheus::{IntCounterVec, Opts, Registry};

pub struct DurableRemovals {
    registry: AggregateRegistry<RemovedPuts>,
    directory: Arc<ObjectDirectory>,
    /// Removal-log number journaled so far.
    durable: AtomicU64,
    flush: tokio::sync::Mutex<()>,
    /// The put ids remembered when this run started, by owner: an owner that completes its
    /// replay to this run was answered `Stale` for each and dropped them. Only these: a put id
    /// remembered during this run names an object (or a replaced version) the owner replayed
    /// and still holds until its release arrives, even if it is below this run's put ids.
    recovered: std::sync::Mutex<BTreeMap<String, Vec<u64>>>,
    events: IntCounterVec,
}

impl DurableRemovals {
    /// Fences the recovered removals in `directory` and takes over journaling new ones.
    pub fn new(
        registry: AggregateRegistry<RemovedPuts>,
        recovered: &RemovedPuts,
        directory: Arc<ObjectDirectory>,
        metrics: &Registry,
    ) -> Result<Self, prometheus::Error> {
        for (owner, ids) in &recovered.by_owner {
            directory
                .removals()
                .fence_recovered(owner, ids.iter().copied());
        }
        if !recovered.is_empty() {
            tracing::info!(
                removed_puts = recovered.len(),
                "journaled removes fenced from owner replays"
            );
        }
        let events = IntCounterVec::new(
            Opts::new(
                "crescent_removed_puts_total",
                "Removed put ids journaled before their removes were acknowledged (journaled), \
                 and forgotten once their owners dropped them (settled).",
            ),
            &["event"],
        )?;
        metrics.register(Box::new(events.clone()))?;
        Ok(Self {
            registry,
            durable: AtomicU64::new(directory.removals().recorded()),
            directory,
            flush: tokio::sync::Mutex::new(()),
            recovered: std::sync::Mutex::new(
                recovered
                    .by_owner
                    .iter()
                    .map(|(owner, ids)| (owner.clone(), ids.iter().copied().collect()))
                    .collect(),
            ),
            events,
        })
    }

    /// Waits until every removal recorded so far is journaled (call it after a remove ran,
    /// before answering it).
    pub async fn wait_recorded(&self) -> Result<(), ApiError> {
        self.wait(self.directory.removals().recorded()).await
    }

    /// Waits until the removal log is journaled up to `upto`.
    pub async fn wait(&self, upto: u64) -> Result<(), ApiError> {
        while self.durable.load(Ordering::Acquire) < upto {
            let _turn = self.flush.lock().await;
            if self.durable.load(Ordering::Acquire) >= upto {
                break;
            }
            let log = self.directory.removals();
            let mut taken = log.take();
            let n: usize = taken.by_owner.values().map(Vec::len).sum();
            if n > 0 {
                crescent_crash::point(points::REMOVE_BEFORE_JOURNAL);
                let cmd = RemovedPutsCommand::Remember(taken.by_owner.clone());
                if let Err(e) = self.registry.execute(INSTANCE_ID, cmd).await {
                    log.restore(taken);
                    let e = crate::error::CommandFailed::from(e);
                    return Err(ApiError::new(
                        e.code,
                        format!("the remove was not made durable: {}", e.message),
                    ));
                }
                self.events
                    .with_label_values(&["journaled"])
                    .inc_by(n as u64);
            }
            // Durable: the removed versions' quota is free again (docs/tenants.md, "Removes").
            crescent_crash::point(points::REMOVE_AFTER_JOURNAL);
            taken.settle_refunds();
            self.durable.fetch_max(taken.reached, Ordering::AcqRel);
        }
        Ok(())
    }

    /// `owner` acknowledged releases of these put ids: forget those remembered (in the
    /// background: a lost settle only keeps an entry until the next one).
    pub fn settle(self: &Arc<Self>, owner: &str, put_ids: Vec<u64>) {
        let fenced: Vec<u64> = put_ids
            .into_iter()
            .filter(|id| self.directory.removals().is_fenced(*id))
            .collect();
        if fenced.is_empty() {
            return;
        }
        // A replaced version released before the next journal write need not be journaled.
        self.directory.removals().drop_unjournaled(owner, &fenced);
        let cmd = RemovedPutsCommand::Settle {
            owner: owner.to_string(),
            put_ids: fenced,
        };
        self.settle_with(owner.to_string(), cmd);
    }

    /// `owner` completed its replay to this run: it dropped the put ids remembered when this
    /// run started (they were fenced before any replay, so answered `Stale`). Not those
    /// remembered since, whatever their run: a remove made after the replay (or while this
    /// completion was retried) names a put the owner replayed and still holds.
    pub fn settle_replayed(self: &Arc<Self>, owner: &str) {
        let taken = self
            .recovered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(owner);
        let Some(put_ids) = taken else {
            return;
        };
        let cmd = RemovedPutsCommand::Settle {
            owner: owner.to_string(),
            put_ids,
        };
        self.settle_with(owner.to_string(), cmd);
    }

    /// `owner` has no segment left: its table is gone with them.
    pub fn drop_owner(self: &Arc<Self>, owner: &str) {
        let cmd = RemovedPutsCommand::DropOwner {
            owner: owner.to_string(),
        };
        self.settle_with(owner.to_string(), cmd);
    }

    fn settle_with(self: &Arc<Self>, owner: String, cmd: RemovedPutsCommand) {
        let this = self.clone();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            let lifted = match &cmd {
                RemovedPutsCommand::Settle { put_ids, .. } => Lift::Ids(put_ids.clone()),
                RemovedPutsCommand::SettleBelow { below, .. } => Lift::Below(*below),
                _ => Lift::Below(u64::MAX),
            };
            match this.registry.execute(INSTANCE_ID, cmd).await {
                Ok(done) => {
                    let log = this.directory.removals();
                    match lifted {
                        Lift::Ids(ids) => log.settle(&owner, &ids),
                        Lift::Below(below) => log.settle_below(&owner, below),
                    }
                    if !done.events.is_empty() {
                        this.events.with_label_values(&["settled"]).inc();
                    }
                }
                Err(e) => tracing::debug!(%owner, error = %e, "removed puts not settled"),
            }
        });
    }
}

enum Lift {
    Ids(Vec<u64>),
    Below(u64),
}
