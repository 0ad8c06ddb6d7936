//! Tenant quota roots in crescentd: one `QuotaRoot` actor per tenant, seeded from the
//! recovered world, through which every quota command is journaled (docs/tenants.md).
//!
//! The admin routes set and show policies here; the put and remove paths send no commands
//! through it.

use std::collections::BTreeMap;

use crescent_actors::quota_root::{PolicyMode, QuotaCommand, QuotaEvent, QuotaLimits, QuotaRoot};
use crescent_actors::{AggregateRegistry, Runtime, World};
use crescent_store::identity::validate_scope_name;
use crescent_wire::tenants::TenantQuota;
use tracing::Instrument;

use crate::api::error::{from_runtime, HttpError};

pub struct TenantQuotas {
    registry: AggregateRegistry<QuotaRoot>,
}

impl TenantQuotas {
    /// The registry seeded with every recovered quota root.
    pub fn recover(runtime: &Runtime, world: &World) -> Self {
        let states: BTreeMap<String, QuotaRoot> = world
            .iter::<QuotaRoot>()
            .map(|(id, s)| (id.clone(), s.clone()))
            .collect();
        if !states.is_empty() {
            tracing::info!(tenants = states.len(), "quota roots recovered");
        }
        let registry = AggregateRegistry::<QuotaRoot>::builder(runtime.clone())
            .recovered(states, world.last_seq())
            .build();
        Self { registry }
    }

    /// Runs `cmd` on `tenant`'s quota root; resolves once its events are committed.
    pub async fn execute(
        &self,
        tenant: &str,
        cmd: QuotaCommand,
    ) -> Result<Vec<QuotaEvent>, HttpError> {
        validate_scope_name("tenant", tenant)?;
        let span = tracing::debug_span!("quota", tenant, command = command_name(&cmd));
        let done = self
            .registry
            .execute(tenant, cmd)
            .instrument(span)
            .await
            .map_err(from_runtime)?;
        Ok(done.events)
    }

    /// Sets `tenant`'s hard limits (`mode`: bootstrap or admin change); true when a policy
    /// was created or changed.
    pub async fn set_policy(
        &self,
        tenant: &str,
        limits: QuotaLimits,
        mode: PolicyMode,
    ) -> Result<bool, HttpError> {
        let cmd = QuotaCommand::SetPolicy { limits, mode };
        Ok(!self.execute(tenant, cmd).await?.is_empty())
    }

    /// `tenant`'s policy and accounting, as committed.
    pub async fn show(&self, tenant: &str) -> Result<TenantQuota, HttpError> {
        validate_scope_name("tenant", tenant)?;
        let name = tenant.to_string();
        self.registry
            .read(tenant, move |root| quota_of(name, root))
            .await
            .map_err(from_runtime)
    }
}

/// The wire view of a quota root.
pub fn quota_of(tenant: String, root: &QuotaRoot) -> TenantQuota {
    let limits = root.limits();
    TenantQuota {
        tenant,
        max_bytes: limits.max_bytes,
        max_objects: limits.max_objects,
        policy_version: root.policy().map(|p| p.policy_version),
        fingerprint: root.policy().map(|p| p.fingerprint.clone()),
        used_bytes: root.used_bytes(),
        used_objects: root.used_objects(),
        pending_bytes: root.pending_bytes(),
        pending_operations: root.pending_operations() as u64,
        in_doubt_operations: root.in_doubt_operations() as u64,
    }
}

/// A bounded name for the command (tracing).
fn command_name(cmd: &QuotaCommand) -> &'static str {
    match cmd {
        QuotaCommand::SetPolicy { .. } => "set_policy",
        QuotaCommand::Reserve { .. } => "reserve",
        QuotaCommand::ReserveBatch { .. } => "reserve_batch",
        QuotaCommand::Publish { .. } => "publish",
        QuotaCommand::Finalize { .. } => "finalize",
        QuotaCommand::Abort { .. } => "abort",
        QuotaCommand::ExpireDue { .. } => "expire_due",
        QuotaCommand::PruneTerminal { .. } => "prune_terminal",
    }
}
