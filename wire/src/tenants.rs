//! Tenant quota policy and usage on the wire (docs/tenants.md, "Admin API").

use serde::{Deserialize, Serialize};

/// Routes (admin).
pub mod routes {
    pub const QUOTA_SET: &str = "/v1/tenants/quota";
    pub const SHOW: &str = "/v1/tenants/show";
    pub const LIST: &str = "/v1/tenants/list";
    /// `GET /v1/stats?tenant=T`: one tenant's [`super::TenantQuota`] as JSON.
    pub const STATS: &str = "/v1/stats";
}

/// `POST /v1/tenants/quota`: sets the tenant's hard limits (the admin change: creates the
/// policy or replaces it, bumping its version). A limit left out is unlimited.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetTenantQuotaRequest {
    pub tenant: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_objects: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetTenantQuotaReply {
    /// False when the tenant already had these limits (nothing was journaled).
    pub changed: bool,
    pub quota: TenantQuota,
}

/// `POST /v1/tenants/show`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShowTenantRequest {
    pub tenant: String,
}

/// `POST /v1/tenants/list` (admin).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListTenantsRequest {}

/// Every tenant with a stored policy or with objects, by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListTenantsReply {
    pub tenants: Vec<TenantQuota>,
}

/// `GET /v1/stats?tenant=T` (admin).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantStatsQuery {
    pub tenant: String,
}

/// A tenant's quota policy (as committed) and usage (exact, as the directory holds it now).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantQuota {
    pub tenant: String,
    /// `None`: unlimited (also when the tenant has no stored policy).
    pub max_bytes: Option<u64>,
    pub max_objects: Option<u64>,
    /// `None`: no stored policy.
    pub policy_version: Option<u64>,
    pub fingerprint: Option<String>,
    pub used_bytes: u64,
    pub used_objects: u64,
    pub pending_bytes: u64,
    /// Accounting operations reserved and not yet publishing.
    pub pending_operations: u64,
    /// Accounting operations publishing (charged until finalized), and removes not yet
    /// durable (their objects' quota held until they are).
    pub in_doubt_operations: u64,
    /// What those removes hold: out of `used_bytes`, still counted by admission. Wire
    /// addition: absent from older servers (0).
    #[serde(default)]
    pub removing_bytes: u64,
    /// The last reconciliation of the journaled usage with the directory rebuilt after a
    /// restart or a promotion (docs/tenants.md, "Journaled usage and reconciliation"); absent
    /// until one ran. Wire addition: absent from older servers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconciliation: Option<UsageReconciliation>,
    /// The usage as the journal last recorded it, written behind the directory's (absent
    /// until recorded). Wire addition: absent from older servers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded: Option<RecordedUsage>,
    /// In a mesh: what this cluster holds of the tenant's quota across the mesh
    /// (docs/tenants.md, "Quota across a mesh"); absent outside one. Wire addition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mesh: Option<MeshShare>,
}

/// A tenant's quota as one cluster of a mesh holds it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MeshShare {
    /// At the tenant's home: what the other clusters may hold, counted by its admission.
    pub granted_bytes: u64,
    pub granted_objects: u64,
    /// The most this cluster may hold (its allowance); `None`: no cap (the home, once every
    /// other cluster reported, or a tenant without limits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cap_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cap_objects: Option<u64>,
}

/// The tenant's usage as last journaled (docs/tenants.md, "Journaled usage and
/// reconciliation").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedUsage {
    pub used_bytes: u64,
    pub used_objects: u64,
    /// Server clock, ms since the Unix epoch.
    pub at_ms: i64,
}

/// The usage last journaled before a rebuild and the rebuilt one; they differ by objects that
/// did not come back (negative) or that were written after the last record (positive).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageReconciliation {
    pub recorded_bytes: u64,
    pub recorded_objects: u64,
    pub rebuilt_bytes: u64,
    pub rebuilt_objects: u64,
    /// Server clock, ms since the Unix epoch.
    pub at_ms: i64,
}
