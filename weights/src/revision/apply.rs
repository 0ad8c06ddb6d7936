//! `WeightRevision::apply`: how each event changes the record, its operations and leases
//! (pure; decide has already checked every event it emits).

use crate::planner::MoveDirection;
use crate::policy::Residency;

use super::event::{
    ImportBegun, MembersLost, OperationFinished, OperationStarted, RevisionDeleted, RoundCopied,
    RoundReleased, WeightRevisionEvent,
};
use super::types::{
    Availability, Lease, Operation, OperationKind, OperationStatus, OperationTrigger, PendingRound,
    Progress, Retirement, RevisionRecord,
};
use super::{WeightRevision, MAX_FINISHED_OPERATIONS};

impl WeightRevision {
    /// Applies one event (`Aggregate::apply`): the record, operations and leases it changes.
    pub(super) fn apply_event(&mut self, event: &WeightRevisionEvent) {
        use WeightRevisionEvent as E;
        match event {
            E::ImportBegun(e) => self.import_begun(e),
            E::ImportCommitted(e) => {
                let rec = self.rec_mut();
                rec.availability = Availability::Ready;
                rec.initially_converged =
                    rec.policy.preferred_residency == crate::policy::PreferredResidency::Hot;
                rec.summary = Some(e.summary.clone());
                self.set_hot_bytes(e.summary.logical_bytes);
                self.touch(Some(e.metadata_generation), e.at_ms);
            }
            E::OperationStarted(e) => self.operation_started(e),
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
            E::RoundCopied(e) => self.round_copied(e),
            E::RoundReleased(e) => self.round_released(e),
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
            E::RevisionDeleted(e) => self.revision_deleted(e),
            E::MembersLost(e) => self.members_lost(e),
            E::RevisionRetired(e) => {
                self.rec_mut().retired = Some(Retirement {
                    request_id: e.request_id.clone(),
                    successor_generation: e.successor_generation,
                });
                self.touch(Some(e.metadata_generation), e.at_ms);
            }
        }
    }

    /// The record of a revision whose import begins.
    fn import_begun(&mut self, e: &ImportBegun) {
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

    /// A running operation, now the active one (a deletion makes the revision DELETING).
    fn operation_started(&mut self, e: &OperationStarted) {
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

    /// A copied round: promotion counts it done; demotion waits for its release.
    fn round_copied(&mut self, e: &RoundCopied) {
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

    /// A released demotion round: now counted done.
    fn round_released(&mut self, e: &RoundReleased) {
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

    /// The end of a deletion: the revision is DELETED and holds nothing.
    fn revision_deleted(&mut self, e: &RevisionDeleted) {
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

    /// Lost members: the revision is DEGRADED (ABSENT when nothing is left anywhere).
    fn members_lost(&mut self, e: &MembersLost) {
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
