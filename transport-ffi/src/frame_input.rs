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
//! thread it is waiting for.

use std::io::{ErrorKind, Read};
use std::time::{Duration, Instant};

use crescent_wire::rpc::{FrameHeader, RpcError, HEADER_LEN};
use tokio::io::Interest;
use tokio::net::TcpStream;

/// Initial input buffer (a batch answer of a few dozen keys fits at once).
const INITIAL: usize = 16 << 10;

/// Buffered input of one connection.
pub struct FrameInput {
    raw: std::net::TcpStream,
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
    pub fn new(stream: &TcpStream) -> std::io::Result<FrameInput> {
        let raw = socket_dup(stream)?;
        raw.set_nonblocking(true)?;
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
        stream: &TcpStream,
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
        stream: &TcpStream,
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
        stream: &TcpStream,
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
                    match stream.try_io(Interest::READABLE, || (&*raw).read(buf)) {
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

/// A second descriptor for the same socket.
fn socket_dup(stream: &TcpStream) -> std::io::Result<std::net::TcpStream> {
    use std::os::fd::AsFd;
    let owned = stream.as_fd().try_clone_to_owned()?;
    Ok(std::net::TcpStream::from(owned))
}
