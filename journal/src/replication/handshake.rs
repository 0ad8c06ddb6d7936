//! The active's side of the replication handshake: from accept to Welcome (or a refusal).
//!
//! Nothing a connection sends before its Welcome touches the running session (docs/ha.md,
//! "Which acks count"): the Hello is read within the handshake timeout and [`MAX_HELLO`]
//! bytes, its protocol version checked, and with auth on its `peer` credential verified
//! ([`PeerCheck`], docs/security.md "Replication peers") before the active answers anything
//! but a refusal or reads its own journal for the standby. Only then are the capabilities, the
//! term and the standby's position checked and the Welcome sent; the caller replaces the
//! running session after that.

use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::protocol::{
    digest_from, read_message_within, refusal, write_message, Message, ProtocolError, RewindPoint,
    MAX_HELLO, PROTOCOL_VERSION,
};
use super::source::Shared;
use crate::error::JournalError;
use crate::journal::Journal;

/// Why a standby's credential is not accepted: a stable code ([`refusal::UNAUTHENTICATED`],
/// [`refusal::PERMISSION_DENIED`], [`refusal::UNAVAILABLE`]) and a message for the standby
/// (never the token).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerRefusal {
    pub code: &'static str,
    pub message: String,
}

/// Verifies the token a Hello carries (`None`: it carries none), given the peer's address.
/// The node behind it counts and logs its refusals (with bounded labels, rate-limited).
type PeerCheckFn = dyn Fn(Option<&str>, SocketAddr) -> Result<(), PeerRefusal> + Send + Sync;

/// The active's credential check for standbys (auth on); see [`PeerCheckFn`].
#[derive(Clone)]
pub struct PeerCheck(pub Arc<PeerCheckFn>);

impl PeerCheck {
    pub fn new(
        f: impl Fn(Option<&str>, SocketAddr) -> Result<(), PeerRefusal> + Send + Sync + 'static,
    ) -> Self {
        Self(Arc::new(f))
    }
}

impl std::fmt::Debug for PeerCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PeerCheck(..)")
    }
}

/// A standby that completed the handshake and was sent its Welcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Welcomed {
    pub node: String,
    pub term: u64,
    pub from_seq: u64,
    /// (event kind, newest version it replays), from its Hello.
    pub capabilities: Vec<(String, u16)>,
}

/// What a connection that passed the handshake gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Accepted {
    /// A standby following the journal.
    Follow(Welcomed),
    /// A proven standby asking for a snapshot (docs/ha.md, "Reseeding"): nothing was sent yet,
    /// and the running session is not touched.
    Reseed { node: String, term: u64 },
}

/// Logs at most once per interval, saying how many it left out.
#[derive(Debug, Default)]
pub(super) struct LogLimiter {
    last: Mutex<Option<Instant>>,
    suppressed: AtomicU64,
}

/// One log line per this interval for each limiter.
const LOG_INTERVAL: Duration = Duration::from_secs(60);

impl LogLimiter {
    /// `Some(left out since the last line)` when a line may be logged now.
    pub fn allow(&self) -> Option<u64> {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        if last.is_some_and(|t| now.duration_since(t) < LOG_INTERVAL) {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        *last = Some(now);
        Some(self.suppressed.swap(0, Ordering::Relaxed))
    }
}

/// Reads with one deadline for the whole message: each read waits at most the time left, so
/// a peer trickling bytes cannot hold the connection past it.
struct DeadlineReader<'a> {
    stream: &'a TcpStream,
    deadline: Instant,
}

impl Read for DeadlineReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "no whole Hello within the handshake timeout",
            ));
        }
        self.stream.set_read_timeout(Some(left))?;
        let mut stream: &TcpStream = self.stream;
        stream.read(buf)
    }
}

/// Runs the handshake on an accepted connection. `Err(())`: it ended without a session
/// (refused, or closed for a broken or late Hello), already logged and counted.
pub(super) fn handshake(
    shared: &Shared,
    stream: &mut TcpStream,
    peer: SocketAddr,
) -> Result<Accepted, ()> {
    let hello = read_hello(shared, stream).map_err(|e| {
        shared.count_closed("handshake");
        if let Some(left_out) = shared.unproven_log.allow() {
            tracing::info!(%peer, error = %e, code = e.code(), left_out,
                "replication connection closed before a valid Hello");
        }
    })?;
    let (version, node, last_seq, last_term, last_digest, capabilities, token, reseed) = match hello
    {
        Message::Hello {
            version,
            node,
            last_seq,
            last_term,
            last_digest,
            capabilities,
            token,
            reseed,
        } => (
            version,
            node,
            last_seq,
            last_term,
            last_digest,
            capabilities,
            token,
            reseed,
        ),
        other => {
            shared.count_closed("handshake");
            if let Some(left_out) = shared.unproven_log.allow() {
                tracing::info!(%peer, kind = other.kind(), left_out,
                    "replication connection closed: its first message is not a Hello");
            }
            return Err(());
        }
    };
    if version != PROTOCOL_VERSION {
        shared.count_closed("handshake");
        let msg = format!(
            "replication protocol version {version}; this active speaks {PROTOCOL_VERSION} \
             (version 2 added the standby's peer credential, version 3 reseeding): run the \
             same crescentd release on both nodes"
        );
        if let Some(left_out) = shared.unproven_log.allow() {
            tracing::warn!(%peer, %msg, left_out, "refusing a standby");
        }
        return send_refusal(shared, stream, refusal::INCOMPATIBLE, msg, None);
    }
    if let Some(check) = &shared.config.peer_check {
        if let Err(r) = (check.0)(token.as_ref().map(|t| t.0.as_str()), peer) {
            // The check logged it (rate-limited) and counted it.
            return send_refusal(shared, stream, r.code, r.message, None);
        }
    }
    let refuse = |stream: &mut TcpStream, code: &str, msg: String, rewind| {
        if let Some(left_out) = shared.proven_log.allow() {
            tracing::warn!(%peer, standby = %node, code, %msg, left_out, "refusing a standby");
        }
        send_refusal(shared, stream, code, msg, rewind)
    };
    if let Err(why) = (shared.capabilities)(&capabilities) {
        return refuse(stream, refusal::INCOMPATIBLE, why, None);
    }
    let Some(term) = (shared.term)() else {
        let msg = "this node is not the active".to_string();
        return refuse(stream, refusal::NOT_LEADER, msg, None);
    };
    if reseed {
        return Ok(Accepted::Reseed { node, term });
    }
    let Ok(last_digest) = digest_from(&last_digest) else {
        let msg = format!("a digest of {} bytes", last_digest.len());
        return refuse(stream, refusal::INCOMPATIBLE, msg, None);
    };
    let from_seq = match check_position(&shared.journal, last_seq, last_term, &last_digest) {
        Ok(from) => from,
        Err((code, message, rewind)) => return refuse(stream, code, message, rewind),
    };
    let welcome = Message::Welcome {
        version: PROTOCOL_VERSION,
        term,
        leader: shared.config.node.clone(),
        from_seq,
    };
    if let Err(e) = write_message(stream, &welcome) {
        tracing::info!(%peer, standby = %node, error = %e, "standby gone before its Welcome");
        return Err(());
    }
    Ok(Accepted::Follow(Welcomed {
        node,
        term,
        from_seq,
        capabilities,
    }))
}

/// The first message, within the handshake timeout and [`MAX_HELLO`] bytes.
fn read_hello(shared: &Shared, stream: &mut TcpStream) -> Result<Message, ProtocolError> {
    stream.set_nonblocking(false)?;
    stream.set_nodelay(true)?;
    stream.set_write_timeout(Some(shared.config.handshake_timeout))?;
    let mut reader = DeadlineReader {
        stream,
        deadline: Instant::now() + shared.config.handshake_timeout,
    };
    read_message_within(&mut reader, MAX_HELLO)
}

/// Sends a refusal (recorded in the status) and ends the handshake.
pub(super) fn send_refusal(
    shared: &Shared,
    stream: &mut TcpStream,
    code: &str,
    message: String,
    rewind_to: Option<RewindPoint>,
) -> Result<Accepted, ()> {
    shared.status.lock().expect("status mutex").last_refusal =
        Some((code.to_string(), message.clone()));
    let refused = Message::Refused {
        code: code.to_string(),
        message,
        rewind_to,
    };
    // The peer may be gone already: nothing more to do either way.
    let _ = write_message(stream, &refused);
    Err(())
}

/// Where a standby at (`last_seq`, `last_digest`) continues, or why it cannot.
pub(super) fn check_position(
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
    if let Some((seq, _, digest)) = journal.base() {
        if seq == last_seq && &digest == last_digest {
            return Ok(last_seq + 1);
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_limiter_lets_one_line_through_per_interval_and_counts_the_rest() {
        let l = LogLimiter::default();
        assert_eq!(l.allow(), Some(0));
        assert_eq!(l.allow(), None);
        assert_eq!(l.allow(), None);
        *l.last.lock().unwrap() = Some(Instant::now() - LOG_INTERVAL);
        assert_eq!(l.allow(), Some(2));
    }

    #[test]
    fn a_trickling_peer_is_cut_at_the_deadline() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        let writer = std::thread::spawn(move || {
            use std::io::Write;
            // A length of 40 bytes, then one byte every 50 ms: never whole within 300 ms.
            let _ = client.write_all(&40u32.to_le_bytes());
            for _ in 0..20 {
                if client.write_all(&[0x80]).is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        let started = Instant::now();
        let mut reader = DeadlineReader {
            stream: &server,
            deadline: started + Duration::from_millis(300),
        };
        let err = read_message_within(&mut reader, MAX_HELLO).unwrap_err();
        let took = started.elapsed();
        assert!(matches!(err, ProtocolError::Io(_)), "{err}");
        assert!(
            took >= Duration::from_millis(290) && took < Duration::from_millis(800),
            "{took:?}"
        );
        drop(server);
        writer.join().unwrap();
    }
}
