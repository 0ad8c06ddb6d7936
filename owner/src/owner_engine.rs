//! An owner whose segment is served by a transfer engine (`--transport transfer-engine`,
//! docs/transport.md "Transfer-engine segments"): the segment is exported through the engine
//! under its segment id and mounted with transport `transfer_engine`; the owner's TCP listener
//! keeps serving notices and the cold-restore staging region.

use std::sync::Arc;

use crescent_client::{ClientError, CrescentClient};
use crescent_transport::ffi::{FfiConfig, FfiTransport};
use crescent_transport::tcp::TcpTransport;
use crescent_transport::{RemoteSegment, SegmentMemory, Transport};
use crescent_wire::segments::TransportKind;

/// Where an owner's segment is served: its TCP listener, or a transfer engine.
#[derive(Debug)]
pub(crate) enum SegmentServer {
    Tcp(Arc<TcpTransport>),
    Engine(Arc<FfiTransport>),
}

impl SegmentServer {
    /// The server for a segment mounted with `kind`: the TCP listener, or an engine loaded
    /// from the client's engine configuration (INVALID_ARGUMENT when it has none).
    pub(crate) fn for_kind(
        kind: TransportKind,
        client: &CrescentClient,
        owner_id: &str,
        tcp: &Arc<TcpTransport>,
    ) -> Result<SegmentServer, ClientError> {
        match kind {
            TransportKind::Tcp => Ok(SegmentServer::Tcp(tcp.clone())),
            TransportKind::TransferEngine => {
                let config = client.transfer_engine_config().ok_or_else(|| {
                    ClientError::InvalidArgument(format!(
                        "a transfer-engine segment needs the engine's library: set {} (or the \
                         client's transfer_engine option)",
                        crescent_transport::ffi::LIBRARY_ENV
                    ))
                })?;
                let config = FfiConfig {
                    local_server_name: owner_id.to_string(),
                    ..config.clone()
                };
                let metrics = client.metrics().transport().clone();
                Ok(SegmentServer::Engine(Arc::new(FfiTransport::load(
                    config, metrics,
                )?)))
            }
            TransportKind::Embedded => Err(ClientError::InvalidArgument(
                "an owner serves its segment over tcp or a transfer engine; embedded segments \
                 belong to crescentd"
                    .into(),
            )),
        }
    }

    /// The transport the segment is mounted with.
    pub(crate) fn kind(&self) -> TransportKind {
        match self {
            SegmentServer::Tcp(_) => TransportKind::Tcp,
            SegmentServer::Engine(_) => TransportKind::TransferEngine,
        }
    }

    fn transport(&self) -> &dyn Transport {
        match self {
            SegmentServer::Tcp(t) => &**t,
            SegmentServer::Engine(e) => &**e,
        }
    }

    pub(crate) fn serve(
        &self,
        segment_id: &str,
        memory: Arc<SegmentMemory>,
    ) -> Result<(), ClientError> {
        Ok(self.transport().serve_segment(segment_id, memory)?)
    }

    pub(crate) fn withdraw(&self, segment_id: &str) -> Result<(), ClientError> {
        self.transport().withdraw_segment(segment_id)?;
        Ok(())
    }

    /// How this process's own client reaches the segment (`endpoint`: the TCP listener's).
    pub(crate) fn own_remote(&self, endpoint: &str, segment_id: Arc<str>) -> RemoteSegment {
        match self {
            SegmentServer::Tcp(_) => RemoteSegment::new(endpoint, segment_id),
            SegmentServer::Engine(_) => RemoteSegment::transfer_engine(endpoint, segment_id),
        }
    }
}
