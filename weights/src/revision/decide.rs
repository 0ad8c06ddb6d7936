//! `WeightRevision::decide`: the dispatch, shared guards, and the import, policy, lease and
//! retirement rules. Migration, repair and deletion rules are in `workflow.rs`.

use crescent_actors::Ctx;

use crate::error::WeightError;
use crate::identity::RevisionIdentity;
use crate::policy::{
    MigrationLimits, MigrationMode, PreferredResidency, Residency, ResidencyTarget,
    WeightStoragePolicy,
};

use super::command::WeightRevisionCommand;
use super::event::*;
use super::group::validate_group;
use super::types::{
    Availability, GroupMember, OperationKind, OperationTrigger, PayloadSummary, RevisionRecord,
};
use super::WeightRevision;
use crate::planner::AffinityUnit;

type Decided = Result<Vec<WeightRevisionEvent>, WeightError>;

/// NOT_FOUND for a tombstone, NOT_READY otherwise.
pub(super) fn unavailable(rec: &RevisionRecord, reason: &str) -> WeightError {
    if rec.availability == Availability::Deleted {
        WeightError::NotFound {
            what: "revision",
            id: rec.identity.to_string(),
        }
    } else {
        WeightError::NotReady {
            id: rec.identity.to_string(),
            availability: rec.availability.as_str(),
            reason: reason.to_string(),
        }
    }
}

pub(super) fn cooldown_passed(rec: &RevisionRecord, now_ms: i64, cooldown_ms: u64) -> bool {
    rec.last_migration_finished_ms
        .is_none_or(|t| now_ms.saturating_sub(t) >= i64::try_from(cooldown_ms).unwrap_or(i64::MAX))
}

pub(super) fn retired_conflict(rec: &RevisionRecord) -> Option<WeightError> {
    rec.retired.as_ref().map(|r| WeightError::Conflict {
        what: "revision",
        id: rec.identity.to_string(),
        reason: format!(
            "retired by upsert {:?} for generation {}",
            r.request_id, r.successor_generation
        ),
    })
}

/// A lease ends at `now + ttl` (the TTL is bounded, so this cannot overflow in practice).
fn expiry(now_ms: i64, ttl_ms: u64) -> i64 {
    now_ms.saturating_add(i64::try_from(ttl_ms).unwrap_or(i64::MAX))
}

impl WeightRevision {
    pub(super) fn rec(&self) -> Result<&RevisionRecord, WeightError> {
        self.record.as_ref().ok_or_else(|| WeightError::NotFound {
            what: "revision",
            id: String::new(),
        })
    }

    pub(super) fn check_generation(rec: &RevisionRecord, expected: u64) -> Result<(), WeightError> {
        if expected != rec.metadata_generation {
            return Err(WeightError::StaleGeneration {
                what: "metadata_generation",
                expected,
                current: rec.metadata_generation,
            });
        }
        Ok(())
    }

    /// A READY revision (NOT_READY / NOT_FOUND otherwise) that no successor has retired.
    pub(super) fn ready_unretired(&self) -> Result<&RevisionRecord, WeightError> {
        let rec = self.rec()?;
        if rec.availability != Availability::Ready {
            return Err(unavailable(rec, "the revision must be READY"));
        }
        if let Some(e) = retired_conflict(rec) {
            return Err(e);
        }
        Ok(rec)
    }

    /// `lease_expired` for every lease past its TTL: emitted ahead of a command whose decision
    /// depends on active leases, so the state matches the decision.
    pub(super) fn expire_due(&self, now_ms: i64) -> Vec<WeightRevisionEvent> {
        self.leases
            .iter()
            .filter(|(_, l)| !l.is_active(now_ms))
            .map(|(id, _)| {
                WeightRevisionEvent::LeaseExpired(LeaseEnded {
                    lease_id: id.clone(),
                    at_ms: now_ms,
                })
            })
            .collect()
    }

    pub(super) fn busy_if_leased(&self, now_ms: i64, what: &str) -> Result<(), WeightError> {
        let active = self.active_lease_count(now_ms);
        if active > 0 {
            return Err(WeightError::busy(format!(
                "{active} active lease(s) block {what}"
            )));
        }
        Ok(())
    }

    pub(super) fn busy_if_operation(&self, rec: &RevisionRecord) -> Result<(), WeightError> {
        if let Some(id) = &rec.active_operation_id {
            let kind = self
                .operations
                .get(id)
                .map_or("operation", |o| match o.kind {
                    OperationKind::Migrating => "MIGRATING",
                    OperationKind::Repairing => "REPAIRING",
                    OperationKind::Deleting => "DELETING",
                });
            return Err(WeightError::busy(format!(
                "{kind} operation {id} is active"
            )));
        }
        Ok(())
    }

    pub(super) fn new_operation_id(&self, ctx: &Ctx) -> String {
        format!("op-{}-{}", ctx.fresh_id.simple(), self.operation_seq + 1)
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn start_operation(
        &self,
        ctx: &Ctx,
        kind: OperationKind,
        target: Option<ResidencyTarget>,
        trigger: OperationTrigger,
        members_total: Option<u64>,
        bytes_total: Option<u64>,
        metadata_generation: u64,
    ) -> WeightRevisionEvent {
        WeightRevisionEvent::OperationStarted(OperationStarted {
            operation_id: self.new_operation_id(ctx),
            kind,
            target,
            trigger,
            members_total,
            bytes_total,
            metadata_generation,
            at_ms: ctx.now_ms,
        })
    }

    pub(super) fn decide_validated(&self, cmd: &WeightRevisionCommand, ctx: &Ctx) -> Decided {
        use WeightRevisionCommand as C;
        let now = ctx.now_ms;
        match cmd {
            C::BeginImport { identity, policy } => self.decide_begin(identity, policy, now),
            C::CommitImport {
                expected_metadata_generation,
                summary,
                members,
                affinity_units,
            } => self.decide_commit(
                *expected_metadata_generation,
                summary,
                members,
                affinity_units,
                ctx,
            ),
            C::UpdatePolicy {
                policy,
                expected_metadata_generation,
            } => self.decide_update_policy(policy, *expected_metadata_generation, now),
            C::AcquireLease {
                holder,
                ttl_ms,
                expected_metadata_generation,
                limits,
            } => self.decide_acquire(holder, *ttl_ms, *expected_metadata_generation, limits, ctx),
            C::RenewLease { lease_id, ttl_ms } => self.decide_renew(lease_id, *ttl_ms, now),
            C::ReleaseLease { lease_id } => Ok(if self.leases.contains_key(lease_id) {
                vec![WeightRevisionEvent::LeaseReleased(LeaseEnded {
                    lease_id: lease_id.clone(),
                    at_ms: now,
                })]
            } else {
                Vec::new()
            }),
            C::ExpireLeases => Ok(self.expire_due(now)),
            C::Retire {
                request_id,
                successor_generation,
                expected_metadata_generation,
                require_idle,
            } => self.decide_retire(
                request_id,
                *successor_generation,
                *expected_metadata_generation,
                *require_idle,
                now,
            ),
            _ => self.decide_workflow(cmd, ctx),
        }
    }

    fn decide_begin(
        &self,
        identity: &RevisionIdentity,
        policy: &WeightStoragePolicy,
        now: i64,
    ) -> Decided {
        let Some(rec) = &self.record else {
            return Ok(vec![WeightRevisionEvent::ImportBegun(ImportBegun {
                identity: identity.clone(),
                group_id: identity.group_id(),
                manifest_key: identity.manifest_key(),
                policy: *policy,
                metadata_generation: 1,
                at_ms: now,
            })]);
        };
        let conflict = |reason: String| WeightError::Conflict {
            what: "revision",
            id: identity.to_string(),
            reason,
        };
        if rec.identity != *identity {
            return Err(conflict(format!(
                "this aggregate holds revision {}",
                rec.identity
            )));
        }
        match rec.availability {
            Availability::Deleting | Availability::Deleted => Err(conflict(
                "the identity is deleted (tombstoned); publish a new weight_generation".into(),
            )),
            _ if rec.policy != *policy => Err(conflict(format!(
                "the revision exists with policy {:?}; use weight_update_policy",
                rec.policy
            ))),
            // A retry of the same import: the same group, nothing new.
            _ => Ok(Vec::new()),
        }
    }

    fn decide_commit(
        &self,
        expected: u64,
        summary: &PayloadSummary,
        members: &[GroupMember],
        units: &[AffinityUnit],
        ctx: &Ctx,
    ) -> Decided {
        let rec = self.rec()?;
        match rec.availability {
            Availability::Importing => {}
            Availability::Ready | Availability::Degraded => {
                // A retried commit returns the committed result; anything else would change
                // the immutable summary.
                return if rec.summary.as_ref() == Some(summary) {
                    Ok(Vec::new())
                } else {
                    Err(WeightError::Conflict {
                        what: "revision",
                        id: rec.identity.to_string(),
                        reason:
                            "the published manifest reference and payload summary are immutable"
                                .into(),
                    })
                };
            }
            Availability::Deleting | Availability::Deleted => {
                return Err(unavailable(rec, "the revision is being deleted"))
            }
        }
        Self::check_generation(rec, expected)?;
        validate_group(&rec.group_id, &rec.manifest_key, summary, members, units)?;
        let generation = rec.metadata_generation + 1;
        let mut events = vec![WeightRevisionEvent::ImportCommitted(ImportCommitted {
            summary: summary.clone(),
            metadata_generation: generation,
            at_ms: ctx.now_ms,
        })];
        // READY is published as HOT; the initial convergence toward a colder preference is
        // persisted in the same batch, whatever the migration mode.
        if rec.policy.preferred_residency != PreferredResidency::Hot {
            events.push(self.start_operation(
                ctx,
                OperationKind::Migrating,
                Some(rec.policy.preferred_target()),
                OperationTrigger::Initial,
                None,
                None,
                generation,
            ));
        }
        Ok(events)
    }

    fn decide_update_policy(
        &self,
        policy: &WeightStoragePolicy,
        expected: u64,
        now: i64,
    ) -> Decided {
        let rec = self.rec()?;
        if matches!(
            rec.availability,
            Availability::Deleting | Availability::Deleted
        ) {
            return Err(unavailable(rec, "the revision is being deleted"));
        }
        if rec.policy == *policy {
            return Ok(Vec::new());
        }
        Self::check_generation(rec, expected)?;
        Ok(vec![WeightRevisionEvent::PolicyUpdated(PolicyUpdated {
            policy: *policy,
            metadata_generation: rec.metadata_generation + 1,
            at_ms: now,
        })])
    }

    /// The AUTO promotion an access triggers: toward the preferred residency when the
    /// revision is colder than it.
    fn promotion_target(rec: &RevisionRecord) -> Option<ResidencyTarget> {
        match (rec.policy.preferred_residency, rec.residency) {
            (PreferredResidency::Hot, Residency::Cold | Residency::Mixed) => {
                Some(ResidencyTarget::Hot)
            }
            (PreferredResidency::Mixed, Residency::Cold) => Some(rec.policy.preferred_target()),
            _ => None,
        }
    }

    fn decide_acquire(
        &self,
        holder: &str,
        ttl_ms: u64,
        expected: Option<u64>,
        limits: &MigrationLimits,
        ctx: &Ctx,
    ) -> Decided {
        let rec = self.ready_unretired()?;
        if let Some(expected) = expected {
            Self::check_generation(rec, expected)?;
        }
        let mut events = Vec::with_capacity(2);
        let promote = rec.policy.migration_mode == MigrationMode::Auto
            && rec.initially_converged
            && rec.active_operation_id.is_none()
            && cooldown_passed(rec, ctx.now_ms, limits.cooldown_ms);
        if let Some(target) = promote.then(|| Self::promotion_target(rec)).flatten() {
            // Persisted before (in the same batch as) the lease it is granted for.
            events.push(self.start_operation(
                ctx,
                OperationKind::Migrating,
                Some(target),
                OperationTrigger::Access,
                None,
                None,
                rec.metadata_generation + 1,
            ));
        }
        events.push(WeightRevisionEvent::LeaseGranted(LeaseGranted {
            lease_id: format!("lease-{}-{}", ctx.fresh_id.simple(), self.lease_seq + 1),
            holder: holder.to_string(),
            expires_at_ms: expiry(ctx.now_ms, ttl_ms),
            at_ms: ctx.now_ms,
        }));
        Ok(events)
    }

    fn decide_renew(&self, lease_id: &str, ttl_ms: u64, now: i64) -> Decided {
        let rec = self.rec()?;
        let lease = self
            .leases
            .get(lease_id)
            .ok_or_else(|| WeightError::NotFound {
                what: "lease",
                id: lease_id.to_string(),
            })?;
        if !lease.is_active(now) {
            return Err(WeightError::LeaseExpired {
                lease_id: lease_id.to_string(),
            });
        }
        if let Some(e) = retired_conflict(rec) {
            return Err(e);
        }
        Ok(vec![WeightRevisionEvent::LeaseRenewed(LeaseRenewed {
            lease_id: lease_id.to_string(),
            expires_at_ms: expiry(now, ttl_ms),
            at_ms: now,
        })])
    }

    fn decide_retire(
        &self,
        request_id: &str,
        successor_generation: u64,
        expected: u64,
        require_idle: bool,
        now: i64,
    ) -> Decided {
        let rec = self.rec()?;
        if let Some(r) = &rec.retired {
            // The same upsert resuming: already fenced (the base may even be deleted by now).
            return if r.request_id == request_id && r.successor_generation == successor_generation {
                Ok(Vec::new())
            } else {
                Err(retired_conflict(rec).expect("retired"))
            };
        }
        if !matches!(
            rec.availability,
            Availability::Ready | Availability::Degraded
        ) {
            return Err(unavailable(
                rec,
                "only a published revision can be replaced",
            ));
        }
        if successor_generation <= rec.identity.weight_generation {
            return Err(WeightError::invalid(
                "successor_generation",
                format!(
                    "{successor_generation} is not above the base generation {}",
                    rec.identity.weight_generation
                ),
            ));
        }
        Self::check_generation(rec, expected)?;
        let mut events = Vec::new();
        if require_idle {
            // DELETE_FIRST: refuse before any side effect while the base is in use.
            self.busy_if_operation(rec)?;
            self.busy_if_leased(now, "a DELETE_FIRST replacement")?;
            events.extend(self.expire_due(now));
        }
        events.push(WeightRevisionEvent::RevisionRetired(RevisionRetired {
            request_id: request_id.to_string(),
            successor_generation,
            metadata_generation: rec.metadata_generation + 1,
            at_ms: now,
        }));
        Ok(events)
    }
}
