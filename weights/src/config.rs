//! Cluster defaults and limits for managed weights (crescentd configuration), validated at
//! startup: an invalid value stops the process (fail closed).

use serde::{Deserialize, Serialize};

use crate::error::WeightError;
use crate::policy::{
    check_ratio, MigrationLimits, MigrationMode, PreferredResidency, WeightStoragePolicy,
    DEFAULT_MIXED_HOT_RATIO,
};

/// The `[weights]` configuration, with the seed's keys and defaults. Unknown residency or mode
/// strings already fail deserialization; [`WeightConfig::validate`] checks the rest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WeightConfig {
    pub default_weight_preferred_residency: PreferredResidency,
    pub default_weight_mixed_hot_ratio: f64,
    pub default_weight_migration_mode: MigrationMode,
    /// Gate for ordinary weight metadata mutations on an HA cluster.
    pub weight_management_oplog_capability_confirmed: bool,
    /// Separate gate for lineage (`weight_upsert`) mutations.
    pub weight_lineage_oplog_capability_confirmed: bool,
    pub weight_migration_cooldown_ms: u64,
    pub weight_migration_max_members_per_round: u64,
    pub weight_migration_max_bytes_per_round: u64,
}

impl Default for WeightConfig {
    fn default() -> Self {
        let limits = MigrationLimits::default();
        Self {
            default_weight_preferred_residency: PreferredResidency::Mixed,
            default_weight_mixed_hot_ratio: DEFAULT_MIXED_HOT_RATIO,
            default_weight_migration_mode: MigrationMode::Auto,
            weight_management_oplog_capability_confirmed: false,
            weight_lineage_oplog_capability_confirmed: false,
            weight_migration_cooldown_ms: limits.cooldown_ms,
            weight_migration_max_members_per_round: limits.max_members_per_round,
            weight_migration_max_bytes_per_round: limits.max_bytes_per_round,
        }
    }
}

impl WeightConfig {
    /// Every check; crescentd calls this once at startup and refuses to start on an error.
    pub fn validate(&self) -> Result<(), WeightError> {
        let config = |key: &'static str, e: WeightError| WeightError::Config {
            key,
            reason: e.to_string(),
        };
        check_ratio("mixed_hot_ratio", self.default_weight_mixed_hot_ratio)
            .map_err(|e| config("default_weight_mixed_hot_ratio", e))?;
        if self.weight_migration_max_members_per_round == 0 {
            return Err(WeightError::Config {
                key: "weight_migration_max_members_per_round",
                reason: "must be at least 1".into(),
            });
        }
        if self.weight_migration_max_bytes_per_round == 0 {
            return Err(WeightError::Config {
                key: "weight_migration_max_bytes_per_round",
                reason: "must be at least 1".into(),
            });
        }
        Ok(())
    }

    /// The cluster default policy (the lowest layer of [`crate::resolve_policy`]).
    pub fn cluster_default_policy(&self) -> WeightStoragePolicy {
        WeightStoragePolicy {
            preferred_residency: self.default_weight_preferred_residency,
            mixed_hot_ratio: self.default_weight_mixed_hot_ratio,
            migration_mode: self.default_weight_migration_mode,
        }
    }

    pub fn migration_limits(&self) -> MigrationLimits {
        MigrationLimits {
            cooldown_ms: self.weight_migration_cooldown_ms,
            max_members_per_round: self.weight_migration_max_members_per_round,
            max_bytes_per_round: self.weight_migration_max_bytes_per_round,
        }
    }

    /// Whether ordinary weight mutations may be journaled. `ha_replicated` is false for a
    /// standalone crescentd, whose journal has no standby that could lack the event kinds.
    pub fn require_weight_mutations(&self, ha_replicated: bool) -> Result<(), WeightError> {
        if ha_replicated && !self.weight_management_oplog_capability_confirmed {
            return Err(WeightError::CapabilityDisabled {
                flag: "weight_management_oplog_capability_confirmed",
            });
        }
        Ok(())
    }

    /// Whether lineage (`weight_upsert`) mutations may be journaled; needs both gates.
    pub fn require_lineage_mutations(&self, ha_replicated: bool) -> Result<(), WeightError> {
        self.require_weight_mutations(ha_replicated)?;
        if ha_replicated && !self.weight_lineage_oplog_capability_confirmed {
            return Err(WeightError::CapabilityDisabled {
                flag: "weight_lineage_oplog_capability_confirmed",
            });
        }
        Ok(())
    }
}
