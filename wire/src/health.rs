//! `GET /readyz` (docs/api.md, "Readiness"): whether this node serves writes now.

use serde::{Deserialize, Serialize};

/// The body of `/readyz`, 200 when `ready`, 503 otherwise.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Readiness {
    pub ready: bool,
    /// `active`, `standalone`, `standby` or `deposed`.
    pub role: String,
    /// The rebuild gate (`SERVING`, `REBUILDING`, `DEGRADED`); none on a standby.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<String>,
    /// Why the node is not ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}
