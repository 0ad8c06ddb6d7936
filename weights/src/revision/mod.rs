//! The `WeightRevision` aggregate: one complete, immutable weight revision (one identity).
//!
//! Three orthogonal dimensions: availability (IMPORTING/READY/DEGRADED/DELETING/DELETED),
//! observed residency (UNKNOWN/HOT/COLD/MIXED/ABSENT) and an optional active operation. Leases
//! and operations are separate records; the metadata record holds only the active operation's
//! id. The aggregate never touches store objects: the server performs each physical step and
//! records it with a command, so every phase is durable before the next one starts.

mod command;
mod decide;
mod deletion;
mod event;
mod group;
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
use crate::planner::{hot_ratio, AutoCandidate, MoveDirection};
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

    fn rec_mut(&mut self) -> &mut RevisionRecord {
        self.record
            .as_mut()
            .expect("events after import_begun only (decide guarantees it)")
    }

    fn set_hot_bytes(&mut self, hot_bytes: u64) {
        let rec = self.rec_mut();
        rec.hot_bytes = hot_bytes;
        if let Some(total) = rec.summary.as_ref().map(|s| s.logical_bytes) {
            rec.residency = Residency::of_hot_bytes(hot_bytes, total);
        }
    }

    fn touch(&mut self, metadata_generation: Option<u64>, at_ms: i64) {
        let rec = self.rec_mut();
        if let Some(g) = metadata_generation {
            rec.metadata_generation = g;
        }
        rec.updated_at_ms = at_ms;
    }

    fn op_mut(&mut self, operation_id: &str) -> Option<&mut Operation> {
        self.operations.get_mut(operation_id)
    }

    /// Forgets the oldest finished operations beyond [`MAX_FINISHED_OPERATIONS`].
    fn prune_finished(&mut self) {
        let mut finished: Vec<(i64, String)> = self
            .operations
            .values()
            .filter(|o| !o.is_running())
            .map(|o| {
                (
                    o.finished_at_ms.unwrap_or(o.started_at_ms),
                    o.operation_id.clone(),
                )
            })
            .collect();
        if finished.len() <= MAX_FINISHED_OPERATIONS {
            return;
        }
        finished.sort();
        let excess = finished.len() - MAX_FINISHED_OPERATIONS;
        for (_, id) in finished.into_iter().take(excess) {
            self.operations.remove(&id);
        }
    }

    fn finish_operation(&mut self, e: &OperationFinished) {
        let Some(op) = self.op_mut(&e.operation_id) else {
            return;
        };
        op.status = e.status;
        op.finished_at_ms = Some(e.at_ms);
        op.updated_at_ms = e.at_ms;
        if e.status == OperationStatus::Failed {
            op.attempts += 1;
            op.last_error.clone_from(&e.error);
        }
        let (kind, trigger) = (op.kind, op.trigger);
        let succeeded = e.status == OperationStatus::Succeeded;
        if let Some(h) = e.hot_bytes {
            self.set_hot_bytes(h);
        }
        let rec = self.rec_mut();
        if rec.active_operation_id.as_deref() == Some(e.operation_id.as_str()) {
            rec.active_operation_id = None;
        }
        match kind {
            OperationKind::Migrating => {
                rec.last_migration_finished_ms = Some(e.at_ms);
                if succeeded && trigger == OperationTrigger::Initial {
                    rec.initially_converged = true;
                }
            }
            OperationKind::Repairing if succeeded => {
                rec.availability = Availability::Ready;
                rec.lost_members = 0;
            }
            _ => {}
        }
        self.touch(Some(e.metadata_generation), e.at_ms);
        self.prune_finished();
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
        use WeightRevisionEvent as E;
        match event {
            E::ImportBegun(e) => {
                self.record = Some(RevisionRecord {
                    identity: e.identity.clone(),
                    group_id: e.group_id.clone(),
                    manifest_key: e.manifest_key.clone(),
                    policy: e.policy,
                    availability: Availability::Importing,
                    residency: Residency::Unknown,
                    hot_bytes: 0,
                    metadata_generation: e.metadata_generation,
                    summary: None,
                    active_operation_id: None,
                    initially_converged: false,
                    retired: None,
                    lost_members: 0,
                    created_at_ms: e.at_ms,
                    updated_at_ms: e.at_ms,
                    last_access_ms: e.at_ms,
                    last_migration_finished_ms: None,
                });
            }
            E::ImportCommitted(e) => {
                let rec = self.rec_mut();
                rec.availability = Availability::Ready;
                rec.initially_converged =
                    rec.policy.preferred_residency == crate::policy::PreferredResidency::Hot;
                rec.summary = Some(e.summary.clone());
                self.set_hot_bytes(e.summary.logical_bytes);
                self.touch(Some(e.metadata_generation), e.at_ms);
            }
            E::OperationStarted(e) => {
                self.operation_seq += 1;
                self.operations.insert(
                    e.operation_id.clone(),
                    Operation {
                        operation_id: e.operation_id.clone(),
                        kind: e.kind,
                        target: e.target,
                        trigger: e.trigger,
                        status: OperationStatus::Running,
                        progress: Progress {
                            members_total: e.members_total,
                            bytes_total: e.bytes_total,
                            ..Progress::default()
                        },
                        pending_round: None,
                        manifest_deleted: false,
                        attempts: 0,
                        last_error: None,
                        started_generation: e.metadata_generation,
                        started_at_ms: e.at_ms,
                        updated_at_ms: e.at_ms,
                        finished_at_ms: None,
                    },
                );
                let rec = self.rec_mut();
                rec.active_operation_id = Some(e.operation_id.clone());
                if e.kind == OperationKind::Deleting {
                    rec.availability = Availability::Deleting;
                }
                self.touch(Some(e.metadata_generation), e.at_ms);
            }
            E::OperationPlanned(e) => {
                if let Some(op) = self.op_mut(&e.operation_id) {
                    op.progress.members_total = Some(e.members_total);
                    op.progress.bytes_total = Some(e.bytes_total);
                    op.updated_at_ms = e.at_ms;
                }
            }
            E::PolicyUpdated(e) => {
                self.rec_mut().policy = e.policy;
                self.touch(Some(e.metadata_generation), e.at_ms);
            }
            E::LeaseGranted(e) => {
                self.lease_seq += 1;
                self.leases.insert(
                    e.lease_id.clone(),
                    Lease {
                        holder: e.holder.clone(),
                        granted_at_ms: e.at_ms,
                        expires_at_ms: e.expires_at_ms,
                    },
                );
                self.rec_mut().last_access_ms = e.at_ms;
            }
            E::LeaseRenewed(e) => {
                if let Some(lease) = self.leases.get_mut(&e.lease_id) {
                    lease.expires_at_ms = e.expires_at_ms;
                }
            }
            E::LeaseReleased(e) | E::LeaseExpired(e) => {
                self.leases.remove(&e.lease_id);
            }
            E::RoundCopied(e) => {
                if let Some(op) = self.op_mut(&e.operation_id) {
                    op.updated_at_ms = e.at_ms;
                    match e.direction {
                        MoveDirection::Promote => {
                            op.progress.rounds_completed = e.round;
                            op.progress.members_done += e.members;
                            op.progress.bytes_done += e.bytes;
                        }
                        MoveDirection::Demote => {
                            op.pending_round = Some(PendingRound {
                                round: e.round,
                                units: e.units,
                                members: e.members,
                                bytes: e.bytes,
                            });
                        }
                    }
                }
                self.set_hot_bytes(e.hot_bytes);
                self.touch(Some(e.metadata_generation), e.at_ms);
            }
            E::RoundReleased(e) => {
                if let Some(op) = self.op_mut(&e.operation_id) {
                    if let Some(p) = op.pending_round.take() {
                        op.progress.rounds_completed = p.round;
                        op.progress.members_done += p.members;
                        op.progress.bytes_done += p.bytes;
                    }
                    op.updated_at_ms = e.at_ms;
                }
                self.set_hot_bytes(e.hot_bytes);
                self.touch(Some(e.metadata_generation), e.at_ms);
            }
            E::OperationAttemptFailed(e) => {
                if let Some(op) = self.op_mut(&e.operation_id) {
                    op.attempts += 1;
                    op.last_error = Some(e.error.clone());
                    op.updated_at_ms = e.at_ms;
                }
            }
            E::OperationFinished(e) => self.finish_operation(e),
            E::DeletionBatchDeleted(e) => {
                if let Some(op) = self.op_mut(&e.operation_id) {
                    op.progress.rounds_completed = e.batch;
                    op.progress.members_done += e.members;
                    op.progress.bytes_done += e.bytes;
                    op.updated_at_ms = e.at_ms;
                }
            }
            E::ManifestDeleted(e) => {
                if let Some(op) = self.op_mut(&e.operation_id) {
                    op.manifest_deleted = true;
                    op.updated_at_ms = e.at_ms;
                }
            }
            E::RevisionDeleted(e) => {
                if let Some(op) = self.op_mut(&e.operation_id) {
                    op.status = OperationStatus::Succeeded;
                    op.finished_at_ms = Some(e.at_ms);
                    op.updated_at_ms = e.at_ms;
                }
                self.leases.clear();
                let rec = self.rec_mut();
                rec.availability = Availability::Deleted;
                rec.residency = Residency::Absent;
                rec.hot_bytes = 0;
                rec.active_operation_id = None;
                self.touch(Some(e.metadata_generation), e.at_ms);
                self.prune_finished();
            }
            E::MembersLost(e) => {
                let all_lost = self.all_lost(e.lost_members);
                if let Some(h) = e.hot_bytes {
                    self.set_hot_bytes(h);
                    if all_lost {
                        // Nothing of the payloads is left anywhere: no tier holds them.
                        self.rec_mut().residency = Residency::Absent;
                    }
                }
                let rec = self.rec_mut();
                rec.availability = Availability::Degraded;
                rec.lost_members = e.lost_members;
                self.touch(Some(e.metadata_generation), e.at_ms);
            }
            E::RevisionRetired(e) => {
                self.rec_mut().retired = Some(Retirement {
                    request_id: e.request_id.clone(),
                    successor_generation: e.successor_generation,
                });
                self.touch(Some(e.metadata_generation), e.at_ms);
            }
        }
    }
}
