//! The `WeightRevision` aggregate: one complete, immutable weight revision (one identity).
//!
//! Three orthogonal dimensions: availability (IMPORTING/READY/DEGRADED/DELETING/DELETED),
//! observed residency (UNKNOWN/HOT/COLD/MIXED/ABSENT) and an optional active operation. Leases
//! and operations are separate records; the metadata record holds only the active operation's
//! id. The aggregate never touches store objects: the server performs each physical step and
//! records it with a command, so every phase is durable before the next one starts.

mod apply;
mod command;
mod decide;
mod deletion;
mod event;
mod group;
mod repair;
mod types;
mod workflow;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_degraded;
#[cfg(test)]
mod tests_lifecycle;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crescent_actors::{Aggregate, Ctx};

use crate::error::WeightError;
use crate::identity::RevisionIdentity;
use crate::planner::{hot_ratio, AutoCandidate};
use crate::policy::{MigrationLimits, MigrationMode, Residency, WeightStoragePolicy};

pub use command::{WeightRevisionCommand, MAX_ERROR_BYTES, MAX_LEASE_TTL_MS};
pub use event::{
    DeletionBatchDeleted, ImportBegun, ImportCommitted, LeaseEnded, LeaseGranted, LeaseRenewed,
    ManifestDeleted, MembersLost, OperationAttemptFailed, OperationFinished, OperationPlanned,
    OperationStarted, PolicyUpdated, RevisionDeleted, RevisionRetired, RoundCopied, RoundReleased,
    WeightRevisionEvent,
};
pub use types::{
    Availability, GroupMember, Lease, ObjectType, Operation, OperationKind, OperationStatus,
    OperationTrigger, PayloadSummary, PendingRound, Progress, Retirement, RevisionRecord,
};

/// Stream kind in the journal and section name in snapshots.
pub const STREAM_KIND: &str = "weight_revision";
/// Finished operations kept per revision (the oldest are forgotten first).
pub const MAX_FINISHED_OPERATIONS: usize = 64;

/// One weight revision. Empty (`record == None`) until `BeginImport`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WeightRevision {
    record: Option<RevisionRecord>,
    leases: BTreeMap<String, Lease>,
    operations: BTreeMap<String, Operation>,
    /// Leases and operations ever created here: makes their ids unique within the revision
    /// whatever the runtime's fresh id.
    lease_seq: u64,
    operation_seq: u64,
}

/// What `weight_get_metadata` returns: the metadata record without reading the manifest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RevisionView {
    pub identity: RevisionIdentity,
    pub group_id: String,
    pub manifest_key: String,
    pub policy: WeightStoragePolicy,
    pub availability: Availability,
    pub residency: Residency,
    pub observed_hot_ratio: f64,
    pub metadata_generation: u64,
    pub summary: Option<PayloadSummary>,
    pub active_operation_id: Option<String>,
    pub active_lease_count: u64,
    pub retired: Option<Retirement>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    pub last_access_ms: i64,
}

impl WeightRevision {
    pub fn record(&self) -> Option<&RevisionRecord> {
        self.record.as_ref()
    }

    pub fn identity(&self) -> Option<&RevisionIdentity> {
        self.record.as_ref().map(|r| &r.identity)
    }

    pub fn leases(&self) -> &BTreeMap<String, Lease> {
        &self.leases
    }

    pub fn lease(&self, lease_id: &str) -> Option<&Lease> {
        self.leases.get(lease_id)
    }

    /// Leases still within their TTL at `now_ms`.
    pub fn active_lease_count(&self, now_ms: i64) -> u64 {
        self.leases.values().filter(|l| l.is_active(now_ms)).count() as u64
    }

    pub fn operations(&self) -> &BTreeMap<String, Operation> {
        &self.operations
    }

    /// `weight_get_operation`: running or finished.
    pub fn operation(&self, operation_id: &str) -> Option<&Operation> {
        self.operations.get(operation_id)
    }

    pub fn active_operation(&self) -> Option<&Operation> {
        let id = self.record.as_ref()?.active_operation_id.as_ref()?;
        self.operations.get(id)
    }

    /// `weight_is_exist`: the exact revision is READY, readable, and not retired by a
    /// successor (a retired revision grants no new lease). True while MIGRATING.
    pub fn is_exist(&self) -> bool {
        self.record
            .as_ref()
            .is_some_and(|r| r.availability == Availability::Ready && r.retired.is_none())
    }

    /// `weight_get_size`: the logical payload bytes validated at commit.
    pub fn size(&self) -> Result<u64, WeightError> {
        let rec = self.record.as_ref().ok_or_else(|| WeightError::NotFound {
            what: "revision",
            id: String::new(),
        })?;
        match (&rec.summary, rec.availability) {
            (_, Availability::Deleted) => Err(decide::unavailable(rec, "revision is deleted")),
            (Some(summary), _) => Ok(summary.logical_bytes),
            (None, _) => Err(decide::unavailable(rec, "import has not committed")),
        }
    }

    pub fn observed_hot_ratio(&self) -> f64 {
        self.record.as_ref().map_or(0.0, |r| {
            let total = r.summary.as_ref().map_or(0, |s| s.logical_bytes);
            hot_ratio(r.hot_bytes, total)
        })
    }

    /// The metadata view at `now_ms` (for the active lease count).
    pub fn view(&self, now_ms: i64) -> Option<RevisionView> {
        let r = self.record.as_ref()?;
        Some(RevisionView {
            identity: r.identity.clone(),
            group_id: r.group_id.clone(),
            manifest_key: r.manifest_key.clone(),
            policy: r.policy,
            availability: r.availability,
            residency: r.residency,
            observed_hot_ratio: self.observed_hot_ratio(),
            metadata_generation: r.metadata_generation,
            summary: r.summary.clone(),
            active_operation_id: r.active_operation_id.clone(),
            active_lease_count: self.active_lease_count(now_ms),
            retired: r.retired.clone(),
            created_at_ms: r.created_at_ms,
            updated_at_ms: r.updated_at_ms,
            last_access_ms: r.last_access_ms,
        })
    }

    /// Whether the manifest still has its hard-pinned memory replica: always, from commit
    /// until the deletion workflow deletes it last.
    pub fn manifest_memory_pinned(&self) -> bool {
        let Some(rec) = &self.record else {
            return false;
        };
        match rec.availability {
            Availability::Importing | Availability::Deleted => false,
            Availability::Ready | Availability::Degraded => true,
            Availability::Deleting => {
                rec.summary.is_some()
                    && !self.active_operation().is_some_and(|o| o.manifest_deleted)
            }
        }
    }

    /// This revision as an AUTO demotion candidate at `now_ms`: READY, AUTO, initially
    /// converged, no operation, no active lease, out of cooldown, not retired, and with HOT
    /// bytes to release.
    pub fn auto_candidate(&self, now_ms: i64, limits: &MigrationLimits) -> Option<AutoCandidate> {
        let r = self.record.as_ref()?;
        let eligible = r.availability == Availability::Ready
            && r.policy.migration_mode == MigrationMode::Auto
            && r.initially_converged
            && r.active_operation_id.is_none()
            && r.retired.is_none()
            && self.active_lease_count(now_ms) == 0
            && decide::cooldown_passed(r, now_ms, limits.cooldown_ms)
            && r.hot_bytes > 0;
        eligible.then(|| AutoCandidate {
            identity: r.identity.clone(),
            last_access_ms: r.last_access_ms,
            releasable_hot_bytes: r.hot_bytes,
        })
    }
}

impl Aggregate for WeightRevision {
    const KIND: &'static str = STREAM_KIND;
    const SNAPSHOT_SCHEMA: u32 = 1;

    type Command = WeightRevisionCommand;
    type Event = WeightRevisionEvent;
    type Error = WeightError;

    fn decide(
        &self,
        cmd: &WeightRevisionCommand,
        ctx: &Ctx,
    ) -> Result<Vec<WeightRevisionEvent>, WeightError> {
        cmd.validate()?;
        self.decide_validated(cmd, ctx)
    }

    fn apply(&mut self, event: &WeightRevisionEvent) {
        self.apply_event(event);
    }
}
