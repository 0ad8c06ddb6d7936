//! The standby's side: follows the active's journal into its own.
//!
//! One thread connects to wherever [`LeaderAddress`] points, says Hello with this journal's
//! head (and, with auth on, a `peer` token it mints for each connection: [`PeerToken`]), and
//! then appends each Records message through [`Journal::append_replicated`] (which
//! checks every CRC, the seq order, the term and the chain digest before anything is written,
//! and writes and syncs on this thread when the journal's writer thread is idle),
//! acknowledges once durable (from whichever thread synced, through
//! [`Journal::set_durable_hook`]), and tells
//! `on_durable` so the node can apply the records through its replay code. A refused
//! or broken connection is retried with backoff; a diverged journal is reported in the status
//! and never overwritten.

use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::protocol::{
    read_message, refusal, write_message, Credential, Message, PeerToken, ProtocolError,
    RewindPoint, PROTOCOL_VERSION,
};
use super::round_timing::{self, Stage};
use crate::codec::{check_frame, decode_body_ref, FramePrefix, FRAME_PREFIX_LEN};
use crate::error::JournalError;
use crate::journal::Journal;
use crate::record::RecordRef;

/// Where the active's replication endpoint is now (`None`: no known active).
pub type LeaderAddress = Arc<dyn Fn() -> Option<SocketAddr> + Send + Sync>;
/// Called with the newest durable seq as it advances (while records flow, at most every
/// 2 ms: several batches may be reported at once).
pub type OnDurable = Arc<dyn Fn(u64) + Send + Sync>;

#[derive(Debug, Clone)]
pub struct FollowerConfig {
    pub node: String,
    /// (event kind, newest version) this node can replay.
    pub capabilities: Vec<(String, u16)>,
    /// A silent active is given up after this long (it heartbeats far more often).
    pub io_timeout: Duration,
    pub retry_min: Duration,
    pub retry_max: Duration,
    /// The credential the active asks for with auth on (docs/security.md); `None`: none.
    pub token: Option<PeerToken>,
}

impl Default for FollowerConfig {
    fn default() -> Self {
        Self {
            node: "standby".into(),
            capabilities: Vec::new(),
            io_timeout: Duration::from_secs(3),
            retry_min: Duration::from_millis(50),
            retry_max: Duration::from_secs(2),
            token: None,
        }
    }
}

/// What the standby knows of its replication.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FollowerStatus {
    pub connected: bool,
    pub leader: Option<String>,
    pub leader_addr: Option<SocketAddr>,
    /// The term of the active followed.
    pub term: u64,
    /// Local durable seq.
    pub durable_seq: u64,
    /// The active's commit and durable seqs as last heard.
    pub leader_commit_seq: u64,
    pub leader_durable_seq: u64,
    pub received_bytes: u64,
    /// The last refusal (code, message) and, on divergence, the suggested rewind point.
    pub refused: Option<(String, String)>,
    pub rewind_to: Option<RewindPoint>,
}

impl FollowerStatus {
    /// Whether this standby holds everything the active has made durable (as last heard).
    pub fn caught_up(&self) -> bool {
        self.connected && self.durable_seq >= self.leader_durable_seq
    }
}

struct Shared {
    journal: Journal,
    leader: LeaderAddress,
    on_durable: OnDurable,
    config: FollowerConfig,
    status: Mutex<FollowerStatus>,
    stop: AtomicBool,
}

/// A running follower; stop it before promoting this node.
pub struct Follower {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Follower {
    pub fn start(
        journal: Journal,
        leader: LeaderAddress,
        on_durable: OnDurable,
        config: FollowerConfig,
    ) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            journal,
            leader,
            on_durable,
            config,
            status: Mutex::new(FollowerStatus::default()),
            stop: AtomicBool::new(false),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("replication-follower".into())
            .spawn(move || follow_loop(&s))?;
        Ok(Self {
            shared,
            thread: Some(thread),
        })
    }

    pub fn status(&self) -> FollowerStatus {
        let mut st = self.shared.status.lock().expect("status mutex").clone();
        st.durable_seq = self.shared.journal.durable().get();
        st
    }

    /// Stops following; returns once the follower thread has ended (nothing more is appended).
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        self.halt();
    }
}

fn follow_loop(shared: &Arc<Shared>) {
    let mut backoff = shared.config.retry_min;
    while !shared.stop.load(Ordering::Acquire) {
        let Some(addr) = (shared.leader)() else {
            sleep_unless_stopped(shared, backoff);
            continue;
        };
        let span = tracing::info_span!("replication_follow", leader = %addr);
        let _g = span.enter();
        match follow_once(shared, addr) {
            Ok(()) => backoff = shared.config.retry_min,
            Err(e) => {
                tracing::info!(error = %e, "not following the active");
                backoff = (backoff * 2).min(shared.config.retry_max);
            }
        }
        {
            let mut st = shared.status.lock().expect("status mutex");
            st.connected = false;
        }
        sleep_unless_stopped(shared, backoff);
    }
}

fn sleep_unless_stopped(shared: &Shared, d: Duration) {
    let step = Duration::from_millis(10);
    let mut left = d;
    while !left.is_zero() && !shared.stop.load(Ordering::Acquire) {
        let s = left.min(step);
        std::thread::sleep(s);
        left -= s;
    }
}

#[derive(Debug, thiserror::Error)]
enum FollowError {
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
    #[error("journal: {0}")]
    Journal(#[from] JournalError),
    #[error("refused by the active: {code}: {message}")]
    Refused { code: String, message: String },
}

/// Hello and its answer: following the active from its Welcome (fenced at its term), or the
/// refusal recorded in the status (an incompatible version, a diverged journal).
fn handshake(shared: &Shared, stream: &mut TcpStream, addr: SocketAddr) -> Result<(), FollowError> {
    let (last_seq, last_term, last_digest) = shared.journal.head();
    write_message(
        stream,
        &Message::Hello {
            version: PROTOCOL_VERSION,
            node: shared.config.node.clone(),
            last_seq,
            last_term,
            last_digest: last_digest.to_vec(),
            capabilities: shared.config.capabilities.clone(),
            token: shared
                .config
                .token
                .as_ref()
                .and_then(|t| (t.0)())
                .map(Credential),
            reseed: false,
        },
    )?;
    match read_message(stream)? {
        Message::Welcome { version, .. } if version != PROTOCOL_VERSION => {
            let message = format!(
                "the active speaks replication protocol version {version}, this standby \
                 {PROTOCOL_VERSION}: run the same crescentd release on both nodes"
            );
            let code = refusal::INCOMPATIBLE.to_string();
            shared.status.lock().expect("status mutex").refused =
                Some((code.clone(), message.clone()));
            return Err(FollowError::Refused { code, message });
        }
        Message::Welcome {
            term,
            leader,
            from_seq,
            ..
        } => {
            tracing::info!(%leader, term, from_seq, "following the active");
            shared.journal.fence(term);
            let mut st = shared.status.lock().expect("status mutex");
            st.connected = true;
            st.leader = Some(leader);
            st.leader_addr = Some(addr);
            st.term = term;
            st.refused = None;
            st.rewind_to = None;
        }
        Message::Refused {
            code,
            message,
            rewind_to,
        } => {
            if code == refusal::DIVERGED {
                tracing::error!(%message, ?rewind_to, "this standby's journal has diverged from the active's; it will not follow (see docs/ha.md)");
            }
            let mut st = shared.status.lock().expect("status mutex");
            st.refused = Some((code.clone(), message.clone()));
            st.rewind_to = rewind_to;
            return Err(FollowError::Refused { code, message });
        }
        other => {
            return Err(ProtocolError::Malformed(format!("expected Welcome, got {other:?}")).into())
        }
    }
    Ok(())
}

fn follow_once(shared: &Shared, addr: SocketAddr) -> Result<(), FollowError> {
    let mut stream =
        TcpStream::connect_timeout(&addr, shared.config.io_timeout).map_err(ProtocolError::from)?;
    stream.set_nodelay(true).map_err(ProtocolError::from)?;
    stream
        .set_read_timeout(Some(shared.config.io_timeout))
        .map_err(ProtocolError::from)?;
    stream
        .set_write_timeout(Some(shared.config.io_timeout))
        .map_err(ProtocolError::from)?;
    handshake(shared, &mut stream, addr)?;
    // Records are appended as they arrive (the standby's journal writes each message as its
    // own batch: the active already gathered it) and acknowledged once durable. Whoever synced
    // (this thread, or the journal's writer) acks each advance itself, right after the sync
    // (no thread wake-up on the active's commit path); the ack thread covers an advance the
    // hook could not ack (the socket was
    // busy), keeps the active's view fresh when idle, and hands durable seqs to `on_durable`.
    let out = Arc::new(Mutex::new(stream.try_clone().map_err(ProtocolError::from)?));
    let acked = Arc::new(AtomicU64::new(0));
    let _hook = DurableHookGuard::install(&shared.journal, out.clone(), acked.clone());
    let acker = {
        let journal = shared.journal.clone();
        let on_durable = shared.on_durable.clone();
        let done = Arc::new(AtomicBool::new(false));
        let done_flag = done.clone();
        let thread = std::thread::Builder::new()
            .name("replication-ack".into())
            .spawn(move || ack_loop(&journal, &out, &acked, &on_durable, &done_flag))
            .map_err(ProtocolError::from)?;
        (done, thread)
    };
    let result = receive_loop(shared, &mut stream);
    acker.0.store(true, Ordering::Release);
    let _ = stream.shutdown(std::net::Shutdown::Both);
    let acked = acker.1.join();
    result?;
    match acked {
        Ok(Ok(())) | Err(_) => Ok(()),
        Ok(Err(e)) => Err(e.into()),
    }
}

/// The journal's durable hook for one session: acks from the thread that synced (the
/// follower or the journal's writer). Removed when the session ends, so no later session's
/// socket ever sees an ack of this one's.
struct DurableHookGuard {
    journal: Journal,
}

impl DurableHookGuard {
    fn install(journal: &Journal, out: Arc<Mutex<TcpStream>>, acked: Arc<AtomicU64>) -> Self {
        journal.set_durable_hook(Some(Arc::new(move |durable_seq| {
            // Never wait for the ack thread's write: it acks this advance itself.
            let Ok(mut out) = out.try_lock() else {
                return;
            };
            match write_message(&mut *out, &Message::Ack { durable_seq }) {
                Ok(()) => {
                    round_timing::mark(Stage::AckSent, durable_seq);
                    acked.fetch_max(durable_seq, Ordering::AcqRel);
                }
                // The session is broken: end it (the receive loop sees the shutdown).
                Err(_) => {
                    let _ = out.shutdown(std::net::Shutdown::Both);
                }
            }
        })));
        Self {
            journal: journal.clone(),
        }
    }
}

impl Drop for DurableHookGuard {
    fn drop(&mut self) {
        self.journal.set_durable_hook(None);
    }
}

/// Acks durable advances the writer's hook did not (and, when idle, the current durable seq
/// now and then), and tells `on_durable` of each advance.
fn ack_loop(
    journal: &Journal,
    out: &Mutex<TcpStream>,
    acked: &AtomicU64,
    on_durable: &OnDurable,
    done: &AtomicBool,
) -> Result<(), ProtocolError> {
    let durable = journal.durable();
    let mut seen = 0;
    let mut last_sent = std::time::Instant::now();
    let mut busy = false;
    while !done.load(Ordering::Acquire) {
        // While records flow, poll every HOOK_GRACE instead of parking on the watermark: a
        // parked waiter costs the writer a wake-up (a syscall) between its sync and the hook's
        // ack on every batch. Idle, park until the next advance.
        let reached = if busy {
            std::thread::sleep(HOOK_GRACE);
            durable.fault().map_or(Ok(()), |f| {
                Err(ProtocolError::Malformed(format!("journal: {f}")))
            })?;
            Some(durable.get()).filter(|&d| d > seen)
        } else {
            let reached = durable
                .wait_for_timeout(seen + 1, Duration::from_millis(100))
                .map_err(|e| ProtocolError::Malformed(format!("journal: {e}")))?;
            if reached.is_some() {
                // The writer's hook acks this advance right after waking this thread: racing
                // it for the socket only sends the same ack twice (and, winning, delays it).
                std::thread::sleep(HOOK_GRACE);
            }
            reached
        };
        busy = reached.is_some();
        let d = reached.unwrap_or(seen);
        let stale = acked.load(Ordering::Acquire) < d;
        if stale || last_sent.elapsed() >= Duration::from_millis(200) {
            let mut out = out.lock().unwrap_or_else(|p| p.into_inner());
            // Whatever is durable by now (at least `d`).
            let d = durable.get().max(d);
            write_message(&mut *out, &Message::Ack { durable_seq: d })?;
            round_timing::mark(Stage::AckSent, d);
            acked.fetch_max(d, Ordering::AcqRel);
            last_sent = std::time::Instant::now();
        }
        if d > seen {
            on_durable(d);
            seen = d;
        }
    }
    Ok(())
}

/// Bytes read from the active's socket at once.
const RECEIVE_BUFFER: usize = 64 << 10;

/// How long the ack thread leaves a new durable seq to the writer's hook before it checks
/// that it was acked (the hook acks within microseconds; the ack thread only covers an
/// advance the hook could not ack, so a wait here costs nothing in the common case).
const HOOK_GRACE: Duration = Duration::from_millis(2);

fn receive_loop(shared: &Shared, stream: &mut TcpStream) -> Result<(), FollowError> {
    // Buffered: a message's length and body come in one read when both have arrived.
    let mut input = std::io::BufReader::with_capacity(RECEIVE_BUFFER, &*stream);
    while !shared.stop.load(Ordering::Acquire) {
        let message = read_message(&mut input)?;
        let received = round_timing::now();
        match message {
            Message::Records {
                term,
                commit_seq,
                frames,
            } => {
                // Nothing more buffered: this thread writes and syncs the message itself
                // (unless the journal's writer is still busy). More already here: queue it, so
                // the writer takes the messages that arrived during its sync as one batch.
                let write_now = input.buffer().is_empty();
                let last = append_frames(shared, &frames, write_now, received)?;
                let mut st = shared.status.lock().expect("status mutex");
                st.term = term;
                st.leader_commit_seq = commit_seq;
                st.leader_durable_seq = st.leader_durable_seq.max(last);
                st.received_bytes += frames.len() as u64;
            }
            Message::Heartbeat {
                term,
                commit_seq,
                durable_seq,
            } => {
                shared.journal.fence(term);
                let mut st = shared.status.lock().expect("status mutex");
                st.term = term;
                st.leader_commit_seq = commit_seq;
                st.leader_durable_seq = durable_seq;
            }
            Message::Refused { code, message, .. } => {
                shared.status.lock().expect("status mutex").refused =
                    Some((code.clone(), message.clone()));
                return Err(FollowError::Refused { code, message });
            }
            other => {
                return Err(
                    ProtocolError::Malformed(format!("unexpected message {other:?}")).into(),
                )
            }
        }
    }
    Ok(())
}

/// Appends the frames of one Records message to the journal (every frame's CRC here, then
/// the seq order, term and chain digest in the journal, all before anything is written):
/// written and synced on this thread when `write_now` and the journal's writer is idle,
/// queued for the writer otherwise. Returns the last seq. Durability is acknowledged by the
/// durable hook (or the ack thread), never here.
fn append_frames(
    shared: &Shared,
    frames: &[u8],
    write_now: bool,
    received: Option<std::time::Instant>,
) -> Result<u64, FollowError> {
    let mut records: Vec<RecordRef<'_>> = Vec::new();
    let mut at = 0;
    while at < frames.len() {
        let len = match check_frame(&frames[at..]) {
            Ok(FramePrefix::Valid { len }) => len,
            Ok(FramePrefix::End) => {
                return Err(ProtocolError::Malformed("empty frame in Records".into()).into())
            }
            Err(e) => return Err(ProtocolError::Malformed(format!("frame: {e}")).into()),
        };
        let body = &frames[at + FRAME_PREFIX_LEN..at + len];
        records.push(
            decode_body_ref(body).map_err(|e| ProtocolError::Malformed(format!("record: {e}")))?,
        );
        at += len;
    }
    let Some(last) = records.last().map(|r| r.seq) else {
        return Ok(shared.journal.last_seq());
    };
    round_timing::mark_at(Stage::Received, last, received);
    round_timing::mark(Stage::Queued, last);
    let ticket = if write_now {
        shared.journal.append_replicated(&records)?
    } else {
        shared.journal.submit_replicated(&records)?
    };
    Ok(ticket.last_seq)
}
