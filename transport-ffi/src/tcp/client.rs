//! `TcpTransport`: the default data plane. Serves this process's segments through its own
//! transfer listener and runs batches against other owners' listeners over pooled,
//! pipelined connections (or by memcpy when the endpoint is a listener of this process).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::join_all;
use tokio::time::Instant;
use tracing::{info_span, Instrument};

use super::connection::WireTransfer;
use super::pool::{EndpointPool, SegmentInfo};
use super::protocol::{Status, MAX_NOTIFY_LEN};
use super::segment_table::{local_listener, NotifyHandler, SegmentTable};
use super::server::{ServerLimits, TcpTransferServer};
use super::TcpConfig;
use crate::error::{Result, TransportError};
use crate::memory::SegmentMemory;
use crate::metrics::TransportMetrics;
use crate::transport::{
    BatchCompletion, BoxFuture, LocalHandle, LocalRegistry, TransferDescriptor, TransferOp,
    Transport, TransportKind,
};

/// The TCP transport.
pub struct TcpTransport {
    config: TcpConfig,
    metrics: TransportMetrics,
    locals: LocalRegistry,
    served: Arc<SegmentTable>,
    server: Option<TcpTransferServer>,
    advertised: Option<String>,
    pools: Mutex<HashMap<Arc<str>, Arc<EndpointPool>>>,
}

impl std::fmt::Debug for TcpTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpTransport")
            .field("endpoint", &self.advertised)
            .field("served", &self.served.ids())
            .finish_non_exhaustive()
    }
}

/// One descriptor of a batch, resolved for its endpoint group.
struct Item<'a> {
    index: usize,
    desc: &'a TransferDescriptor,
    local: &'a SegmentMemory,
}

impl TcpTransport {
    /// Starts the transport; binds the transfer listener if `config.listen` is set.
    pub async fn start(config: TcpConfig, metrics: TransportMetrics) -> Result<Self> {
        let served = Arc::new(SegmentTable::new());
        let (server, advertised) = match &config.listen {
            Some(addr) => {
                let limits = ServerLimits {
                    max_transfer_len: config.max_transfer_len,
                    io_timeout: Duration::from_millis(config.io_timeout_ms),
                    max_connections: config.max_connections.max(1),
                    idle_timeout: (config.idle_timeout_ms > 0)
                        .then(|| Duration::from_millis(config.idle_timeout_ms)),
                };
                let server =
                    TcpTransferServer::bind(addr, served.clone(), limits, metrics.clone()).await?;
                let advertised = config
                    .advertise
                    .clone()
                    .unwrap_or_else(|| server.local_addr().to_string());
                (Some(server), Some(advertised))
            }
            None => (None, None),
        };
        Ok(Self {
            config,
            metrics,
            locals: LocalRegistry::default(),
            served,
            server,
            advertised,
            pools: Mutex::default(),
        })
    }

    /// The address the listener is bound to, if any.
    pub fn listen_addr(&self) -> Option<std::net::SocketAddr> {
        self.server.as_ref().map(|s| s.local_addr())
    }

    /// Makes this listener require a data-plane grant signed by `key` (or by the key it held
    /// before, kept for a rotation) on every READ and WRITE of its segments. Returns whether
    /// the key is new. Transfers from this very process (the same-process fast path) are not
    /// checked.
    pub fn install_grant_key(&self, key: crate::grant::GrantKey) -> bool {
        self.served.install_grant_key(key)
    }

    /// The keys this listener verifies grants with (`None`: it requires none).
    pub fn grant_keys(&self) -> Option<crate::grant::GrantKeys> {
        self.served.grant_keys()
    }

    /// Whether this listener requires data-plane grants.
    pub fn requires_grants(&self) -> bool {
        self.served.grant_keys().is_some()
    }

    /// Installs (or removes) the answer of this listener to NOTIFY messages.
    pub fn set_notify_handler(&self, handler: Option<NotifyHandler>) {
        self.served.set_notify_handler(handler);
    }

    /// Sends a NOTIFY to the listener at `endpoint` and returns its answer. A listener without
    /// a handler answers NOT_FOUND (`SegmentNotFound` with segment `notify`), one whose
    /// handler refuses INVALID (`InvalidArgument`). Bounded by the connect and batch timeouts;
    /// a listener of this process is called directly.
    pub async fn notify(&self, endpoint: &str, payload: &[u8]) -> Result<Vec<u8>> {
        if payload.len() as u64 > MAX_NOTIFY_LEN {
            return Err(TransportError::InvalidArgument(format!(
                "a notification holds at most {MAX_NOTIFY_LEN} bytes, not {}",
                payload.len()
            )));
        }
        let refused = |status: Status| match status {
            Status::NotFound => TransportError::SegmentNotFound {
                endpoint: endpoint.to_owned(),
                segment: "notify".to_owned(),
            },
            _ => TransportError::InvalidArgument(format!("{endpoint} refused the notification")),
        };
        if let Some(table) = local_listener(endpoint).filter(|_| self.config.same_process_fast_path)
        {
            return table.notify(payload).map_err(refused);
        }
        let endpoint_arc: Arc<str> = Arc::from(endpoint);
        let pool = self.pool(&endpoint_arc);
        let deadline = Instant::now() + Duration::from_millis(self.config.batch_timeout_ms);
        let connect_timeout = Duration::from_millis(self.config.connect_timeout_ms);
        let mut fresh = false;
        loop {
            let mut pooled = pool.checkout(deadline, connect_timeout, fresh).await?;
            let sent = tokio::time::timeout_at(deadline, pooled.conn.notify(endpoint, payload));
            match sent.await {
                Ok(Ok(answer)) => {
                    pool.give_back(pooled);
                    return answer.map_err(refused);
                }
                // A reused idle connection may have been closed by a restarted peer.
                Ok(Err(_)) if pooled.reused && !fresh => fresh = true,
                Ok(Err(e)) => return Err(e),
                Err(_) => {
                    return Err(TransportError::Timeout {
                        what: format!("notification to {endpoint}"),
                        after: Duration::from_millis(self.config.batch_timeout_ms),
                    })
                }
            }
        }
    }

    fn pool(&self, endpoint: &Arc<str>) -> Arc<EndpointPool> {
        self.pools
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(endpoint.clone())
            .or_insert_with(|| {
                Arc::new(EndpointPool::new(
                    endpoint.clone(),
                    self.config.connections_per_endpoint,
                ))
            })
            .clone()
    }

    async fn run_batch(&self, batch: &[TransferDescriptor]) -> Result<BatchCompletion> {
        if batch.len() > self.config.max_batch {
            return Err(TransportError::BatchTooLarge {
                len: batch.len(),
                max: self.config.max_batch,
            });
        }
        let started = std::time::Instant::now();
        let batch_timeout = Duration::from_millis(self.config.batch_timeout_ms);
        let deadline = Instant::now() + batch_timeout;
        let resolved = self
            .locals
            .resolve_batch(batch, self.config.max_transfer_len, true);
        let mut statuses: Vec<Option<Result<()>>> = vec![None; batch.len()];
        let mut groups: Vec<(Arc<str>, Vec<Item<'_>>)> = Vec::new();
        for (index, (desc, local)) in batch.iter().zip(&resolved).enumerate() {
            let local = match local {
                Ok(local) => local.as_ref(),
                Err(e) => {
                    statuses[index] = Some(Err(e.clone()));
                    continue;
                }
            };
            let item = Item { index, desc, local };
            match groups.iter_mut().find(|(e, _)| *e == desc.remote.endpoint) {
                Some((_, items)) => items.push(item),
                None => groups.push((desc.remote.endpoint.clone(), vec![item])),
            }
        }
        let runs = groups.iter().map(|(endpoint, items)| async move {
            let mut group_statuses: Vec<Option<Result<()>>> = vec![None; items.len()];
            let outcome =
                match local_listener(endpoint).filter(|_| self.config.same_process_fast_path) {
                    Some(table) => {
                        tokio::time::timeout_at(
                            deadline,
                            copy_in_process(&table, endpoint, items, &mut group_statuses),
                        )
                        .await
                    }
                    None => {
                        let pool = self.pool(endpoint);
                        tokio::time::timeout_at(
                            deadline,
                            self.run_group(&pool, items, deadline, &mut group_statuses),
                        )
                        .await
                    }
                };
            let unfinished = match outcome {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(e),
                Err(_) => Some(TransportError::Timeout {
                    what: format!("batch against {endpoint}"),
                    after: batch_timeout,
                }),
            };
            items
                .iter()
                .zip(group_statuses)
                .map(|(item, status)| {
                    let status = status.unwrap_or_else(|| {
                        Err(unfinished.clone().unwrap_or_else(|| {
                            TransportError::unavailable(endpoint, "transfer left unanswered")
                        }))
                    });
                    (item.index, status)
                })
                .collect::<Vec<_>>()
        });
        for (index, status) in join_all(runs).await.into_iter().flatten() {
            statuses[index] = Some(status);
        }
        let statuses: Vec<Result<()>> = statuses
            .into_iter()
            .map(|s| s.expect("every descriptor gets a status"))
            .collect();
        let ops: Vec<TransferOp> = batch.iter().map(|d| d.op).collect();
        self.metrics.record_batch(
            TransportKind::Tcp,
            &ops,
            batch.iter().map(|d| d.length),
            &statuses,
            started.elapsed(),
        );
        Ok(BatchCompletion { statuses })
    }

    /// Runs one endpoint's share of a batch on one pooled connection. A failure on a reused
    /// idle connection before any answer arrived (the peer restarted meanwhile) is retried
    /// once on a fresh one: reads and writes of the same bytes to the same place are
    /// idempotent.
    async fn run_group(
        &self,
        pool: &EndpointPool,
        items: &[Item<'_>],
        deadline: Instant,
        statuses: &mut [Option<Result<()>>],
    ) -> Result<()> {
        let connect_timeout = Duration::from_millis(self.config.connect_timeout_ms);
        let mut fresh = false;
        loop {
            let mut pooled = pool.checkout(deadline, connect_timeout, fresh).await?;
            match self
                .exchange_group(pool, &mut pooled.conn, items, statuses)
                .await
            {
                Ok(()) => {
                    pool.give_back(pooled);
                    return Ok(());
                }
                Err(e) => {
                    let nothing_answered = statuses.iter().all(|s| s.is_none());
                    if pooled.reused && !fresh && nothing_answered {
                        fresh = true;
                        continue;
                    }
                    return Err(e);
                }
            }
        }
    }

    async fn exchange_group(
        &self,
        pool: &EndpointPool,
        conn: &mut super::connection::Connection,
        items: &[Item<'_>],
        statuses: &mut [Option<Result<()>>],
    ) -> Result<()> {
        let endpoint = pool.endpoint();
        // Distinct segment ids of the group (a batch usually names few).
        let mut ids: Vec<Arc<str>> = Vec::new();
        for item in items {
            if !ids.contains(&item.desc.remote.segment_id) {
                ids.push(item.desc.remote.segment_id.clone());
            }
        }
        let infos = pool.resolve(conn, &ids).await?;
        let mut wire = Vec::with_capacity(items.len());
        let mut slots = Vec::with_capacity(items.len());
        for (pos, item) in items.iter().enumerate() {
            let d = item.desc;
            let at = ids
                .iter()
                .position(|id| *id == d.remote.segment_id)
                .expect("collected above");
            let not_found = || TransportError::SegmentNotFound {
                endpoint: endpoint.to_owned(),
                segment: d.remote.segment_id.to_string(),
            };
            match infos[at] {
                SegmentInfo::NotFound => statuses[pos] = Some(Err(not_found())),
                SegmentInfo::Invalid => {
                    statuses[pos] = Some(Err(TransportError::InvalidArgument(format!(
                        "{endpoint} refused segment id {:?}",
                        d.remote.segment_id
                    ))))
                }
                SegmentInfo::Open { handle, size } => {
                    if d.remote_offset
                        .checked_add(d.length)
                        .is_none_or(|end| end > size)
                    {
                        statuses[pos] = Some(Err(TransportError::OutOfRange {
                            what: format!("segment {}", d.remote.segment_id),
                            offset: d.remote_offset,
                            length: d.length,
                            size,
                        }));
                        continue;
                    }
                    wire.push(WireTransfer {
                        op: d.op,
                        handle,
                        remote_offset: d.remote_offset,
                        length: d.length,
                        local: item.local,
                        local_offset: d.local_offset,
                        segment_id: &d.remote.segment_id,
                        segment_size: size,
                        grant: d.grant.as_ref(),
                    });
                    slots.push(pos);
                }
            }
        }
        if wire.is_empty() {
            return Ok(());
        }
        let mut wire_statuses: Vec<Option<Result<()>>> = vec![None; wire.len()];
        let mut outcome = Ok(());
        for run in conflict_free_runs(&wire) {
            outcome = conn
                .exchange(endpoint, &wire[run.clone()], &mut wire_statuses[run])
                .await;
            if outcome.is_err() {
                break;
            }
        }
        for (slot, status) in slots.iter().zip(wire_statuses) {
            if let Some(Err(TransportError::SegmentNotFound { segment, .. })) = &status {
                pool.forget(segment);
            }
            if status.is_some() {
                statuses[*slot] = status;
            }
        }
        outcome
    }
}

/// Splits a pipelined run where a Write (which locks its local range shared while it sends)
/// and a Read (which locks its local range exclusively while it receives) overlap locally. Pipelined on one connection, such a pair could wait on
/// each other through the socket buffers (the reader waiting for the writer's lock, the writer
/// waiting for the peer, the peer waiting for the reader); run one after the other instead.
/// Nearly every batch has no such pair and stays one run.
fn conflict_free_runs(wire: &[WireTransfer<'_>]) -> Vec<std::ops::Range<usize>> {
    if !has_local_conflict(wire) {
        return std::iter::once(0..wire.len()).collect();
    }
    let mut runs = Vec::new();
    let mut start = 0;
    for i in 0..wire.len() {
        if wire[start..i].iter().any(|t| conflicts(t, &wire[i])) {
            runs.push(start..i);
            start = i;
        }
    }
    runs.push(start..wire.len());
    runs
}

fn conflicts(a: &WireTransfer<'_>, b: &WireTransfer<'_>) -> bool {
    std::ptr::eq(a.local, b.local)
        && a.op != b.op
        && a.local_offset < b.local_offset + b.length
        && b.local_offset < a.local_offset + a.length
}

/// Sort-and-sweep check for any conflicting pair, O(n log n).
fn has_local_conflict(wire: &[WireTransfer<'_>]) -> bool {
    if !wire.iter().any(|t| t.op == TransferOp::Read) || wire.len() < 2 {
        return false;
    }
    let mut spans: Vec<(usize, u64, u64, bool)> = wire
        .iter()
        .filter(|t| t.length > 0)
        .map(|t| {
            let region = t.local as *const SegmentMemory as usize;
            (
                region,
                t.local_offset,
                t.local_offset + t.length,
                t.op == TransferOp::Read,
            )
        })
        .collect();
    spans.sort_unstable_by_key(|&(region, start, ..)| (region, start));
    // Sorted by start, an earlier span overlaps the current one iff it ends after its start.
    let (mut region, mut end_shared, mut end_exclusive) = (usize::MAX, 0u64, 0u64);
    for (r, start, end, exclusive) in spans {
        if r != region {
            (region, end_shared, end_exclusive) = (r, 0, 0);
        }
        if exclusive {
            if start < end_shared {
                return true;
            }
            end_exclusive = end_exclusive.max(end);
        } else {
            if start < end_exclusive {
                return true;
            }
            end_shared = end_shared.max(end);
        }
    }
    false
}

/// The same-process fast path: the endpoint is one of our own listeners, so copy directly.
async fn copy_in_process(
    table: &SegmentTable,
    endpoint: &str,
    items: &[Item<'_>],
    statuses: &mut [Option<Result<()>>],
) -> Result<()> {
    for (pos, item) in items.iter().enumerate() {
        statuses[pos] = Some(copy_one(table, endpoint, item).await);
    }
    Ok(())
}

async fn copy_one(table: &SegmentTable, endpoint: &str, item: &Item<'_>) -> Result<()> {
    let d = item.desc;
    let remote =
        table
            .by_id(&d.remote.segment_id)
            .ok_or_else(|| TransportError::SegmentNotFound {
                endpoint: endpoint.to_owned(),
                segment: d.remote.segment_id.to_string(),
            })?;
    if !remote.in_bounds(d.remote_offset, d.length) {
        return Err(TransportError::OutOfRange {
            what: format!("segment {}", d.remote.segment_id),
            offset: d.remote_offset,
            length: d.length,
            size: remote.len() as u64,
        });
    }
    let overlaps =
        d.local_offset < d.remote_offset + d.length && d.remote_offset < d.local_offset + d.length;
    if remote.same_region(item.local) && overlaps && d.length > 0 {
        return Err(TransportError::InvalidArgument(
            "local and remote ranges are the same memory and overlap".into(),
        ));
    }
    match d.op {
        TransferOp::Write => {
            let src = item
                .local
                .lock_read("local buffer", d.local_offset, d.length)
                .await?;
            let mut dst = remote
                .lock_write("segment", d.remote_offset, d.length)
                .await?;
            dst.as_mut_slice().copy_from_slice(src.as_slice());
        }
        TransferOp::Read => {
            let src = remote
                .lock_read("segment", d.remote_offset, d.length)
                .await?;
            let mut dst = item
                .local
                .lock_write("local buffer", d.local_offset, d.length)
                .await?;
            dst.as_mut_slice().copy_from_slice(src.as_slice());
        }
    }
    Ok(())
}

impl Transport for TcpTransport {
    fn kind(&self) -> TransportKind {
        TransportKind::Tcp
    }

    fn local_endpoint(&self) -> Option<String> {
        self.advertised.clone()
    }

    fn register(&self, memory: Arc<SegmentMemory>) -> Result<LocalHandle> {
        Ok(self.locals.insert(memory))
    }

    fn unregister(&self, handle: LocalHandle) -> Result<Arc<SegmentMemory>> {
        self.locals.remove(handle)
    }

    fn serve_segment(&self, segment_id: &str, memory: Arc<SegmentMemory>) -> Result<()> {
        if self.server.is_none() {
            return Err(TransportError::InvalidArgument(
                "this transport has no transfer listener (set `listen`) and cannot serve segments"
                    .into(),
            ));
        }
        self.served.insert(segment_id, memory)
    }

    fn withdraw_segment(&self, segment_id: &str) -> Result<Arc<SegmentMemory>> {
        let endpoint = self.advertised.as_deref().unwrap_or("local");
        self.served.remove(segment_id, endpoint)
    }

    fn submit<'a>(
        &'a self,
        batch: &'a [TransferDescriptor],
    ) -> BoxFuture<'a, Result<BatchCompletion>> {
        let span = info_span!(
            "transport.submit",
            transport = "tcp",
            descriptors = batch.len()
        );
        Box::pin(self.run_batch(batch).instrument(span))
    }
}
