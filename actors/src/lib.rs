//! Crescent's domain: pure aggregates and the actix actor shells that journal their events.
//!
//! Cargo feature `runtime` (on by default) adds everything that runs against the journal: the
//! actix actor shells (`runtime`), the replay state (`World`) and the record codec
//! (`event_codec`). Without it the crate holds only the pure aggregates and their event
//! payloads, and builds without actix or the journal (docs/architecture.md "Crates").

pub mod aggregate;
#[cfg(feature = "runtime")]
pub mod event_codec;
pub mod event_macro;
pub mod event_payload;
pub mod event_versions;
pub mod incarnation;
pub mod quota_root;
pub mod removed_puts;
#[cfg(feature = "runtime")]
pub mod runtime;
pub mod segment_registry;
pub mod testing;
#[cfg(test)]
mod wire_code_tests;
#[cfg(feature = "runtime")]
pub mod world;

pub use aggregate::{Aggregate, Ctx, DecodeError, DomainEvent, ErrorCode, WireCoded};
/// How a caller should treat an aggregate's error (the same type as the journal's).
pub use crescent_error_class::ErrorClass;
pub use event_versions::{EventVersionPolicy, EventVersions, StartAt};
#[cfg(feature = "runtime")]
pub use runtime::{AggregateRegistry, Executed, Runtime, RuntimeError};
pub use segment_registry::{
    SegmentRegistry, SegmentRegistryCommand, SegmentRegistryError, SegmentRegistryEvent,
    TransportKind,
};
#[cfg(feature = "runtime")]
pub use world::{Table, World, WorldError};
