//! Giving back the read leases of gets. A get's reply comes with a read lease (the server's
//! `lease_ttl_ms`, 10 s by default) that keeps its replicas from being removed, evicted or
//! unmounted while the bytes are copied out. Once the copy is done the client releases it, so a
//! `remove` right after a `get` is not refused as BUSY for the rest of the TTL.
//!
//! Releases are best effort: one that fails only means the lease runs out at its deadline, so
//! failures are logged and counted, never reported to the caller of the get. For the same
//! reason they are sent without waiting for the answer (see `send_only`).

use crescent_wire::rpc::RpcOp;
use crescent_wire::store::{BatchRequest, GetReply, ObjectId, ReleaseRequest, MAX_BATCH};
use serde::Serialize;
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
    })
}

impl CrescentClient {
    /// Releases one get's lease (best effort, see the module docs).
    pub(crate) async fn release_lease(&self, release: Option<ReleaseRequest>) {
        let Some(release) = release else {
            return;
        };
        let operation = self
            .send_only(RpcOp::Release, &release)
            .instrument(tracing::debug_span!("client.release"));
        if let Err(e) = self.data.metrics.metered("release", operation, |_| 0).await {
            tracing::debug!(key = %release.id.key, error = %e, "lease release failed; it expires at its deadline");
        }
    }

    /// Releases the leases of a batch of gets, one request per `MAX_BATCH` items (best effort,
    /// see the module docs).
    pub(crate) async fn release_leases(&self, releases: Vec<ReleaseRequest>) {
        if releases.is_empty() {
            return;
        }
        let operation = async {
            for chunk in releases.chunks(MAX_BATCH) {
                let body = BatchRequest {
                    items: chunk.to_vec(),
                };
                self.send_only(RpcOp::BatchRelease, &body).await?;
            }
            Ok::<_, ClientError>(())
        }
        .instrument(tracing::debug_span!(
            "client.release_batch",
            items = releases.len()
        ));
        let released = self
            .data
            .metrics
            .metered("release_batch", operation, |_| 0)
            .await;
        if let Err(e) = released {
            tracing::debug!(error = %e, "batch lease release failed; the leases expire at their deadline");
        }
    }

    /// Sends a request whose answer nobody acts on, to the current leader. A lease lives on
    /// the leader that granted it; after a leader change there is nothing to release (the new
    /// active grants its own leases), so a release with no leader known is dropped.
    async fn send_only<B: Serialize>(&self, op: RpcOp, body: &B) -> Result<(), ClientError> {
        match self.locator.current() {
            Some(current) => current.conn.send_only(op, body).await,
            None => Ok(()),
        }
    }

    /// Waits until the server has run every request this client sent without waiting (the
    /// lease releases of its gets). A short-lived process calls it before exiting, so that a
    /// `get` followed by a `remove` from another process finds the lease released (the CLI
    /// does).
    pub async fn settle(&self) {
        if let Some(current) = self.locator.current() {
            current.conn.settle().await;
        }
    }
}
