//! Tunables of the object directory, and their defaults (docs/configuration.md).

use crate::error::StoreError;

#[derive(Debug, Clone, PartialEq)]
pub struct StoreConfig {
    /// Number of independently locked shards (a power of two is not required).
    pub shards: usize,
    /// Read lease granted by `get` (default 10 s).
    pub lease_ttl_ms: u64,
    /// A chain of lease renewals never protects an object longer than this from the chain's
    /// first grant (default 60 s); after the cap, one TTL of cool-down passes before a new chain
    /// may start, so eviction and remove always get a window.
    pub max_lease_ms: u64,
    /// A put not ended within this time may be pre-empted by a new put of the same key
    /// (default 30 s).
    pub discard_timeout_ms: u64,
    /// The space of a pre-empted or abandoned put is reclaimed this long after its start
    /// (default 600 s): its writer may still be writing until then.
    pub release_timeout_ms: u64,
    /// Eviction starts above this fraction of total capacity (default 0.90).
    pub high_watermark: f64,
    /// One eviction frees this fraction of total capacity (default 0.05).
    pub evict_ratio: f64,
    /// Largest value accepted by put_start (default 4 GiB).
    pub max_object_bytes: u64,
    /// Most replicas one put may ask for.
    pub max_replicas: u32,
    /// Most distinct (tenant, domain) scopes the directory interns.
    pub max_scopes: usize,
    /// Seed of the placement RNG (random placement is reproducible in tests).
    pub seed: u64,
    /// Bound of each owner's queue of undelivered replica releases, in entries (default
    /// 65,536; `releases.rs`). On overflow the oldest is dropped and counted.
    pub release_queue_limit: usize,
    /// Most bytes (value sizes) one tenant's puts in progress may hold together; a put past
    /// it is `BUSY` unless the tenant has none in progress (0: no bound; docs/tenants.md
    /// "Soft isolation").
    pub max_inflight_bytes_per_tenant: u64,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            shards: 64,
            lease_ttl_ms: 10_000,
            max_lease_ms: 60_000,
            discard_timeout_ms: 30_000,
            release_timeout_ms: 600_000,
            high_watermark: 0.90,
            evict_ratio: 0.05,
            max_object_bytes: 4 << 30,
            max_replicas: 8,
            max_scopes: 1 << 16,
            seed: 0x6372_6573_6365_6e74,
            release_queue_limit: crate::releases::DEFAULT_RELEASE_QUEUE_LIMIT,
            max_inflight_bytes_per_tenant: 0,
        }
    }
}

impl StoreConfig {
    pub fn validate(&self) -> Result<(), StoreError> {
        let bad = |field, reason: &str| Err(StoreError::invalid(field, reason));
        if self.shards == 0 || self.shards > 4096 {
            return bad("shards", "must be in 1..=4096");
        }
        if self.lease_ttl_ms == 0 {
            return bad("lease_ttl_ms", "must be > 0");
        }
        if self.max_lease_ms < self.lease_ttl_ms {
            return bad("max_lease_ms", "must be >= lease_ttl_ms");
        }
        if self.release_timeout_ms < self.discard_timeout_ms {
            return bad("release_timeout_ms", "must be >= discard_timeout_ms");
        }
        if !(self.high_watermark > 0.0 && self.high_watermark <= 1.0) {
            return bad("high_watermark", "must be in (0, 1]");
        }
        if !(self.evict_ratio > 0.0 && self.evict_ratio <= 1.0) {
            return bad("evict_ratio", "must be in (0, 1]");
        }
        if self.max_object_bytes == 0 {
            return bad("max_object_bytes", "must be > 0");
        }
        if self.max_replicas == 0 {
            return bad("max_replicas", "must be > 0");
        }
        if self.max_scopes == 0 || self.max_scopes > u32::MAX as usize {
            return bad("max_scopes", "must be in 1..=u32::MAX");
        }
        if self.release_queue_limit == 0 {
            return bad("release_queue_limit", "must be > 0");
        }
        Ok(())
    }
}
