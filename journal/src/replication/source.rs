//! The active's side: serves its journal to one standby over the replication protocol.
//!
//! One listener thread accepts standbys; a newer connection replaces the session of an older
//! one (a standby that reconnects must not wait for its dead session to time out). A session
//! checks the standby's position against this journal (refusing a diverged one, naming the
//! newest record both should share), then streams durable records as whole frames, with
//! heartbeats when idle. A second thread per session reads the standby's acks into the
//! [`CommitTracker`] (acks.rs), which counts them per connection and refuses one above what
//! the connection was sent. Every message carries the term the node leads under; the session ends
//! (telling the standby `NOT_LEADER`) as soon as that term is no longer current.

use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::acks::{AckReader, SourceMetrics};
use super::commit::CommitTracker;
use super::protocol::{
    digest_from, encode_records_into, read_message, refusal, write_message, Message, ProtocolError,
    RewindPoint, PROTOCOL_VERSION,
};
use super::round_timing::{self, Stage};
use super::sender::{DirectSend, RecordSender};
use super::window::SendWindow;
use crate::codec::encode_ref_into;
use crate::error::JournalError;
use crate::journal::Journal;

/// The term this node currently leads under (`None`: not the leader).
pub type TermSource = Arc<dyn Fn() -> Option<u64> + Send + Sync>;
/// Whether a standby with these (event kind, newest replayable version) can follow.
pub type CapabilityCheck = Arc<dyn Fn(&[(String, u16)]) -> Result<(), String> + Send + Sync>;

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
}

impl Default for SourceConfig {
    fn default() -> Self {
        Self {
            node: "active".into(),
            heartbeat: Duration::from_millis(200),
            max_batch_bytes: 4 << 20,
            io_timeout: Duration::from_secs(5),
            metrics: None,
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

struct Shared {
    journal: Journal,
    tracker: CommitTracker,
    term: TermSource,
    capabilities: CapabilityCheck,
    config: SourceConfig,
    /// Shared with the journal writer's tap, which counts what it sends itself.
    status: Arc<Mutex<SourceStatus>>,
    stop: AtomicBool,
    /// The stop flag of the running session.
    session: Mutex<Option<Arc<AtomicBool>>>,
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
    while !shared.stop.load(Ordering::Acquire) {
        match listener.accept() {
            Ok((stream, peer)) => {
                let stop = Arc::new(AtomicBool::new(false));
                if let Some(old) = shared
                    .session
                    .lock()
                    .expect("session mutex")
                    .replace(stop.clone())
                {
                    old.store(true, Ordering::Release);
                }
                let s = shared.clone();
                let spawned = std::thread::Builder::new()
                    .name("replication-session".into())
                    .spawn(move || {
                        let span = tracing::info_span!("replication_session", %peer);
                        let _g = span.enter();
                        if let Err(e) = run_session(&s, stream, &stop) {
                            tracing::warn!(error = %e, "replication session ended");
                        }
                        // Still connected if a newer session replaced this one.
                        let mut st = s.status.lock().expect("status mutex");
                        st.connected = s.tracker.session().is_some();
                    });
                if let Err(e) = spawned {
                    tracing::error!(error = %e, "cannot start a replication session");
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => {
                tracing::warn!(error = %e, "replication accept failed");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

fn refuse(
    shared: &Shared,
    stream: &mut TcpStream,
    code: &str,
    message: String,
    rewind_to: Option<RewindPoint>,
) -> Result<(), ProtocolError> {
    tracing::warn!(code, %message, "refusing a standby");
    shared.status.lock().expect("status mutex").last_refusal =
        Some((code.to_string(), message.clone()));
    write_message(
        stream,
        &Message::Refused {
            code: code.to_string(),
            message,
            rewind_to,
        },
    )
}

fn run_session(
    shared: &Arc<Shared>,
    mut stream: TcpStream,
    stop: &Arc<AtomicBool>,
) -> Result<(), ProtocolError> {
    stream.set_nonblocking(false)?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(shared.config.io_timeout))?;
    stream.set_write_timeout(Some(shared.config.io_timeout))?;
    let Message::Hello {
        version,
        node,
        last_seq,
        last_term,
        last_digest,
        capabilities,
    } = read_message(&mut stream)?
    else {
        return Err(ProtocolError::Malformed("expected Hello".into()));
    };
    if version != PROTOCOL_VERSION {
        let msg = format!("protocol version {version}, this active speaks {PROTOCOL_VERSION}");
        return refuse(shared, &mut stream, refusal::INCOMPATIBLE, msg, None);
    }
    if let Err(why) = (shared.capabilities)(&capabilities) {
        return refuse(shared, &mut stream, refusal::INCOMPATIBLE, why, None);
    }
    let Some(term) = (shared.term)() else {
        let msg = "this node is not the active".to_string();
        return refuse(shared, &mut stream, refusal::NOT_LEADER, msg, None);
    };
    let last_digest = digest_from(&last_digest)?;
    let from_seq = match check_position(&shared.journal, last_seq, last_term, &last_digest) {
        Ok(from) => from,
        Err((code, message, rewind)) => {
            return refuse(shared, &mut stream, code, message, rewind);
        }
    };
    write_message(
        &mut stream,
        &Message::Welcome {
            version: PROTOCOL_VERSION,
            term,
            leader: shared.config.node.clone(),
            from_seq,
        },
    )?;
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

/// Where a standby at (`last_seq`, `last_digest`) continues, or why it cannot.
fn check_position(
    journal: &Journal,
    last_seq: u64,
    last_term: u64,
    last_digest: &crate::record::Digest,
) -> Result<u64, (&'static str, String, Option<RewindPoint>)> {
    let durable = journal.durable().get();
    let first = journal.first_seq();
    let journal_err = |e: JournalError| (refusal::NEEDS_RESEED, e.to_string(), None);
    if last_seq == 0 {
        if first > 1 {
            return Err((
                refusal::NEEDS_RESEED,
                format!("an empty standby needs records from 1, this journal starts at {first}"),
                None,
            ));
        }
        return Ok(1);
    }
    if last_seq < first {
        return Err((
            refusal::NEEDS_RESEED,
            format!("the standby is at seq {last_seq}, this journal starts at {first}"),
            None,
        ));
    }
    if last_seq <= durable {
        let mut ours = None;
        journal
            .visit_range(last_seq, last_seq, |r| {
                ours = Some(*r.digest);
                Ok::<_, JournalError>(())
            })
            .map_err(journal_err)?;
        if ours.as_ref() == Some(last_digest) {
            return Ok(last_seq + 1);
        }
    }
    // Diverged: name the newest record of a term the standby had, at or below its last seq.
    // Everything the standby holds after it was never replicated here, so never committed.
    let mut rewind = None;
    journal
        .visit_range(first, last_seq.min(durable), |r| {
            if r.term <= last_term {
                rewind = Some(RewindPoint {
                    seq: r.seq,
                    digest: r.digest.to_vec(),
                });
            }
            Ok::<_, JournalError>(())
        })
        .map_err(journal_err)?;
    Err((
        refusal::DIVERGED,
        format!(
            "the standby's record {last_seq} (term {last_term}) is not in this journal's history \
             (durable through {durable})"
        ),
        rewind,
    ))
}

/// One batch seen by the journal's replication tap that the tap did not send itself.
struct Tapped {
    first: u64,
    last: u64,
    frames: Vec<u8>,
}

/// What the tap leaves to the session thread.
enum TapWork {
    /// A batch to send.
    Send(Tapped),
    /// Finish the message the tap could only partly write.
    Flush,
}

/// Batches the tap may hold before it drops (the session then reads the gap back from disk).
const TAP_DEPTH: usize = 256;

fn stream_records(
    shared: &Shared,
    stream: TcpStream,
    stop: &AtomicBool,
    term: u64,
    from_seq: u64,
    session: u64,
) -> Result<(), ProtocolError> {
    // Live records come from the writer's tap, before the active's own sync, so both sides
    // sync in parallel. The tap sends each batch itself when the socket takes it without
    // waiting (sender.rs) and queues it for this thread otherwise; anything older (or dropped
    // by a full queue) is read back from disk once durable. The tap is this session's until
    // it ends. A later session installs its own tap; this one only goes quiet (clearing the
    // journal's tap here could remove the newer session's).
    let wire_tracker = shared.tracker.clone();
    let sender = Arc::new(RecordSender::new(
        stream,
        from_seq - 1,
        Box::new(move |last| wire_tracker.on_sent(session, last)),
    ));
    let (tx, rx) = std::sync::mpsc::sync_channel::<TapWork>(TAP_DEPTH);
    let live = Arc::new(AtomicBool::new(true));
    let tap_live = live.clone();
    let tap_sender = sender.clone();
    let status = shared.status.clone();
    let tracker = shared.tracker.clone();
    shared
        .journal
        .set_replication_tap(Some(Arc::new(move |first, last, frames: &[u8]| {
            if !tap_live.load(Ordering::Acquire) {
                return;
            }
            let commit_seq = tracker.commit().get();
            match tap_sender.try_send_direct(term, commit_seq, first, last, frames) {
                DirectSend::Sent { bytes } => {
                    round_timing::mark(Stage::Sent, last);
                    count_sent(
                        &mut status.lock().expect("status mutex"),
                        first - 1,
                        last,
                        bytes,
                    );
                }
                DirectSend::Partial { bytes } => {
                    count_sent(
                        &mut status.lock().expect("status mutex"),
                        first - 1,
                        last,
                        bytes,
                    );
                    // If the queue is full, the session thread flushes on its next round
                    // (within a heartbeat interval) anyway.
                    let _ = tx.try_send(TapWork::Flush);
                }
                DirectSend::Deferred => {
                    let _ = tx.try_send(TapWork::Send(Tapped {
                        first,
                        last,
                        frames: frames.to_vec(),
                    }));
                }
            }
        })));
    let result = stream_loop(shared, &sender, stop, (term, session), &rx);
    live.store(false, Ordering::Release);
    sender.close();
    result
}

fn stream_loop(
    shared: &Shared,
    sender: &RecordSender,
    stop: &AtomicBool,
    (term, session): (u64, u64),
    tapped: &std::sync::mpsc::Receiver<TapWork>,
) -> Result<(), ProtocolError> {
    let to = Session { term, id: session };
    let durable = shared.journal.durable();
    let mut last_heartbeat = Instant::now();
    while !stop.load(Ordering::Acquire) && !shared.stop.load(Ordering::Acquire) {
        if (shared.term)() != Some(term) {
            let msg = format!("term {term} is over on this node");
            let mut out = sender.lock();
            out.flush_pending()?;
            return refuse(shared, out.stream_mut()?, refusal::NOT_LEADER, msg, None);
        }
        let work = tapped.recv_timeout(shared.config.heartbeat);
        let mut out = sender.lock();
        out.flush_pending()?;
        match work {
            Ok(TapWork::Flush) => {}
            Ok(TapWork::Send(batch)) => {
                let sent = out.sent;
                if batch.last > sent {
                    if batch.first > sent + 1 {
                        // Records before this batch were written before the tap saw them (or
                        // it dropped them): they are durable, or about to be.
                        let upto = batch.first - 1;
                        durable
                            .wait_for_blocking(upto)
                            .map_err(|e| ProtocolError::Malformed(format!("journal: {e}")))?;
                        out.sent = send_from_disk(shared, out.stream_mut()?, to, sent, upto)?;
                    }
                    let sent = out.sent;
                    let skip = frames_before(&batch.frames, batch.first, sent + 1)?;
                    send_frames(
                        shared,
                        out.stream_mut()?,
                        to,
                        &batch.frames[skip..],
                        sent,
                        batch.last,
                    )?;
                    round_timing::mark(Stage::Sent, batch.last);
                    out.sent = batch.last;
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                // Idle: catch up whatever is durable but unsent (a dropped tap batch), then
                // heartbeat.
                let d = durable.get();
                if d > out.sent {
                    let sent = out.sent;
                    out.sent = send_from_disk(shared, out.stream_mut()?, to, sent, d)?;
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return Ok(()),
        }
        if last_heartbeat.elapsed() >= shared.config.heartbeat {
            write_message(
                out.stream_mut()?,
                &Message::Heartbeat {
                    term,
                    commit_seq: shared.tracker.commit().get(),
                    durable_seq: durable.get(),
                },
            )?;
            last_heartbeat = Instant::now();
        }
    }
    Ok(())
}

/// Counts a message of frames `sent + 1 ..= last`, `bytes` long, as sent.
fn count_sent(st: &mut SourceStatus, sent: u64, last: u64, bytes: u64) {
    st.sent_bytes += bytes;
    st.window.sent(last, last.saturating_sub(sent), bytes);
    st.sent_seq = st.sent_seq.max(last);
}

/// Byte offset in `frames` (whose first frame is seq `first`) of the frame of seq `want`.
fn frames_before(frames: &[u8], first: u64, want: u64) -> Result<usize, ProtocolError> {
    let mut at = 0;
    for _ in first..want {
        let len = frames
            .get(at..at + 4)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")) as usize)
            .ok_or_else(|| ProtocolError::Malformed("tapped batch shorter than its seqs".into()))?;
        at += crate::codec::FRAME_PREFIX_LEN + len;
    }
    Ok(at)
}

/// The session records are sent under: its term, and its id in the commit tracker.
#[derive(Debug, Clone, Copy)]
struct Session {
    term: u64,
    id: u64,
}

fn send_frames(
    shared: &Shared,
    stream: &mut TcpStream,
    to: Session,
    frames: &[u8],
    sent: u64,
    last: u64,
) -> Result<(), ProtocolError> {
    let mut message = Vec::with_capacity(frames.len() + 64);
    encode_records_into(&mut message, to.term, shared.tracker.commit().get(), frames);
    // Before the bytes go out: the standby may ack them as soon as they arrive.
    shared.tracker.on_sent(to.id, last);
    stream.write_all(&message)?;
    let mut st = shared.status.lock().expect("status mutex");
    count_sent(&mut st, sent, last, frames.len() as u64);
    Ok(())
}

/// Sends durable records `sent + 1 ..= upto` read from disk, in messages of at most
/// `max_batch_bytes`; returns the new last sent seq.
fn send_from_disk(
    shared: &Shared,
    stream: &mut TcpStream,
    to: Session,
    mut sent: u64,
    upto: u64,
) -> Result<u64, ProtocolError> {
    #[derive(Debug)]
    struct Full;
    impl From<JournalError> for Full {
        fn from(_: JournalError) -> Self {
            Full
        }
    }
    while sent < upto {
        let mut frames = Vec::new();
        let mut last = sent;
        let max = shared.config.max_batch_bytes;
        let read = shared.journal.visit_range(sent + 1, upto, |r| {
            if frames.len() >= max {
                return Err(Full);
            }
            encode_ref_into(&mut frames, &r);
            last = r.seq;
            Ok(())
        });
        if read.is_err() && last == sent {
            return Err(ProtocolError::Malformed(format!(
                "cannot read seq {} from the journal",
                sent + 1
            )));
        }
        send_frames(shared, stream, to, &frames, sent, last)?;
        sent = last;
    }
    Ok(sent)
}
