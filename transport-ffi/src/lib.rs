//! Crescent's data plane: bytes move directly between clients and storage owners; the control
//! plane only decides where they live (segment id, offset, length).
//!
//! - [`Transport`]: register local memory, run batches of reads/writes against remote segment
//!   ranges, one status per transfer.
//! - [`SegmentMemory`]: page-aligned (or caller-owned) memory behind range locks, so concurrent
//!   transfers into disjoint ranges run in parallel and overlapping ones never race.
//! - [`tcp::TcpTransport`] (default): a transfer listener per storage owner and pooled,
//!   pipelined client connections; the frame layout is documented in [`tcp::protocol`].
//! - [`ffi::FfiTransport`]: the same trait over a dlopened library with the C API of
//!   Mooncake's `transfer_engine_c.h`; `c/mini_transfer_engine.c` is a small implementation.
//! - [`RoutedTransport`]: both at once, each transfer sent where its segment is served.
//! - [`TransportConfig`] selects one; [`TransportMetrics`] holds the Prometheus families.

pub mod config;
pub mod error;
pub mod ffi;
pub mod frame_input;
pub mod frozen;
pub mod grant;
pub mod memory;
pub mod metrics;
mod range_lock;
pub mod routed;
pub mod tcp;
pub mod transport;

pub use config::{build_transport, TransportConfig};
pub use error::{ErrorClass, Result, TransportError};
pub use frozen::FrozenMemory;
pub use grant::{Grant, GrantKey, GrantKeys, GrantRefusal};
pub use memory::{page_size, SegmentMemory};
pub use metrics::TransportMetrics;
pub use routed::RoutedTransport;
pub use transport::{
    BatchCompletion, BoxFuture, LocalHandle, RemoteSegment, TransferDescriptor, TransferOp,
    Transport, TransportKind,
};
