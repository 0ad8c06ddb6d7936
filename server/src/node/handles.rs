//! The small handles the node composes for the subsystems that run beside the API: each
//! subsystem declares what it uses (`crate::housekeeping::Housekeeping`,
//! `crate::embedded::EmbeddedDeps`, `crate::cold::ColdContext`) and the node fills it from its
//! state, so no subsystem depends on [`NodeState`] (docs/architecture.md, "Server modules").

use std::sync::Arc;
use std::time::Duration;

use super::NodeState;
use crate::embedded::EmbeddedDeps;
use crate::error::ServerError;
use crate::housekeeping::Housekeeping;

impl NodeState {
    /// Housekeeping's parts of this node.
    pub fn housekeeping(&self) -> Arc<Housekeeping> {
        Arc::new(Housekeeping {
            directory: self.directory.clone(),
            runtime: self.runtime.clone(),
            liveness: self.liveness.clone(),
            mirror: self.mirror.clone(),
            metrics: self.metrics.clone(),
            rebuild: self.rebuild.clone(),
            removals: self.removals.clone(),
            weights: self.weights.clone(),
            auth: self.auth.clone(),
            usage_journal: self.usage_journal.clone(),
            period: Duration::from_millis(self.store_settings.housekeeping_interval_ms),
        })
    }

    /// What mounting the embedded segment uses of this node.
    pub fn embedded_deps(&self) -> EmbeddedDeps<'_> {
        EmbeddedDeps {
            settings: &self.store_settings,
            net: &self.net_settings,
            segments: &self.segments,
            mirror: &self.mirror,
            liveness: &self.liveness,
            cold: &self.cold_context,
            cell: &self.embedded,
        }
    }

    /// Starts and journals this node's embedded segment
    /// ([`crate::embedded::mount_embedded`]).
    pub async fn mount_embedded(&self) -> Result<(), ServerError> {
        crate::embedded::mount_embedded(&self.embedded_deps()).await
    }
}
