//! Leader discovery for clients and standbys: get + watch the leader key in etcd, or poll the
//! leader record in Redis.

use std::time::Duration;

use etcd_client::{Client, EventType, KeyValue, WatchOptions};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::sleep;
use tracing::{debug, info_span, warn, Instrument};

use crate::config::ClusterKeys;
use crate::coordination::LeaderSlot;
use crate::error::HaError;
use crate::etcd::connect;
use crate::records::LeaderRecord;
use crate::redis_backend::{connect_redis, RedisCoordination, POLL_INTERVAL};
use crate::role::LeaderInfo;

const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(2);

/// Follows `/crescent/<cluster>/leader` and publishes the serving leader (`None` while there
/// is none, or while a winner is still taking office). Reconnects with backoff on any error,
/// re-reading the key before watching again so no change is missed.
pub struct LeaderWatch {
    rx: watch::Receiver<Option<LeaderInfo>>,
    task: JoinHandle<()>,
}

impl std::fmt::Debug for LeaderWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderWatch")
            .field("leader", &*self.rx.borrow())
            .finish_non_exhaustive()
    }
}

impl LeaderWatch {
    /// Connects to `endpoints` and starts following the leader of `cluster`.
    pub async fn connect(endpoints: &[String], cluster: &str) -> Result<Self, HaError> {
        let client = connect(endpoints).await?;
        Self::start(client, cluster)
    }

    /// Follows the leader of `cluster` over an existing client. Needs a tokio runtime.
    pub fn start(client: Client, cluster: &str) -> Result<Self, HaError> {
        let keys = ClusterKeys::new(cluster)?;
        let (tx, rx) = watch::channel(None);
        let span = info_span!("leader_watch", cluster = %cluster);
        let task = tokio::spawn(follow(client, keys, tx).instrument(span));
        Ok(LeaderWatch { rx, task })
    }

    /// Follows the leader of `cluster` in the Redis server at `url` (`redis://HOST:PORT`),
    /// reading its record every [`POLL_INTERVAL`]. Needs a tokio runtime.
    pub fn start_redis(url: &str, cluster: &str) -> Result<Self, HaError> {
        let keys = ClusterKeys::new(cluster)?;
        let timeout = Duration::from_secs(2);
        let backend = RedisCoordination::new(connect_redis(url, timeout)?, keys, timeout);
        let (tx, rx) = watch::channel(None);
        let span = info_span!("leader_watch", cluster = %cluster, backend = "redis");
        let task = tokio::spawn(poll_redis(backend, tx).instrument(span));
        Ok(LeaderWatch { rx, task })
    }

    /// The leader as last seen.
    pub fn current(&self) -> Option<LeaderInfo> {
        self.rx.borrow().clone()
    }

    /// A receiver of leader changes.
    pub fn subscribe(&self) -> watch::Receiver<Option<LeaderInfo>> {
        self.rx.clone()
    }

    /// Waits until a leader is known (at once if one is), at most `timeout`.
    pub async fn wait_for_leader(&self, timeout: Duration) -> Result<LeaderInfo, HaError> {
        let mut rx = self.rx.clone();
        let seen = match tokio::time::timeout(timeout, rx.wait_for(|l| l.is_some())).await {
            Ok(Ok(leader)) => leader.clone(),
            _ => None,
        };
        seen.ok_or(HaError::NoLeader(timeout))
    }

    /// Waits for a leader other than `previous` (by term), e.g. after a NOT_LEADER answer or
    /// a failed request to the old one, at most `timeout`.
    pub async fn wait_for_new_leader(
        &self,
        previous_term: u64,
        timeout: Duration,
    ) -> Result<LeaderInfo, HaError> {
        let mut rx = self.rx.clone();
        let newer = |l: &Option<LeaderInfo>| l.as_ref().is_some_and(|l| l.term > previous_term);
        let seen = match tokio::time::timeout(timeout, rx.wait_for(newer)).await {
            Ok(Ok(leader)) => leader.clone(),
            _ => None,
        };
        seen.ok_or(HaError::NoLeader(timeout))
    }
}

impl Drop for LeaderWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Decodes a leader key: `Ok(None)` for a winner that has not finished taking office.
pub fn leader_from_kv(key: &str, kv: &KeyValue) -> Result<Option<LeaderInfo>, HaError> {
    let record = LeaderRecord::decode(key, kv.value())?;
    let term = kv.create_revision() as u64;
    match record.term {
        None => Ok(None),
        Some(t) if t == term => Ok(Some(LeaderInfo {
            node: record.node,
            address: record.address,
            term,
        })),
        Some(t) => Err(HaError::Malformed {
            record: "leader record",
            key: key.to_string(),
            reason: format!("it claims term {t} but the key was created at revision {term}"),
        }),
    }
}

fn publish(tx: &watch::Sender<Option<LeaderInfo>>, leader: Option<LeaderInfo>) {
    tx.send_if_modified(|current| {
        if *current == leader {
            false
        } else {
            *current = leader;
            true
        }
    });
}

fn decode_or_none(key: &str, kv: &KeyValue) -> Option<LeaderInfo> {
    leader_from_kv(key, kv).unwrap_or_else(|e| {
        warn!(error = %e, "ignoring an unreadable leader record");
        None
    })
}

async fn follow(client: Client, keys: ClusterKeys, tx: watch::Sender<Option<LeaderInfo>>) {
    let mut backoff = BACKOFF_MIN;
    loop {
        match follow_once(&client, &keys, &tx, &mut backoff).await {
            Ok(()) => debug!("leader watch ended; restarting"),
            Err(e) => debug!(error = %e, ?backoff, "leader watch failed; reconnecting"),
        }
        if tx.is_closed() {
            return;
        }
        sleep(backoff).await;
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

/// Reads the key, then watches it from the next revision until the stream ends or fails.
async fn follow_once(
    client: &Client,
    keys: &ClusterKeys,
    tx: &watch::Sender<Option<LeaderInfo>>,
    backoff: &mut Duration,
) -> Result<(), etcd_client::Error> {
    let mut kv_client = client.kv_client();
    let resp = kv_client.get(keys.leader.as_str(), None).await?;
    let revision = resp.header().map(|h| h.revision()).unwrap_or(0);
    publish(
        tx,
        resp.kvs()
            .first()
            .and_then(|kv| decode_or_none(&keys.leader, kv)),
    );

    let mut watch_client = client.watch_client();
    let options = WatchOptions::new().with_start_revision(revision + 1);
    let mut stream = watch_client
        .watch(keys.leader.as_str(), Some(options))
        .await?;
    *backoff = BACKOFF_MIN;
    while let Some(resp) = stream.message().await? {
        if resp.canceled() {
            // Compacted past our revision, or cancelled by the server: read again.
            return Ok(());
        }
        for event in resp.events() {
            let leader = match (event.event_type(), event.kv()) {
                (EventType::Put, Some(kv)) => decode_or_none(&keys.leader, kv),
                _ => None,
            };
            publish(tx, leader);
        }
    }
    Ok(())
}

/// Reads the Redis leader record every [`POLL_INTERVAL`] until the receivers are gone; a failed
/// read keeps the last leader published (the next read decides).
async fn poll_redis(backend: RedisCoordination, tx: watch::Sender<Option<LeaderInfo>>) {
    while !tx.is_closed() {
        match backend.read_raw().await {
            Ok((leader, _)) => {
                let leader = match backend.leader_slot(leader.as_deref()) {
                    Ok(LeaderSlot::Serving(info)) => Some(info),
                    Ok(_) => None,
                    Err(e) => {
                        warn!(error = %e, "ignoring an unreadable leader record");
                        None
                    }
                };
                publish(&tx, leader);
            }
            Err(e) => debug!(error = %e, "reading the leader record failed"),
        }
        sleep(POLL_INTERVAL).await;
    }
}
