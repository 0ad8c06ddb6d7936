//! The OpLog: Crescent's one durable, totally ordered journal.
//!
//! Every state change of the control plane is a [`Record`] appended here. A record carries its
//! sequence number, the writer's term (for fencing), a timestamp, the stream it belongs to
//! (aggregate kind + id) and the versioned event bytes. Each record extends a SHA-256 chain so
//! two replicas can prove they agree up to a sequence number.
//!
//! The [`Journal`] front-end assigns sequence numbers, extends the chain, fences stale terms and
//! group-commits everything waiting into one durable write per batch. Durability itself is the
//! job of a [`JournalBackend`]: segmented files ([`file`](mod@file), the default), `sled_backend`
//! (cargo feature `sled`, on by default), or [`memory`] (tests). Every backend passes the same
//! [`conformance`] suite.
//!
//! Byte layouts: frames in [`codec`], segment files in [`file`](mod@file) and [`file::segment`].
//! Offline, read-only inspection for tools: [`file::JournalScan`] and [`file::open_read_only`].
//! Metrics: [`JournalMetrics`] (label `backend` only).

pub mod backend;
pub mod codec;
pub mod conformance;
pub mod datadir;
pub mod error;
pub mod fd_reserve;
pub mod file;
pub mod journal;
mod keyed;
pub mod memory;
pub mod metrics;
pub mod quarantine;
pub mod record;
pub mod recovery;
pub mod replication;
#[cfg(feature = "sled")]
pub mod sled_backend;
pub mod watermark;

pub use backend::{
    visit_capturing, visit_with, BackendFactory, JournalBackend, ReadSource, RecordIter,
    RecordVisitor, Recovered,
};
pub use error::{JournalError, Result};
pub use journal::{
    AppendAck, AppendGuard, AppendTicket, DurableHook, Journal, JournalOptions, ReplicationTap,
};
pub use metrics::JournalMetrics;
pub use record::{
    chain_digest, chain_digest_parts, Digest, EventData, NewRecord, Record, RecordRef, StreamId,
    GENESIS_DIGEST,
};
pub use recovery::{RecoveryMode, TruncationReport};
pub use watermark::Watermark;
