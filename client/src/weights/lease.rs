//! [`RevisionLease`]: the revision lease a read holds for as long as it runs (docs/weights.md,
//! "What the server does with this crate", weight_get). A background task renews it after a
//! third of its TTL, so a load that outlasts the TTL stays protected (no deletion, no release
//! of the replicas it reads); the lease is released when the read completes or fails
//! ([`RevisionLease::release`]) and, when the read is cancelled (its future dropped), by the
//! guard's `Drop`, which spawns the release on the current runtime. A caller that crashes
//! leaves it to expire by its TTL.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crescent_wire::store::Ack;
use crescent_wire::weights::{self as w, routes};
use crescent_wire::ErrorCode;
use tokio::task::JoinHandle;
use tracing::Instrument;

use super::WeightStore;
use crate::error::ClientError;
use crate::failover::Retry;

/// Shortest wait between two renewal attempts (a failed renewal is retried sooner than a
/// third of the TTL, but not in a tight loop).
const MIN_RENEW_WAIT: Duration = Duration::from_millis(50);

/// A granted revision lease, renewed in the background until released or dropped.
#[derive(Debug)]
pub(crate) struct RevisionLease {
    store: WeightStore,
    id: w::WeightId,
    lease_id: String,
    renewer: Option<JoinHandle<()>>,
    /// Why the lease was lost (a renewal refused for good): the read is no longer protected.
    lost: Arc<Mutex<Option<String>>>,
}

impl RevisionLease {
    /// Acquires the lease of `id` for `holder` with a TTL of `ttl`; returns it with the
    /// metadata it was granted at.
    pub(crate) async fn acquire(
        store: &WeightStore,
        id: &w::WeightId,
        holder: &str,
        ttl: Duration,
    ) -> Result<(Self, w::WeightMetadata), ClientError> {
        let req = w::LeaseRequest {
            id: id.clone(),
            holder: holder.to_string(),
            ttl_ms: ttl.as_millis() as u64,
            expected_metadata_generation: None,
        };
        let granted: w::LeaseReply = store
            .op(
                "weight_lease_acquire",
                store.post(routes::LEASE_ACQUIRE, &req),
            )
            .await?;
        let lost = Arc::new(Mutex::new(None));
        let renewer = tokio::spawn(
            renew_loop(
                store.clone(),
                id.clone(),
                granted.lease_id.clone(),
                ttl,
                lost.clone(),
            )
            .instrument(tracing::debug_span!("weights.lease_renew", lease = %granted.lease_id)),
        );
        let lease = Self {
            store: store.clone(),
            id: id.clone(),
            lease_id: granted.lease_id,
            renewer: Some(renewer),
            lost,
        };
        Ok((lease, granted.metadata))
    }

    pub(crate) fn lease_id(&self) -> &str {
        &self.lease_id
    }

    /// `Err(LEASE_EXPIRED)` once a renewal was refused: what is read from then on is no
    /// longer protected by the lease.
    pub(crate) fn check(&self) -> Result<(), ClientError> {
        let lost = self.lost.lock().unwrap_or_else(|p| p.into_inner());
        match &*lost {
            None => Ok(()),
            Some(why) => Err(ClientError::item(
                ErrorCode::LeaseExpired,
                format!(
                    "revision lease {} was lost during the read: {why}",
                    self.lease_id
                ),
            )),
        }
    }

    /// Stops renewing and releases the lease (completion and error paths).
    pub(crate) async fn release(mut self) -> Result<(), ClientError> {
        self.stop_renewing();
        let req = self.release_request();
        let released: Result<Ack, _> = self.store.post(routes::LEASE_RELEASE, &req).await;
        released.map(|_| ())
    }

    fn stop_renewing(&mut self) {
        if let Some(renewer) = self.renewer.take() {
            renewer.abort();
        }
    }

    fn release_request(&self) -> w::LeaseReleaseRequest {
        w::LeaseReleaseRequest {
            id: self.id.clone(),
            lease_id: self.lease_id.clone(),
        }
    }
}

impl Drop for RevisionLease {
    /// A read dropped before it ended (cancelled): release in the background if a runtime is
    /// there to run it, else the lease expires by its TTL.
    fn drop(&mut self) {
        let Some(renewer) = self.renewer.take() else {
            return; // released already
        };
        renewer.abort();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::debug!(lease = %self.lease_id, "no runtime: the lease expires by its TTL");
            return;
        };
        let store = self.store.clone();
        let req = self.release_request();
        runtime.spawn(async move {
            let released: Result<Ack, _> = store.post(routes::LEASE_RELEASE, &req).await;
            if let Err(e) = released {
                tracing::warn!(lease = %req.lease_id, error = %e, "release of a cancelled read's lease failed");
            }
        });
    }
}

/// Renews the lease after a third of its TTL, measured from when the previous grant or
/// renewal was sent (the server's expiry is on its own clock). A refusal that a retry cannot
/// change (LEASE_EXPIRED, NOT_FOUND, CONFLICT for a retired revision) ends the loop and marks
/// the lease lost; any other failure is retried after a third of the time still left.
async fn renew_loop(
    store: WeightStore,
    id: w::WeightId,
    lease_id: String,
    ttl: Duration,
    lost: Arc<Mutex<Option<String>>>,
) {
    let mut granted_at = tokio::time::Instant::now();
    let mut wait = ttl / 3;
    loop {
        tokio::time::sleep(wait.max(MIN_RENEW_WAIT)).await;
        let sent = tokio::time::Instant::now();
        let req = w::LeaseRenewRequest {
            id: id.clone(),
            lease_id: lease_id.clone(),
            ttl_ms: ttl.as_millis() as u64,
        };
        // Renewing twice only extends the same lease: safe to resend after a failover.
        let renew = store.client.post_route(
            routes::LEASE_RENEW,
            Retry::Idempotent,
            routes::LEASE_RENEW,
            &req,
        );
        let renewed: Result<w::LeaseReply, ClientError> =
            store.op("weight_lease_renew", renew).await;
        match renewed {
            Ok(_) => {
                granted_at = sent;
                wait = ttl / 3;
            }
            Err(e) if e.retryable() => {
                let left =
                    (granted_at + ttl).saturating_duration_since(tokio::time::Instant::now());
                if left.is_zero() {
                    let why = format!("expired before a renewal got through ({e})");
                    *lost.lock().unwrap_or_else(|p| p.into_inner()) = Some(why);
                    return;
                }
                tracing::debug!(lease = %lease_id, error = %e, ?left, "lease renewal failed; retrying");
                wait = left / 3;
            }
            Err(e) => {
                tracing::warn!(lease = %lease_id, error = %e, "lease renewal refused");
                *lost.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
                return;
            }
        }
    }
}
