//! The client's half of the metadata rebuild (docs/rebuild.md).
//!
//! - [`notifier`]: a writer that wrote a replica into another owner's segment has that owner
//!   record it (NOTIFY over the TCP transport connection it already has to the owner's
//!   transfer listener) and waits for the answer before put_end, so the owner's ownership
//!   table holds every acknowledged replica in its segments, not only its own process's.
//! - [`replayer`]: an owner that sees a new leader term replays its table to crescentd in
//!   bounded batches, then signals completion.
//! - [`server_watch`]: the owner learns at once that crescentd restarted or the leader changed.
//! - [`overwrite_check`]: before replaying, the owner drops replicas whose bytes in its memory
//!   no longer match their checksum (an address reused without the table hearing of it).

pub mod notifier;
pub mod overwrite_check;
pub mod replayer;
pub mod server_watch;

pub use notifier::{
    NotRecorded, NoticeSender, NoticeTarget, Notifier, NotifyConfig, SendFailure, TaggedEntries,
};
pub use overwrite_check::{forget_overwritten, OverwriteCheck};
pub use replayer::{replay_table, RebuildSink, ReplayConfig, ReplayReport};
pub use server_watch::WatchConfig;
