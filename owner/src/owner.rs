//! The storage-owner role: this process lends a segment of its memory to the store.
//!
//! [`Owner::start`] allocates the segment, serves it through its own TCP transfer listener (or
//! a transfer engine, `OwnerConfig::transport`; the listener then still takes notices),
//! registers the owner (endpoint = the advertised transfer address), mounts the segment, and
//! heartbeats on the interval crescentd answers. While it runs, the client that started it
//! places its puts on this segment first (`local_first`), reads local replicas first, and
//! records its committed replicas here in the ownership table.
//!
//! Incarnation: by default the process start time in ms since the Unix epoch, so a restarted
//! owner with the same id (`--id`) always registers a larger one and crescentd drops what the
//! previous incarnation had mounted (its memory is gone). Pass one explicitly when ids and
//! counters are managed elsewhere; it must grow across restarts.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crescent_transport::tcp::{TcpConfig, TcpTransport};
use crescent_transport::{SegmentMemory, Transport};
use crescent_wire::segments::{MountSegmentRequest, RegisterOwnerRequest, TransportKind};
use crescent_wire::store::ReleasedReplica;
use crescent_wire::ErrorCode;

use crescent_client::rebuild::WatchConfig;
use crescent_client::{ClientError, CrescentClient, LocalSegment, OwnershipTable, RebuildMetrics};

use crate::overwrite_check::forget_overwritten;
use crate::owner_engine::SegmentServer;
use crate::owner_notice::{install_data_key, notice_handler};
use crate::replayer::{replay_table, ReplayConfig, ReplayReport};

/// Longest owner id (the segment id `<owner_id>/seg0` must stay within the server's 256).
pub const MAX_OWNER_ID_BYTES: usize = 200;

/// How to run a storage owner.
#[derive(Debug, Clone)]
pub struct OwnerConfig {
    /// `None`: `owner-<random>`. Use a stable id for a node that restarts.
    pub owner_id: Option<String>,
    /// Segment size in bytes.
    pub size: u64,
    /// Transfer listener address (`HOST:PORT`, port 0 picks one).
    pub listen: String,
    /// The address peers should dial, if not the bound one (e.g. listening on 0.0.0.0).
    pub advertise: Option<String>,
    /// `None`: process start time in ms (see the module docs).
    pub incarnation: Option<u64>,
    /// Heartbeat interval until crescentd answers with its own.
    pub initial_heartbeat: Duration,
    /// How long shutdown retries an unmount refused while replicas are read-leased.
    pub unmount_timeout: Duration,
    /// How the owner watches crescentd so that it heartbeats at once after a restart or a
    /// leader change (`crescent_client::rebuild::server_watch`).
    pub watch: WatchConfig,
    /// Commit the whole segment's memory at start (`SegmentMemory::allocate_resident`) rather
    /// than page by page on first write: no page fault on the write path, at the price of the
    /// full resident size from the start.
    pub resident: bool,
    /// Cold devices this owner serves (`--cold-device`): crescentd drives them, this
    /// process performs their IO.
    pub cold_devices: Vec<crate::cold_device::OwnerColdDeviceConfig>,
    /// Bytes of the remote-restore staging region served beside the segment when this owner
    /// has cold devices (`--cold-staging-bytes`; 0: none, remote restores of this owner's
    /// objects then carry the payload through crescentd, bounded by its body limit).
    pub cold_staging_bytes: u64,
    /// How long a remote reader may hold a staged payload before its token is fenced.
    pub cold_staging_ttl_ms: u64,
    /// How peers reach the segment: the TCP listener (default), or a transfer engine loaded
    /// from the client's engine configuration (docs/transport.md, "Transfer-engine segments").
    pub transport: TransportKind,
}

impl Default for OwnerConfig {
    fn default() -> Self {
        Self {
            owner_id: None,
            size: 256 << 20,
            listen: "127.0.0.1:0".into(),
            advertise: None,
            incarnation: None,
            initial_heartbeat: Duration::from_secs(1),
            unmount_timeout: Duration::from_secs(15),
            watch: WatchConfig::default(),
            resident: false,
            cold_devices: Vec::new(),
            cold_staging_bytes: crate::owner_staging::DEFAULT_OWNER_STAGING_BYTES,
            cold_staging_ttl_ms: crate::owner_staging::DEFAULT_OWNER_STAGING_TTL_MS,
            transport: TransportKind::Tcp,
        }
    }
}

/// What the background heartbeat has learned, and the replay it runs.
#[derive(Debug, Default)]
struct HeartbeatState {
    term: AtomicU64,
    ok: AtomicU64,
    /// The term whose metadata this owner has replayed (or found nothing to replay for).
    replayed_term: AtomicU64,
    replay: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// After a failed replay: not before this instant, and the failures so far.
    replay_retry: Mutex<Option<(tokio::time::Instant, u32)>>,
    last_replay: Mutex<Option<ReplayReport>>,
}

impl HeartbeatState {
    fn abort_replay(&self) {
        if let Some(h) = self.replay.lock().unwrap_or_else(|p| p.into_inner()).take() {
            h.abort();
        }
    }
}

/// A running storage owner. Stop it with [`Owner::shutdown`] (unmounts); dropping it only
/// stops heartbeating, and crescentd expires it after its client TTL.
#[derive(Debug)]
pub struct Owner {
    client: CrescentClient,
    owner_id: Arc<str>,
    segment_id: Arc<str>,
    endpoint: String,
    incarnation: u64,
    size: u64,
    transport: Arc<TcpTransport>,
    /// What serves the segment: `transport`, or a transfer engine.
    server: SegmentServer,
    table: Arc<OwnershipTable>,
    heartbeat: Option<tokio::task::JoinHandle<()>>,
    state: Arc<HeartbeatState>,
    unmount_timeout: Duration,
    /// The cold devices served (their IO loops stop when this is dropped).
    cold_devices: Vec<crate::cold_device::OwnerColdDevice>,
    /// The remote-restore staging region of the cold devices (served on `transport`).
    cold_staging: Option<Arc<crate::owner_staging::OwnerStaging>>,
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(1, |d| d.as_millis() as u64)
}

/// Checks an owner id (printable, non-empty, short enough to derive a segment id from).
pub fn check_owner_id(id: &str) -> Result<(), ClientError> {
    if id.is_empty() || id.len() > MAX_OWNER_ID_BYTES {
        return Err(ClientError::InvalidArgument(format!(
            "owner id must be 1..={MAX_OWNER_ID_BYTES} bytes, got {}",
            id.len()
        )));
    }
    if id.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(ClientError::InvalidArgument(format!(
            "owner id {id:?} contains whitespace or control characters"
        )));
    }
    Ok(())
}

/// The owner id (`config.owner_id`, else a fresh `owner-…`) once checked, and the segment size
/// in bytes (positive, addressable).
fn identity_and_size(owner_id: Option<String>, size: u64) -> Result<(String, usize), ClientError> {
    let owner_id = match owner_id {
        Some(id) => id,
        None => format!("owner-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]),
    };
    check_owner_id(&owner_id)?;
    if size == 0 {
        return Err(ClientError::InvalidArgument(
            "segment size must be positive".into(),
        ));
    }
    let bytes = usize::try_from(size)
        .map_err(|_| ClientError::InvalidArgument(format!("segment size {size} too large")))?;
    Ok((owner_id, bytes))
}

/// The id of an owner's segment.
pub fn segment_id_for(owner_id: &str) -> String {
    format!("{owner_id}/seg0")
}

/// The owner's transfer listener (TCP; the transfer engine, if any, serves beside it) and
/// the endpoint it advertises.
async fn start_listener(
    client: &CrescentClient,
    config: &OwnerConfig,
) -> Result<(Arc<TcpTransport>, String), ClientError> {
    let tcp = TcpConfig {
        listen: Some(config.listen.clone()),
        advertise: config.advertise.clone(),
        ..TcpConfig::default()
    };
    let transport = Arc::new(TcpTransport::start(tcp, client.metrics().transport().clone()).await?);
    let endpoint = transport
        .local_endpoint()
        .ok_or_else(|| ClientError::Protocol("transfer listener has no endpoint".into()))?;
    Ok((transport, endpoint))
}

/// Starts the heartbeat (re-registering and re-mounting after a crescentd restart) and the
/// server watch that wakes it; the one handle returned stops both.
fn spawn_heartbeat(
    client: &CrescentClient,
    (register, mount): (RegisterOwnerRequest, MountSegmentRequest),
    served: ServedSegment,
    state: &Arc<HeartbeatState>,
    config: &OwnerConfig,
) -> tokio::task::JoinHandle<()> {
    let wake = Arc::new(tokio::sync::Notify::new());
    let watch = tokio::spawn(client.watch_server(wake.clone(), config.watch.clone()));
    let heartbeat = tokio::spawn(heartbeat_loop(
        client.clone(),
        register,
        mount,
        served,
        state.clone(),
        config.initial_heartbeat,
        wake,
    ));
    // One handle for both: aborting it drops both guards, which abort both tasks; the watch
    // only serves the heartbeat and also ends if the heartbeat task panics.
    tokio::spawn(async move {
        let _stop_watch = AbortOnDrop(watch);
        let mut heartbeat = AbortOnDrop(heartbeat);
        let _ = (&mut heartbeat.0).await;
    })
}

impl Owner {
    /// Starts serving a segment and mounts it; `client` becomes its local client.
    pub async fn start(client: &CrescentClient, config: OwnerConfig) -> Result<Owner, ClientError> {
        let (owner_id, size) = identity_and_size(config.owner_id.clone(), config.size)?;
        let segment_id = segment_id_for(&owner_id);
        let incarnation = config.incarnation.unwrap_or_else(now_ms);
        let memory = Arc::new(match config.resident {
            true => SegmentMemory::allocate_resident(size)?,
            false => SegmentMemory::allocate(size)?,
        });
        let (transport, endpoint) = start_listener(client, &config).await?;
        let server = SegmentServer::for_kind(config.transport, client, &owner_id, &transport)?;
        let register = RegisterOwnerRequest {
            owner_id: owner_id.clone(),
            endpoint: endpoint.clone(),
            incarnation,
        };
        let mount = MountSegmentRequest {
            owner_id: owner_id.clone(),
            segment_id: segment_id.clone(),
            base: memory.as_ptr() as u64,
            size: config.size,
            transport: server.kind(),
        };
        // Registered first: with `[auth]` the answer carries the key the listener then
        // requires grants with, before the segment is served or anything is placed in it.
        let registered = client.register_owner(&register).await?;
        install_data_key(&transport, registered.data_key.as_deref())?;
        server.serve(&segment_id, memory.clone())?;
        client.mount_segment(&mount).await?;
        let table = Arc::new(OwnershipTable::new(
            client.metrics().owned_replicas().clone(),
        ));
        table.serve_segment(&segment_id, config.size);
        transport.set_notify_handler(Some(notice_handler(
            &owner_id,
            table.clone(),
            Arc::downgrade(&transport),
        )));
        let owner_id: Arc<str> = owner_id.into();
        let segment_id: Arc<str> = segment_id.into();
        client.attach_own_segment(LocalSegment {
            remote: server.own_remote(&endpoint, segment_id.clone()),
            table: table.clone(),
            memory: Some(memory.clone()),
        });
        let state = Arc::new(HeartbeatState::default());
        let served = ServedSegment {
            table: table.clone(),
            memory: memory.clone(),
            transport: transport.clone(),
        };
        let heartbeat = spawn_heartbeat(client, (register, mount), served, &state, &config);
        let (cold_devices, cold_staging) = crate::owner_cold::start_cold(
            client,
            &transport,
            (&owner_id, incarnation, &endpoint),
            config.cold_devices,
            (config.cold_staging_bytes, config.cold_staging_ttl_ms),
        )
        .await?;
        let via = server.kind();
        tracing::info!(%owner_id, %segment_id, %endpoint, size, incarnation, ?via, "storage owner started");
        Ok(Owner {
            client: client.clone(),
            owner_id,
            segment_id,
            endpoint,
            incarnation,
            size: config.size,
            transport,
            server,
            table,
            heartbeat: Some(heartbeat),
            state,
            unmount_timeout: config.unmount_timeout,
            cold_devices,
            cold_staging,
        })
    }

    /// The remote-restore staging region of this owner's cold devices, if any.
    pub fn cold_staging(&self) -> Option<&Arc<crate::owner_staging::OwnerStaging>> {
        self.cold_staging.as_ref()
    }

    pub fn owner_id(&self) -> &str {
        &self.owner_id
    }

    pub fn segment_id(&self) -> &str {
        &self.segment_id
    }

    /// The advertised transfer endpoint.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// How peers reach the segment (the transport it is mounted with).
    pub fn transport(&self) -> TransportKind {
        self.server.kind()
    }

    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    /// The ids of the cold devices this owner serves.
    pub fn cold_device_ids(&self) -> Vec<&str> {
        self.cold_devices.iter().map(|d| d.device_id()).collect()
    }

    /// The committed replicas in this owner's segment.
    pub fn ownership(&self) -> &Arc<OwnershipTable> {
        &self.table
    }

    /// The leader term of the last heartbeat answer (0 before the first).
    pub fn term(&self) -> u64 {
        self.state.term.load(Ordering::Relaxed)
    }

    /// The last completed replay of the ownership table (after a leader term change).
    pub fn last_replay(&self) -> Option<ReplayReport> {
        self.state
            .last_replay
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The term whose metadata this owner has replayed.
    pub fn replayed_term(&self) -> u64 {
        self.state.replayed_term.load(Ordering::Relaxed)
    }

    /// Heartbeats answered so far.
    pub fn heartbeats(&self) -> u64 {
        self.state.ok.load(Ordering::Relaxed)
    }

    /// Stops heartbeating, unmounts the segment (retrying while crescentd refuses because of
    /// read leases, up to the configured timeout), stops serving it and empties the ownership
    /// table. Returns how many owned replicas were dropped.
    pub async fn shutdown(mut self) -> Result<usize, ClientError> {
        if let Some(h) = self.heartbeat.take() {
            h.abort();
        }
        self.state.abort_replay();
        self.cold_devices.clear();
        self.client.detach_own_segment(&self.segment_id);
        let deadline = tokio::time::Instant::now() + self.unmount_timeout;
        loop {
            match self.client.unmount_segment(&self.segment_id).await {
                Ok(_) => break,
                Err(e) if e.code() == Some(ErrorCode::NotFound) => break,
                Err(e)
                    if (e.retryable()
                        || matches!(e.code(), Some(ErrorCode::Busy | ErrorCode::Conflict)))
                        && tokio::time::Instant::now() < deadline =>
                {
                    tracing::info!(error = %e, "unmount refused; retrying");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => return Err(e),
            }
        }
        self.transport.set_notify_handler(None);
        if let Some(staging) = self.cold_staging.take() {
            let _ = self.transport.withdraw_segment(staging.segment_id());
        }
        self.server.withdraw(&self.segment_id)?;
        let dropped = self.table.forget_segment(&self.segment_id);
        tracing::info!(owner_id = %self.owner_id, dropped, "storage owner stopped");
        Ok(dropped)
    }
}

impl Drop for Owner {
    fn drop(&mut self) {
        if let Some(h) = self.heartbeat.take() {
            h.abort();
        }
        self.state.abort_replay();
        self.client.detach_own_segment(&self.segment_id);
    }
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Registers the owner and mounts its segment again (crescentd forgot them, e.g. after
/// losing its state); a re-mount means crescentd dropped the segment's replicas, so the table
/// forgets them too.
async fn register_again(
    client: &CrescentClient,
    (register, mount): (&RegisterOwnerRequest, &MountSegmentRequest),
    transport: &TcpTransport,
    table: &OwnershipTable,
) {
    let again = async {
        let registered = client.register_owner(register).await?;
        install_data_key(transport, registered.data_key.as_deref())?;
        client.mount_segment(mount).await
    }
    .await;
    match again {
        Ok(reply) => {
            client.metrics().owner_reregistered();
            if !reply.events.is_empty() {
                let dropped = table.forget_segment(&mount.segment_id);
                table.serve_segment(&mount.segment_id, mount.size);
                tracing::warn!(
                    dropped,
                    "segment was re-mounted; its replicas were dropped by crescentd"
                );
            }
        }
        Err(e) => tracing::warn!(error = %e, "re-registration failed"),
    }
}

/// Heartbeats forever. When crescentd no longer knows the owner (it expired it, or lost its
/// memory), registers and mounts again; a mount that had to be redone means the server
/// dropped our replicas, so the ownership table is emptied to match. `wake` (the server watch)
/// cuts the wait between heartbeats short: crescentd is back after a restart, or the leader
/// changed, so the next heartbeat goes out at once.
async fn heartbeat_loop(
    client: CrescentClient,
    register: RegisterOwnerRequest,
    mount: MountSegmentRequest,
    served: ServedSegment,
    state: Arc<HeartbeatState>,
    initial: Duration,
    wake: Arc<tokio::sync::Notify>,
) {
    let ServedSegment {
        table,
        memory,
        transport,
    } = served;
    let metrics = client.metrics().clone();
    let mut interval = initial;
    let mut failing = false;
    // The highest release sequence applied to the table; acknowledged on the next heartbeat.
    let mut releases_applied: Option<u64> = None;
    loop {
        // A heartbeat in flight is never abandoned for a wake-up: the failover layer already
        // re-sends it when the leader changes, and cancelling requests mid-flight under load
        // kept an owner of the HA load test from ever completing its replay.
        match client
            .heartbeat(&register.owner_id, register.incarnation, releases_applied)
            .await
        {
            Ok(reply) => {
                interval = Duration::from_millis(reply.interval_ms.clamp(50, 60_000));
                if let Err(e) = install_data_key(&transport, reply.data_key.as_deref()) {
                    tracing::warn!(error = %e, "heartbeat carried an unusable data-plane key");
                }
                if let Some(seq) = apply_releases(&table, &reply.released, metrics.rebuild()) {
                    releases_applied = Some(releases_applied.map_or(seq, |a| a.max(seq)));
                }
                let before = state.term.swap(reply.term, Ordering::Relaxed);
                if before == 0 {
                    // Just registered: crescentd knows our (empty or current) state.
                    state.replayed_term.store(reply.term, Ordering::Relaxed);
                } else if before != reply.term {
                    tracing::info!(
                        from = before,
                        to = reply.term,
                        replicas = table.len(),
                        "crescentd leader term changed; replaying the ownership table"
                    );
                    state.abort_replay();
                }
                let ours = OwnSegment {
                    segment_id: &mount.segment_id,
                    memory: &memory,
                };
                maybe_replay(
                    &client,
                    &register.owner_id,
                    &table,
                    ours,
                    &state,
                    reply.term,
                );
                state.ok.fetch_add(1, Ordering::Relaxed);
                metrics.owner_heartbeat("ok");
                if failing {
                    tracing::info!("heartbeats answered again");
                    failing = false;
                }
            }
            Err(e) if e.code() == Some(ErrorCode::NotFound) => {
                metrics.owner_heartbeat("not_found");
                tracing::warn!(error = %e, "crescentd does not know this owner; registering again");
                register_again(&client, (&register, &mount), &transport, &table).await;
            }
            Err(e) => {
                metrics.owner_heartbeat("error");
                if !failing {
                    tracing::warn!(error = %e, "heartbeat failed");
                    failing = true;
                }
            }
        }
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            () = wake.notified() => {}
        }
    }
}

/// Forgets the replicas crescentd released in our segments; returns the highest sequence
/// applied (`None` when there was nothing), which the next heartbeat acknowledges.
fn apply_releases(
    table: &OwnershipTable,
    released: &[ReleasedReplica],
    metrics: &RebuildMetrics,
) -> Option<u64> {
    let highest = released.iter().map(|r| r.seq).max()?;
    let _span = tracing::debug_span!("owner.forget_released", n = released.len()).entered();
    let report = table.forget_released(released);
    metrics.owner_releases_applied(&report);
    tracing::debug!(
        forgotten = report.forgotten,
        unmatched = report.unmatched,
        unknown_version = report.unknown_version,
        "applied releases from crescentd"
    );
    Some(highest)
}

/// The table of the segment this owner serves, and its memory.
struct ServedSegment {
    table: Arc<OwnershipTable>,
    memory: Arc<SegmentMemory>,
    /// Its listener: takes the data-plane key each heartbeat carries.
    transport: Arc<TcpTransport>,
}

/// The segment this owner serves, whose bytes the replay checks first.
struct OwnSegment<'a> {
    segment_id: &'a str,
    memory: &'a Arc<SegmentMemory>,
}

/// Starts a replay of the table for `term` unless it is done or running. Replicas whose
/// bytes no longer match their checksum are dropped first (`overwrite_check::forget_overwritten`).
fn maybe_replay(
    client: &CrescentClient,
    owner_id: &str,
    table: &Arc<OwnershipTable>,
    ours: OwnSegment<'_>,
    state: &Arc<HeartbeatState>,
    term: u64,
) {
    if state.replayed_term.load(Ordering::Relaxed) == term {
        return;
    }
    let mut running = state.replay.lock().unwrap_or_else(|p| p.into_inner());
    if running.as_ref().is_some_and(|h| !h.is_finished()) {
        return;
    }
    let retry = *state.replay_retry.lock().unwrap_or_else(|p| p.into_inner());
    if retry.is_some_and(|(at, _)| tokio::time::Instant::now() < at) {
        return;
    }
    let (client, owner_id, table, st) = (
        client.clone(),
        owner_id.to_string(),
        table.clone(),
        state.clone(),
    );
    let (segment_id, memory) = (ours.segment_id.to_string(), ours.memory.clone());
    *running = Some(tokio::spawn(async move {
        let metrics = client.metrics().rebuild().clone();
        // Reading every replica's bytes takes a while on a large table: off the runtime.
        let checked = {
            let table = table.clone();
            tokio::task::spawn_blocking(move || forget_overwritten(&table, &segment_id, &memory))
                .await
        };
        match checked {
            Ok(check) => {
                metrics.owner_replay_checked(check.intact, check.overwritten, check.unverifiable)
            }
            Err(e) => {
                tracing::warn!(error = %e, "overwrite check did not finish; replaying unchecked")
            }
        }
        let still_current = {
            let st = st.clone();
            move |t: u64| st.term.load(Ordering::Relaxed) == t
        };
        let outcome = replay_table(
            &client,
            &table,
            &owner_id,
            term,
            &still_current,
            &ReplayConfig::default(),
            &metrics,
        )
        .await;
        match outcome {
            Ok(report) => {
                st.replayed_term.store(term, Ordering::Relaxed);
                *st.replay_retry.lock().unwrap_or_else(|p| p.into_inner()) = None;
                metrics.replay_finished("completed");
                *st.last_replay.lock().unwrap_or_else(|p| p.into_inner()) = Some(report);
            }
            Err(e) if e.code() == Some(ErrorCode::StaleGeneration) => {
                metrics.replay_finished("superseded");
                tracing::info!(term, error = %e, "replay superseded by a newer term");
            }
            Err(e) => {
                metrics.replay_finished("failed");
                let mut retry = st.replay_retry.lock().unwrap_or_else(|p| p.into_inner());
                let failures = retry.map_or(1, |(_, n)| n.saturating_add(1));
                // 1 s doubling to 60 s between whole replays.
                let wait = Duration::from_secs(1u64 << failures.saturating_sub(1).min(6))
                    .min(Duration::from_secs(60));
                *retry = Some((tokio::time::Instant::now() + wait, failures));
                tracing::warn!(term, error = %e, retry_in = ?wait, "replay failed");
            }
        }
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_ids_and_segment_ids() {
        assert!(check_owner_id("node-a").is_ok());
        assert!(check_owner_id("").is_err());
        assert!(check_owner_id("has space").is_err());
        assert!(check_owner_id(&"x".repeat(MAX_OWNER_ID_BYTES + 1)).is_err());
        assert_eq!(segment_id_for("node-a"), "node-a/seg0");
        assert!(segment_id_for(&"x".repeat(MAX_OWNER_ID_BYTES)).len() <= 256);
    }

    #[test]
    fn default_incarnation_grows_with_time() {
        let a = now_ms();
        std::thread::sleep(Duration::from_millis(2));
        assert!(now_ms() > a);
    }
}
