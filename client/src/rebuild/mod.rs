//! The client's half of the metadata rebuild (docs/rebuild.md).
//!
//! - [`notify_queue`] and [`notifier`]: a writer that committed a replica in another owner's
//!   segment tells that owner (NOTIFY over the TCP transport connection it already has to the
//!   owner's transfer listener), so the owner's ownership table holds every committed replica
//!   in its segments, not only its own process's. Bounded, coalesced, backed off, never in the
//!   way of a write: a put does not wait for the owner's acknowledgement.
//! - [`replayer`]: an owner that sees a new leader term replays its table to crescentd in
//!   bounded batches, then signals completion.
//! - [`server_watch`]: the owner learns at once that crescentd restarted or the leader changed.
//! - [`overwrite_check`]: before replaying, the owner drops replicas whose bytes in its memory
//!   no longer match their checksum (an address reused without the table hearing of it).

pub mod notifier;
pub mod notify_queue;
pub mod overwrite_check;
pub mod replayer;
pub mod server_watch;

pub use notifier::{NoticeSender, Notifier, SendFailure};
pub use notify_queue::{DropReason, NoticeBatch, NoticeTarget, NotifyConfig, NotifyQueue};
pub use overwrite_check::{forget_overwritten, OverwriteCheck};
pub use replayer::{replay_table, RebuildSink, ReplayConfig, ReplayReport};
pub use server_watch::WatchConfig;
