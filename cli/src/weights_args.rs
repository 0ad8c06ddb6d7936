//! Arguments of `crescent weights`: the revision identity and the storage policy syntax
//! (`hot`, `cold`, `mixed`, `mixed:RATIO`; modes `pinned`, `manual`, `auto`).

use clap::Args;
use crescent_wire::weights as w;

use crescent_client::ClientError;

#[derive(Debug, Clone, Args)]
pub struct RevisionArgs {
    /// The revision's namespace (for example a model family).
    #[arg(long)]
    pub namespace: String,
    /// The resource within the namespace (for example a model).
    #[arg(long)]
    pub resource: String,
    /// The revision of the resource (for example a branch or a tag).
    #[arg(long)]
    pub revision: String,
}

/// The ID arguments of `crescent weights`: the revision and its weight generation.
#[derive(Debug, Clone, Args)]
pub struct WeightIdArgs {
    #[command(flatten)]
    pub revision: RevisionArgs,
    /// The revision's weight generation.
    #[arg(long)]
    pub generation: u64,
}

impl WeightIdArgs {
    pub fn id(&self, tenant: Option<&str>) -> w::WeightId {
        weight_id(tenant, &self.revision, self.generation)
    }
}

pub(super) fn weight_id(tenant: Option<&str>, id: &RevisionArgs, generation: u64) -> w::WeightId {
    w::WeightId {
        tenant: tenant.map(str::to_string),
        namespace: id.namespace.clone(),
        resource_id: id.resource.clone(),
        revision: id.revision.clone(),
        generation,
    }
}

/// `hot`, `cold`, `mixed` or `mixed:RATIO` plus an optional mode.
pub fn parse_policy(
    policy: Option<&str>,
    mode: Option<&str>,
) -> Result<Option<w::WeightPolicy>, ClientError> {
    if policy.is_none() && mode.is_none() {
        return Ok(None);
    }
    let mut out = w::WeightPolicy::default();
    if let Some(p) = policy {
        let (residency, ratio) = match p.split_once(':') {
            Some((r, ratio)) => (r, Some(ratio)),
            None => (p, None),
        };
        out.preferred_residency = Some(match residency.to_ascii_lowercase().as_str() {
            "hot" => w::PreferredResidency::Hot,
            "cold" => w::PreferredResidency::Cold,
            "mixed" => w::PreferredResidency::Mixed,
            other => {
                return Err(ClientError::InvalidArgument(format!(
                    "policy {other:?}: expected hot, cold, mixed or mixed:RATIO"
                )))
            }
        });
        if let Some(r) = ratio {
            if out.preferred_residency != Some(w::PreferredResidency::Mixed) {
                return Err(ClientError::InvalidArgument(format!(
                    "policy {p:?}: only mixed takes a ratio"
                )));
            }
            let r: f64 = r.parse().map_err(|_| {
                ClientError::InvalidArgument(format!("policy {p:?}: {r:?} is not a ratio"))
            })?;
            if !(r > 0.0 && r < 1.0) {
                return Err(ClientError::InvalidArgument(format!(
                    "policy {p:?}: the ratio must be strictly between 0 and 1"
                )));
            }
            out.mixed_hot_ratio = Some(r);
        }
    }
    if let Some(m) = mode {
        out.migration_mode = Some(match m.to_ascii_lowercase().as_str() {
            "pinned" => w::MigrationMode::Pinned,
            "manual" => w::MigrationMode::Manual,
            "auto" => w::MigrationMode::Auto,
            other => {
                return Err(ClientError::InvalidArgument(format!(
                    "mode {other:?}: expected pinned, manual or auto"
                )))
            }
        });
    }
    Ok(Some(out))
}
