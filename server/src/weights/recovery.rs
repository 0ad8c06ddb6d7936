//! After a restart: the objects of each revision that survived (cold-only routes rebuilt from
//! the cold devices' journal carry no group) are adopted back into the revision's managed
//! group, so the group guard protects them and deletion finds them; and a manifest that came
//! back cold-only gets its memory replica again (the manifest stays memory-readable in every
//! residency).

use std::sync::Arc;

use crescent_weights::{Availability, RevisionIdentity};

use super::workflows::object_id;
use super::WeightService;
use crate::api::error::HttpError;

impl WeightService {
    /// Re-adopts the surviving members of `identity` and re-promotes its manifest.
    pub(super) async fn recover_members(
        self: &Arc<Self>,
        identity: &RevisionIdentity,
    ) -> Result<(), HttpError> {
        let state = self.read_revision(identity).await?;
        let Some(rec) = state.record() else {
            return Ok(());
        };
        if matches!(
            rec.availability,
            Availability::Importing | Availability::Deleted
        ) {
            return Ok(());
        }
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
        tracing::info!(revision = %identity, adopted, "weight revision members recovered");
        Ok(())
    }
}
