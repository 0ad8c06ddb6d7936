//! Placement of a new offload over a node's device set (docs/cold-tier.md, "Devices" (backends,
//! devices and scheduling"): only configured, healthy, schedulable devices with enough free
//! capacity (and the asked tag, if any) are candidates; the one with the most free bytes wins, ties
//! broken by the smallest device id so that the choice is deterministic. Pure: the server passes a
//! summary of each device, not the device itself, so placement never waits for a device's ledger
//! lock (held for the whole of a long offload).

use std::collections::BTreeSet;

use super::{ColdDevice, DeviceHealth};
use crate::error::ColdError;

/// What placement (and `crescent cold ls`, and the metrics) need to know of one device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceSummary {
    pub device_id: String,
    pub configured: bool,
    pub health: DeviceHealth,
    pub schedulable: bool,
    pub capacity: u64,
    pub used: u64,
    pub reserved: u64,
    pub tags: BTreeSet<String>,
}

impl DeviceSummary {
    /// The summary of `device` (known under `device_id` when it is not configured yet).
    pub fn of(device_id: &str, device: &ColdDevice) -> Self {
        Self {
            device_id: device_id.to_string(),
            configured: device.config().is_some(),
            health: device.health(),
            schedulable: device.schedulable(),
            capacity: device.capacity(),
            used: device.used(),
            reserved: device.reserved(),
            tags: device.config().map(|c| c.tags.clone()).unwrap_or_default(),
        }
    }

    /// Capacity neither used nor reserved.
    pub fn free(&self) -> u64 {
        self.capacity
            .saturating_sub(self.used)
            .saturating_sub(self.reserved)
    }

    /// Why this device cannot take a payload of `length` bytes with `tag`, if it cannot.
    fn refusal(&self, length: u64, tag: Option<&str>) -> Option<ColdError> {
        let not_eligible = |reason: String| ColdError::DeviceNotEligible {
            device_id: self.device_id.clone(),
            reason,
        };
        if !self.configured {
            return Some(not_eligible("not configured".into()));
        }
        if self.health != DeviceHealth::Healthy {
            return Some(not_eligible(format!("health is {}", self.health.as_str())));
        }
        if !self.schedulable {
            return Some(not_eligible("not schedulable".into()));
        }
        if let Some(tag) = tag {
            if !self.tags.contains(tag) {
                return Some(not_eligible(format!("has no tag {tag:?}")));
            }
        }
        if self.free() < length {
            return Some(ColdError::InsufficientCapacity {
                device_id: self.device_id.clone(),
                requested: length,
                free: self.free(),
            });
        }
        None
    }
}

/// Chooses the device for a new offload of `length` bytes (optionally only among devices
/// tagged `tag`): the eligible device with the most free bytes, ties to the smallest id.
///
/// With no eligible device the error says why: `InsufficientCapacity` (BUSY, retryable) when
/// some device would qualify but for its free space (the one with the most free bytes is
/// named), else `DeviceNotEligible` (UNAVAILABLE) naming every device and its reason, or
/// `DeviceNotEligible` with an empty id when the node has no device at all.
pub fn choose_device<'a>(
    devices: impl IntoIterator<Item = &'a DeviceSummary>,
    length: u64,
    tag: Option<&str>,
) -> Result<String, ColdError> {
    let mut best: Option<&DeviceSummary> = None;
    let mut short_of_space: Option<ColdError> = None;
    let mut reasons = Vec::new();
    let mut seen = 0usize;
    for d in devices {
        seen += 1;
        match d.refusal(length, tag) {
            None => {
                let better = match best {
                    None => true,
                    Some(b) => {
                        d.free() > b.free() || (d.free() == b.free() && d.device_id < b.device_id)
                    }
                };
                if better {
                    best = Some(d);
                }
            }
            Some(e @ ColdError::InsufficientCapacity { free, .. }) => {
                let roomier = match &short_of_space {
                    Some(ColdError::InsufficientCapacity { free: f, .. }) => free > *f,
                    _ => true,
                };
                if roomier {
                    short_of_space = Some(e);
                }
            }
            Some(ColdError::DeviceNotEligible { device_id, reason }) => {
                reasons.push(format!("{device_id}: {reason}"));
            }
            Some(other) => reasons.push(other.to_string()),
        }
    }
    if let Some(d) = best {
        return Ok(d.device_id.clone());
    }
    if let Some(e) = short_of_space {
        return Err(e);
    }
    Err(ColdError::DeviceNotEligible {
        device_id: String::new(),
        reason: if seen == 0 {
            "this node has no cold device".into()
        } else {
            format!("no device can take the offload ({})", reasons.join("; "))
        },
    })
}
