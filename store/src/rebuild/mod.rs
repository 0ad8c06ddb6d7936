//! Client-driven metadata rebuild (docs/rebuild.md): owners replay their committed replicas
//! into an empty directory after a restart or promotion ([`ObjectDirectory::rebuild_replay`]),
//! and the [`RebuildGate`] keeps object operations out until they have.
//!
//! [`ObjectDirectory::rebuild_replay`]: crate::ObjectDirectory::rebuild_replay

mod gate;
mod ledger;
mod replay;

pub use gate::{OperationClass, RebuildGate, DEFAULT_DEGRADED_TIMEOUT_MS};
pub use ledger::ReplayLedgers;
