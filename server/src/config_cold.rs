//! The `[cold]` section: the cold devices of this storage owner (seed 003). A standalone
//! crescentd configures one `local_dir` device under its data dir by default.

use std::path::{Path, PathBuf};

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
}

impl Default for ColdSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            device_id: "local0".into(),
            root: None,
            capacity_bytes: 64 << 30,
            tags: vec!["local".into()],
            schedulable: true,
        }
    }
}

impl ColdSettings {
    /// The device directory.
    pub fn root_under(&self, data_dir: &Path) -> PathBuf {
        self.root
            .clone()
            .unwrap_or_else(|| data_dir.join("cold").join(&self.device_id))
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        if !self.enabled {
            return Ok(());
        }
        crescent_cold::device::check_device_id(&self.device_id)
            .map_err(|e| invalid("cold.device_id", e.to_string()))?;
        if self.capacity_bytes == 0 {
            return Err(invalid("cold.capacity_bytes", "must be greater than 0"));
        }
        if self.tags.len() > crescent_cold::device::MAX_TAGS {
            return Err(invalid("cold.tags", "too many tags"));
        }
        if self
            .tags
            .iter()
            .any(|t| t.is_empty() || t.chars().any(char::is_control))
        {
            return Err(invalid("cold.tags", "tags must be non-empty text"));
        }
        if let Some(root) = &self.root {
            if root.as_os_str().is_empty() {
                return Err(invalid("cold.root", "must not be empty"));
            }
        }
        Ok(())
    }
}
