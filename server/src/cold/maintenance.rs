//! Periodic upkeep of the cold devices: the health probe (a small write, fsync, read-back and
//! delete under the device root; a change of health is journaled with `SetHealth`) and the
//! pruning of terminal operation and reclaim records (`PruneTerminal`).
//!
//! Health drives the rest: a device that is not `healthy` takes no new offload (placement
//! refuses it, so the worker retries with backoff), and one that is `unavailable` is not
//! readable, so no last hot replica is evicted to it.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crescent_cold::device::{ColdDeviceCommand, DeviceHealth};
use crescent_cold::driver::DeviceLedger;

use super::context::ColdContext;
use super::devices::TierDevice;
use super::{mark_evictable, ColdTier};

/// Consecutive failed probes after which a degraded device is declared unavailable.
pub const UNAVAILABLE_AFTER_FAILURES: u32 = 3;
/// Tick of the upkeep thread when the probe is off (pruning still runs).
const PRUNE_ONLY_TICK: Duration = Duration::from_secs(60);

/// The health a probe result leads to, after `failures` consecutive failed probes (counting
/// this one). Pure, so the policy is tested without a device.
pub fn health_after_probe(ok: bool, failures: u32) -> DeviceHealth {
    match (ok, failures) {
        (true, _) => DeviceHealth::Healthy,
        (false, n) if n >= UNAVAILABLE_AFTER_FAILURES => DeviceHealth::Unavailable,
        (false, _) => DeviceHealth::Degraded,
    }
}

pub use crate::config::cold::UpkeepSettings;

impl ColdTier {
    /// One probe of every device (each journals its own health change).
    pub fn probe_devices(&self, state: &ColdContext) {
        for device in self.all_devices() {
            let failures = device.probe_failures.load(Ordering::Relaxed);
            let failures = self.probe_health(state, &device, failures);
            device.probe_failures.store(failures, Ordering::Relaxed);
        }
        self.observe_devices();
    }

    /// One probe of `device`; journals a health change. Returns the failures in a row.
    fn probe_health(&self, state: &ColdContext, device: &TierDevice, failures: u32) -> u32 {
        let _span = tracing::debug_span!("cold.probe", device = %device.device_id).entered();
        let result = device.io.probe();
        let failures = if result.is_ok() { 0 } else { failures + 1 };
        let health = health_after_probe(result.is_ok(), failures);
        self.metrics
            .probes
            .with_label_values(&[if result.is_ok() { "ok" } else { "failed" }])
            .inc();
        device.with_ledger(|ledger, _| {
            if ledger.device().health() == health {
                return;
            }
            let reason = match &result {
                Ok(()) => "probe succeeded".to_string(),
                Err(e) => format!("probe failed {failures} time(s) in a row: {e}"),
            };
            tracing::warn!(device = %device.device_id, health = health.as_str(), %reason,
                "cold device health changed");
            if let Err(e) = ledger.execute(ColdDeviceCommand::SetHealth { health, reason }) {
                tracing::warn!(device = %device.device_id, error = %e,
                    "health change not journaled");
                return;
            }
            mark_evictable(state, ledger);
        });
        let missed = result.is_ok()
            && device
                .owner_io
                .as_ref()
                .is_some_and(|io| io.take_missed_work());
        if missed {
            // The owner was silent and polls again under the same incarnation (a stall, not a
            // restart: a restart registers, which reconciles). Work that failed meanwhile
            // (a reclaim whose payload delete was not answered, an offload) is resumed now
            // rather than at the owner's next registration, which may never come. Runs on
            // the upkeep thread (other devices' probes wait): rare, and bounded by the
            // owner's answers.
            // Visible as the reconciliation's owner IO (`crescent_cold_owner_io_total{work=
            // "scan"}`) and its log line.
            tracing::info!(device = %device.device_id, "owner returned: reconciling its device");
            if let Err(e) = super::reconcile_device(state, device) {
                tracing::warn!(device = %device.device_id, error = %e,
                    "owner cold device not reconciled after its owner returned");
            }
        }
        failures
    }

    /// Forgets terminal records released before `now - after_ms`, on every device.
    pub fn prune_terminal(&self, now_ms: i64, after_ms: u64) {
        let released_before_ms = now_ms.saturating_sub(after_ms as i64);
        for device in self.all_devices() {
            device.with_ledger(|ledger, _| {
                if let Err(e) =
                    ledger.execute(ColdDeviceCommand::PruneTerminal { released_before_ms })
                {
                    tracing::warn!(device = %device.device_id, error = %e,
                        "terminal records not pruned");
                }
            });
        }
    }
}

/// Starts the upkeep thread (a no-op when both the probe and pruning are off).
pub fn spawn(state: Arc<ColdContext>, settings: UpkeepSettings) -> std::io::Result<()> {
    if settings.probe_interval_ms == 0 && settings.prune_after_ms == 0 {
        return Ok(());
    }
    let Some(tier) = state.cold.get().cloned() else {
        return Ok(());
    };
    let tick = if settings.probe_interval_ms == 0 {
        PRUNE_ONLY_TICK
    } else {
        Duration::from_millis(settings.probe_interval_ms)
    };
    std::thread::Builder::new()
        .name("crescent-cold-upkeep".into())
        .spawn(move || {
            while !tier.queue.wait_stopped(tick) {
                if settings.probe_interval_ms > 0 {
                    tier.probe_devices(&state);
                }
                if settings.prune_after_ms > 0 {
                    tier.prune_terminal(state.now_ms(), settings.prune_after_ms);
                }
            }
        })
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_probes_degrade_then_make_unavailable_and_one_success_heals() {
        assert_eq!(health_after_probe(true, 0), DeviceHealth::Healthy);
        assert_eq!(health_after_probe(false, 1), DeviceHealth::Degraded);
        assert_eq!(health_after_probe(false, 2), DeviceHealth::Degraded);
        assert_eq!(
            health_after_probe(false, UNAVAILABLE_AFTER_FAILURES),
            DeviceHealth::Unavailable
        );
        assert_eq!(health_after_probe(true, 0), DeviceHealth::Healthy);
    }
}
