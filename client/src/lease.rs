//! Giving back the read leases of gets. A get's reply comes with a read lease (the server's
//! `lease_ttl_ms`, 10 s by default) that keeps its replicas from being removed, evicted or
//! unmounted while the bytes are copied out. Once the copy is done the client releases it, so a
//! `remove` right after a `get` is not refused as BUSY for the rest of the TTL.
//!
//! Releases are best effort: one that fails only means the lease runs out at its deadline, so
//! failures are logged and counted, never reported to the caller of the get. For the same
//! reason nobody waits for them: over the RPC fast path they are queued and ride on the
//! connection's next requests (`crate::rpc_release`), over HTTP they are plain calls.

use crescent_wire::rpc::RpcOp;
use crescent_wire::store::{BatchRequest, GetReply, ObjectId, ReleaseRequest, MAX_BATCH};
use tracing::Instrument;

use crate::client::CrescentClient;
use crate::error::ClientError;

/// The release of a get's lease, or `None` when there is nothing to release (a server that
/// predates releases answers `put_id` 0).
pub(crate) fn release_of(id: &ObjectId, reply: &GetReply) -> Option<ReleaseRequest> {
    (reply.put_id != 0).then(|| ReleaseRequest {
        id: id.clone(),
        put_id: reply.put_id,
        lease_until_ms: reply.lease_until_ms,
        // A get answered from the staging pool acks its token with the release.
        staged_token: reply.staged.as_ref().map(|s| s.token),
    })
}

impl CrescentClient {
    /// Releases one get's lease (best effort, see the module docs).
    pub(crate) async fn release_lease(&self, release: Option<ReleaseRequest>) {
        if let Some(release) = release {
            self.release_with("release", vec![release]).await;
        }
    }

    /// Releases the leases of a batch of gets (best effort, see the module docs).
    pub(crate) async fn release_leases(&self, releases: Vec<ReleaseRequest>) {
        if !releases.is_empty() {
            self.release_with("release_batch", releases).await;
        }
    }

    /// Queues `releases` on the leader's RPC pool, or sends them over HTTP (one request per
    /// `MAX_BATCH`). A lease lives on the leader that granted it; after a leader change there
    /// is nothing to release (the new active grants its own leases), so releases with no
    /// leader known are dropped.
    async fn release_with(&self, op: &'static str, releases: Vec<ReleaseRequest>) {
        let count = releases.len();
        let operation = async {
            let Some(current) = self.locator.current() else {
                return Ok(());
            };
            let Err(releases) = current.conn.defer_releases(releases).await else {
                return Ok(());
            };
            for chunk in releases.chunks(MAX_BATCH) {
                let body = BatchRequest {
                    items: chunk.to_vec(),
                };
                current.conn.send_only(RpcOp::BatchRelease, &body).await?;
            }
            Ok::<_, ClientError>(())
        }
        .instrument(tracing::debug_span!("client.release", items = count));
        if let Err(e) = self.data.metrics.metered(op, operation, |_| 0).await {
            tracing::debug!(error = %e, "lease release failed; the leases expire at their deadline");
        }
    }

    /// Waits until the server has run every lease release this client queued or sent without
    /// waiting. A short-lived process calls it before exiting, so that a `get` followed by a
    /// `remove` from another process finds the lease released (the CLI does).
    pub async fn settle(&self) {
        if let Some(current) = self.locator.current() {
            current.conn.settle().await;
        }
    }
}
