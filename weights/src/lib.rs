//! Managed weight revisions (docs/weights.md): the pure domain.
//!
//! - [`WeightRevision`]: one complete, immutable revision (identity, availability, residency,
//!   leases, operations, tombstone).
//! - [`LineageClaim`]: the single replacement claim and generation watermark of a lineage.
//! - [`planner`]: the MIXED planner, migration rounds and AUTO candidate order.
//! - [`pressure`]: the AUTO demotion decision under memory pressure.
//! - [`units`]: the `WeightUnits` record of a revision's affinity units (beside its metadata).
//! - [`policy`] and [`WeightConfig`]: residency policy, its resolution and cluster defaults.
//!
//! Everything here is pure (no IO, clock or randomness); crescentd's actors journal the events
//! and perform the physical steps. See docs/weights.md.

pub mod config;
pub mod error;
pub mod identity;
pub mod lineage;
pub mod metrics;
pub mod planner;
pub mod policy;
pub mod pressure;
pub mod revision;
pub mod units;

pub use config::WeightConfig;
pub use error::WeightError;
pub use identity::{
    derive_request_id, payload_keys_sha256, LineageId, RevisionIdentity, DEFAULT_TENANT,
};
pub use lineage::{ClaimPhase, LineageClaim, LineageClaimCommand, LineageClaimEvent, UpsertMode};
pub use metrics::{AvailabilityReason, GuardedOperation, WeightMetrics};
pub use planner::{affinity_digest, plan_mixed, AffinityUnit, ResidencyPlan};
pub use policy::{
    resolve_policy, MigrationLimits, MigrationMode, PolicyOverride, PreferredResidency, Residency,
    ResidencyTarget, WeightStoragePolicy,
};
pub use revision::{
    Availability, RevisionView, WeightRevision, WeightRevisionCommand, WeightRevisionEvent,
};
pub use units::{WeightUnits, WeightUnitsCommand, WeightUnitsEvent};
