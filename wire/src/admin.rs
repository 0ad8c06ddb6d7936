//! Operator routes on the wire (docs/api.md, "Admin").

use serde::{Deserialize, Serialize};

/// Routes.
pub mod routes {
    pub const SNAPSHOT: &str = "/v1/admin/snapshot";
}

/// `POST /v1/admin/snapshot` (admin; no body): the snapshot written, or the newest one when
/// nothing changed since it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotWritten {
    /// The snapshot file on the server's host.
    pub path: String,
    /// The last journal record folded into it.
    pub seq: u64,
    pub term: u64,
    pub bytes: u64,
}
