//! Per-endpoint connection pools and segment-handle caches of the TCP client.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::connection::{Connection, Opened};
use crate::error::{Result, TransportError};

/// What OPEN told us about a segment id, valid within one listener epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SegmentInfo {
    Open { handle: u32, size: u64 },
    NotFound,
    Invalid,
}

#[derive(Default)]
struct SegmentCache {
    epoch: u64,
    segments: HashMap<Arc<str>, (u32, u64)>,
}

/// A connection checked out of a pool; return it with [`EndpointPool::give_back`] if it is
/// still in a clean state, or drop it.
pub(crate) struct PooledConnection {
    pub(crate) conn: Connection,
    pub(crate) reused: bool,
    _permit: OwnedSemaphorePermit,
}

/// Connections to one endpoint: at most `max` at once; idle ones are kept for reuse.
pub(crate) struct EndpointPool {
    endpoint: Arc<str>,
    idle: Mutex<Vec<Connection>>,
    permits: Arc<Semaphore>,
    cache: Mutex<SegmentCache>,
}

impl EndpointPool {
    pub(crate) fn new(endpoint: Arc<str>, max: usize) -> Self {
        Self {
            endpoint,
            idle: Mutex::default(),
            permits: Arc::new(Semaphore::new(max.max(1))),
            cache: Mutex::default(),
        }
    }

    pub(crate) fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// A connection, reusing an idle one when possible; waits (until `deadline`) if `max`
    /// connections are busy.
    pub(crate) async fn checkout(
        &self,
        deadline: Instant,
        connect_timeout: Duration,
        fresh: bool,
    ) -> Result<PooledConnection> {
        let permit = tokio::time::timeout_at(deadline, self.permits.clone().acquire_owned())
            .await
            .map_err(|_| TransportError::Timeout {
                what: format!("waiting for a connection to {}", self.endpoint),
                after: connect_timeout,
            })?
            .expect("the pool never closes its semaphore");
        if !fresh {
            if let Some(conn) = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop() {
                return Ok(PooledConnection {
                    conn,
                    reused: true,
                    _permit: permit,
                });
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let conn = Connection::connect(&self.endpoint, connect_timeout.min(left)).await?;
        Ok(PooledConnection {
            conn,
            reused: false,
            _permit: permit,
        })
    }

    pub(crate) fn give_back(&self, pooled: PooledConnection) {
        self.idle
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(pooled.conn);
    }

    /// Resolves segment ids to handles for `conn`'s epoch, OPENing those not cached.
    pub(crate) async fn resolve(
        &self,
        conn: &mut Connection,
        ids: &[Arc<str>],
    ) -> Result<Vec<SegmentInfo>> {
        let mut infos = Vec::with_capacity(ids.len());
        let mut missing: Vec<&str> = Vec::new();
        {
            let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            if cache.epoch != conn.epoch {
                // The listener restarted: every handle we knew is void.
                cache.epoch = conn.epoch;
                cache.segments.clear();
            }
            for id in ids {
                match cache.segments.get(id) {
                    Some(&(handle, size)) => infos.push(Some(SegmentInfo::Open { handle, size })),
                    None => {
                        infos.push(None);
                        missing.push(id);
                    }
                }
            }
        }
        if !missing.is_empty() {
            let answers = conn.open(&self.endpoint, &missing).await?;
            let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            let mut answers = answers.into_iter();
            for (slot, id) in infos.iter_mut().zip(ids) {
                if slot.is_some() {
                    continue;
                }
                *slot = Some(match answers.next().expect("one answer per OPEN") {
                    Opened::Segment { handle, size } => {
                        if cache.epoch == conn.epoch {
                            cache.segments.insert(id.clone(), (handle, size));
                        }
                        SegmentInfo::Open { handle, size }
                    }
                    Opened::NotFound => SegmentInfo::NotFound,
                    Opened::Invalid => SegmentInfo::Invalid,
                });
            }
        }
        Ok(infos.into_iter().map(|i| i.expect("filled")).collect())
    }

    /// Forgets a cached handle (the listener said NOT_FOUND for it: withdrawn or remounted).
    pub(crate) fn forget(&self, id: &str) {
        self.cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .segments
            .remove(id);
    }
}
