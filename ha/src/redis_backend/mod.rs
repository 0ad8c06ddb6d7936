//! The Redis backend: one Redis server holds the leader record (with a PX TTL), a term counter
//! and the replication marker; every write is a Lua script, so each is atomic. Changes are
//! found by polling (docs/ha.md, "Redis": what a single Redis can and cannot promise).

mod scripts;

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::AsyncCommands;
use tokio::time::{sleep, Instant};
use tracing::{debug, info, instrument};

use crate::config::ClusterKeys;
use crate::coordination::{Bid, ClusterView, Coordination, LeaderSlot, Renewal, Won};
use crate::error::HaError;
use crate::records::{
    LeaderRecord, ReplicationMarker, LEADER_RECORD_VERSION, REPLICATION_MARKER_VERSION,
};
use crate::role::LeaderInfo;
use scripts::Scripts;

/// How often a non-leader reads the records while it waits for a change. Redis keyspace
/// notifications are off by default and lost on reconnects; a read of two keys every 100 ms
/// costs Redis nothing and bounds how late a candidate sees a free slot (far below a TTL).
pub const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// The coordination records of one cluster in one Redis server.
#[derive(Clone)]
pub struct RedisCoordination {
    conn: ConnectionManager,
    keys: ClusterKeys,
    timeout: Duration,
    scripts: std::sync::Arc<Scripts>,
}

impl std::fmt::Debug for RedisCoordination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisCoordination")
            .field("keys", &self.keys)
            .finish_non_exhaustive()
    }
}

/// What a Redis leader holds its slot with.
#[derive(Debug)]
pub struct RedisLease {
    /// The leader record exactly as the campaign script wrote it: renewals and the release
    /// compare it whole (it carries the term, so no other win can match it).
    record: Vec<u8>,
    /// The TTL the slot was won with; every renewal sets it again.
    ttl: Duration,
    /// The serving record to replace `record` with on taking office, after a win that must
    /// wait ([`Won::serve_after`]).
    stamped: Option<Vec<u8>>,
}

/// The raw values of the leader record and the marker, as last read.
pub type RawRecords = (Option<Vec<u8>>, Option<Vec<u8>>);

/// Runs the Redis request `fut` (named `op` in errors), bounded by `timeout`.
pub(crate) async fn bounded<T>(
    timeout: Duration,
    op: &'static str,
    fut: impl std::future::Future<Output = redis::RedisResult<T>>,
) -> Result<T, HaError> {
    match tokio::time::timeout(timeout, fut).await {
        Ok(result) => result.map_err(HaError::redis(op)),
        Err(_) => Err(HaError::Timeout { op, after: timeout }),
    }
}

/// Connects lazily to `url` (`redis://HOST:PORT`): an unreachable Redis shows up as errors of
/// later requests, and a dropped connection is re-opened by the next request.
pub fn connect_redis(url: &str, timeout: Duration) -> Result<ConnectionManager, HaError> {
    crate::config::validate_redis_url(url)?;
    let client = redis::Client::open(url).map_err(HaError::redis("connect"))?;
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(timeout.min(Duration::from_secs(1))))
        .set_response_timeout(Some(timeout))
        .set_number_of_retries(2)
        .set_min_delay(Duration::from_millis(50))
        .set_max_delay(Duration::from_millis(500));
    ConnectionManager::new_lazy_with_config(client, config).map_err(HaError::redis("connect"))
}

impl RedisCoordination {
    /// Coordination over `conn` for the cluster of `keys`; every request is bounded by
    /// `timeout`.
    pub fn new(conn: ConnectionManager, keys: ClusterKeys, timeout: Duration) -> Self {
        RedisCoordination {
            conn,
            keys,
            timeout,
            scripts: std::sync::Arc::new(Scripts::new()),
        }
    }

    /// Runs `fut` bounded by the request timeout.
    async fn bounded<T>(
        &self,
        op: &'static str,
        fut: impl std::future::Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, HaError> {
        bounded(self.timeout, op, fut).await
    }

    /// The leader record and the marker in one round trip.
    pub async fn read_raw(&self) -> Result<RawRecords, HaError> {
        let mut conn = self.conn.clone();
        let keys = [self.keys.leader.as_str(), self.keys.replication.as_str()];
        let values: Vec<Option<Vec<u8>>> = self
            .bounded("read cluster state", conn.mget(&keys[..]))
            .await?;
        let mut values = values.into_iter();
        Ok((values.next().flatten(), values.next().flatten()))
    }

    /// Decodes the leader record: the term is the one the campaign script stamped into it.
    pub fn leader_slot(&self, raw: Option<&[u8]>) -> Result<LeaderSlot, HaError> {
        let Some(bytes) = raw else {
            return Ok(LeaderSlot::Free);
        };
        let record = LeaderRecord::decode(&self.keys.leader, bytes)?;
        Ok(match record.term {
            Some(term) => LeaderSlot::Serving(LeaderInfo {
                node: record.node,
                address: record.address,
                term,
            }),
            None => LeaderSlot::TakingOffice,
        })
    }

    fn ttl_ms(ttl: Duration) -> u64 {
        ttl.as_millis().max(1) as u64
    }
}

impl Coordination for RedisCoordination {
    const NAME: &'static str = "redis";
    type Lease = RedisLease;
    /// The marker's value as read.
    type MarkerVersion = Vec<u8>;
    type Cursor = RawRecords;

    async fn read_state(&self) -> Result<ClusterView<Vec<u8>, RawRecords>, HaError> {
        let raw = self.read_raw().await?;
        let leader = self.leader_slot(raw.0.as_deref());
        let marker = raw.1.as_ref().map(|bytes| {
            (
                bytes.clone(),
                ReplicationMarker::decode(&self.keys.replication, bytes),
            )
        });
        Ok(ClusterView {
            leader,
            marker,
            cursor: raw,
        })
    }

    async fn wait_for_change(&self, cursor: &RawRecords, at_most: Duration) {
        let until = Instant::now() + at_most;
        while Instant::now() < until {
            sleep(POLL_INTERVAL.min(until.saturating_duration_since(Instant::now()))).await;
            match self.read_raw().await {
                Ok(now) if now != *cursor => return,
                Ok(_) => {}
                Err(e) => debug!(error = %e, "polling the cluster records failed"),
            }
        }
    }

    #[instrument(name = "redis.campaign", level = "info", skip_all,
                 fields(node = bid.node, term_floor = bid.term_floor))]
    async fn campaign(
        &self,
        bid: &Bid<'_>,
        marker: Option<&Vec<u8>>,
    ) -> Result<Option<Won<RedisLease>>, HaError> {
        let mut conn = self.conn.clone();
        let mut call = self.scripts.campaign.prepare_invoke();
        call.key(&self.keys.leader)
            .key(&self.keys.replication)
            .key(&self.keys.term_counter)
            .arg(marker.map(Vec::as_slice).unwrap_or(b""))
            .arg(bid.term_floor)
            .arg(Self::ttl_ms(bid.ttl))
            .arg(bid.node)
            .arg(bid.advertise)
            .arg(LEADER_RECORD_VERSION)
            .arg(REPLICATION_MARKER_VERSION);
        let sent_at = Instant::now();
        let (term, record, counter_missing): (u64, Vec<u8>, i64) = self
            .bounded("campaign", call.invoke_async(&mut conn))
            .await?;
        if term == 0 {
            debug!(reason = %String::from_utf8_lossy(&record), "campaign lost");
            return Ok(None);
        }
        // Without the counter this Redis may have lost its data while a leader of its earlier
        // incarnation still holds a fence: that fence ends within one TTL of its last renewal,
        // which that Redis acknowledged before this campaign was sent (docs/ha.md, "Redis").
        let (serve_after, stamped) = if counter_missing == 1 {
            info!(
                term,
                "won on a Redis without a term counter; serving after one TTL"
            );
            let stamped = LeaderRecord::new(bid.node, bid.advertise, Some(term)).encode();
            (bid.ttl, Some(stamped))
        } else {
            info!(term, "won the election");
            (Duration::ZERO, None)
        };
        Ok(Some(Won {
            term,
            lease: RedisLease {
                record,
                ttl: bid.ttl,
                stamped,
            },
            sent_at,
            ttl: bid.ttl,
            serve_after,
        }))
    }

    #[instrument(name = "redis.renew", level = "debug", skip_all, fields(term = term))]
    async fn renew(&self, term: u64, lease: &mut RedisLease) -> Result<Renewal, HaError> {
        let mut conn = self.conn.clone();
        let ttl = lease.ttl;
        let mut call = self.scripts.renew.prepare_invoke();
        call.key(&self.keys.leader)
            .arg(lease.record.as_slice())
            .arg(Self::ttl_ms(ttl));
        let sent_at = Instant::now();
        let answer: i64 = self.bounded("renew", call.invoke_async(&mut conn)).await?;
        match answer {
            1 => Ok(Renewal::Renewed { sent_at, ttl }),
            0 => Ok(Renewal::LeaseGone),
            -1 => Ok(Renewal::KeyLost),
            other => Err(HaError::UnexpectedAnswer {
                op: "renew",
                answer: other.to_string(),
            }),
        }
    }

    #[instrument(name = "redis.take_office", level = "info", skip_all, fields(term = term))]
    async fn take_office(&self, term: u64, lease: &mut RedisLease) -> Result<bool, HaError> {
        let Some(stamped) = lease.stamped.clone() else {
            return Ok(true);
        };
        let mut conn = self.conn.clone();
        let mut call = self.scripts.take_office.prepare_invoke();
        call.key(&self.keys.leader)
            .arg(lease.record.as_slice())
            .arg(stamped.as_slice());
        let done: i64 = self
            .bounded("take office", call.invoke_async(&mut conn))
            .await?;
        if done == 1 {
            lease.record = stamped;
            lease.stamped = None;
        }
        Ok(done == 1)
    }

    #[instrument(name = "redis.release", level = "info", skip_all, fields(term = term))]
    async fn release(&self, term: u64, lease: RedisLease) {
        let mut conn = self.conn.clone();
        let mut call = self.scripts.release.prepare_invoke();
        call.key(&self.keys.leader).arg(lease.record.as_slice());
        match self
            .bounded::<i64>("release", call.invoke_async(&mut conn))
            .await
        {
            Ok(1) => debug!(term, "leader record released"),
            Ok(_) => debug!(term, "leader record already gone or replaced"),
            Err(e) => debug!(term, error = %e, "release failed; the record will expire"),
        }
    }

    #[instrument(name = "redis.read_marker", level = "debug", skip_all)]
    async fn read_marker(&self) -> Result<Option<ReplicationMarker>, HaError> {
        let mut conn = self.conn.clone();
        let raw: Option<Vec<u8>> = self
            .bounded(
                "get replication marker",
                conn.get(self.keys.replication.as_str()),
            )
            .await?;
        raw.map(|b| ReplicationMarker::decode(&self.keys.replication, &b))
            .transpose()
    }

    #[instrument(name = "redis.write_marker", level = "info", skip_all, fields(term = term))]
    async fn write_marker(&self, term: u64, marker: &ReplicationMarker) -> Result<(), HaError> {
        if marker.term != term || term == 0 {
            return Err(HaError::InvalidArgument(format!(
                "marker carries term {} but is written under term {term}",
                marker.term
            )));
        }
        let mut conn = self.conn.clone();
        let mut call = self.scripts.write_marker.prepare_invoke();
        call.key(&self.keys.leader)
            .key(&self.keys.replication)
            .key(&self.keys.term_counter)
            .arg(term)
            .arg(marker.encode());
        let written: i64 = self
            .bounded("write replication marker", call.invoke_async(&mut conn))
            .await?;
        if written == 1 {
            Ok(())
        } else {
            debug!(
                term,
                "marker write fenced: the leader record is not at this term"
            );
            Err(HaError::Fenced { term })
        }
    }
}
