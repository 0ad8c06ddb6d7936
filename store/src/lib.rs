//! crescent-store: the object directory of crescentd.
//!
//! Per-object metadata is high-rate and not journaled: it lives here, in memory, sharded by
//! a hash of (scope, key) so HTTP workers call it concurrently. The directory decides where
//! bytes live (segments mounted by storage owners, an offset allocator per segment); the
//! bytes themselves move between clients and owners.
//!
//! Everything is deterministic: each time-dependent method takes `now_ms` (ms since the Unix
//! epoch, server clock), nothing reads a clock or starts a thread. The server calls
//! [`ObjectDirectory::tick`] and [`ObjectDirectory::maybe_evict`] periodically.
//!
//! Identity: (tenant, optional domain, key); tenant and domain are interned into a scope id
//! that is part of every index key, so scopes never see each other's keys.

pub mod allocator;
mod batch;
pub mod cold;
pub mod config;
mod directory;
mod entry;
pub mod error;
mod eviction;
mod eviction_budgets;
mod groups;
mod housekeeping;
pub mod identity;
mod lease;
pub mod metrics;
mod mount;
mod ops_put;
mod ops_read;
mod ops_remove;
pub mod rebuild;
pub mod releases;
pub mod removals;
mod route_change;
mod scan;
pub mod segments;
mod shard;
pub mod tenant_allowance;
pub mod tenants;
pub mod time;

pub use cold::{cold_object_key, parse_cold_object_key, DirectoryRoutes, PromotionSlot};
pub use config::StoreConfig;
pub use directory::{DirectoryStats, GroupGuard, ObjectDirectory};
pub use entry::GroupId;
pub use error::{ErrorClass, StoreError};
pub use eviction::EvictReport;
pub use groups::{GroupNamer, GroupObject, ManagedSkipHook};
pub use housekeeping::TickReport;
pub use metrics::StoreMetrics;
pub use mount::UnmountReport;
pub use rebuild::{OperationClass, RebuildGate, DEFAULT_DEGRADED_TIMEOUT_MS};
pub use releases::{ReleaseMetrics, ReleaseQueues};
pub use removals::{RemovalLog, RemovedByOwner, TakenRemovals};
pub use segments::{MountSpec, SegmentUsage};
pub use tenants::{HeldRefund, TenantFigures, TenantLedger};
