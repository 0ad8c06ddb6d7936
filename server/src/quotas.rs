//! Tenant quota roots in crescentd: one `QuotaRoot` actor per tenant, seeded from the
//! recovered world, through which every quota command is journaled (docs/tenants.md).
//!
//! A policy's limits are installed in the object directory's tenant ledger once journaled
//! (and at recovery), and the put path admits against them there; usage is the ledger's
//! exact counters (docs/tenants.md, "Enforcement on the put path").

use std::collections::BTreeMap;
use std::sync::Arc;

use crescent_actors::quota_root::{
    Allowance, PolicyMode, QuotaCommand, QuotaEvent, QuotaLimits, QuotaRoot,
};
use crescent_actors::{AggregateRegistry, Runtime, World};
use crescent_store::identity::validate_scope_name;
use crescent_store::ObjectDirectory;
use crescent_wire::tenants::{MeshShare, RecordedUsage, TenantQuota, UsageReconciliation};
use tracing::Instrument;

use crate::error::CommandFailed;

pub struct TenantQuotas {
    registry: AggregateRegistry<QuotaRoot>,
    /// The tenants whose recovered roots hold a usage record (what a run reconciles).
    recorded_tenants: std::collections::BTreeSet<String>,
    directory: Arc<ObjectDirectory>,
    metrics: crate::tenant_metrics::TenantMetrics,
}

impl TenantQuotas {
    /// The registry seeded with every recovered quota root, whose limits `directory` enforces
    /// from now on.
    pub fn recover(
        runtime: &Runtime,
        world: &World,
        directory: Arc<ObjectDirectory>,
        default: &crate::config::TenantDefaultConfig,
        metrics: &prometheus::Registry,
    ) -> Result<Self, crate::error::ServerError> {
        directory
            .tenants()
            .set_default_limits(default.max_bytes, default.max_objects);
        let states: BTreeMap<String, QuotaRoot> = world
            .iter::<QuotaRoot>()
            .map(|(id, s)| (id.clone(), s.clone()))
            .collect();
        if !states.is_empty() {
            tracing::info!(tenants = states.len(), "quota roots recovered");
        }
        for (tenant, root) in &states {
            let limits = root.limits();
            directory
                .tenants()
                .set_limits(tenant, limits.max_bytes, limits.max_objects);
            // What this cluster granted other clusters of a mesh stays charged across a
            // restart (docs/tenants.md, "Quota across a mesh").
            let granted = root.allowances_total();
            if granted != Allowance::default() {
                directory
                    .tenants()
                    .add_granted(tenant, (granted.bytes, granted.objects));
            }
        }
        let recorded_tenants = states
            .iter()
            .filter(|(_, root)| root.recorded_usage().is_some())
            .map(|(tenant, _)| tenant.clone())
            .collect();
        let registry = AggregateRegistry::<QuotaRoot>::builder(runtime.clone())
            .recovered(states, world.last_seq())
            .build();
        let metrics = crate::tenant_metrics::TenantMetrics::register(metrics)
            .map_err(|e| crate::error::ServerError::Recovery(format!("tenant metrics: {e}")))?;
        Ok(Self {
            registry,
            recorded_tenants,
            directory,
            metrics,
        })
    }

    /// The tenants whose recovered roots hold a usage record.
    pub fn recorded_tenants(&self) -> std::collections::BTreeSet<String> {
        self.recorded_tenants.clone()
    }

    /// Sets the per-tenant gauges from the directory's figures (at scrape time).
    pub fn refresh_metrics(&self) {
        self.metrics.refresh(&self.directory.tenants().all());
    }

    /// Runs `cmd` on `tenant`'s quota root; resolves once its events are committed.
    pub async fn execute(
        &self,
        tenant: &str,
        cmd: QuotaCommand,
    ) -> Result<Vec<QuotaEvent>, TenantQuotaError> {
        validate_scope_name("tenant", tenant)?;
        let span = tracing::debug_span!("quota", tenant, command = command_name(&cmd));
        let done = self
            .registry
            .execute(tenant, cmd)
            .instrument(span)
            .await
            .map_err(CommandFailed::from)?;
        Ok(done.events)
    }

    /// Sets `tenant`'s hard limits (`mode`: bootstrap or admin change); true when a policy
    /// was created or changed.
    pub async fn set_policy(
        &self,
        tenant: &str,
        limits: QuotaLimits,
        mode: PolicyMode,
    ) -> Result<bool, TenantQuotaError> {
        let cmd = QuotaCommand::SetPolicy { limits, mode };
        let changed = !self.execute(tenant, cmd).await?.is_empty();
        self.install_stored(tenant)
            .await
            .map_err(CommandFailed::from)?;
        Ok(changed)
    }

    /// Installs in the directory the limits `tenant`'s root holds now (journaled or already
    /// stored): what the put path admits against.
    async fn install_stored(
        &self,
        tenant: &str,
    ) -> Result<(), crescent_actors::RuntimeError<crescent_actors::quota_root::QuotaError>> {
        let stored = self.registry.read(tenant, |root| root.limits()).await?;
        self.directory
            .tenants()
            .set_limits(tenant, stored.max_bytes, stored.max_objects);
        Ok(())
    }

    /// Creates every `[[tenants]]` policy that is absent (docs/tenants.md, "Policy
    /// bootstrap"). A stored policy that differs stays: if an admin changed it (version 2 or
    /// more) the config is only out of date and a warning says so; a version 1 that differs
    /// fails startup, naming the tenant, so a config change is never silently ignored.
    pub async fn bootstrap(
        &self,
        tenants: &[crate::config::TenantPolicyConfig],
    ) -> Result<(), crate::error::ServerError> {
        use crescent_actors::quota_root::QuotaError;
        use crescent_actors::runtime::RuntimeError;
        for t in tenants {
            let limits = QuotaLimits {
                max_bytes: t.max_bytes,
                max_objects: t.max_objects,
            };
            let cmd = QuotaCommand::SetPolicy {
                limits,
                mode: PolicyMode::Bootstrap,
            };
            match self.registry.execute(&t.name, cmd).await {
                Ok(done) => {
                    if !done.events.is_empty() {
                        tracing::info!(tenant = %t.name, "tenant quota policy created from the config");
                    }
                }
                Err(RuntimeError::Domain(QuotaError::PolicyMismatch {
                    policy_version, ..
                })) if policy_version >= 2 => {
                    tracing::warn!(tenant = %t.name, policy_version, "[[tenants]] differs from \
                        the policy an admin set; the stored policy stays (update the config)");
                }
                Err(e) => {
                    return Err(crate::error::ServerError::Recovery(format!(
                        "[[tenants]] {:?}: {e}; set it with `crescent tenant quota set` or make \
                         the config match",
                        t.name
                    )))
                }
            }
            self.install_stored(&t.name)
                .await
                .map_err(|e| crate::error::ServerError::Recovery(e.to_string()))?;
        }
        Ok(())
    }

    /// The allowances `tenant`'s root records for other clusters of a mesh, by cluster.
    pub async fn allowances(
        &self,
        tenant: &str,
    ) -> Result<BTreeMap<String, Allowance>, TenantQuotaError> {
        validate_scope_name("tenant", tenant)?;
        self.registry
            .read(tenant, |root| {
                root.allowances()
                    .map(|(c, a)| (c.clone(), *a))
                    .collect::<BTreeMap<_, _>>()
            })
            .await
            .map_err(|e| CommandFailed::from(e).into())
    }

    /// `tenant`'s policy, as committed, and its usage, as the directory holds it now.
    pub async fn show(&self, tenant: &str) -> Result<TenantQuota, TenantQuotaError> {
        validate_scope_name("tenant", tenant)?;
        let name = tenant.to_string();
        let quota = self
            .registry
            .read(tenant, move |root| quota_of(name, root))
            .await
            .map_err(CommandFailed::from)?;
        Ok(with_usage(quota, &self.directory.tenants().figures(tenant)))
    }

    /// Every tenant with a policy or with objects, by name.
    pub async fn list(&self) -> Result<Vec<TenantQuota>, TenantQuotaError> {
        let mut out = Vec::new();
        for figures in self.directory.tenants().all() {
            let name = figures.tenant.clone();
            let quota = self
                .registry
                .read(&figures.tenant, move |root| quota_of(name, root))
                .await
                .map_err(CommandFailed::from)?;
            out.push(with_usage(quota, &figures));
        }
        Ok(out)
    }
}

/// The wire view of a quota root: its policy and its journaled accounting operations.
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
        removing_bytes: 0,
        reconciliation: root.last_reconciliation().map(|r| UsageReconciliation {
            recorded_bytes: r.recorded_bytes,
            recorded_objects: r.recorded_objects,
            rebuilt_bytes: r.rebuilt_bytes,
            rebuilt_objects: r.rebuilt_objects,
            at_ms: r.at_ms,
        }),
        recorded: root.recorded_usage().map(|r| RecordedUsage {
            used_bytes: r.used_bytes,
            used_objects: r.used_objects,
            at_ms: r.at_ms,
        }),
        mesh: None,
    }
}

/// `quota` with the directory's exact usage: its committed objects, its puts in progress with
/// what they reserved and its removes not yet durable (beside the root's own accounting
/// operations).
fn with_usage(quota: TenantQuota, figures: &crescent_store::TenantFigures) -> TenantQuota {
    // Without a policy the limits in force are the default ones (docs/tenants.md, "Default
    // limits").
    let (max_bytes, max_objects) = match quota.policy_version {
        Some(_) => (quota.max_bytes, quota.max_objects),
        None => (figures.max_bytes, figures.max_objects),
    };
    TenantQuota {
        max_bytes,
        max_objects,
        used_bytes: figures.used_bytes,
        used_objects: figures.used_objects,
        pending_bytes: figures.pending_bytes,
        pending_operations: quota.pending_operations + figures.pending_puts,
        in_doubt_operations: quota.in_doubt_operations + figures.removing_objects,
        removing_bytes: figures.removing_bytes,
        mesh: mesh_share(figures),
        ..quota
    }
}

/// In a mesh, what this cluster holds of the tenant's quota: only a cluster that granted or
/// was capped has a share to show.
fn mesh_share(f: &crescent_store::TenantFigures) -> Option<MeshShare> {
    let share = MeshShare {
        granted_bytes: f.granted_bytes,
        granted_objects: f.granted_objects,
        cap_bytes: f.cap_bytes,
        cap_objects: f.cap_objects,
    };
    (share != MeshShare::default()).then_some(share)
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
        QuotaCommand::RecordUsage { .. } => "record_usage",
        QuotaCommand::ReconcileUsage { .. } => "reconcile_usage",
        QuotaCommand::RecordAllowance { .. } => "record_allowance",
        QuotaCommand::ReleaseAllowance { .. } => "release_allowance",
    }
}

/// Why a tenant quota request was refused.
#[derive(Debug, thiserror::Error)]
pub enum TenantQuotaError {
    /// The tenant name is not a valid scope name.
    #[error(transparent)]
    Name(#[from] crescent_store::StoreError),
    /// The quota root's command or read did not run.
    #[error(transparent)]
    Command(#[from] CommandFailed),
}

impl TenantQuotaError {
    pub fn code(&self) -> crescent_wire::ErrorCode {
        match self {
            TenantQuotaError::Name(e) => e.wire_code(),
            TenantQuotaError::Command(e) => e.code,
        }
    }
}

impl From<TenantQuotaError> for crescent_wire::ApiError {
    fn from(e: TenantQuotaError) -> Self {
        crescent_wire::ApiError::new(e.code(), e.to_string())
    }
}

#[cfg(test)]
mod error_tests {
    use super::*;
    use crescent_error_class::coverage::assert_wire_map;
    use crescent_error_class::every_variant;
    use crescent_wire::ErrorCode;

    #[test]
    fn every_refusal_has_a_code_other_than_internal() {
        let all = every_variant!(TenantQuotaError {
            Name => validate_scope_name("tenant", "").unwrap_err().into(),
            Command => TenantQuotaError::Command(CommandFailed {
                code: ErrorCode::QuotaExceeded,
                message: "m".into(),
            }),
        });
        assert_wire_map(&all, TenantQuotaError::code, &[]);
    }
}
