//! Reading RPC frames (`crescent_wire::rpc`) with a short busy-poll before sleeping; used by
//! both ends of the RPC fast path (crescentd's listener and the client's connections).
//!
//! On loopback and in VMs, most of a round trip's latency is waking a sleeping thread (and an
//! idle CPU) when a frame arrives, not the work. So a reader polls the socket with non-blocking
//! reads for up to a caller-chosen `spin` (the client after sending a request; the server after
//! answering one, since the next request usually follows within microseconds). The polling goes
//! through a duplicate of the descriptor, since tokio's own `try_read` answers from cached
//! readiness and would never see new data without yielding; only then does it wait for the
//! reactor. Each poll yields the CPU to other runnable threads, so the spin never starves the
//! thread it is waiting for. The socket is TCP or, for a client on crescentd's own host, a
//! Unix stream socket ([`PolledSocket`]).

use std::io::{ErrorKind, Read};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use crescent_wire::rpc::{FrameHeader, RpcError, HEADER_LEN};
use tokio::io::Interest;
use tokio::net::{TcpStream, UnixStream};

/// A tokio stream socket whose readiness [`FrameInput`] waits on once its spin is over.
pub trait PolledSocket: AsFd {
    /// Waits until the reactor reports the socket readable.
    fn readable(&self) -> impl std::future::Future<Output = std::io::Result<()>>;
    /// Runs a read on the duplicate, clearing the readiness it saw if it would block.
    fn try_read_io<R>(&self, f: impl FnOnce() -> std::io::Result<R>) -> std::io::Result<R>;
}

impl PolledSocket for TcpStream {
    fn readable(&self) -> impl std::future::Future<Output = std::io::Result<()>> {
        TcpStream::readable(self)
    }
    fn try_read_io<R>(&self, f: impl FnOnce() -> std::io::Result<R>) -> std::io::Result<R> {
        self.try_io(Interest::READABLE, f)
    }
}

impl PolledSocket for UnixStream {
    fn readable(&self) -> impl std::future::Future<Output = std::io::Result<()>> {
        UnixStream::readable(self)
    }
    fn try_read_io<R>(&self, f: impl FnOnce() -> std::io::Result<R>) -> std::io::Result<R> {
        self.try_io(Interest::READABLE, f)
    }
}

/// Initial input buffer (a batch answer of a few dozen keys fits at once).
const INITIAL: usize = 16 << 10;

/// Buffered input of one connection.
pub struct FrameInput {
    /// A duplicate of the socket's descriptor (read(2) works on any socket; the duplicate
    /// shares the original's non-blocking flag).
    raw: std::fs::File,
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

#[derive(Debug)]
pub enum ReadFailure {
    Io(std::io::Error),
    Frame(RpcError),
}

impl FrameInput {
    /// `stream` stays the tokio side (readiness, writes); reads go through a duplicate.
    pub fn new(stream: &impl PolledSocket) -> std::io::Result<FrameInput> {
        let raw = std::fs::File::from(stream.as_fd().try_clone_to_owned()?);
        Ok(FrameInput {
            raw,
            buf: vec![0; INITIAL],
            start: 0,
            end: 0,
        })
    }

    /// Whether unread bytes are buffered.
    pub fn has_buffered(&self) -> bool {
        self.end > self.start
    }

    /// Whether the peer has closed (or reset) an idle connection; true also when unexpected
    /// bytes arrived (the connection is out of step).
    pub fn peer_gone(&mut self) -> bool {
        if self.has_buffered() {
            return true;
        }
        let mut probe = [0u8; 1];
        !matches!(self.raw.read(&mut probe), Err(ref e) if e.kind() == ErrorKind::WouldBlock)
    }

    /// Waits (polling for up to `spin` first) for the next frame to begin; false when the peer
    /// closed between frames.
    pub async fn next_frame_starts(
        &mut self,
        stream: &impl PolledSocket,
        spin: Duration,
    ) -> Result<bool, ReadFailure> {
        if self.has_buffered() {
            return Ok(true);
        }
        match self.fill_to(stream, 1, spin).await {
            Ok(()) => Ok(true),
            Err(ReadFailure::Io(e)) if e.kind() == ErrorKind::UnexpectedEof => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Reads one whole frame (polling for up to `spin` before sleeping); returns its header, with the body at `body()` until the next
    /// call.
    pub async fn read_frame(
        &mut self,
        stream: &impl PolledSocket,
        max_body: usize,
        spin: Duration,
    ) -> Result<FrameHeader, ReadFailure> {
        self.fill_to(stream, HEADER_LEN, spin).await?;
        let header: [u8; HEADER_LEN] = self.buf[self.start..self.start + HEADER_LEN]
            .try_into()
            .expect("HEADER_LEN bytes");
        let header = FrameHeader::parse(&header, max_body).map_err(ReadFailure::Frame)?;
        self.fill_to(stream, HEADER_LEN + header.body_len, spin)
            .await?;
        self.start += HEADER_LEN;
        Ok(header)
    }

    /// The request id of the buffered frame header that [`FrameInput::read_frame`] refused (so
    /// a server can answer it before closing).
    pub fn peek_request_id(&self) -> Option<u64> {
        let header = self.buf.get(self.start..self.start + HEADER_LEN)?;
        (self.end - self.start >= HEADER_LEN)
            .then(|| u64::from_le_bytes(header[5..13].try_into().expect("8 bytes")))
    }

    /// The body of the frame last read (and consumes it).
    pub fn take_body(&mut self, len: usize) -> &[u8] {
        let body = &self.buf[self.start..self.start + len];
        self.start += len;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        body
    }

    /// Drops a buffer that one huge frame grew.
    pub fn shrink(&mut self, keep: usize) {
        if self.buf.len() > keep && !self.has_buffered() {
            self.buf = vec![0; INITIAL];
            self.start = 0;
            self.end = 0;
        }
    }

    async fn fill_to(
        &mut self,
        stream: &impl PolledSocket,
        want: usize,
        spin: Duration,
    ) -> Result<(), ReadFailure> {
        if self.end - self.start >= want {
            return Ok(());
        }
        if self.start + want > self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let spin_until = Instant::now() + spin;
        while self.end - self.start < want {
            // The buffer grows only as bytes arrive (at most doubling what is already held),
            // never to a length a header merely claims: a peer that announces a huge frame
            // and sends nothing costs nothing (docs/configuration.md, `[net]`).
            if self.end == self.buf.len() {
                let grown = (self.buf.len() * 2).min(want.next_power_of_two());
                self.buf.resize(grown, 0);
            }
            let got = match self.raw.read(&mut self.buf[self.end..]) {
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    if Instant::now() < spin_until {
                        // Give the CPU to any other runnable thread between polls: on a busy
                        // machine (few cores, builds alongside) a pure spin keeps the very
                        // thread that would answer (the peer, or our own transfer listener)
                        // off the core, turning a µs wait into a scheduler time slice. With
                        // nothing else runnable, the yield returns at once.
                        std::thread::yield_now();
                        continue;
                    }
                    stream.readable().await.map_err(ReadFailure::Io)?;
                    let raw = &self.raw;
                    let buf = &mut self.buf[self.end..];
                    match stream.try_read_io(|| (&*raw).read(buf)) {
                        Err(e) if e.kind() == ErrorKind::WouldBlock => continue,
                        other => other,
                    }
                }
                other => other,
            };
            match got {
                Ok(0) => {
                    return Err(ReadFailure::Io(std::io::Error::new(
                        ErrorKind::UnexpectedEof,
                        "connection closed",
                    )))
                }
                Ok(n) => self.end += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(ReadFailure::Io(e)),
            }
        }
        Ok(())
    }
}
