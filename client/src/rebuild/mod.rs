//! The client's half of the metadata rebuild (docs/rebuild.md); the owner's half (the replay
//! of its table, the overwrite check before it) is in the crescent-owner package.
//!
//! - [`notifier`]: a writer that wrote a replica into another owner's segment has that owner
//!   record it (NOTIFY over the TCP transport connection it already has to the owner's
//!   transfer listener) and waits for the answer before put_end, so the owner's ownership
//!   table holds every acknowledged replica in its segments, not only its own process's.
//! - [`server_watch`]: the owner learns at once that crescentd restarted or the leader changed.

pub mod notifier;
pub mod server_watch;

pub use notifier::{
    NotRecorded, NoticeSender, NoticeTarget, Notifier, NotifyConfig, SendFailure, TaggedEntries,
};
pub use server_watch::WatchConfig;
