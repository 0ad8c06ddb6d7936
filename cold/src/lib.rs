//! The cold tier (docs/cold-tier.md).
//!
//! - [`device`]: the `ColdDevice` aggregate: config facts, capacity accounting, the cold
//!   operation and reclaim state machines and the journaled cold routes.
//! - [`route`]: the pure route model (hot replicas beside at most one active cold backing,
//!   CAS on version + content + cold identity, the last-hot eviction rule).
//! - [`io`]: the IO seam of a device ([`io::ColdIo`]): local, or performed by a storage owner.
//! - [`local_dir`]: `local_dir` device IO (idempotent, checksummed, crash-safe files).
//! - [`scheduler`]: the offload queue (bounded, rate-limited, retrying, watermarks).
//! - [`restore`]: single-flight restores and batch grouping by device.
//! - [`reconcile`]: the offload/reclaim driver and restart reconciliation.
//! - [`metrics`]: Prometheus metrics.

pub mod device;
pub mod driver;
pub mod error;
pub mod ids;
pub mod io;
pub mod local_dir;
pub mod metrics;
pub mod restore;
pub mod route;
pub mod scheduler;

pub use device::{ColdDevice, ColdDeviceCommand, ColdDeviceEvent};
pub use error::ColdError;
pub use ids::{payload_checksum, ColdOpId, PayloadFingerprint, ReclaimId};
