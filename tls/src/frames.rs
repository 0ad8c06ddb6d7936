//! Reading RPC frames (`crescent_wire::rpc`) from a TLS stream: the TLS counterpart of
//! `crescent_transport::frame_input`, used by both ends of the RPC fast path when `[tls]` is
//! on. No busy-poll: the bytes must pass through the TLS session, so the reader waits for the
//! reactor like any tokio reader. Buffers grow only as bytes arrive, never to a length a header
//! merely claims (docs/configuration.md, "Network bounds").

use std::io::{self, ErrorKind};

use crescent_transport::frame_input::ReadFailure;
use crescent_wire::rpc::{FrameHeader, HEADER_LEN};
use tokio::io::{AsyncRead, AsyncReadExt};

const INITIAL: usize = 16 << 10;

/// Buffered decrypted input of one connection.
#[derive(Debug)]
pub struct StreamFrames {
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl Default for StreamFrames {
    fn default() -> Self {
        Self {
            buf: vec![0; INITIAL],
            start: 0,
            end: 0,
        }
    }
}

impl StreamFrames {
    /// Whether unread bytes are buffered.
    pub fn has_buffered(&self) -> bool {
        self.end > self.start
    }

    /// Waits for the next frame to begin; false when the peer closed between frames.
    pub async fn next_frame_starts<R: AsyncRead + Unpin>(
        &mut self,
        reader: &mut R,
    ) -> Result<bool, ReadFailure> {
        if self.has_buffered() {
            return Ok(true);
        }
        match self.fill_to(reader, 1).await {
            Ok(()) => Ok(true),
            Err(ReadFailure::Io(e)) if e.kind() == ErrorKind::UnexpectedEof => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Reads one whole frame; its body is at [`StreamFrames::take_body`] until the next call.
    pub async fn read_frame<R: AsyncRead + Unpin>(
        &mut self,
        reader: &mut R,
        max_body: usize,
    ) -> Result<FrameHeader, ReadFailure> {
        self.fill_to(reader, HEADER_LEN).await?;
        let header: [u8; HEADER_LEN] = self.buf[self.start..self.start + HEADER_LEN]
            .try_into()
            .expect("HEADER_LEN bytes");
        let header = FrameHeader::parse(&header, max_body).map_err(ReadFailure::Frame)?;
        self.fill_to(reader, HEADER_LEN + header.body_len).await?;
        self.start += HEADER_LEN;
        Ok(header)
    }

    /// The request id of a buffered header that [`StreamFrames::read_frame`] refused.
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
            *self = Self::default();
        }
    }

    async fn fill_to<R: AsyncRead + Unpin>(
        &mut self,
        reader: &mut R,
        want: usize,
    ) -> Result<(), ReadFailure> {
        if self.end - self.start >= want {
            return Ok(());
        }
        if self.start + want > self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        while self.end - self.start < want {
            if self.end == self.buf.len() {
                let grown = (self.buf.len() * 2).min(want.next_power_of_two());
                self.buf.resize(grown, 0);
            }
            match reader.read(&mut self.buf[self.end..]).await {
                Ok(0) => {
                    return Err(ReadFailure::Io(io::Error::new(
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

/// Whether the peer of an idle pooled connection has gone: the socket has reached its end or
/// failed, or bytes arrived where none are due (a close_notify; crescentd sends no session
/// tickets: [`crate::server_config`]). Looks without consuming, through a duplicate of the
/// descriptor (tokio's readiness is cached until the task yields).
pub fn idle_peer_gone(stream: &tokio::net::TcpStream) -> bool {
    use std::os::fd::AsFd;
    let Ok(owned) = stream.as_fd().try_clone_to_owned() else {
        return true;
    };
    let raw = std::net::TcpStream::from(owned);
    let mut probe = [0u8; 1];
    !matches!(raw.peek(&mut probe), Err(ref e) if e.kind() == ErrorKind::WouldBlock)
}
