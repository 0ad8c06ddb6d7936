//! Following a mesh's membership record (docs/scale-out.md, "Generations and redirects"): read
//! it once, then watch it (etcd) or poll it (Redis), and publish every newer generation. The
//! generation held never goes backwards: a record that vanished (a Redis that lost its data),
//! cannot be read, or carries an older generation leaves the last good one in place.

use std::time::Duration;

use crescent_mesh::Membership;
use etcd_client::{Client, WatchOptions};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{sleep, timeout};
use tracing::{debug, info, info_span, warn, Instrument};

use crate::coordination::CoordinationEndpoint;
use crate::error::HaError;
use crate::mesh_store::MembershipStore;
use crate::redis_backend::POLL_INTERVAL;

/// etcd: how long one watch may stay silent before the record is read again anyway (a watch
/// that broke without an error).
const RESYNC: Duration = Duration::from_secs(5);
/// After a failed read or watch.
const RETRY: Duration = Duration::from_millis(200);

/// The newest membership of one mesh, kept current in the background.
pub struct MembershipWatch {
    rx: watch::Receiver<Option<Membership>>,
    task: JoinHandle<()>,
}

impl std::fmt::Debug for MembershipWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let generation = self.rx.borrow().as_ref().map(|m| m.generation);
        f.debug_struct("MembershipWatch")
            .field("generation", &generation)
            .finish_non_exhaustive()
    }
}

impl MembershipWatch {
    /// Starts following the record of `mesh` at `endpoint` (requests bounded by
    /// `request_timeout`). Needs a tokio runtime.
    pub async fn start(
        endpoint: &CoordinationEndpoint,
        mesh: &str,
        request_timeout: Duration,
    ) -> Result<MembershipWatch, HaError> {
        let store = MembershipStore::connect(endpoint, mesh, request_timeout).await?;
        let (tx, rx) = watch::channel(None);
        let span = info_span!("mesh_watch", mesh = %mesh, backend = endpoint.backend());
        let task = tokio::spawn(follow(store, tx).instrument(span));
        Ok(MembershipWatch { rx, task })
    }

    /// The newest membership seen (`None`: none yet).
    pub fn current(&self) -> Option<Membership> {
        self.rx.borrow().clone()
    }

    /// A receiver of every newer generation.
    pub fn subscribe(&self) -> watch::Receiver<Option<Membership>> {
        self.rx.clone()
    }

    /// Waits until a membership of at least `generation` is held (at once if it is), at most
    /// `within`: what a client does on a redirect naming a newer generation.
    pub async fn wait_for_generation(
        &self,
        generation: u64,
        within: Duration,
    ) -> Result<Membership, HaError> {
        let mut rx = self.rx.clone();
        let reached =
            |m: &Option<Membership>| m.as_ref().is_some_and(|m| m.generation >= generation);
        let seen = match timeout(within, rx.wait_for(reached)).await {
            Ok(Ok(m)) => m.clone(),
            _ => None,
        };
        seen.ok_or(HaError::Timeout {
            op: "wait for mesh generation",
            after: within,
        })
    }
}

impl Drop for MembershipWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Publishes `m` if it is newer than what is held; reports whether it was.
fn publish(tx: &watch::Sender<Option<Membership>>, m: Membership) -> bool {
    tx.send_if_modified(|held| match held {
        Some(h) if h.generation >= m.generation => {
            if *h != m && h.generation == m.generation {
                warn!(
                    generation = m.generation,
                    "the record changed without a new generation; keeping the one held"
                );
            }
            false
        }
        _ => {
            info!(
                generation = m.generation,
                clusters = m.clusters.len(),
                "mesh membership"
            );
            *held = Some(m);
            true
        }
    })
}

async fn follow(store: MembershipStore, tx: watch::Sender<Option<Membership>>) {
    while !tx.is_closed() {
        let read_at = match store.read_at().await {
            Ok((Some(stored), at)) => {
                publish(&tx, stored.membership);
                at
            }
            Ok((None, at)) => {
                debug!("no membership record; keeping the one held");
                at
            }
            Err(e) => {
                warn!(error = %e, code = e.code(), "reading the membership failed; keeping the one held");
                sleep(RETRY).await;
                continue;
            }
        };
        match store.etcd_client() {
            // From the revision after the read: a record written between the read and the
            // watch's start is an event of the watch, not a wait for the resync.
            Some(client) => wait_etcd(client, store.key(), read_at.map(|rev| rev + 1)).await,
            None => sleep(POLL_INTERVAL).await,
        }
    }
}

/// Returns at the first event on `key` after `from` (or from now), after [`RESYNC`], or after
/// a failure (then after [`RETRY`]).
async fn wait_etcd(client: &Client, key: &str, from: Option<i64>) {
    let mut options = WatchOptions::new();
    if let Some(rev) = from {
        options = options.with_start_revision(rev);
    }
    let waited = timeout(RESYNC, async {
        let mut watch_client = client.watch_client();
        let mut stream = watch_client.watch(key, Some(options)).await?;
        while let Some(resp) = stream.message().await? {
            if resp.canceled() || !resp.events().is_empty() {
                return Ok(());
            }
        }
        Ok::<(), etcd_client::Error>(())
    })
    .await;
    if let Ok(Err(e)) = waited {
        debug!(error = %e, "membership watch failed");
        sleep(RETRY).await;
    }
}
