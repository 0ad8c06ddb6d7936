//! Residency policy of a revision, its resolution, and the validated cluster defaults.

use serde::{Deserialize, Serialize};

use crate::error::WeightError;

/// Aggregate physical residency of a revision's required payloads (never the manifest, which
/// always keeps a hard-pinned memory replica).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Residency {
    Unknown,
    Hot,
    Cold,
    Mixed,
    Absent,
}

impl Residency {
    pub fn as_str(self) -> &'static str {
        match self {
            Residency::Unknown => "UNKNOWN",
            Residency::Hot => "HOT",
            Residency::Cold => "COLD",
            Residency::Mixed => "MIXED",
            Residency::Absent => "ABSENT",
        }
    }

    /// The residency of a readable revision holding `hot_bytes` of `total_bytes` in memory.
    pub fn of_hot_bytes(hot_bytes: u64, total_bytes: u64) -> Residency {
        if hot_bytes >= total_bytes {
            Residency::Hot
        } else if hot_bytes == 0 {
            Residency::Cold
        } else {
            Residency::Mixed
        }
    }
}

/// The residency a revision converges toward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PreferredResidency {
    Hot,
    Cold,
    Mixed,
}

impl PreferredResidency {
    pub fn as_residency(self) -> Residency {
        match self {
            PreferredResidency::Hot => Residency::Hot,
            PreferredResidency::Cold => Residency::Cold,
            PreferredResidency::Mixed => Residency::Mixed,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MigrationMode {
    /// After initial convergence, residency is fixed: no migration, explicit or automatic.
    Pinned,
    /// After initial convergence, only explicit `weight_migrate`.
    Manual,
    /// Explicit migration plus automatic promotion and demotion.
    Auto,
}

/// A concrete migration target: HOT, COLD, or MIXED with its hot ratio.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResidencyTarget {
    Hot,
    Cold,
    Mixed { hot_ratio: f64 },
}

impl ResidencyTarget {
    pub fn residency(self) -> Residency {
        match self {
            ResidencyTarget::Hot => Residency::Hot,
            ResidencyTarget::Cold => Residency::Cold,
            ResidencyTarget::Mixed { .. } => Residency::Mixed,
        }
    }

    pub fn validate(self) -> Result<(), WeightError> {
        match self {
            ResidencyTarget::Mixed { hot_ratio } => check_ratio("mixed_hot_ratio", hot_ratio),
            _ => Ok(()),
        }
    }
}

pub(crate) fn check_ratio(field: &'static str, ratio: f64) -> Result<(), WeightError> {
    if ratio.is_finite() && ratio > 0.0 && ratio < 1.0 {
        Ok(())
    } else {
        Err(WeightError::invalid(
            field,
            format!("{ratio} is not strictly between 0 and 1"),
        ))
    }
}

pub const DEFAULT_MIXED_HOT_RATIO: f64 = 0.5;

/// The policy persisted with each revision.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WeightStoragePolicy {
    pub preferred_residency: PreferredResidency,
    pub mixed_hot_ratio: f64,
    pub migration_mode: MigrationMode,
}

impl Default for WeightStoragePolicy {
    fn default() -> Self {
        Self {
            preferred_residency: PreferredResidency::Mixed,
            mixed_hot_ratio: DEFAULT_MIXED_HOT_RATIO,
            migration_mode: MigrationMode::Auto,
        }
    }
}

impl WeightStoragePolicy {
    pub fn validate(&self) -> Result<(), WeightError> {
        check_ratio("mixed_hot_ratio", self.mixed_hot_ratio)
    }

    /// The migration target of the preferred residency.
    pub fn preferred_target(&self) -> ResidencyTarget {
        match self.preferred_residency {
            PreferredResidency::Hot => ResidencyTarget::Hot,
            PreferredResidency::Cold => ResidencyTarget::Cold,
            PreferredResidency::Mixed => ResidencyTarget::Mixed {
                hot_ratio: self.mixed_hot_ratio,
            },
        }
    }
}

/// A partial policy: what `weight_put(policy=...)` or a client's default sets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct PolicyOverride {
    #[serde(default)]
    pub preferred_residency: Option<PreferredResidency>,
    #[serde(default)]
    pub mixed_hot_ratio: Option<f64>,
    #[serde(default)]
    pub migration_mode: Option<MigrationMode>,
}

impl From<WeightStoragePolicy> for PolicyOverride {
    fn from(p: WeightStoragePolicy) -> Self {
        Self {
            preferred_residency: Some(p.preferred_residency),
            mixed_hot_ratio: Some(p.mixed_hot_ratio),
            migration_mode: Some(p.migration_mode),
        }
    }
}

/// Field by field: `put` > `client_default` > `cluster_default`. The result is validated.
pub fn resolve_policy(
    put: Option<&PolicyOverride>,
    client_default: Option<&PolicyOverride>,
    cluster_default: &WeightStoragePolicy,
) -> Result<WeightStoragePolicy, WeightError> {
    let put = put.copied().unwrap_or_default();
    let client = client_default.copied().unwrap_or_default();
    let policy = WeightStoragePolicy {
        preferred_residency: put
            .preferred_residency
            .or(client.preferred_residency)
            .unwrap_or(cluster_default.preferred_residency),
        mixed_hot_ratio: put
            .mixed_hot_ratio
            .or(client.mixed_hot_ratio)
            .unwrap_or(cluster_default.mixed_hot_ratio),
        migration_mode: put
            .migration_mode
            .or(client.migration_mode)
            .unwrap_or(cluster_default.migration_mode),
    };
    policy.validate()?;
    Ok(policy)
}

/// Bounds of one migration round and the pause between automatic migrations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigrationLimits {
    pub cooldown_ms: u64,
    pub max_members_per_round: u64,
    pub max_bytes_per_round: u64,
}

impl Default for MigrationLimits {
    fn default() -> Self {
        Self {
            cooldown_ms: 30_000,
            max_members_per_round: 64,
            max_bytes_per_round: 1 << 30,
        }
    }
}

impl MigrationLimits {
    pub fn validate(&self) -> Result<(), WeightError> {
        if self.max_members_per_round == 0 {
            return Err(WeightError::invalid(
                "max_members_per_round",
                "must be at least 1",
            ));
        }
        if self.max_bytes_per_round == 0 {
            return Err(WeightError::invalid(
                "max_bytes_per_round",
                "must be at least 1",
            ));
        }
        Ok(())
    }
}
