//! The multi-step weight workflows crescentd drives: each step is performed on the object
//! directory and then recorded with a command, so a restart resumes from the persisted
//! progress (`resume_all` at startup).

use std::sync::Arc;
use std::time::Duration;

use crescent_store::{GroupId, GroupObject};
use crescent_weights::lineage::UpsertStep;
use crescent_weights::revision::{GroupMember, ObjectType, OperationKind, PayloadSummary};
use crescent_weights::{
    affinity_digest, payload_keys_sha256, Availability, ClaimPhase, LineageClaimCommand, LineageId,
    PreferredResidency, RevisionIdentity, UpsertMode, WeightRevision, WeightRevisionCommand,
    WeightUnitsCommand,
};
use crescent_wire::store::{DataType, ObjectId};
use crescent_wire::{ApiError, ErrorCode};
use tracing::Instrument;

use super::error::WeightServiceError;
use super::{WeightService, WEIGHTS_DOMAIN};

/// Payloads deleted per recorded batch.
pub const DELETION_BATCH: usize = 64;
/// How often the lease expiry timer looks for expired leases.
const LEASE_SWEEP: Duration = Duration::from_millis(500);
/// Pause between retries of a workflow step refused as BUSY (a lease still drains).
const RETRY_PAUSE: Duration = Duration::from_millis(200);

pub fn object_id(key: &str) -> ObjectId {
    ObjectId::scoped(None, Some(WEIGHTS_DOMAIN), key)
}

/// Keys of payload objects start with this.
pub fn payload_prefix(identity: &RevisionIdentity) -> String {
    format!("weights/{}/p/", identity.stream_id())
}

fn member_row(o: &GroupObject, group_id: &str) -> GroupMember {
    GroupMember {
        key: o.key.clone(),
        group_id: group_id.to_string(),
        object_type: match o.data_type {
            DataType::Metadata => ObjectType::Metadata,
            DataType::Weight => ObjectType::Weight,
            _ => ObjectType::Other,
        },
        logical_bytes: o.size,
        complete: o.complete,
        memory_readable: o.memory_readable,
        hard_pinned: o.hard_pinned,
        content_sha256: None,
    }
}

fn code_of(e: &WeightServiceError) -> ErrorCode {
    e.code()
}

impl WeightService {
    fn group_of(&self, group_id: &str) -> GroupId {
        self.groups.intern(group_id)
    }

    /// Members of the revision's group in the weights domain.
    fn members(&self, group_id: &str) -> Vec<GroupObject> {
        self.directory
            .group_members(self.group_of(group_id))
            .into_iter()
            .filter(|o| o.domain.as_deref() == Some(WEIGHTS_DOMAIN))
            .collect()
    }

    /// Refuses a resolved policy this node cannot reach (no cold tier for COLD/MIXED).
    pub fn check_reachable(&self, preferred: PreferredResidency) -> Result<(), ApiError> {
        match preferred {
            PreferredResidency::Hot => Ok(()),
            PreferredResidency::Cold => self.cold("preferred residency COLD").map(|_| ()),
            PreferredResidency::Mixed => self.cold("preferred residency MIXED").map(|_| ()),
        }
    }

    /// weight_put's last step: lists the group and commits the whole-group validation.
    pub async fn commit_import(
        self: &Arc<Self>,
        identity: &RevisionIdentity,
        expected: u64,
        manifest_sha256: String,
        units: Vec<crescent_weights::AffinityUnit>,
    ) -> Result<WeightRevision, WeightServiceError> {
        let state = self.read_revision(identity).await?;
        let rec = state.record().ok_or_else(|| not_found(identity))?.clone();
        let group_id = rec.group_id.clone();
        let members: Vec<GroupMember> = self
            .members(&group_id)
            .iter()
            .map(|o| member_row(o, &group_id))
            .collect();
        let keys: Vec<&str> = units
            .iter()
            .flat_map(|u| u.member_keys.iter().map(String::as_str))
            .collect();
        let summary = PayloadSummary {
            manifest_sha256,
            payload_keys_sha256: payload_keys_sha256(&keys),
            payload_count: keys.len() as u64,
            logical_bytes: units.iter().map(|u| u.bytes).sum(),
            affinity_count: units.len() as u64,
            affinity_digest: affinity_digest(&units),
        };
        // The units are durable before READY is: every migration plans from them.
        self.record_units(identity, &units, &summary.affinity_digest, rec.availability)
            .await?;
        let after = self
            .revision(
                identity,
                WeightRevisionCommand::CommitImport {
                    expected_metadata_generation: expected,
                    summary,
                    members,
                    affinity_units: units,
                },
            )
            .await?;
        self.spawn_followups(identity.clone());
        Ok(after)
    }

    /// Records the affinity units of a revision being committed. A still-IMPORTING revision
    /// whose earlier, failed commit recorded other units (the writer retried with other
    /// content) has them replaced; after READY they are immutable (CONFLICT).
    async fn record_units(
        &self,
        identity: &RevisionIdentity,
        units: &[crescent_weights::AffinityUnit],
        digest: &str,
        availability: Availability,
    ) -> Result<(), WeightServiceError> {
        let record = || WeightUnitsCommand::Record {
            units: units.to_vec(),
            affinity_digest: digest.to_string(),
        };
        match self.units_command(identity, record()).await {
            Err(e)
                if code_of(&e) == ErrorCode::Conflict
                    && availability == Availability::Importing =>
            {
                self.units_command(identity, WeightUnitsCommand::Forget)
                    .await?;
                self.units_command(identity, record()).await
            }
            other => other,
        }
    }

    /// Removes one member of the group being deleted (with its cold copy, if any).
    async fn remove_member(
        &self,
        key: &str,
        group: GroupId,
        now: i64,
    ) -> Result<(), WeightServiceError> {
        match self.cold_tier() {
            Some(cold) => cold
                .remove_member(key.to_string(), group)
                .await
                .map(|_| ())
                .map_err(|e| WeightServiceError::refused(ErrorCode::Unavailable, e)),
            None => self
                .directory
                .remove_group_member(&object_id(key), group, now)
                .map(|_| ())
                .map_err(Into::into),
        }
    }

    /// After a commit: the initial migration (if any) and a claim waiting for this target.
    fn spawn_followups(self: &Arc<Self>, identity: RevisionIdentity) {
        let me = self.clone();
        actix_rt::spawn(async move {
            me.drive_revision(&identity).await;
            me.drive_claim(&identity.lineage()).await;
        });
    }

    /// Drives the revision's running operation (migration or deletion) to its end.
    pub async fn drive_revision(self: &Arc<Self>, identity: &RevisionIdentity) {
        let key = identity.stream_id();
        if !self.start_driving(&key) {
            return;
        }
        let span = tracing::info_span!("weights.drive_revision", revision = %key);
        let result = async {
            let state = self.read_revision(identity).await?;
            let active = state
                .active_operation()
                .map(|o| (o.kind, o.operation_id.clone()));
            if let Some((kind, op)) = &active {
                tracing::info!(operation = %op, ?kind, "driving weight operation");
            }
            match active {
                Some((OperationKind::Deleting, op)) => self.run_deletion(identity, &op).await,
                Some((OperationKind::Migrating, op)) => self.run_migration(identity, &op).await,
                _ => Ok(()),
            }
        }
        .instrument(span)
        .await;
        self.stop_driving(&key);
        if let Err(e) = result {
            tracing::warn!(revision = %key, error = %e, "weight workflow stopped; it resumes on the next trigger or restart");
        }
    }

    /// Deletion: payloads in batches, the manifest last, then verify the group is empty.
    async fn run_deletion(
        self: &Arc<Self>,
        identity: &RevisionIdentity,
        operation_id: &str,
    ) -> Result<(), WeightServiceError> {
        loop {
            let state = self.read_revision(identity).await?;
            let Some(rec) = state.record() else {
                return Ok(());
            };
            let Some(op) = state.operation(operation_id).filter(|o| o.is_running()) else {
                return Ok(());
            };
            let group = self.group_of(&rec.group_id);
            let manifest_key = rec.manifest_key.clone();
            let now = self.now_ms();
            if !op.manifest_deleted {
                let payloads: Vec<GroupObject> = self
                    .members(&rec.group_id)
                    .into_iter()
                    .filter(|o| o.key != manifest_key)
                    .take(DELETION_BATCH)
                    .collect();
                let p = &op.progress;
                let remaining = p.members_total.map(|t| t - p.members_done);
                let batch = p.rounds_completed + 1;
                let (members, bytes) = if !payloads.is_empty() {
                    for o in &payloads {
                        self.remove_member(&o.key, group, now).await?;
                    }
                    let members = payloads.len() as u64;
                    // Pending (never ended) puts count only when the import had committed
                    // nothing for them; a committed revision's totals bound the batch.
                    let members = remaining.map_or(members, |r| members.min(r));
                    let bytes = payloads.iter().map(|o| o.size).sum::<u64>();
                    let bytes = p.bytes_total.map_or(bytes, |t| bytes.min(t - p.bytes_done));
                    (members, bytes)
                } else {
                    // Payloads the directory no longer holds (their memory went away with a
                    // restart or an owner) are deleted already.
                    (
                        remaining.unwrap_or(0),
                        p.bytes_total.map_or(0, |t| t - p.bytes_done),
                    )
                };
                if members > 0 {
                    self.revision(
                        identity,
                        WeightRevisionCommand::RecordDeletionBatch {
                            operation_id: operation_id.into(),
                            batch,
                            members,
                            bytes,
                        },
                    )
                    .await?;
                    continue;
                }
                self.remove_member(&manifest_key, group, now).await?;
                self.revision(
                    identity,
                    WeightRevisionCommand::RecordManifestDeleted {
                        operation_id: operation_id.into(),
                    },
                )
                .await?;
                continue;
            }
            // Anything left (a late put of the group) goes too, then the group must be empty.
            for o in self.members(&rec.group_id) {
                self.remove_member(&o.key, group, now).await?;
            }
            let remaining_members = self.members(&rec.group_id).len() as u64;
            self.revision(
                identity,
                WeightRevisionCommand::CompleteDeletion {
                    operation_id: operation_id.into(),
                    remaining_members,
                },
            )
            .await?;
            // The tombstone keeps the summary; the units are of no more use.
            self.units_command(identity, WeightUnitsCommand::Forget)
                .await?;
            return Ok(());
        }
    }

    /// Logical payload bytes with a readable memory replica.
    pub(super) fn observed_hot_bytes(&self, group_id: &str, manifest_key: &str) -> u64 {
        self.members(group_id)
            .iter()
            .filter(|o| o.key != manifest_key && o.memory_readable)
            .map(|o| o.size)
            .sum()
    }

    /// Moves the lineage's active claim on until it needs the client (the target import) or
    /// is done. Idempotent: every step is fenced by the claim's persisted phase.
    pub async fn drive_claim(self: &Arc<Self>, lineage: &LineageId) {
        let key = format!("claim:{}", lineage.stream_id());
        if !self.start_driving(&key) {
            return;
        }
        let span = tracing::info_span!("weights.drive_claim", lineage = %lineage);
        let result = self.claim_loop(lineage).instrument(span).await;
        self.stop_driving(&key);
        if let Err(e) = result {
            tracing::warn!(lineage = %lineage, error = %e, "upsert claim stopped; it resumes on the next trigger or restart");
        }
    }

    async fn claim_loop(self: &Arc<Self>, lineage: &LineageId) -> Result<(), WeightServiceError> {
        loop {
            let state = self.read_lineage(lineage).await?;
            let Some(claim) = state.active_claim().cloned() else {
                return Ok(());
            };
            let advance = |phase| LineageClaimCommand::AdvanceClaim {
                request_id: claim.request_id.clone(),
                phase,
            };
            match claim.next_step() {
                UpsertStep::ImportTarget => {
                    let target = self.read_revision(&claim.target).await?;
                    let committed = target.record().is_some_and(|r| {
                        matches!(r.availability, Availability::Ready | Availability::Degraded)
                    });
                    if !committed {
                        return Ok(());
                    }
                    self.lineage(lineage, advance(ClaimPhase::TargetReady))
                        .await?;
                }
                UpsertStep::RetireBase { require_idle } => {
                    if !require_idle {
                        self.check_target_intact(&claim.target).await?;
                    }
                    let base = self.read_revision(&claim.base).await?;
                    let Some(rec) = base.record() else {
                        return Err(not_found(&claim.base));
                    };
                    let retire = WeightRevisionCommand::Retire {
                        request_id: claim.request_id.clone(),
                        successor_generation: claim.target.weight_generation,
                        expected_metadata_generation: rec.metadata_generation,
                        require_idle,
                    };
                    match self.revision(&claim.base, retire).await {
                        Ok(_) => {
                            self.lineage(lineage, advance(ClaimPhase::BaseRetired))
                                .await?;
                        }
                        Err(e) if require_idle && code_of(&e) == ErrorCode::Busy => {
                            // DELETE_FIRST: the base is in use and nothing was destroyed.
                            self.lineage(
                                lineage,
                                LineageClaimCommand::FailClaim {
                                    request_id: claim.request_id.clone(),
                                    reason: e.message(),
                                },
                            )
                            .await?;
                            return Ok(());
                        }
                        Err(e) if code_of(&e) == ErrorCode::StaleGeneration => continue,
                        Err(e) => return Err(e),
                    }
                }
                UpsertStep::DrainBaseLeases => {
                    let base = self.read_revision(&claim.base).await?;
                    if base.active_lease_count(self.now_ms()) > 0 {
                        tokio::time::sleep(RETRY_PAUSE).await;
                        continue;
                    }
                    self.lineage(lineage, advance(ClaimPhase::BaseDrained))
                        .await?;
                }
                UpsertStep::DeleteBase => {
                    if claim.mode == UpsertMode::PutFirst {
                        self.check_target_intact(&claim.target).await?;
                    }
                    self.remove_and_drive(&claim.base).await?;
                    let base = self.read_revision(&claim.base).await?;
                    let deleted = base
                        .record()
                        .is_none_or(|r| r.availability == Availability::Deleted);
                    if !deleted {
                        tokio::time::sleep(RETRY_PAUSE).await;
                        continue;
                    }
                    self.lineage(lineage, advance(ClaimPhase::BaseDeleted))
                        .await?;
                }
                UpsertStep::CommitWatermark => {
                    self.lineage(lineage, advance(ClaimPhase::Committed))
                        .await?;
                }
                UpsertStep::Done => return Ok(()),
            }
        }
    }

    /// PUT_FIRST retires and deletes the base only while its READY target is intact: a
    /// target that lost payloads (DEGRADED after a restart) leaves the base serving and the
    /// claim in its phase until the target is repaired.
    async fn check_target_intact(
        &self,
        target: &RevisionIdentity,
    ) -> Result<(), WeightServiceError> {
        let state = self.read_revision(target).await?;
        match state.record().map(|r| r.availability) {
            Some(Availability::Ready) => Ok(()),
            other => Err(WeightServiceError::refused(
                ErrorCode::NotReady,
                format!(
                    "upsert target {target} is {}: the base is kept until the target is repaired",
                    other.map_or("missing", |a| a.as_str())
                ),
            )),
        }
    }

    /// `Remove` (retried while BUSY under draining leases) and the deletion workflow.
    pub async fn remove_and_drive(
        self: &Arc<Self>,
        identity: &RevisionIdentity,
    ) -> Result<WeightRevision, WeightServiceError> {
        loop {
            let state = self.read_revision(identity).await?;
            let Some(rec) = state.record() else {
                return Err(not_found(identity));
            };
            if matches!(
                rec.availability,
                Availability::Deleting | Availability::Deleted
            ) {
                break;
            }
            let cmd = WeightRevisionCommand::Remove {
                expected_metadata_generation: rec.metadata_generation,
            };
            match self.revision(identity, cmd).await {
                Ok(_) => break,
                Err(e) if matches!(code_of(&e), ErrorCode::Busy | ErrorCode::StaleGeneration) => {
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
                Err(e) => return Err(e),
            }
        }
        self.drive_revision(identity).await;
        self.read_revision(identity).await
    }

    /// The lease expiry timer: `ExpireLeases` (time comes from the command's `Ctx`) for every
    /// revision holding an expired lease.
    pub fn spawn_lease_expiry(self: &Arc<Self>) {
        let me = self.clone();
        actix_rt::spawn(async move {
            let mut ticks = tokio::time::interval(LEASE_SWEEP);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                let now = me.now_ms();
                for identity in me.leased_revisions() {
                    let Ok(state) = me.read_revision(&identity).await else {
                        continue;
                    };
                    if state.leases().values().any(|l| !l.is_active(now)) {
                        if let Err(e) = me
                            .revision(&identity, WeightRevisionCommand::ExpireLeases)
                            .await
                        {
                            tracing::warn!(revision = %identity, error = %e, "lease expiry failed");
                        }
                    }
                }
            }
        });
    }
}

pub fn not_found(identity: &RevisionIdentity) -> WeightServiceError {
    WeightServiceError::refused(
        ErrorCode::NotFound,
        format!("weight revision {identity} not found"),
    )
}
