//! Managed weight revisions (wire version 1, the `/v1/weights/...` routes).
//!
//! The eleven public operations: weight_put (begin, object puts, commit), weight_get (lease,
//! read, release), weight_is_exist, weight_get_metadata, weight_get_size, weight_list,
//! weight_update_policy, weight_upsert, weight_migrate, weight_get_operation, weight_remove.
//! Enumerations travel as their upper-case names (`READY`, `HOT`, ...), requests accept the
//! lower-case forms too.

use serde::{Deserialize, Serialize};

/// `(tenant, namespace, resource_id, revision, generation)`; an absent tenant is `default`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WeightId {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    pub namespace: String,
    pub resource_id: String,
    pub revision: String,
    pub generation: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum PreferredResidency {
    #[serde(alias = "hot")]
    Hot,
    #[serde(alias = "cold")]
    Cold,
    #[serde(alias = "mixed")]
    Mixed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum MigrationMode {
    #[serde(alias = "pinned")]
    Pinned,
    #[serde(alias = "manual")]
    Manual,
    #[serde(alias = "auto")]
    Auto,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum UpsertMode {
    #[serde(alias = "put_first", alias = "put-first")]
    PutFirst,
    #[serde(alias = "delete_first", alias = "delete-first")]
    DeleteFirst,
}

/// A (partial) storage policy: unset fields come from the client's and the cluster's defaults.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct WeightPolicy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preferred_residency: Option<PreferredResidency>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mixed_hot_ratio: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migration_mode: Option<MigrationMode>,
}

impl WeightId {
    /// The identity in the default tenant.
    pub fn new(namespace: &str, resource_id: &str, revision: &str, generation: u64) -> Self {
        Self {
            tenant: None,
            namespace: namespace.to_string(),
            resource_id: resource_id.to_string(),
            revision: revision.to_string(),
            generation,
        }
    }
}

impl WeightPolicy {
    /// A policy naming the preferred residency and the migration mode (the HOT ratio comes
    /// from the client's and the cluster's defaults).
    pub fn of(preferred_residency: PreferredResidency, migration_mode: MigrationMode) -> Self {
        Self {
            preferred_residency: Some(preferred_residency),
            mixed_hot_ratio: None,
            migration_mode: Some(migration_mode),
        }
    }
}

/// The policy a revision persists (every field resolved).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResolvedPolicy {
    pub preferred_residency: String,
    pub mixed_hot_ratio: f64,
    pub migration_mode: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WeightRequest {
    pub id: WeightId,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PutBeginRequest {
    pub id: WeightId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<WeightPolicy>,
    /// The upsert request this import belongs to (the target of a claim).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PutBeginReply {
    pub group_id: String,
    pub manifest_key: String,
    /// Every payload key starts with this.
    pub payload_prefix: String,
    pub metadata_generation: u64,
    pub availability: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WeightObjectKind {
    Payload,
    Manifest,
}

/// put_start of one object of an IMPORTING revision (into its managed group); the writer then
/// ends or revokes it with the ordinary object routes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WeightObjectRequest {
    pub id: WeightId,
    pub key: String,
    pub size: u64,
    pub kind: WeightObjectKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<u32>,
}

/// A tensor or alias group: payload objects that move together.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AffinityUnit {
    pub unit_id: String,
    pub member_keys: Vec<String>,
    pub bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PutCommitRequest {
    pub id: WeightId,
    pub expected_metadata_generation: u64,
    /// SHA-256 (lowercase hex) of the manifest object's bytes.
    pub manifest_sha256: String,
    /// In manifest order; they must cover every payload exactly once.
    pub affinity_units: Vec<AffinityUnit>,
}

/// `weight_get_metadata` (never the manifest body).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WeightMetadata {
    pub id: WeightId,
    pub group_id: String,
    pub manifest_key: String,
    pub availability: String,
    pub residency: String,
    pub observed_hot_ratio: f64,
    pub metadata_generation: u64,
    pub policy: ResolvedPolicy,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest_sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload_count: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logical_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity_count: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_operation_id: Option<String>,
    pub active_lease_count: u64,
    /// The successor generation of a retired revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retired_by_generation: Option<u64>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRequest {
    pub id: WeightId,
    pub holder: String,
    pub ttl_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_metadata_generation: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRenewRequest {
    pub id: WeightId,
    pub lease_id: String,
    pub ttl_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseReleaseRequest {
    pub id: WeightId,
    pub lease_id: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeaseReply {
    pub lease_id: String,
    pub expires_at_ms: i64,
    pub metadata: WeightMetadata,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WeightExistReply {
    pub exists: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WeightSizeReply {
    pub size: u64,
}

/// Most revisions in one `weight_list` page.
pub const MAX_WEIGHT_LIST_PAGE: u32 = 1000;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WeightListRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_id: Option<String>,
    /// The previous page's `next`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// Page size, at most [`MAX_WEIGHT_LIST_PAGE`] (default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WeightListReply {
    pub revisions: Vec<WeightMetadata>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UpdatePolicyRequest {
    pub id: WeightId,
    pub policy: WeightPolicy,
    /// Default: the current generation (read just before; a concurrent change still fails).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_metadata_generation: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MigrateRequest {
    pub id: WeightId,
    pub to: PreferredResidency,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hot_ratio: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_metadata_generation: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperationRequest {
    pub operation_id: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoveWeightRequest {
    pub id: WeightId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_metadata_generation: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OperationReply {
    pub operation_id: String,
    pub id: WeightId,
    pub kind: String,
    pub trigger: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    pub rounds_completed: u64,
    pub members_done: u64,
    pub bytes_done: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub members_total: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_total: Option<u64>,
    pub attempts: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    pub started_at_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at_ms: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UpsertRequest {
    pub base: WeightId,
    pub target_generation: u64,
    #[serde(default = "put_first")]
    pub mode: UpsertMode,
    /// Default: the base's current generation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_base_metadata_generation: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<WeightPolicy>,
}

fn put_first() -> UpsertMode {
    UpsertMode::PutFirst
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpsertStatusRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    pub namespace: String,
    pub resource_id: String,
    pub revision: String,
    pub request_id: String,
}

/// A replacement claim: its persisted phase and what happens next (`import_target`: the
/// client writes the target with `weight_put` under `request_id`; `done`: finished).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpsertReply {
    pub request_id: String,
    pub base: WeightId,
    pub target: WeightId,
    pub mode: UpsertMode,
    pub phase: String,
    pub next_step: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watermark: Option<u64>,
}

pub mod routes {
    pub const PUT_BEGIN: &str = "/v1/weights/put/begin";
    pub const PUT_OBJECT: &str = "/v1/weights/put/object";
    pub const PUT_COMMIT: &str = "/v1/weights/put/commit";
    pub const LEASE_ACQUIRE: &str = "/v1/weights/lease/acquire";
    pub const LEASE_RENEW: &str = "/v1/weights/lease/renew";
    pub const LEASE_RELEASE: &str = "/v1/weights/lease/release";
    pub const EXIST: &str = "/v1/weights/exist";
    pub const METADATA: &str = "/v1/weights/metadata";
    pub const SIZE: &str = "/v1/weights/size";
    pub const LIST: &str = "/v1/weights/list";
    pub const POLICY: &str = "/v1/weights/policy";
    pub const UPSERT: &str = "/v1/weights/upsert";
    pub const UPSERT_STATUS: &str = "/v1/weights/upsert/status";
    pub const MIGRATE: &str = "/v1/weights/migrate";
    pub const OPERATION: &str = "/v1/weights/operation";
    pub const REMOVE: &str = "/v1/weights/remove";
}
