//! The `[cold]` section: the cold devices of this storage owner (docs/cold-tier.md). A standalone
//! crescentd configures one `local_dir` device under its data dir by default.

use std::path::{Path, PathBuf};

use crescent_cold::scheduler::{OffloadMode, OffloadOrder, SchedulerConfig};
use serde::{Deserialize, Serialize};

use crate::config::{invalid, ConfigError};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ColdSettings {
    /// Whether this node has a cold tier at all.
    pub enabled: bool,
    /// Stable id of the default `local_dir` device (journaled: never rename a device in use).
    pub device_id: String,
    /// Its directory; default `<data_dir>/cold/<device_id>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<PathBuf>,
    /// Bytes the device may hold (used + reserved never exceed it).
    pub capacity_bytes: u64,
    pub tags: Vec<String>,
    /// Whether new offloads may be placed on it.
    pub schedulable: bool,
    /// Background offload: `off` (only `crescent offload KEY`), `passthrough` (every completed
    /// put is materialized in the background) or `evict_triggered` (eviction materializes its
    /// victims first and never drops an object without a cold copy).
    pub offload_mode: OffloadModeSetting,
    /// Offload queue bound (entries queued, retrying or in flight).
    pub queue_max_entries: usize,
    /// Offload queue bound (bytes); passthrough puts get BUSY above `queue_high_watermark` of it
    /// until the held bytes fall to `queue_low_watermark` of it.
    pub queue_max_bytes: u64,
    pub queue_high_watermark: f64,
    pub queue_low_watermark: f64,
    /// `fifo` or `size_aware` (smallest first) within a class.
    pub queue_order: OffloadOrder,
    /// Offload rate limit in bytes per second (0 = unlimited), with its burst.
    pub rate_bytes_per_sec: u64,
    pub burst_bytes: u64,
    /// Retry backoff: base * 2^(attempt-1), capped; given up after `max_attempts`.
    pub retry_base_ms: u64,
    pub retry_max_ms: u64,
    pub max_attempts: u32,
    /// Device health probe period (a small write, fsync, read-back and delete under the root);
    /// 0 turns it off. Failed probes degrade the device, repeated ones make it unavailable.
    pub health_probe_interval_ms: u64,
    /// Terminal operation and reclaim records older than this are pruned from the device
    /// state (0: kept forever). Longer than any retry: a repeat of a pruned record's command
    /// gets NOT_FOUND instead of a no-op.
    pub prune_terminal_after_ms: u64,
    /// A get of a cold-only object may name its backing to a reader that asked for it
    /// (`accept_cold_backing`), which then reads the device directory itself (a local
    /// restore); off: every restore is read and verified here.
    pub local_restore: bool,
    /// Restored cold-only objects are re-promoted into DRAM in the background (best effort;
    /// never delays or fails the read).
    pub promote_on_read: bool,
    /// Promotion queue bounds (entries, and bytes of the objects queued or being promoted);
    /// an offer beyond either is dropped and counted.
    pub promotion_queue_entries: usize,
    pub promotion_queue_bytes: u64,
    /// A promotion waits until no cold-only object was restored for this long (0: runs at
    /// once), so a burst of reads is not slowed by the promotions it queued...
    pub promotion_quiet_ms: u64,
    /// ...but at most this long after it was queued (a tier read without pause still
    /// promotes).
    pub promotion_max_defer_ms: u64,
    /// Reads in flight at once for the cold-only items of one batch get (per device).
    pub restore_parallelism: usize,
    /// Remote restores through the staging pool (docs/cold-tier.md, "Restore on read"): bytes of
    /// the registered staging region served by the embedded segment's transfer listener (0: off,
    /// every remote restore answers inline), its allocation unit, how long a reader may hold a
    /// staged payload before its token is fenced, and the smallest payload staged (smaller ones
    /// answer inline: one RPC beats an RPC plus a transfer).
    pub staging_bytes: u64,
    pub staging_unit_bytes: u64,
    pub staging_ttl_ms: u64,
    pub staging_min_bytes: u64,
    /// Several devices (`[[cold.devices]]`); when given, they replace the one device of the
    /// fields above (`device_id`, `root`, `capacity_bytes`, `tags`, `schedulable`, which must
    /// then stay unset).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<ColdDeviceSettings>,
}

/// One `[[cold.devices]]` entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ColdDeviceSettings {
    /// Stable device id (journaled: never rename a device in use).
    pub id: String,
    /// `local_dir` (a directory on SSD or an NFS mount), the only kind today.
    #[serde(default = "default_kind")]
    pub kind: String,
    /// Its directory; default `<data_dir>/cold/<id>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<PathBuf>,
    #[serde(default = "default_capacity")]
    pub capacity_bytes: u64,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default = "default_true")]
    pub schedulable: bool,
}

fn default_kind() -> String {
    "local_dir".into()
}

fn default_capacity() -> u64 {
    ColdSettings::default().capacity_bytes
}

fn default_true() -> bool {
    true
}

/// A configured device, resolved against the data dir.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceSpec {
    pub device_id: String,
    pub root: PathBuf,
    /// Whether the root was given (HA needs an explicit, shared root).
    pub explicit_root: bool,
    pub capacity_bytes: u64,
    pub tags: Vec<String>,
    pub schedulable: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OffloadModeSetting {
    Off,
    Passthrough,
    EvictTriggered,
}

impl OffloadModeSetting {
    pub fn mode(self) -> Option<OffloadMode> {
        match self {
            OffloadModeSetting::Off => None,
            OffloadModeSetting::Passthrough => Some(OffloadMode::Passthrough),
            OffloadModeSetting::EvictTriggered => Some(OffloadMode::EvictTriggered),
        }
    }
}

impl Default for ColdSettings {
    fn default() -> Self {
        let q = SchedulerConfig::default();
        Self {
            enabled: true,
            device_id: "local0".into(),
            root: None,
            capacity_bytes: 64 << 30,
            tags: vec!["local".into()],
            schedulable: true,
            offload_mode: OffloadModeSetting::Off,
            queue_max_entries: q.max_entries,
            queue_max_bytes: q.max_bytes,
            queue_high_watermark: q.high_watermark,
            queue_low_watermark: q.low_watermark,
            queue_order: q.order,
            rate_bytes_per_sec: q.rate_bytes_per_sec,
            burst_bytes: q.burst_bytes,
            retry_base_ms: q.retry_base_ms,
            retry_max_ms: q.retry_max_ms,
            max_attempts: q.max_attempts,
            health_probe_interval_ms: 10_000,
            prune_terminal_after_ms: 24 * 3_600_000,
            local_restore: true,
            promote_on_read: true,
            promotion_queue_entries: 64,
            promotion_queue_bytes: 256 << 20,
            promotion_quiet_ms: 50,
            promotion_max_defer_ms: 2_000,
            restore_parallelism: 2,
            staging_bytes: 64 << 20,
            staging_unit_bytes: 64 << 10,
            staging_ttl_ms: 5_000,
            staging_min_bytes: 256 << 10,
            devices: Vec::new(),
        }
    }
}

impl ColdSettings {
    /// The offload scheduler's configuration.
    pub fn scheduler(&self) -> SchedulerConfig {
        SchedulerConfig {
            max_entries: self.queue_max_entries,
            max_bytes: self.queue_max_bytes,
            order: self.queue_order,
            rate_bytes_per_sec: self.rate_bytes_per_sec,
            burst_bytes: self.burst_bytes,
            retry_base_ms: self.retry_base_ms,
            retry_max_ms: self.retry_max_ms,
            max_attempts: self.max_attempts,
            high_watermark: self.queue_high_watermark,
            low_watermark: self.queue_low_watermark,
        }
    }

    /// The remote-restore staging pool's settings.
    pub fn staging(&self) -> StagingSettings {
        StagingSettings {
            bytes: self.staging_bytes,
            unit_bytes: self.staging_unit_bytes,
            ttl_ms: self.staging_ttl_ms,
            min_bytes: self.staging_min_bytes,
        }
    }

    /// The upkeep thread's settings.
    pub fn upkeep(&self) -> UpkeepSettings {
        UpkeepSettings {
            probe_interval_ms: self.health_probe_interval_ms,
            prune_after_ms: self.prune_terminal_after_ms,
        }
    }

    /// The device directory of the one-device form.
    pub fn root_under(&self, data_dir: &Path) -> PathBuf {
        self.root
            .clone()
            .unwrap_or_else(|| data_dir.join("cold").join(&self.device_id))
    }

    /// Every configured device, in id order: the `[[cold.devices]]` entries, or else the one
    /// device of `[cold]` (so existing configs and journals stay as they were).
    pub fn device_specs(&self, data_dir: &Path) -> Vec<DeviceSpec> {
        let mut specs: Vec<DeviceSpec> = if self.devices.is_empty() {
            vec![DeviceSpec {
                device_id: self.device_id.clone(),
                root: self.root_under(data_dir),
                explicit_root: self.root.is_some(),
                capacity_bytes: self.capacity_bytes,
                tags: self.tags.clone(),
                schedulable: self.schedulable,
            }]
        } else {
            self.devices
                .iter()
                .map(|d| DeviceSpec {
                    device_id: d.id.clone(),
                    root: d
                        .root
                        .clone()
                        .unwrap_or_else(|| data_dir.join("cold").join(&d.id)),
                    explicit_root: d.root.is_some(),
                    capacity_bytes: d.capacity_bytes,
                    tags: d.tags.clone(),
                    schedulable: d.schedulable,
                })
                .collect()
        };
        specs.sort_by(|a, b| a.device_id.cmp(&b.device_id));
        specs
    }

    fn validate_devices(&self) -> Result<(), ConfigError> {
        if self.devices.is_empty() {
            return validate_device(
                "cold",
                &self.device_id,
                "local_dir",
                self.root.as_deref(),
                self.capacity_bytes,
                &self.tags,
            );
        }
        let one = ColdSettings::default();
        if self.device_id != one.device_id
            || self.root.is_some()
            || self.capacity_bytes != one.capacity_bytes
            || self.tags != one.tags
            || self.schedulable != one.schedulable
        {
            return Err(invalid(
                "cold.devices",
                "set either the one device of [cold] (device_id, root, capacity_bytes, tags, \
                 schedulable) or [[cold.devices]], not both",
            ));
        }
        let mut ids = std::collections::BTreeSet::new();
        let mut roots = std::collections::BTreeSet::new();
        for d in &self.devices {
            validate_device(
                "cold.devices",
                &d.id,
                &d.kind,
                d.root.as_deref(),
                d.capacity_bytes,
                &d.tags,
            )?;
            if !ids.insert(d.id.as_str()) {
                return Err(invalid(
                    "cold.devices.id",
                    format!("device id {:?} appears twice", d.id),
                ));
            }
            if let Some(root) = &d.root {
                if !roots.insert(root.clone()) {
                    return Err(invalid(
                        "cold.devices.root",
                        format!("root {} is given to two devices", root.display()),
                    ));
                }
            }
        }
        Ok(())
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        if !self.enabled {
            return Ok(());
        }
        self.validate_devices()?;
        self.scheduler()
            .validate()
            .map_err(|e| invalid("cold.queue", e.to_string()))?;
        self.validate_durations()?;
        if self.promotion_queue_entries == 0 || self.promotion_queue_bytes == 0 {
            return Err(invalid(
                "cold.promotion_queue",
                "promotion_queue_entries and promotion_queue_bytes must be greater than 0 \
                 (turn promotion off with promote_on_read = false)",
            ));
        }
        if self.promotion_quiet_ms > self.promotion_max_defer_ms {
            return Err(invalid(
                "cold.promotion_quiet_ms",
                "must not exceed promotion_max_defer_ms",
            ));
        }
        if !(1..=64).contains(&self.restore_parallelism) {
            return Err(invalid("cold.restore_parallelism", "between 1 and 64"));
        }
        self.staging()
            .validate()
            .map_err(|reason| invalid("cold.staging", reason))?;
        Ok(())
    }
}

impl ColdSettings {
    /// The millisecond settings become deadlines (`now + value`, an `Instant` plus a
    /// `Duration`, a signed timestamp minus the value): each has an upper bound so that
    /// cannot overflow or wrap (docs/configuration.md).
    fn validate_durations(&self) -> Result<(), ConfigError> {
        let h = self.health_probe_interval_ms;
        if h != 0 && !(100..=MAX_PERIOD_MS).contains(&h) {
            return Err(invalid(
                "cold.health_probe_interval_ms",
                format!("{h} is neither 0 (off) nor within 100..={MAX_PERIOD_MS}"),
            ));
        }
        let bounded: [(&'static str, u64, u64); 3] = [
            ("cold.retry_max_ms", self.retry_max_ms, MAX_PERIOD_MS),
            (
                "cold.promotion_max_defer_ms",
                self.promotion_max_defer_ms,
                MAX_PERIOD_MS,
            ),
            (
                "cold.prune_terminal_after_ms",
                self.prune_terminal_after_ms,
                MAX_PRUNE_AFTER_MS,
            ),
        ];
        for (key, value, max) in bounded {
            if value > max {
                return Err(invalid(key, format!("{value} is above the maximum {max}")));
            }
        }
        Ok(())
    }
}

/// Longest retry backoff, probe period, promotion deferral: an hour.
const MAX_PERIOD_MS: u64 = 3_600_000;
/// Longest retention of terminal records: a year.
const MAX_PRUNE_AFTER_MS: u64 = 365 * 86_400_000;

/// The checks of one device's settings (`section` names the config path in errors).
fn validate_device(
    section: &'static str,
    id: &str,
    kind: &str,
    root: Option<&Path>,
    capacity_bytes: u64,
    tags: &[String],
) -> Result<(), ConfigError> {
    let field = |name: &'static str| -> &'static str {
        match (section, name) {
            ("cold", "id") => "cold.device_id",
            ("cold", "kind") => "cold.kind",
            ("cold", "root") => "cold.root",
            ("cold", "capacity_bytes") => "cold.capacity_bytes",
            ("cold", _) => "cold.tags",
            (_, "id") => "cold.devices.id",
            (_, "kind") => "cold.devices.kind",
            (_, "root") => "cold.devices.root",
            (_, "capacity_bytes") => "cold.devices.capacity_bytes",
            _ => "cold.devices.tags",
        }
    };
    crescent_cold::device::check_device_id(id).map_err(|e| invalid(field("id"), e.to_string()))?;
    if kind != crescent_cold::device::DeviceKind::LocalDir.as_str() {
        return Err(invalid(
            field("kind"),
            format!("unknown device kind {kind:?} (local_dir is the only kind)"),
        ));
    }
    if capacity_bytes == 0 {
        return Err(invalid(field("capacity_bytes"), "must be greater than 0"));
    }
    if tags.len() > crescent_cold::device::MAX_TAGS {
        return Err(invalid(field("tags"), "too many tags"));
    }
    if tags
        .iter()
        .any(|t| t.is_empty() || t.chars().any(char::is_control))
    {
        return Err(invalid(field("tags"), "tags must be non-empty text"));
    }
    if root.is_some_and(|r| r.as_os_str().is_empty()) {
        return Err(invalid(field("root"), "must not be empty"));
    }
    Ok(())
}

/// `[cold] staging_*`: the pool's size, unit, reader deadline and smallest staged payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StagingSettings {
    pub bytes: u64,
    pub unit_bytes: u64,
    pub ttl_ms: u64,
    pub min_bytes: u64,
}

impl StagingSettings {
    pub fn enabled(&self) -> bool {
        self.bytes > 0
    }

    pub fn validate(&self) -> Result<(), String> {
        if !self.enabled() {
            return Ok(());
        }
        if !(4 << 10..=64 << 20).contains(&self.unit_bytes) {
            return Err("staging_unit_bytes must be between 4 KiB and 64 MiB".into());
        }
        if self.bytes < self.unit_bytes || self.bytes > 64 << 30 {
            return Err("staging_bytes must be 0 (off) or one unit to 64 GiB".into());
        }
        if !(100..=600_000).contains(&self.ttl_ms) {
            return Err("staging_ttl_ms must be between 100 and 600000".into());
        }
        Ok(())
    }
}

/// What the upkeep thread does, from `[cold]`.
#[derive(Debug, Clone, Copy)]
pub struct UpkeepSettings {
    /// 0: no probe.
    pub probe_interval_ms: u64,
    /// Terminal records older than this are pruned (0: never).
    pub prune_after_ms: u64,
}

#[cfg(test)]
#[path = "cold_tests.rs"]
mod tests;
