//! The etcd backend: the leader key bound to an etcd lease, the term is the key's
//! create_revision, watches are etcd watches (docs/ha.md, "The term").

mod campaign;

use std::time::Duration;

use etcd_client::{
    Client, LeaseKeepAliveStream, LeaseKeeper, Txn, TxnOp, TxnOpResponse, WatchOptions,
};
use tokio::time::{sleep, Instant};
use tracing::debug;

use crate::config::ClusterKeys;
use crate::coordination::{Bid, ClusterView, Coordination, LeaderSlot, Renewal, Won};
use crate::error::HaError;
use crate::etcd::bounded;
use crate::marker_store::ReplicationMarkerStore;
use crate::records::{LeaderRecord, ReplicationMarker};
use crate::role::LeaderInfo;

/// The coordination records of one cluster in etcd.
#[derive(Clone)]
pub struct EtcdCoordination {
    client: Client,
    keys: ClusterKeys,
    timeout: Duration,
    markers: ReplicationMarkerStore,
}

impl std::fmt::Debug for EtcdCoordination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdCoordination")
            .field("keys", &self.keys)
            .finish_non_exhaustive()
    }
}

/// A leader's etcd lease and, once opened, its keep-alive stream.
pub struct EtcdLease {
    id: i64,
    /// The TTL asked for at the grant.
    ttl: Duration,
    keepalive: Option<(LeaseKeeper, LeaseKeepAliveStream)>,
}

impl EtcdCoordination {
    /// Coordination over `client` for the cluster of `keys`; every request outside the
    /// renewals is bounded by `timeout`.
    pub fn new(client: Client, keys: ClusterKeys, timeout: Duration) -> Self {
        let markers = ReplicationMarkerStore::new(client.clone(), keys.clone(), timeout);
        EtcdCoordination {
            client,
            keys,
            timeout,
            markers,
        }
    }

    /// One keep-alive round trip; `Ok(None)`: etcd no longer knows the lease.
    async fn keep_alive(&self, lease: &mut EtcdLease) -> Result<Option<i64>, HaError> {
        match &mut lease.keepalive {
            None => {
                // Opening the stream sends the first keep-alive and waits for its answer.
                let mut lease_client = self.client.lease_client();
                match lease_client.keep_alive(lease.id).await {
                    Ok(pair) => {
                        lease.keepalive = Some(pair);
                        Ok(Some(lease.ttl.as_secs() as i64))
                    }
                    Err(etcd_client::Error::LeaseKeepAliveError(msg))
                        if msg.contains("not found") =>
                    {
                        Ok(None)
                    }
                    Err(e) => Err(HaError::Etcd {
                        op: "lease keep-alive",
                        source: e,
                    }),
                }
            }
            Some((keeper, stream)) => {
                keeper
                    .keep_alive()
                    .await
                    .map_err(HaError::etcd("lease keep-alive"))?;
                match stream
                    .message()
                    .await
                    .map_err(HaError::etcd("lease keep-alive"))?
                {
                    Some(resp) if resp.ttl() > 0 => Ok(Some(resp.ttl())),
                    Some(_) => Ok(None),
                    None => Err(HaError::Etcd {
                        op: "lease keep-alive",
                        source: etcd_client::Error::LeaseKeepAliveError(
                            "keep-alive stream closed".into(),
                        ),
                    }),
                }
            }
        }
    }

    /// Best-effort lease revoke (deletes the leader key at once). Failure is harmless: the
    /// lease then expires on its own.
    async fn revoke(&self, lease_id: i64) {
        let mut lease_client = self.client.lease_client();
        if let Err(e) = bounded("lease revoke", self.timeout, lease_client.revoke(lease_id)).await {
            debug!(error = %e, lease_id, "lease revoke failed; it will expire");
        }
    }
}

impl Coordination for EtcdCoordination {
    const NAME: &'static str = "etcd";
    type Lease = EtcdLease;
    /// The marker's mod_revision.
    type MarkerVersion = i64;
    /// The etcd revision the view was read at.
    type Cursor = i64;

    async fn read_state(&self) -> Result<ClusterView<i64, i64>, HaError> {
        let txn = Txn::new().and_then([
            TxnOp::get(self.keys.leader.as_str(), None),
            TxnOp::get(self.keys.replication.as_str(), None),
        ]);
        let mut kv = self.client.kv_client();
        let resp = bounded("read cluster state", self.timeout, kv.txn(txn)).await?;
        let revision = resp.header().map(|h| h.revision()).unwrap_or(0);
        let mut gets = resp.op_responses().into_iter().map(|r| match r {
            TxnOpResponse::Get(g) => g.kvs().first().cloned(),
            _ => None,
        });
        let leader = match gets.next().flatten() {
            None => Ok(LeaderSlot::Free),
            // A record whose term is not (yet) the key's create_revision belongs to a winner
            // still taking office: not serving, but the key is taken.
            Some(kv) => match LeaderRecord::decode(&self.keys.leader, kv.value()) {
                Ok(LeaderRecord {
                    node,
                    address,
                    term: Some(term),
                    ..
                }) if term == kv.create_revision() as u64 => Ok(LeaderSlot::Serving(LeaderInfo {
                    node,
                    address,
                    term,
                })),
                Ok(_) => Ok(LeaderSlot::TakingOffice),
                Err(e) => Err(e),
            },
        };
        let marker = gets.next().flatten().map(|kv| {
            (
                kv.mod_revision(),
                ReplicationMarker::decode(&self.keys.replication, kv.value()),
            )
        });
        Ok(ClusterView {
            leader,
            marker,
            cursor: revision,
        })
    }

    async fn wait_for_change(&self, revision: &i64, at_most: Duration) {
        let mut watch_client = self.client.watch_client();
        let prefix = self.keys.prefix.clone();
        let revision = *revision;
        let watch = async move {
            let options = WatchOptions::new()
                .with_prefix()
                .with_start_revision(revision + 1);
            let mut stream = watch_client.watch(prefix, Some(options)).await?;
            while let Some(resp) = stream.message().await? {
                if resp.canceled() || !resp.events().is_empty() {
                    break;
                }
            }
            Ok::<(), etcd_client::Error>(())
        };
        tokio::select! {
            _ = sleep(at_most) => {}
            result = watch => {
                if let Err(e) = result {
                    debug!(error = %e, "cluster watch failed");
                    // A failing watch turns into a short pause, not a busy loop.
                    sleep(at_most.min(Duration::from_millis(250))).await;
                }
            }
        }
    }

    async fn campaign(
        &self,
        bid: &Bid<'_>,
        marker_rev: Option<&i64>,
    ) -> Result<Option<Won<EtcdLease>>, HaError> {
        // mod_revision 0 compares equal to an absent key.
        self.campaign_with_lease(bid, marker_rev.copied().unwrap_or(0))
            .await
    }

    async fn renew(&self, term: u64, lease: &mut EtcdLease) -> Result<Renewal, HaError> {
        let sent_at = Instant::now();
        // The key check runs beside the keep-alive rather than after it: both are issued after
        // `sent_at`, which is all the deadline needs, and the renewal costs one round trip.
        let mut kv = self.client.kv_client();
        let key_check = kv.get(self.keys.leader.as_str(), None);
        let lease_id = lease.id;
        let (ttl_secs, key) = tokio::join!(self.keep_alive(lease), key_check);
        let ttl_secs = match ttl_secs? {
            Some(ttl) => ttl,
            None => return Ok(Renewal::LeaseGone),
        };
        let resp = key.map_err(HaError::etcd("get leader key"))?;
        match resp.kvs().first() {
            Some(kv) if kv.create_revision() as u64 == term && kv.lease() == lease_id => {
                Ok(Renewal::Renewed {
                    sent_at,
                    ttl: Duration::from_secs(ttl_secs.max(0) as u64),
                })
            }
            _ => Ok(Renewal::KeyLost),
        }
    }

    fn renewal_failed(&self, lease: &mut EtcdLease) {
        // A stream that failed or hung is not trusted again: the next attempt opens a new one.
        lease.keepalive = None;
    }

    async fn release(&self, _term: u64, lease: EtcdLease) {
        drop(lease.keepalive);
        self.revoke(lease.id).await;
    }

    async fn read_marker(&self) -> Result<Option<ReplicationMarker>, HaError> {
        Ok(self.markers.read().await?.map(|m| m.marker))
    }

    async fn write_marker(&self, term: u64, marker: &ReplicationMarker) -> Result<(), HaError> {
        self.markers.write_as_leader(term, marker).await
    }
}
