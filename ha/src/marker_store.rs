//! Reading and writing the replication (in-sync) marker, `/crescent/<cluster>/replication`.

use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, Txn, TxnOp};
use tracing::{debug, instrument};

use crate::config::ClusterKeys;
use crate::error::HaError;
use crate::etcd::bounded;
use crate::records::ReplicationMarker;

/// A marker as stored, with the etcd revision of its last write (campaigns compare it so that
/// a marker written between reading it and campaigning voids the campaign).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredMarker {
    pub marker: ReplicationMarker,
    pub mod_revision: i64,
}

/// Access to one cluster's marker. Reading is open to anyone; writing takes the writer's term
/// and succeeds only while the leader key was created at that revision, so a deposed leader
/// can never overwrite what its successor wrote.
#[derive(Clone)]
pub struct ReplicationMarkerStore {
    client: Client,
    keys: ClusterKeys,
    timeout: Duration,
}

impl std::fmt::Debug for ReplicationMarkerStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplicationMarkerStore")
            .field("keys", &self.keys)
            .finish_non_exhaustive()
    }
}

impl ReplicationMarkerStore {
    pub fn new(client: Client, keys: ClusterKeys, timeout: Duration) -> Self {
        ReplicationMarkerStore {
            client,
            keys,
            timeout,
        }
    }

    pub fn keys(&self) -> &ClusterKeys {
        &self.keys
    }

    /// The marker, or `None` if the key does not exist.
    pub async fn read(&self) -> Result<Option<StoredMarker>, HaError> {
        let mut kv = self.client.kv_client();
        let resp = bounded(
            "get replication marker",
            self.timeout,
            kv.get(self.keys.replication.as_str(), None),
        )
        .await?;
        resp.kvs()
            .first()
            .map(|kv| {
                Ok(StoredMarker {
                    marker: ReplicationMarker::decode(&self.keys.replication, kv.value())?,
                    mod_revision: kv.mod_revision(),
                })
            })
            .transpose()
    }

    /// Writes `marker` as the leader of `term` (which must be `marker.term`). Fails with
    /// [`HaError::Fenced`] if the leader key does not exist or was created at another
    /// revision; nothing is written then.
    #[instrument(level = "debug", skip(self, marker), fields(key = %self.keys.replication))]
    pub async fn write_as_leader(
        &self,
        term: u64,
        marker: &ReplicationMarker,
    ) -> Result<(), HaError> {
        if marker.term != term {
            return Err(HaError::InvalidArgument(format!(
                "marker carries term {} but is written under term {term}",
                marker.term
            )));
        }
        let term_rev = i64::try_from(term).map_err(|_| {
            HaError::InvalidArgument(format!("term {term} is not an etcd revision"))
        })?;
        if term_rev <= 0 {
            return Err(HaError::InvalidArgument(format!(
                "term {term} is not an etcd revision"
            )));
        }
        let txn = Txn::new()
            .when([Compare::create_revision(
                self.keys.leader.as_str(),
                CompareOp::Equal,
                term_rev,
            )])
            .and_then([TxnOp::put(
                self.keys.replication.as_str(),
                marker.encode(),
                None,
            )]);
        let mut kv = self.client.kv_client();
        let resp = bounded("write replication marker", self.timeout, kv.txn(txn)).await?;
        if !resp.succeeded() {
            debug!(
                term,
                "marker write fenced: the leader key is not at this term"
            );
            return Err(HaError::Fenced { term });
        }
        Ok(())
    }
}
