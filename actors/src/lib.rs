//! Crescent's domain: pure aggregates and the actix actor shells that journal their events.

pub mod aggregate;
pub mod event_codec;
pub mod event_payload;
#[cfg(test)]
mod given_when_then;
pub mod incarnation;
pub mod quota_root;
pub mod removed_puts;
pub mod runtime;
pub mod segment_registry;
pub mod world;

pub use aggregate::{Aggregate, Ctx, DecodeError, DomainEvent, WireCoded};
pub use runtime::{AggregateRegistry, Executed, Runtime, RuntimeError};
pub use segment_registry::{
    SegmentRegistry, SegmentRegistryCommand, SegmentRegistryError, SegmentRegistryEvent,
    TransportKind,
};
pub use world::{Table, World, WorldError};
