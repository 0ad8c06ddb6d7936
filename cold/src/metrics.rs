//! Prometheus metrics of the cold tier. Labels are bounded: health states, outcomes, queue
//! names; never device ids, operation ids or keys (per-device figures are in `crescent cold
//! ls`).

use std::time::Duration;

use prometheus::{
    Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};

use crate::device::{ColdDevice, DeviceHealth, ReleasedFrom};
use crate::error::ColdError;

/// Promotion outcomes (the `outcome` label of `crescent_cold_promotions_total`): offered and
/// queued, offered while the same backing and route version was already queued (single
/// flight), dropped by a full queue, promoted, failed, or skipped because the route moved on.
pub const PROMOTION_OUTCOMES: [&str; 6] =
    ["queued", "duplicate", "dropped", "done", "failed", "stale"];

/// Restore outcomes (the `outcome` label).
pub const RESTORE_OUTCOMES: [&str; 6] = [
    "ok",
    "checksum_mismatch",
    "corrupt",
    "missing",
    "io_error",
    "backpressure",
];

#[derive(Clone, Debug)]
pub struct ColdMetrics {
    pub capacity_bytes: IntGauge,
    pub used_bytes: IntGauge,
    pub reserved_bytes: IntGauge,
    pub devices: IntGaugeVec,
    pub offload_queue_depth: IntGauge,
    pub offload_queue_bytes: IntGauge,
    pub offload_in_flight: IntGauge,
    pub materialized: IntCounter,
    pub materialized_bytes: IntCounter,
    pub offload_retries: IntCounter,
    pub offload_given_up: IntCounter,
    pub restore_seconds: Histogram,
    pub restores: IntCounterVec,
    pub single_flight_hits: IntCounter,
    pub reclaims: IntCounterVec,
    pub backpressure: IntCounterVec,
    /// Device health probes by outcome (ok, failed).
    pub probes: IntCounterVec,
    /// IO performed by storage owners for their devices, by work (write, read, delete, scan,
    /// remove_stale_temps) and outcome (ok, failed, not_connected).
    pub owner_io: IntCounterVec,
    /// Background re-promotions of restored objects by outcome (`PROMOTION_OUTCOMES`).
    pub promotions: IntCounterVec,
    /// Promotions queued or running.
    pub promotion_queue_depth: IntGauge,
    /// Gets answered with the cold backing for the reader to read itself (local restores).
    pub backing_refs: IntCounter,
}

impl ColdMetrics {
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        let m = Self::unregistered();
        registry.register(Box::new(m.capacity_bytes.clone()))?;
        registry.register(Box::new(m.used_bytes.clone()))?;
        registry.register(Box::new(m.reserved_bytes.clone()))?;
        registry.register(Box::new(m.devices.clone()))?;
        registry.register(Box::new(m.offload_queue_depth.clone()))?;
        registry.register(Box::new(m.offload_queue_bytes.clone()))?;
        registry.register(Box::new(m.offload_in_flight.clone()))?;
        registry.register(Box::new(m.materialized.clone()))?;
        registry.register(Box::new(m.materialized_bytes.clone()))?;
        registry.register(Box::new(m.offload_retries.clone()))?;
        registry.register(Box::new(m.offload_given_up.clone()))?;
        registry.register(Box::new(m.restore_seconds.clone()))?;
        registry.register(Box::new(m.restores.clone()))?;
        registry.register(Box::new(m.single_flight_hits.clone()))?;
        registry.register(Box::new(m.reclaims.clone()))?;
        registry.register(Box::new(m.backpressure.clone()))?;
        registry.register(Box::new(m.probes.clone()))?;
        registry.register(Box::new(m.owner_io.clone()))?;
        registry.register(Box::new(m.promotions.clone()))?;
        registry.register(Box::new(m.promotion_queue_depth.clone()))?;
        registry.register(Box::new(m.backing_refs.clone()))?;
        Ok(m)
    }

    /// Metrics counted but exported nowhere (tests, benches).
    pub fn unregistered() -> Self {
        let gauge = |name: &str, help: &str| IntGauge::new(name, help).expect("valid metric");
        let counter = |name: &str, help: &str| IntCounter::new(name, help).expect("valid metric");
        let counter_vec = |name: &str, help: &str, labels: &[&str]| {
            IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric")
        };
        Self {
            capacity_bytes: gauge("crescent_cold_capacity_bytes", "Configured capacity of all cold devices."),
            used_bytes: gauge("crescent_cold_used_bytes", "Committed cold usage of all devices."),
            reserved_bytes: gauge("crescent_cold_reserved_bytes", "Reserved (not yet committed) cold bytes of all devices."),
            devices: IntGaugeVec::new(
                Opts::new("crescent_cold_devices", "Cold devices by health (healthy, degraded, unavailable)."),
                &["health"],
            )
            .expect("valid metric"),
            offload_queue_depth: gauge("crescent_cold_offload_queue_depth", "Offload jobs queued or waiting to retry."),
            offload_queue_bytes: gauge("crescent_cold_offload_queue_bytes", "Bytes held by the offload queue (queued, retrying, in flight)."),
            offload_in_flight: gauge("crescent_cold_offload_in_flight", "Offload jobs being run."),
            materialized: counter("crescent_cold_materialized_total", "Offloads that reached UsageCommitted."),
            materialized_bytes: counter("crescent_cold_materialized_bytes_total", "Bytes of offloads that reached UsageCommitted."),
            offload_retries: counter("crescent_cold_offload_retries_total", "Offload attempts that failed and were rescheduled."),
            offload_given_up: counter("crescent_cold_offload_given_up_total", "Offloads given up after their last attempt."),
            restore_seconds: Histogram::with_opts(
                HistogramOpts::new("crescent_cold_restore_seconds", "Latency of cold reads (read and verify).")
                    .buckets(vec![0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0]),
            )
            .expect("valid metric"),
            restores: counter_vec(
                "crescent_cold_restores_total",
                "Cold reads by outcome (ok, checksum_mismatch, corrupt, missing, io_error, backpressure).",
                &["outcome"],
            ),
            single_flight_hits: counter("crescent_cold_restore_single_flight_hits_total", "Restores served by joining a restore already in flight."),
            reclaims: counter_vec(
                "crescent_cold_reclaims_total",
                "Reclaim outcomes (released_reserved, released_used, cancelled, failed).",
                &["outcome"],
            ),
            backpressure: counter_vec(
                "crescent_cold_backpressure_total",
                "Requests refused by a saturated queue (offload_queue, restore_single_flight, capacity).",
                &["queue"],
            ),
            probes: counter_vec(
                "crescent_cold_probes_total",
                "Device health probes (write, fsync, read back, delete) by outcome (ok, failed).",
                &["outcome"],
            ),
            owner_io: counter_vec(
                "crescent_cold_owner_io_total",
                "IO performed by storage owners for their cold devices, by work and outcome (ok, failed, not_connected, redelivered).",
                &["work", "outcome"],
            ),
            promotions: counter_vec(
                "crescent_cold_promotions_total",
                "Background re-promotions of restored objects (queued, duplicate, dropped, done, failed, stale).",
                &["outcome"],
            ),
            promotion_queue_depth: gauge("crescent_cold_promotion_queue_depth", "Re-promotions queued or running."),
            backing_refs: counter("crescent_cold_backing_refs_total", "Gets answered with the cold backing, read by the reader itself (local restore)."),
        }
    }

    /// Sets the device gauges from the current device states.
    pub fn observe_devices<'a>(&self, devices: impl IntoIterator<Item = &'a ColdDevice>) {
        let summaries: Vec<crate::device::DeviceSummary> = devices
            .into_iter()
            .map(|d| crate::device::DeviceSummary::of(d.config().map_or("", |c| &c.device_id), d))
            .collect();
        self.observe_summaries(&summaries);
    }

    /// Sets the device gauges from summaries (the server keeps one per device, so it need
    /// not lock every device's ledger to publish the sums).
    pub fn observe_summaries<'a>(
        &self,
        devices: impl IntoIterator<Item = &'a crate::device::DeviceSummary>,
    ) {
        let (mut capacity, mut used, mut reserved) = (0u64, 0u64, 0u64);
        let mut by_health = [0i64; 3];
        for d in devices {
            capacity += d.capacity;
            used += d.used;
            reserved += d.reserved;
            let i = DeviceHealth::ALL
                .iter()
                .position(|h| *h == d.health)
                .expect("all healths listed");
            by_health[i] += 1;
        }
        self.capacity_bytes.set(capacity as i64);
        self.used_bytes.set(used as i64);
        self.reserved_bytes.set(reserved as i64);
        for (h, n) in DeviceHealth::ALL.iter().zip(by_health) {
            self.devices.with_label_values(&[h.as_str()]).set(n);
        }
    }

    pub fn observe_scheduler(&self, scheduler: &crate::scheduler::OffloadScheduler) {
        self.offload_queue_depth.set(scheduler.depth() as i64);
        self.offload_queue_bytes.set(scheduler.held_bytes() as i64);
        self.offload_in_flight.set(scheduler.in_flight() as i64);
    }

    /// Counts one restore and its latency.
    pub fn restore_finished(&self, elapsed: Duration, result: Result<(), &ColdError>) {
        self.restore_seconds.observe(elapsed.as_secs_f64());
        self.restores
            .with_label_values(&[restore_outcome(result)])
            .inc();
        if let Err(ColdError::Backpressure { .. }) = result {
            self.backpressure
                .with_label_values(&["restore_single_flight"])
                .inc();
        }
    }

    pub fn reclaim_finished(&self, from: Option<ReleasedFrom>) {
        let outcome = match from {
            Some(ReleasedFrom::Reserved) => "released_reserved",
            Some(ReleasedFrom::Used) => "released_used",
            None => "cancelled",
        };
        self.reclaims.with_label_values(&[outcome]).inc();
    }
}

/// The bounded `outcome` label of a restore result.
pub fn restore_outcome(result: Result<(), &ColdError>) -> &'static str {
    match result {
        Ok(()) => "ok",
        Err(ColdError::ChecksumMismatch { .. }) | Err(ColdError::LengthMismatch { .. }) => {
            "checksum_mismatch"
        }
        Err(ColdError::CorruptFile { .. }) => "corrupt",
        Err(ColdError::PayloadMissing { .. }) | Err(ColdError::NotFound { .. }) => "missing",
        Err(ColdError::Backpressure { .. }) => "backpressure",
        Err(_) => "io_error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registers_and_exports_bounded_labels() {
        let registry = Registry::new();
        let m = ColdMetrics::register(&registry).unwrap();
        let mut device = ColdDevice::default();
        crescent_actors::Aggregate::apply(
            &mut device,
            &crate::device::ColdDeviceEvent::DeviceConfigured(crate::device::DeviceConfigured {
                device_id: "dev1".into(),
                kind: crate::device::DeviceKind::LocalDir,
                root: "/r".into(),
                capacity: 1000,
                tags: vec![],
                schedulable: true,
                at_ms: 0,
            }),
        );
        m.observe_devices([&device, &ColdDevice::default()]);
        m.restore_finished(Duration::from_millis(2), Ok(()));
        m.restore_finished(
            Duration::from_millis(2),
            Err(&ColdError::ChecksumMismatch {
                locator: "l".into(),
                expected: 1,
                actual: 2,
            }),
        );
        m.reclaim_finished(Some(ReleasedFrom::Used));
        assert_eq!(m.capacity_bytes.get(), 1000);
        assert_eq!(m.devices.with_label_values(&["healthy"]).get(), 1);
        assert_eq!(m.devices.with_label_values(&["unavailable"]).get(), 1);
        assert_eq!(
            m.restores.with_label_values(&["checksum_mismatch"]).get(),
            1
        );
        let families = registry.gather();
        assert!(families.len() >= 12);
        for f in &families {
            for metric in f.get_metric() {
                for label in metric.get_label() {
                    assert!(
                        ["health", "outcome", "queue"].contains(&label.name()),
                        "{}",
                        label.name()
                    );
                }
            }
        }
        assert!(
            ColdMetrics::register(&registry).is_err(),
            "names are unique"
        );
    }
}
