//! Snapshots: the state of every aggregate at a journal seq, in a sectioned, versioned file.
//!
//! - [`format`]: the byte layout (header, sections with SHA-256, trailer with CRC32C).
//! - [`SnapshotDir`]: atomic writes, listing, the newest valid snapshot, retention.
//! - [`ReplayState`]: what a snapshottable state implements (the actors crate's `World`).
//! - [`Snapshotter`]: shadow replay of the journal on its own thread, writing snapshots by event
//!   count and by time, then retention and journal prefix truncation.
//! - [`restore`]: newest valid snapshot + journal tail.

pub mod error;
pub mod format;
pub mod metrics;
pub mod restore;
pub mod snapshotter;
pub mod source;
pub mod state;
pub mod store;
pub mod stream_check;

pub use error::{ErrorClass, Result, SnapshotError};
pub use format::{Position, Section, SnapshotHeader, FORMAT_VERSION};
pub use metrics::SnapshotMetrics;
pub use restore::{restore, restore_upto, Restored};
pub use snapshotter::{Snapshotter, SnapshotterConfig, SnapshotterStatus};
pub use source::{JournalSource, RecordBuffer};
pub use state::{ReplayState, SectionSet, SectionSpec};
pub use store::{NewestValid, SkippedSnapshot, Snapshot, SnapshotDir, SnapshotEntry, SnapshotInfo};
pub use stream_check::StreamCheck;
