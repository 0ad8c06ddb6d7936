//! Metrics of a storage owner's remote-restore staging region (the crescent-owner package's
//! `owner_staging`). They live with the client's metrics so that
//! [`crate::ClientMetrics::register`] exports them with the rest of the process's families.

use prometheus::{IntCounter, IntCounterVec, IntGauge, Opts, Registry};

/// Outcomes of a `Stage` work item (the `outcome` label).
pub const OWNER_STAGE_OUTCOMES: [&str; 3] = ["staged", "busy", "failed"];
/// Outcomes of a released token (the `outcome` label).
pub const OWNER_STAGING_ACK_OUTCOMES: [&str; 4] = ["released", "repeat", "fenced", "unknown"];

/// The owner staging metrics (no ids or keys as labels).
#[derive(Clone, Debug)]
pub struct OwnerStagingMetrics {
    capacity_bytes: IntGauge,
    used_bytes: IntGauge,
    live_tokens: IntGauge,
    stages: IntCounterVec,
    acks: IntCounterVec,
    expired: IntCounter,
}

impl OwnerStagingMetrics {
    pub fn unregistered() -> Self {
        let gauge = |name: &str, help: &str| IntGauge::new(name, help).expect("valid metric");
        let counter_vec = |name: &str, help: &str| {
            IntCounterVec::new(Opts::new(name, help), &["outcome"]).expect("valid metric")
        };
        Self {
            capacity_bytes: gauge(
                "crescent_client_owner_staging_capacity_bytes",
                "Bytes of this owner's remote-restore staging region (0: none).",
            ),
            used_bytes: gauge(
                "crescent_client_owner_staging_used_bytes",
                "Bytes of this owner's staging slots allocated (occupancy).",
            ),
            live_tokens: gauge(
                "crescent_client_owner_staging_tokens",
                "Staged payload tokens of this owner not yet released or fenced and retired.",
            ),
            stages: counter_vec(
                "crescent_client_owner_staging_total",
                "Stage work items performed by this owner, by outcome (staged; busy: region \
                 saturated, explicit backpressure; failed: the read or check failed).",
            ),
            acks: counter_vec(
                "crescent_client_owner_staging_acks_total",
                "Staged tokens released by readers, by outcome (released; repeat; fenced: \
                 after expiry; unknown: retired or from an earlier run).",
            ),
            expired: IntCounter::new(
                "crescent_client_owner_staging_expired_total",
                "Staged tokens of this owner fenced because their reader did not ack in time.",
            )
            .expect("valid metric"),
        }
    }

    pub fn register(&self, registry: &Registry) -> prometheus::Result<()> {
        registry.register(Box::new(self.capacity_bytes.clone()))?;
        registry.register(Box::new(self.used_bytes.clone()))?;
        registry.register(Box::new(self.live_tokens.clone()))?;
        registry.register(Box::new(self.stages.clone()))?;
        registry.register(Box::new(self.acks.clone()))?;
        registry.register(Box::new(self.expired.clone()))
    }

    pub fn set_capacity(&self, bytes: u64) {
        self.capacity_bytes.set(bytes as i64);
    }

    /// The region's allocated bytes and live tokens now.
    pub fn set_occupancy(&self, used_bytes: u64, live_tokens: usize) {
        self.used_bytes.set(used_bytes as i64);
        self.live_tokens.set(live_tokens as i64);
    }

    /// One `Stage` work item done, by outcome ([`OWNER_STAGE_OUTCOMES`]).
    pub fn staged(&self, outcome: &'static str) {
        self.stages.with_label_values(&[outcome]).inc();
    }

    /// One token released by its reader, by outcome ([`OWNER_STAGING_ACK_OUTCOMES`]).
    pub fn acked(&self, outcome: &'static str) {
        self.acks.with_label_values(&[outcome]).inc();
    }

    /// `n` tokens fenced because their reader did not ack in time.
    pub fn fenced(&self, n: u64) {
        self.expired.inc_by(n);
    }

    /// `crescent_client_owner_staging_total{outcome}` so far.
    pub fn stages(&self, outcome: &str) -> u64 {
        self.stages.with_label_values(&[outcome]).get()
    }

    /// `crescent_client_owner_staging_acks_total{outcome}` so far.
    pub fn acks(&self, outcome: &str) -> u64 {
        self.acks.with_label_values(&[outcome]).get()
    }

    pub fn expired(&self) -> u64 {
        self.expired.get()
    }
}
