//! After a restart: the objects of each revision that survived (cold-only routes rebuilt from
//! the cold devices' journal carry no group) are adopted back into the revision's managed
//! group, so the group guard protects them and deletion finds them; and a manifest that came
//! back cold-only gets its memory replica again (the manifest stays memory-readable in every
//! residency). Payloads that came back nowhere (a HOT revision without cold copies on a
//! standalone node: the embedded segment's memory is new) make the revision DEGRADED with
//! the residency of what remains, so reads answer NOT_READY instead of failing part-way; a
//! DEGRADED revision whose payloads are all back (owners that replayed) is repaired.

use std::sync::Arc;
use std::time::Duration;

use crescent_weights::revision::OperationKind;
use crescent_weights::{
    Availability, AvailabilityReason, RevisionIdentity, WeightRevision, WeightRevisionCommand,
};

use crescent_store::StoreError;
use crescent_wire::store::RemovePrefixRequest;

use super::error::WeightServiceError;
use super::workflows::{object_id, payload_prefix};
use super::{WeightService, WEIGHTS_DOMAIN};

/// How often recovery looks at the rebuild gate while the owners replay.
const GATE_POLL: Duration = Duration::from_millis(50);

impl WeightService {
    /// The revision's state when it has a record whose availability `wanted` accepts (both
    /// recovery passes skip empty aggregates and the availabilities they do not handle).
    async fn recovered_revision(
        &self,
        identity: &RevisionIdentity,
        wanted: impl Fn(Availability) -> bool,
    ) -> Result<Option<WeightRevision>, WeightServiceError> {
        let state = self.read_revision(identity).await?;
        Ok(state
            .record()
            .is_some_and(|rec| wanted(rec.availability))
            .then_some(state))
    }

    /// At startup or promotion: once the rebuild gate is open (the owners have replayed what
    /// they hold, or the degraded timeout passed), re-adopts each revision's surviving
    /// objects, checks it for lost payloads, then resumes every running deletion and
    /// migration and every active claim from its persisted phase. Checking before the
    /// owners' replay would find their objects missing and degrade intact revisions.
    pub fn resume_all(self: &Arc<Self>, rebuild: Arc<crate::rebuild::Rebuild>) {
        let me = self.clone();
        actix_rt::spawn(async move {
            if !rebuild.is_open() {
                tracing::info!("weight recovery waits for the rebuild gate");
                while !rebuild.is_open() {
                    tokio::time::sleep(GATE_POLL).await;
                }
            }
            let (identities, _) = me.list_identities(|_| true, true, None, usize::MAX);
            let revisions = identities.len();
            let mut lineages = Vec::new();
            for identity in identities {
                if !lineages.contains(&identity.lineage()) {
                    lineages.push(identity.lineage());
                }
                if let Err(e) = me.recover_members(&identity).await {
                    tracing::warn!(revision = %identity, error = %e, "member recovery failed");
                }
                if let Ok(state) = me.read_revision(&identity).await {
                    if let Err(e) = me.purge_tombstone(&state) {
                        tracing::warn!(revision = %identity, error = %e,
                            "replayed objects of a deleted revision were not removed");
                    }
                }
                if let Err(e) = me
                    .reconcile_losses(&identity, AvailabilityReason::Recovery)
                    .await
                {
                    tracing::warn!(revision = %identity, error = %e, "loss reconciliation failed");
                }
                let running = me
                    .read_revision(&identity)
                    .await
                    .is_ok_and(|s| s.active_operation().is_some());
                if running {
                    tracing::info!(revision = %identity, "resuming weight operation");
                    let driver = me.clone();
                    actix_rt::spawn(async move { driver.drive_revision(&identity).await });
                }
            }
            tracing::info!(
                revisions,
                "weight revisions recovered and checked for lost payloads"
            );
            for lineage in lineages {
                let Ok(state) = me.read_lineage(&lineage).await else {
                    continue;
                };
                if let Some(claim) = state.active_claim() {
                    tracing::info!(lineage = %lineage, phase = ?claim.phase,
                        request_id = %claim.request_id, "resuming upsert claim");
                    me.metrics.claim_resumed(claim.mode, claim.phase);
                    let driver = me.clone();
                    actix_rt::spawn(async move { driver.drive_claim(&lineage).await });
                }
            }
        });
    }

    /// Re-adopts the surviving members of `identity` and re-promotes its manifest.
    pub(super) async fn recover_members(
        self: &Arc<Self>,
        identity: &RevisionIdentity,
    ) -> Result<(), WeightServiceError> {
        let Some(state) = self
            .recovered_revision(identity, |a| {
                !matches!(a, Availability::Importing | Availability::Deleted)
            })
            .await?
        else {
            return Ok(());
        };
        let Some(rec) = state.record() else {
            return Ok(());
        };
        let group = self.groups.intern(&rec.group_id);
        let manifest_key = rec.manifest_key.clone();
        let units = self.read_units(identity).await?.unwrap_or_default();
        let keys = std::iter::once(manifest_key.clone())
            .chain(units.into_iter().flat_map(|u| u.member_keys));
        let mut adopted = 0u64;
        for key in keys {
            match self.directory.adopt_group_member(&object_id(&key), group) {
                Ok(true) => adopted += 1,
                Ok(false) => {}
                Err(e) => tracing::warn!(revision = %identity, key, error = %e,
                    "a surviving object was not adopted into its group"),
            }
        }
        let manifest_cold_only = self
            .directory
            .route(&object_id(&manifest_key))
            .ok()
            .flatten()
            .is_some_and(|r| r.replicas.is_empty());
        if let (true, Some(cold), Availability::Ready | Availability::Degraded) =
            (manifest_cold_only, self.cold_tier(), rec.availability)
        {
            if let Err(e) = cold.copy_to_memory(vec![manifest_key]).await {
                tracing::warn!(revision = %identity, error = %e,
                    "the manifest was not restored into memory; reads restore it on demand");
            }
        }
        if adopted > 0 {
            tracing::info!(revision = %identity, adopted, "weight revision members recovered");
        }
        Ok(())
    }

    /// Removes a tombstone's objects that came back with an owner's replay: crescentd's
    /// removals are not propagated to the owner's ownership table (docs/rebuild.md, limits),
    /// so a deleted revision's payloads and manifest can reappear, as ordinary objects of no
    /// group that nothing references any more. A deletion still running re-adopts them into
    /// its group instead ([`WeightService::recover_members`]) and removes them in its batches.
    pub(super) fn purge_tombstone(
        &self,
        state: &WeightRevision,
    ) -> Result<u64, WeightServiceError> {
        let Some(rec) = state
            .record()
            .filter(|r| r.availability == Availability::Deleted)
        else {
            return Ok(0);
        };
        let now = self.now_ms();
        let payloads = self.directory.remove_prefix(
            &RemovePrefixRequest {
                tenant: None,
                domain: Some(WEIGHTS_DOMAIN.to_string()),
                prefix: payload_prefix(&rec.identity),
            },
            now,
        )?;
        let manifest = match self
            .directory
            .remove(&object_id(&rec.manifest_key), false, now)
        {
            Ok(()) => 1,
            Err(StoreError::NotFound { .. }) => 0,
            Err(e) => return Err(e.into()),
        };
        let removed = payloads.removed + manifest;
        if removed > 0 {
            tracing::warn!(revision = %rec.identity, removed, skipped = payloads.skipped,
                "objects of a deleted weight revision came back with an owner's replay: removed");
        }
        Ok(removed)
    }

    /// Compares a published revision's payloads with the replicas that exist: lost ones
    /// degrade it (journaled, residency corrected; `reason` labels the transition); a degraded
    /// one with every payload back is repaired. A revision committed without recorded units
    /// cannot be checked. Recovery runs it once per start, the run-time check
    /// (`health.rs`) after an owner expired and while a revision is DEGRADED.
    pub(super) async fn reconcile_losses(
        self: &Arc<Self>,
        identity: &RevisionIdentity,
        reason: AvailabilityReason,
    ) -> Result<(), WeightServiceError> {
        let Some(state) = self
            .recovered_revision(identity, |a| {
                matches!(a, Availability::Ready | Availability::Degraded)
            })
            .await?
        else {
            return Ok(());
        };
        let Some(rec) = state.record() else {
            return Ok(());
        };
        let Some(units) = self.read_units(identity).await? else {
            return Ok(());
        };
        let mut lost = 0u64;
        let mut hot_bytes = 0u64;
        for key in units.iter().flat_map(|u| u.member_keys.iter()) {
            match self.directory.route(&object_id(key)).ok().flatten() {
                None => lost += 1,
                Some(route) if !route.replicas.is_empty() => hot_bytes += route.length,
                Some(_) => {}
            }
        }
        if lost > 0 {
            self.degrade(identity, &state, (lost, hot_bytes), reason)
                .await
        } else if rec.availability == Availability::Degraded {
            self.repair(identity, &state, hot_bytes).await
        } else {
            Ok(())
        }
    }

    async fn degrade(
        self: &Arc<Self>,
        identity: &RevisionIdentity,
        state: &WeightRevision,
        (lost, hot_bytes): (u64, u64),
        reason: AvailabilityReason,
    ) -> Result<(), WeightServiceError> {
        tracing::warn!(revision = %identity, lost, hot_bytes, reason = reason.as_str(),
            "weight payloads have no replica and no cold copy: the revision is DEGRADED");
        // A migration cannot move what is gone: it ends FAILED before the report (a deletion
        // goes on: it removes what is left).
        if let Some(op) = state
            .active_operation()
            .filter(|o| o.kind == OperationKind::Migrating)
        {
            self.revision(
                identity,
                WeightRevisionCommand::RecordOperationFailure {
                    operation_id: op.operation_id.clone(),
                    error: format!("{lost} payload(s) lost: no replica and no cold copy"),
                    terminal: true,
                },
            )
            .await?;
        }
        let before = state.record().map(|r| r.availability);
        let after = self
            .revision(
                identity,
                WeightRevisionCommand::ReportMembersLost {
                    lost_members: lost,
                    hot_bytes: Some(hot_bytes),
                },
            )
            .await?;
        if before != Some(Availability::Degraded)
            && after.record().map(|r| r.availability) == Some(Availability::Degraded)
        {
            self.metrics
                .availability_changed(Availability::Degraded, reason);
        }
        Ok(())
    }

    async fn repair(
        self: &Arc<Self>,
        identity: &RevisionIdentity,
        state: &WeightRevision,
        hot_bytes: u64,
    ) -> Result<(), WeightServiceError> {
        let Some(rec) = state.record() else {
            return Ok(());
        };
        let operation_id = match state.active_operation() {
            Some(op) if op.kind == OperationKind::Repairing => op.operation_id.clone(),
            Some(_) => return Ok(()),
            None => {
                let after = self
                    .revision(
                        identity,
                        WeightRevisionCommand::StartRepair {
                            expected_metadata_generation: rec.metadata_generation,
                        },
                    )
                    .await?;
                match after.active_operation() {
                    Some(op) => op.operation_id.clone(),
                    None => return Ok(()),
                }
            }
        };
        tracing::info!(revision = %identity, operation = %operation_id,
            "every payload of a DEGRADED revision is back: repaired");
        let after = self
            .revision(
                identity,
                WeightRevisionCommand::CompleteRepair {
                    operation_id,
                    hot_bytes,
                },
            )
            .await?;
        if after.record().map(|r| r.availability) == Some(Availability::Ready) {
            self.metrics
                .availability_changed(Availability::Ready, AvailabilityReason::Repaired);
        }
        Ok(())
    }
}
