//! Winning the leader key and taking office: the two guarded transactions of an etcd
//! campaign (docs/ha.md, "The term").

use std::time::Duration;

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp, TxnOpResponse};
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::{EtcdCoordination, EtcdLease};
use crate::coordination::{Bid, Won};
use crate::error::HaError;
use crate::etcd::bounded;
use crate::records::{LeaderRecord, ReplicationMarker};

impl EtcdCoordination {
    /// Grants a lease, creates the leader key if it is absent and the marker unchanged since it
    /// was read, then takes office: stamps the term into the leader record and writes the claim
    /// marker, both guarded by the term. A lost race revokes the lease.
    pub(super) async fn campaign_with_lease(
        &self,
        bid: &Bid<'_>,
        marker_rev: i64,
    ) -> Result<Option<Won<EtcdLease>>, HaError> {
        let mut lease_client = self.client.lease_client();
        let granted_at = Instant::now();
        let lease = bounded(
            "lease grant",
            self.timeout,
            lease_client.grant(bid.ttl.as_secs() as i64, None),
        )
        .await?;
        let lease_id = lease.id();
        // etcd may grant a longer TTL than asked, never a shorter one honestly; use the
        // shorter of the two so the local deadline can only be early.
        let ttl = Duration::from_secs(lease.ttl().max(0) as u64).min(bid.ttl);
        match self.take_office(bid, lease_id, marker_rev).await {
            Ok(Some(term)) => {
                info!(term, lease_id, "won the election");
                Ok(Some(Won {
                    term,
                    lease: EtcdLease {
                        id: lease_id,
                        ttl: bid.ttl,
                        keepalive: None,
                    },
                    sent_at: granted_at,
                    ttl,
                    serve_after: Duration::ZERO,
                }))
            }
            Ok(None) => {
                self.revoke(lease_id).await;
                Ok(None)
            }
            Err(e) => {
                self.revoke(lease_id).await;
                Err(e)
            }
        }
    }

    async fn take_office(
        &self,
        bid: &Bid<'_>,
        lease_id: i64,
        marker_rev: i64,
    ) -> Result<Option<u64>, HaError> {
        let timeout = self.timeout;
        let leader_key = self.keys.leader.as_str();
        let mut kv = self.client.kv_client();
        let record = LeaderRecord::new(bid.node, bid.advertise, None);
        let win = Txn::new()
            .when([
                Compare::create_revision(leader_key, CompareOp::Equal, 0),
                Compare::mod_revision(self.keys.replication.as_str(), CompareOp::Equal, marker_rev),
            ])
            .and_then([
                TxnOp::put(
                    leader_key,
                    record.encode(),
                    Some(PutOptions::new().with_lease(lease_id)),
                ),
                TxnOp::get(leader_key, None),
            ]);
        let resp = bounded("campaign", timeout, kv.txn(win)).await?;
        if !resp.succeeded() {
            debug!("lost the race for the leader key, or the marker changed");
            return Ok(None);
        }
        let term = resp
            .op_responses()
            .into_iter()
            .find_map(|r| match r {
                TxnOpResponse::Get(g) => g.kvs().first().map(|kv| kv.create_revision()),
                _ => None,
            })
            .filter(|rev| *rev > 0)
            .ok_or_else(|| HaError::Malformed {
                record: "campaign response",
                key: self.keys.leader.clone(),
                reason: "the winning transaction did not return the leader key".into(),
            })? as u64;

        let claim = ReplicationMarker::claim(bid.node, term);
        let stamped = LeaderRecord::new(bid.node, bid.advertise, Some(term));
        let office = Txn::new()
            .when([
                Compare::create_revision(leader_key, CompareOp::Equal, term as i64),
                Compare::lease(leader_key, CompareOp::Equal, lease_id),
            ])
            .and_then([
                TxnOp::put(
                    leader_key,
                    stamped.encode(),
                    Some(PutOptions::new().with_lease(lease_id)),
                ),
                TxnOp::put(self.keys.replication.as_str(), claim.encode(), None),
            ]);
        let resp = bounded("take office", timeout, kv.txn(office)).await;
        match resp {
            Ok(r) if r.succeeded() => Ok(Some(term)),
            Ok(_) => {
                warn!(term, "the leader key changed before taking office");
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
}
