//! The write side of one replication session, shared by the journal writer's tap and the
//! session thread.
//!
//! The tap runs on the active's journal writer thread, just before its own sync. Waking the
//! session thread to send each batch cost a thread hand-off on every sync round (measured
//! 60-80 us of a 700 us round, docs/ha.md "The sync commit path"), so the tap sends the
//! Records message itself with a non-blocking `send`, and leaves the batch to the session
//! thread only when it cannot without waiting: the session thread is writing (lock taken),
//! an earlier batch is still queued for it (order), or the socket is full (a slow standby).
//! A message the socket took only part of is finished by the session thread before anything
//! else goes out. The writer thread therefore never waits for the standby.

use std::io::Write;
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::{Mutex, MutexGuard, TryLockError};

use super::protocol::encode_records_into;

/// What the tap did with a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum DirectSend {
    /// On the wire (or in the kernel's send buffer): `bytes` of frames sent.
    Sent { bytes: u64 },
    /// The socket took part of the message; the session thread must finish it
    /// ([`SendState::flush_pending`]) before writing anything else.
    Partial { bytes: u64 },
    /// Not sent: the session thread sends it.
    Deferred,
}

/// What is on the wire so far, and the socket to write more.
pub(super) struct SendState {
    /// `None` once the session ended (the tap may outlive it: it is replaced, not removed).
    stream: Option<TcpStream>,
    /// Last seq written to the socket (or to `pending`).
    pub sent: u64,
    /// The rest of a message the tap could only partly write.
    pending: Vec<u8>,
    /// Reused encoding buffer of the tap's messages.
    buffer: Vec<u8>,
}

/// Told the last seq of each message just before its bytes go out (the commit tracker's
/// count of what a connection was sent: an ack above it is refused).
pub(super) type OnWire = Box<dyn Fn(u64) + Send + Sync>;

pub(super) struct RecordSender {
    state: Mutex<SendState>,
    on_wire: OnWire,
}

impl RecordSender {
    /// A sender on `stream` (the session's blocking handle, with its write timeout) after
    /// seq `sent`; `on_wire` hears of every message's last seq before it is written.
    pub fn new(stream: TcpStream, sent: u64, on_wire: OnWire) -> Self {
        Self {
            state: Mutex::new(SendState {
                stream: Some(stream),
                sent,
                pending: Vec::new(),
                buffer: Vec::new(),
            }),
            on_wire,
        }
    }

    /// For the session thread: waits for the tap's send, if one is under way. (Its own writes
    /// report what they send to the commit tracker themselves.)
    pub fn lock(&self) -> MutexGuard<'_, SendState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sends the batch `first..=last` now if that needs no waiting at all (see the module doc).
    pub fn try_send_direct(
        &self,
        term: u64,
        commit_seq: u64,
        first: u64,
        last: u64,
        frames: &[u8],
    ) -> DirectSend {
        let mut st = match self.state.try_lock() {
            Ok(st) => st,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return DirectSend::Deferred,
        };
        if st.sent + 1 != first || !st.pending.is_empty() {
            return DirectSend::Deferred;
        }
        let st = &mut *st;
        let Some(stream) = st.stream.as_ref() else {
            return DirectSend::Deferred;
        };
        st.buffer.clear();
        encode_records_into(&mut st.buffer, term, commit_seq, frames);
        // Before the bytes go out: the standby may ack them as soon as they arrive. If the
        // socket takes nothing, the session thread sends these very seqs next.
        (self.on_wire)(last);
        let written = match send_nonblocking(stream, &st.buffer) {
            Ok(n) => n,
            Err(e) => {
                // Broken connection: end the session (its thread sees the shutdown); nothing
                // was half-written that anyone will read.
                tracing::info!(error = %e, "replication send failed");
                let _ = stream.shutdown(std::net::Shutdown::Both);
                return DirectSend::Deferred;
            }
        };
        let bytes = frames.len() as u64;
        if written == 0 {
            return DirectSend::Deferred;
        }
        st.sent = last;
        if written == st.buffer.len() {
            DirectSend::Sent { bytes }
        } else {
            st.pending.extend_from_slice(&st.buffer[written..]);
            DirectSend::Partial { bytes }
        }
    }

    /// The session ended: drop the socket handle (the tap may live on until replaced).
    pub fn close(&self) {
        self.lock().stream = None;
    }
}

impl SendState {
    /// Finishes a message the tap only partly wrote (blocking, with the write timeout).
    pub fn flush_pending(&mut self) -> std::io::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let pending = std::mem::take(&mut self.pending);
        self.stream_mut()?.write_all(&pending)
    }

    /// The socket, for the session thread's own (blocking) writes. Finish
    /// [`SendState::flush_pending`] first.
    pub fn stream_mut(&mut self) -> std::io::Result<&mut TcpStream> {
        debug_assert!(self.pending.is_empty(), "a partial message goes first");
        self.stream
            .as_mut()
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotConnected))
    }
}

/// Writes as much of `bytes` as the socket takes without blocking; `Ok(0)` when it is full.
/// (`MSG_DONTWAIT` makes this one call non-blocking: the socket's other handles stay
/// blocking with their timeouts.)
fn send_nonblocking(stream: &TcpStream, bytes: &[u8]) -> std::io::Result<usize> {
    let fd = stream.as_raw_fd();
    let mut written = 0;
    while written < bytes.len() {
        let rest = &bytes[written..];
        // SAFETY: `rest` is a valid, initialised buffer for the duration of the call, and
        // `fd` stays open while `stream` is borrowed.
        #[allow(unsafe_code)]
        let n = unsafe {
            libc::send(
                fd,
                rest.as_ptr().cast(),
                rest.len(),
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
        if n >= 0 {
            written += n as usize;
            continue;
        }
        let e = std::io::Error::last_os_error();
        match e.kind() {
            std::io::ErrorKind::WouldBlock => break,
            std::io::ErrorKind::Interrupted => continue,
            _ => return Err(e),
        }
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replication::protocol::{read_message, Message};
    use std::net::TcpListener;

    fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        (server, client)
    }

    #[test]
    fn sends_in_order_and_defers_what_would_skip_a_seq() {
        let (server, mut client) = pair();
        let sender = RecordSender::new(server, 4, Box::new(|_| {}));
        assert_eq!(
            sender.try_send_direct(2, 3, 6, 7, b"xx"),
            DirectSend::Deferred,
            "seq 5 is not on the wire yet"
        );
        assert_eq!(
            sender.try_send_direct(2, 3, 5, 7, b"abc"),
            DirectSend::Sent { bytes: 3 }
        );
        assert_eq!(sender.lock().sent, 7);
        let m = read_message(&mut client).unwrap();
        assert_eq!(
            m,
            Message::Records {
                term: 2,
                commit_seq: 3,
                frames: b"abc".to_vec()
            }
        );
        let held = sender.lock();
        assert_eq!(
            sender.try_send_direct(2, 3, 8, 8, b"d"),
            DirectSend::Deferred,
            "never waits for the session thread"
        );
        drop(held);
        sender.close();
        assert_eq!(
            sender.try_send_direct(2, 3, 8, 8, b"d"),
            DirectSend::Deferred
        );
    }

    #[test]
    fn a_full_socket_leaves_the_rest_to_the_session_thread_in_order() {
        let (server, mut client) = pair();
        let sender = RecordSender::new(server, 0, Box::new(|_| {}));
        // Nobody reads: fill the socket until it takes nothing more.
        let big = vec![5u8; 1 << 20];
        let mut seq = 0;
        let mut partial = false;
        loop {
            match sender.try_send_direct(1, 0, seq + 1, seq + 1, &big) {
                DirectSend::Sent { .. } => seq += 1,
                DirectSend::Partial { .. } => {
                    seq += 1;
                    partial = true;
                }
                DirectSend::Deferred => break,
            }
            assert!(seq < 1000, "the socket never filled");
        }
        assert!(partial, "the last message that went out went out in part");
        assert_eq!(sender.lock().sent, seq);
        let reader = std::thread::spawn(move || {
            let mut n = 0;
            while let Ok(Message::Records { frames, .. }) = read_message(&mut client) {
                assert_eq!(frames.len(), big.len(), "every message whole");
                n += 1;
            }
            n
        });
        {
            let mut st = sender.lock();
            st.flush_pending().unwrap();
            st.stream_mut()
                .unwrap()
                .shutdown(std::net::Shutdown::Write)
                .unwrap();
        }
        assert_eq!(reader.join().unwrap(), seq);
    }
}
