//! Following the etcd leader key (feature `etcd`; docs/ha.md, "Clients"): a watch on
//! `/crescent/<cluster>/leader` whose changes move the [`LeaderLocator`] at once. Without the
//! feature a client never follows etcd: [`EtcdFollower`] has no value, and `connect` refuses
//! etcd endpoints.

#[cfg(feature = "etcd")]
pub(crate) use follow::EtcdFollower;

#[cfg(not(feature = "etcd"))]
pub(crate) use disabled::EtcdFollower;

#[cfg(feature = "etcd")]
mod follow {
    use std::sync::atomic::Ordering;
    use std::sync::{Arc, Weak};

    use crescent_ha::{LeaderInfo, LeaderWatch};

    use crate::failover_metrics::LeaderSource;
    use crate::leader::LeaderLocator;

    /// The etcd side: the watch and the task applying its changes.
    pub struct EtcdFollower {
        watch: LeaderWatch,
        task: tokio::task::JoinHandle<()>,
        cluster: String,
    }

    impl EtcdFollower {
        pub fn cluster(&self) -> String {
            self.cluster.clone()
        }

        /// etcd's current leader: (address, term).
        pub fn leader(&self) -> Option<(String, u64)> {
            self.watch.current().map(|l| (l.address, l.term))
        }

        /// For error messages.
        pub fn describe(&self) -> String {
            match self.watch.current() {
                Some(l) => format!(
                    "etcd cluster {}: leader {} at {} (term {})",
                    self.cluster, l.node, l.address, l.term
                ),
                None => format!("etcd cluster {}: no leader", self.cluster),
            }
        }

        pub fn stop(&self) {
            self.task.abort();
        }
    }

    impl LeaderLocator {
        /// Follows the leader record through `watch` (etcd's or Redis's) from now on. Needs a
        /// tokio runtime.
        pub fn follow_watch(self: &Arc<Self>, watch: LeaderWatch, cluster: &str) {
            let mut rx = watch.subscribe();
            let weak: Weak<Self> = Arc::downgrade(self);
            let span = tracing::info_span!("client.leader_follow", cluster = %cluster);
            let task = tokio::spawn(tracing::Instrument::instrument(
                async move {
                    loop {
                        let seen = rx.borrow_and_update().clone();
                        let Some(locator) = weak.upgrade() else {
                            return;
                        };
                        if let Some(leader) = seen {
                            locator.observe_leader(&leader);
                        }
                        drop(locator);
                        if rx.changed().await.is_err() {
                            return;
                        }
                    }
                },
                span,
            ));
            let follower = EtcdFollower {
                watch,
                task,
                cluster: cluster.to_string(),
            };
            if let Err(extra) = self.etcd.set(follower) {
                // Attached twice: keep the first, stop the second.
                extra.task.abort();
            }
        }

        /// A leader published in etcd: followed if its term is not older than the newest seen.
        pub(crate) fn observe_leader(&self, leader: &LeaderInfo) {
            let newest = self.known_term.fetch_max(leader.term, Ordering::AcqRel);
            if leader.term < newest {
                tracing::debug!(
                    term = leader.term,
                    newest,
                    "ignoring an older leader record"
                );
                return;
            }
            self.metrics.observe_term(leader.term);
            self.switch_to(None, &leader.address, LeaderSource::Etcd);
        }
    }
}

#[cfg(not(feature = "etcd"))]
mod disabled {
    /// No etcd follower exists in a build without the `etcd` feature.
    pub enum EtcdFollower {}

    impl EtcdFollower {
        pub fn cluster(&self) -> String {
            match *self {}
        }

        pub fn leader(&self) -> Option<(String, u64)> {
            match *self {}
        }

        pub fn describe(&self) -> String {
            match *self {}
        }

        pub fn stop(&self) {
            match *self {}
        }
    }
}
