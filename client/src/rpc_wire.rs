//! One RPC connection's byte stream: plain TCP or the server's local socket (read with
//! `crescent_transport::frame_input`'s busy-poll), or, when the server's `GET /v1/rpc` says
//! `tls`, a TLS session over TCP (docs/security.md, "TLS"). Chosen when the connection is made; each call matches on it
//! (no dynamic dispatch on the frame path).

use std::sync::Arc;
use std::time::Duration;

use crescent_tls::frames::StreamFrames;
use crescent_transport::frame_input::{FrameInput, ReadFailure};
use crescent_wire::rpc::FrameHeader;
use rustls::pki_types::ServerName;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpStream, UnixStream};

/// How to open TLS to one RPC listener: the client's CA and the name the server's
/// certificate must carry (the host the HTTP API was reached on).
#[derive(Clone)]
pub(crate) struct RpcTls {
    pub connector: crescent_tls::TlsConnector,
    pub name: ServerName<'static>,
}

impl RpcTls {
    pub fn new(config: Arc<crescent_tls::ClientConfig>, host: &str) -> Option<Self> {
        Some(Self {
            connector: crescent_tls::TlsConnector::from(config),
            name: crescent_tls::server_name(host).ok()?,
        })
    }
}

pub(crate) enum ClientWire {
    Plain {
        stream: TcpStream,
        input: FrameInput,
    },
    Tls {
        stream: Box<crescent_tls::client::TlsStream<TcpStream>>,
        input: StreamFrames,
    },
    /// The server's local socket (docs/api.md, "Local socket").
    Local {
        stream: UnixStream,
        input: FrameInput,
    },
}

impl ClientWire {
    pub async fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match self {
            ClientWire::Plain { stream, .. } => stream.write_all(bytes).await,
            ClientWire::Local { stream, .. } => stream.write_all(bytes).await,
            ClientWire::Tls { stream, .. } => {
                stream.write_all(bytes).await?;
                stream.flush().await
            }
        }
    }

    pub async fn read_frame(
        &mut self,
        max_body: usize,
        spin: Duration,
    ) -> Result<FrameHeader, ReadFailure> {
        match self {
            ClientWire::Plain { stream, input } => input.read_frame(stream, max_body, spin).await,
            ClientWire::Local { stream, input } => input.read_frame(stream, max_body, spin).await,
            ClientWire::Tls { stream, input } => input.read_frame(stream.as_mut(), max_body).await,
        }
    }

    pub fn take_body(&mut self, len: usize) -> &[u8] {
        match self {
            ClientWire::Plain { input, .. } | ClientWire::Local { input, .. } => {
                input.take_body(len)
            }
            ClientWire::Tls { input, .. } => input.take_body(len),
        }
    }

    pub fn shrink(&mut self, keep: usize) {
        match self {
            ClientWire::Plain { input, .. } | ClientWire::Local { input, .. } => input.shrink(keep),
            ClientWire::Tls { input, .. } => input.shrink(keep),
        }
    }

    /// Whether the server closed (or broke) an idle connection.
    pub fn peer_gone(&mut self) -> bool {
        match self {
            ClientWire::Plain { input, .. } | ClientWire::Local { input, .. } => input.peer_gone(),
            ClientWire::Tls { stream, input } => {
                input.has_buffered() || crescent_tls::frames::idle_peer_gone(stream.get_ref().0)
            }
        }
    }
}
