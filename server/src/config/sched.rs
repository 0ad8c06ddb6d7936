//! The `[scheduling]` section: per-tenant fair scheduling of store requests (docs/tenants.md,
//! "Soft isolation").

use serde::{Deserialize, Serialize};

use crate::config::{invalid, ConfigError};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SchedulingSettings {
    /// Store requests that run at once (HTTP workers and RPC threads together); more wait in
    /// per-tenant queues and are let in by weighted round-robin turns. 0: one per core.
    pub max_concurrent_requests: usize,
    /// Most batch items one tenant's requests may take in one turn (times its weight).
    pub max_batch_items_per_tenant: u64,
    /// Most put bytes one tenant's requests may take in one turn (times its weight).
    pub max_batch_bytes: u64,
}

impl Default for SchedulingSettings {
    fn default() -> Self {
        Self {
            max_concurrent_requests: 0,
            max_batch_items_per_tenant: 256,
            max_batch_bytes: 64 << 20,
        }
    }
}

/// Most concurrent store requests that may be configured.
const MAX_CONCURRENT: usize = 4096;
/// Largest per-turn byte budget: 1 TiB (the largest object).
const MAX_TURN_BYTES: u64 = 1 << 40;

impl SchedulingSettings {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.max_concurrent_requests > MAX_CONCURRENT {
            return Err(invalid(
                "scheduling.max_concurrent_requests",
                format!(
                    "{} is outside 0 (auto)..={MAX_CONCURRENT}",
                    self.max_concurrent_requests
                ),
            ));
        }
        let max_items = crescent_wire::store::MAX_BATCH as u64;
        if !(1..=max_items).contains(&self.max_batch_items_per_tenant) {
            return Err(invalid(
                "scheduling.max_batch_items_per_tenant",
                format!(
                    "{} is outside 1..={max_items}",
                    self.max_batch_items_per_tenant
                ),
            ));
        }
        if !(1..=MAX_TURN_BYTES).contains(&self.max_batch_bytes) {
            return Err(invalid(
                "scheduling.max_batch_bytes",
                format!("{} is outside 1..=1 TiB", self.max_batch_bytes),
            ));
        }
        Ok(())
    }

    /// Concurrent store requests: the configured number, or one per core.
    pub fn concurrent_requests(&self) -> usize {
        match self.max_concurrent_requests {
            0 => std::thread::available_parallelism().map_or(2, |n| n.get()),
            n => n,
        }
    }

    /// The per-turn budget at weight 1.
    pub fn budget(&self) -> crescent_sched::Budget {
        crescent_sched::Budget {
            items_per_turn: self.max_batch_items_per_tenant,
            bytes_per_turn: self.max_batch_bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(s: SchedulingSettings) -> String {
        s.validate().unwrap_err().to_string()
    }

    #[test]
    fn out_of_range_values_name_their_key() {
        let d = SchedulingSettings::default();
        assert!(d.validate().is_ok());
        let e = refused(SchedulingSettings {
            max_concurrent_requests: 5000,
            ..d.clone()
        });
        assert!(e.contains("scheduling.max_concurrent_requests"), "{e}");
        let e = refused(SchedulingSettings {
            max_batch_items_per_tenant: 0,
            ..d.clone()
        });
        assert!(e.contains("scheduling.max_batch_items_per_tenant"), "{e}");
        let e = refused(SchedulingSettings {
            max_batch_items_per_tenant: 1025,
            ..d.clone()
        });
        assert!(e.contains("scheduling.max_batch_items_per_tenant"), "{e}");
        let e = refused(SchedulingSettings {
            max_batch_bytes: (1 << 40) + 1,
            ..d
        });
        assert!(e.contains("scheduling.max_batch_bytes"), "{e}");
    }

    #[test]
    fn zero_concurrency_means_one_per_core() {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        assert_eq!(SchedulingSettings::default().concurrent_requests(), cores);
    }
}
