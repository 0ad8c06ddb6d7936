//! What one RPC connection reads frames from and writes answers to: a plain socket, TCP or the
//! local Unix socket (with `crescent_transport::frame_input`'s busy-poll), or a TLS session over
//! TCP (`[tls]`, docs/security.md "TLS"). The connection loop is generic over it, so each kind is compiled
//! on its own and the plain path stays exactly as it was: nothing is chosen per frame.

use std::time::Duration;

use crescent_transport::frame_input::{FrameInput, PolledSocket, ReadFailure};
use crescent_wire::rpc::FrameHeader;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

pub(super) trait Wire {
    fn has_buffered(&self) -> bool;
    async fn next_frame_starts(&mut self, spin: Duration) -> Result<bool, ReadFailure>;
    async fn read_frame(
        &mut self,
        max_body: usize,
        spin: Duration,
    ) -> Result<FrameHeader, ReadFailure>;
    fn take_body(&mut self, len: usize) -> &[u8];
    fn shrink(&mut self, keep: usize);
    fn peek_request_id(&self) -> Option<u64>;
    async fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()>;
}

/// A plain socket (TCP or Unix): reads through a duplicate of the descriptor with a short
/// busy-poll.
pub(super) struct Plain<S> {
    pub stream: S,
    pub input: FrameInput,
}

impl<S: PolledSocket + AsyncWrite + Unpin> Wire for Plain<S> {
    fn has_buffered(&self) -> bool {
        self.input.has_buffered()
    }
    async fn next_frame_starts(&mut self, spin: Duration) -> Result<bool, ReadFailure> {
        self.input.next_frame_starts(&self.stream, spin).await
    }
    async fn read_frame(
        &mut self,
        max_body: usize,
        spin: Duration,
    ) -> Result<FrameHeader, ReadFailure> {
        self.input.read_frame(&self.stream, max_body, spin).await
    }
    fn take_body(&mut self, len: usize) -> &[u8] {
        self.input.take_body(len)
    }
    fn shrink(&mut self, keep: usize) {
        self.input.shrink(keep)
    }
    fn peek_request_id(&self) -> Option<u64> {
        self.input.peek_request_id()
    }
    async fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes).await
    }
}

/// A TLS session: frames are read from the decrypted stream (no busy-poll).
pub(super) struct Tls {
    pub stream: crescent_tls::server::TlsStream<TcpStream>,
    pub input: crescent_tls::frames::StreamFrames,
}

impl Wire for Tls {
    fn has_buffered(&self) -> bool {
        self.input.has_buffered()
    }
    async fn next_frame_starts(&mut self, _spin: Duration) -> Result<bool, ReadFailure> {
        self.input.next_frame_starts(&mut self.stream).await
    }
    async fn read_frame(
        &mut self,
        max_body: usize,
        _spin: Duration,
    ) -> Result<FrameHeader, ReadFailure> {
        self.input.read_frame(&mut self.stream, max_body).await
    }
    fn take_body(&mut self, len: usize) -> &[u8] {
        self.input.take_body(len)
    }
    fn shrink(&mut self, keep: usize) {
        self.input.shrink(keep)
    }
    fn peek_request_id(&self) -> Option<u64> {
        self.input.peek_request_id()
    }
    async fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes).await?;
        // A TLS stream buffers the records it wrote: push them out now.
        self.stream.flush().await
    }
}
