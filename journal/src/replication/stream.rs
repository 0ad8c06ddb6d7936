//! A welcomed standby's session: streams records from the journal writer's tap (sent by the
//! tap itself when the socket takes them at once, sender.rs) and from disk for anything older,
//! with heartbeats when idle, until the session is stopped, replaced or its term ends.

use std::io::Write;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use super::protocol::{encode_records_into, refusal, write_message, Message, ProtocolError};
use super::round_timing::{self, Stage};
use super::sender::{DirectSend, RecordSender};
use super::source::{Shared, SourceStatus};
use crate::codec::encode_ref_into;
use crate::error::JournalError;

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

pub(super) fn stream_records(
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
            tracing::warn!(%msg, "ending the standby's session");
            shared.status.lock().expect("status mutex").last_refusal =
                Some((refusal::NOT_LEADER.to_string(), msg.clone()));
            let mut out = sender.lock();
            out.flush_pending()?;
            let refused = Message::Refused {
                code: refusal::NOT_LEADER.to_string(),
                message: msg,
                rewind_to: None,
            };
            return write_message(out.stream_mut()?, &refused);
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
