//! The active's side: serves its journal to one standby over the replication protocol.
//!
//! One listener thread accepts at most `max_connections` connections at once; each runs the
//! handshake (handshake.rs: a whole Hello within the handshake timeout, its version, the peer
//! credential with auth on, then the standby's position against this journal, refusing a
//! diverged one with the newest record both should share). A connection that completed it
//! replaces the running session (a standby that reconnects must not wait for its dead session
//! to time out); one that did not never touches it. A session (stream.rs) streams durable
//! records as whole frames, with heartbeats when idle. A second thread per session reads the
//! standby's acks into the [`CommitTracker`] (acks.rs), which counts them per connection and
//! refuses one above what the connection was sent. Every message carries the term the node
//! leads under; the session ends (telling the standby `NOT_LEADER`) as soon as that term is no
//! longer current.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::acks::{AckReader, SourceMetrics};
use super::commit::CommitTracker;
use super::handshake::{handshake, Accepted, LogLimiter, PeerCheck, Welcomed};
use super::protocol::ProtocolError;
use super::reseed_source::{serve_snapshot, SnapshotSource};
use super::stream::stream_records;
use super::window::SendWindow;
use crate::journal::Journal;

/// The term this node currently leads under (`None`: not the leader).
pub type TermSource = Arc<dyn Fn() -> Option<u64> + Send + Sync>;
/// Whether a standby with these (event kind, newest replayable version) can follow.
pub type CapabilityCheck = Arc<dyn Fn(&[(String, u16)]) -> Result<(), String> + Send + Sync>;

/// Called when a welcomed standby (its name and capabilities) becomes the one that follows,
/// after the session it replaces was told to stop and before anything is streamed to it: the
/// node raises the event versions it writes for it (docs/ha.md, "Event versions in a mixed
/// pair"). An error (it can no longer read what is written) ends the connection unstreamed.
#[derive(Clone)]
pub struct FollowHook(pub Arc<FollowFn>);

type FollowFn = dyn Fn(&str, &[(String, u16)]) -> Result<(), String> + Send + Sync;

impl FollowHook {
    pub fn new(
        f: impl Fn(&str, &[(String, u16)]) -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        Self(Arc::new(f))
    }
}

impl std::fmt::Debug for FollowHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FollowHook(..)")
    }
}

#[derive(Debug, Clone)]
pub struct SourceConfig {
    /// This node's name (sent to standbys).
    pub node: String,
    /// Idle interval between heartbeats.
    pub heartbeat: Duration,
    /// Most frame bytes per Records message.
    pub max_batch_bytes: usize,
    /// Read/write timeout on the connection (a standby silent this long is dropped).
    pub io_timeout: Duration,
    /// Where protocol violations are counted (`None`: not counted).
    pub metrics: Option<SourceMetrics>,
    /// Longest wait for a whole Hello after accept: a peer that sends nothing, or trickles,
    /// is closed at it.
    pub handshake_timeout: Duration,
    /// Most open connections on the listener (handshaking ones and sessions); one more is
    /// closed at once.
    pub max_connections: usize,
    /// Verifies the standby's credential before anything but a refusal is sent (auth on);
    /// `None`: no proof is asked.
    pub peer_check: Option<PeerCheck>,
    /// Where a reseeding standby's snapshot comes from (`None`: reseeds are refused
    /// `NO_SNAPSHOT`).
    pub snapshots: Option<SnapshotSource>,
    /// See [`FollowHook`] (`None`: nothing to do when a standby starts following).
    pub on_follow: Option<FollowHook>,
    /// Most snapshot bytes per SnapshotChunk message.
    pub reseed_chunk_bytes: usize,
}

impl Default for SourceConfig {
    fn default() -> Self {
        Self {
            node: "active".into(),
            heartbeat: Duration::from_millis(200),
            max_batch_bytes: 4 << 20,
            io_timeout: Duration::from_secs(5),
            metrics: None,
            handshake_timeout: Duration::from_secs(5),
            max_connections: 8,
            peer_check: None,
            snapshots: None,
            on_follow: None,
            reseed_chunk_bytes: 1 << 20,
        }
    }
}

/// What the active knows of its standby.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceStatus {
    pub standby: Option<String>,
    pub connected: bool,
    /// Last seq sent to the standby.
    pub sent_seq: u64,
    /// Last seq the standby acknowledged as durable.
    pub acked_seq: u64,
    pub sent_bytes: u64,
    /// What was sent and not yet acknowledged: the lag in bytes.
    pub window: SendWindow,
    /// The last refusal given, if any (code, message).
    pub last_refusal: Option<(String, String)>,
    /// The last protocol violation a standby was dropped for, if any (code, message).
    pub last_protocol_error: Option<(String, String)>,
}

pub(super) struct Shared {
    pub journal: Journal,
    pub tracker: CommitTracker,
    pub term: TermSource,
    pub capabilities: CapabilityCheck,
    pub config: SourceConfig,
    /// Shared with the journal writer's tap, which counts what it sends itself.
    pub status: Arc<Mutex<SourceStatus>>,
    pub stop: AtomicBool,
    /// The stop flag of the running session.
    session: Mutex<Option<Arc<AtomicBool>>>,
    /// Open connections (handshaking and streaming).
    open: Arc<AtomicUsize>,
    /// Rate limits for the log lines of unproven peers (garbage, a full listener, a wrong
    /// version) and of refused standbys past the proof, kept apart so a flood of the first
    /// never hides the second.
    pub unproven_log: LogLimiter,
    pub proven_log: LogLimiter,
}

impl Shared {
    /// Counts a connection closed on one of the listener's bounds.
    pub fn count_closed(&self, reason: &'static str) {
        if let Some(m) = &self.config.metrics {
            m.count_closed(reason);
        }
    }
}

/// A running replication listener. Stopping it (or dropping it) ends every session.
pub struct ReplicationSource {
    shared: Arc<Shared>,
    addr: SocketAddr,
    thread: Option<JoinHandle<()>>,
}

impl ReplicationSource {
    pub fn start(
        journal: Journal,
        listen: SocketAddr,
        tracker: CommitTracker,
        term: TermSource,
        capabilities: CapabilityCheck,
        config: SourceConfig,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind(listen)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            journal,
            tracker,
            term,
            capabilities,
            config,
            status: Arc::new(Mutex::new(SourceStatus::default())),
            stop: AtomicBool::new(false),
            session: Mutex::new(None),
            open: Arc::default(),
            unproven_log: LogLimiter::default(),
            proven_log: LogLimiter::default(),
        });
        let accept = shared.clone();
        let thread = std::thread::Builder::new()
            .name("replication-accept".into())
            .spawn(move || accept_loop(accept, listener))?;
        tracing::info!(%addr, "replication source listening");
        Ok(Self {
            shared,
            addr,
            thread: Some(thread),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn status(&self) -> SourceStatus {
        self.shared.status.lock().expect("status mutex").clone()
    }

    /// Ends the listener and the running session.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(s) = self.shared.session.lock().expect("session mutex").take() {
            s.store(true, Ordering::Release);
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for ReplicationSource {
    fn drop(&mut self) {
        self.halt();
    }
}

fn accept_loop(shared: Arc<Shared>, listener: TcpListener) {
    let mut backoff = ACCEPT_BACKOFF_MIN;
    while !shared.stop.load(Ordering::Acquire) {
        match listener.accept() {
            Ok((stream, peer)) => {
                backoff = ACCEPT_BACKOFF_MIN;
                let Some(slot) = ConnectionSlot::take(&shared) else {
                    // Closed at once: a flood of connections holds no thread and no buffer.
                    shared.count_closed("over_limit");
                    if let Some(left_out) = shared.unproven_log.allow() {
                        tracing::warn!(%peer, max = shared.config.max_connections, left_out,
                            "replication listener full: connection closed");
                    }
                    continue;
                };
                let s = shared.clone();
                let spawned = std::thread::Builder::new()
                    .name("replication-session".into())
                    .spawn(move || {
                        let span = tracing::info_span!("replication_session", %peer);
                        let _g = span.enter();
                        serve_connection(&s, stream, peer);
                        drop(slot);
                    });
                if let Err(e) = spawned {
                    tracing::error!(error = %e, "cannot start a replication session");
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => {
                // Out of descriptors and the like: back off (the session keeps streaming).
                if let Some(m) = &shared.config.metrics {
                    m.count_accept_failure();
                }
                if let Some(left_out) = shared.unproven_log.allow() {
                    tracing::warn!(error = %e, left_out, "replication accept failed");
                }
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
            }
        }
    }
}

const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// One of the listener's `max_connections`, held by a connection's thread until it ends.
struct ConnectionSlot(Arc<AtomicUsize>);

impl ConnectionSlot {
    fn take(shared: &Shared) -> Option<Self> {
        let open = shared.open.clone();
        if open.fetch_add(1, Ordering::AcqRel) >= shared.config.max_connections {
            open.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Self(open))
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One accepted connection: the handshake, then (welcomed) the session.
fn serve_connection(shared: &Arc<Shared>, mut stream: TcpStream, peer: SocketAddr) {
    let welcomed = match handshake(shared, &mut stream, peer) {
        Ok(Accepted::Follow(welcomed)) => welcomed,
        Ok(Accepted::Reseed { node, term }) => return serve_snapshot(shared, stream, &node, term),
        Err(()) => return,
    };
    if shared.stop.load(Ordering::Acquire) {
        return;
    }
    // Only a connection that completed the handshake (and, with auth on, proved its
    // credential) replaces the running session: garbage, a half-sent Hello or a refused peer
    // never disturbs the standby that is following (docs/ha.md, "Which acks count").
    let stop = Arc::new(AtomicBool::new(false));
    if let Some(old) = shared
        .session
        .lock()
        .expect("session mutex")
        .replace(stop.clone())
    {
        old.store(true, Ordering::Release);
    }
    if let Some(hook) = &shared.config.on_follow {
        if let Err(why) = (hook.0)(&welcomed.node, &welcomed.capabilities) {
            tracing::warn!(standby = %welcomed.node, %why, "standby not followed");
            shared.status.lock().expect("status mutex").last_refusal =
                Some((super::protocol::refusal::INCOMPATIBLE.to_string(), why));
            return;
        }
    }
    if let Err(e) = run_session(shared, stream, &stop, welcomed) {
        tracing::warn!(error = %e, "replication session ended");
    }
    // Still connected if a newer session replaced this one.
    let mut st = shared.status.lock().expect("status mutex");
    st.connected = shared.tracker.session().is_some();
}

fn run_session(
    shared: &Arc<Shared>,
    stream: TcpStream,
    stop: &Arc<AtomicBool>,
    welcomed: Welcomed,
) -> Result<(), ProtocolError> {
    let Welcomed {
        node,
        term,
        from_seq,
        ..
    } = welcomed;
    stream.set_read_timeout(Some(shared.config.io_timeout))?;
    stream.set_write_timeout(Some(shared.config.io_timeout))?;
    tracing::info!(standby = %node, from_seq, term, "standby following");
    // The standby's verified position (its last record matches ours) is where this
    // connection's sends and acks start; nothing acked on another connection carries over.
    let session = shared.tracker.connect(&node, from_seq - 1);
    {
        let mut st = shared.status.lock().expect("status mutex");
        st.standby = Some(node.clone());
        st.connected = true;
        st.sent_seq = from_seq - 1;
        st.acked_seq = from_seq - 1;
        st.window.restart();
        st.last_refusal = None;
    }
    let result = follow(shared, stream, stop, term, from_seq, session, node);
    shared.tracker.disconnect(session);
    result
}

/// Streams records to a welcomed standby and reads its acks until either side ends.
fn follow(
    shared: &Arc<Shared>,
    stream: TcpStream,
    stop: &Arc<AtomicBool>,
    term: u64,
    from_seq: u64,
    session: u64,
    node: String,
) -> Result<(), ProtocolError> {
    let acks = {
        let reader = std::io::BufReader::with_capacity(4096, stream.try_clone()?);
        let ack_reader = AckReader {
            tracker: shared.tracker.clone(),
            status: shared.status.clone(),
            metrics: shared.config.metrics.clone(),
            session,
            node,
        };
        let stop = stop.clone();
        std::thread::Builder::new()
            .name("replication-acks".into())
            .spawn(move || ack_reader.run(reader, &stop))?
    };
    let result = stream_records(shared, stream.try_clone()?, stop, term, from_seq, session);
    stop.store(true, Ordering::Release);
    let _ = stream.shutdown(std::net::Shutdown::Both);
    let _ = acks.join();
    result
}
