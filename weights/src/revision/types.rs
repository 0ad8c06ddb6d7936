//! The records a `WeightRevision` holds: metadata, published summary, leases and operations.

use serde::{Deserialize, Serialize};

use crate::identity::RevisionIdentity;
use crate::policy::{Residency, ResidencyTarget, WeightStoragePolicy};

/// Whether the revision is complete and may be discovered and read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Availability {
    Importing,
    Ready,
    Degraded,
    Deleting,
    Deleted,
}

impl Availability {
    pub fn as_str(self) -> &'static str {
        match self {
            Availability::Importing => "IMPORTING",
            Availability::Ready => "READY",
            Availability::Degraded => "DEGRADED",
            Availability::Deleting => "DELETING",
            Availability::Deleted => "DELETED",
        }
    }
}

/// The immutable summary validated at commit: what metadata knows of the manifest and the
/// payloads (never tensors, fragments or addresses).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PayloadSummary {
    /// SHA-256 of the manifest object's bytes (lowercase hex).
    pub manifest_sha256: String,
    /// See [`crate::payload_keys_sha256`].
    pub payload_keys_sha256: String,
    pub payload_count: u64,
    /// Logical payload bytes (the manifest is not counted).
    pub logical_bytes: u64,
    pub affinity_count: u64,
    /// See [`crate::affinity_digest`].
    pub affinity_digest: String,
}

/// The revision metadata record (what `weight_get_metadata` returns, with leases counted).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RevisionRecord {
    pub identity: RevisionIdentity,
    pub group_id: String,
    pub manifest_key: String,
    pub policy: WeightStoragePolicy,
    pub availability: Availability,
    pub residency: Residency,
    /// Logical payload bytes with a readable memory replica (observed by reconciliation).
    pub hot_bytes: u64,
    /// CAS fence: bumped once by every command that changes this record.
    pub metadata_generation: u64,
    /// `None` until the import commits; immutable afterwards.
    pub summary: Option<PayloadSummary>,
    pub active_operation_id: Option<String>,
    /// The initial (post-import) convergence toward the preferred residency has finished;
    /// migration mode rules apply from then on.
    pub initially_converged: bool,
    /// Set by a `weight_upsert` that replaces this revision: no new leases or renewals.
    pub retired: Option<Retirement>,
    pub lost_members: u64,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    /// Persisted last access (lease grant), the first AUTO ordering key.
    pub last_access_ms: i64,
    pub last_migration_finished_ms: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retirement {
    pub request_id: String,
    pub successor_generation: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    pub holder: String,
    pub granted_at_ms: i64,
    pub expires_at_ms: i64,
}

impl Lease {
    /// Active until its expiry instant; an expired lease no longer protects anything even
    /// before the expiry timer has removed it.
    pub fn is_active(&self, now_ms: i64) -> bool {
        now_ms < self.expires_at_ms
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum OperationKind {
    Migrating,
    Repairing,
    Deleting,
}

/// Why an operation was started (the AUTO trigger reasons are metrics labels).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OperationTrigger {
    /// Convergence toward the preferred residency right after import.
    Initial,
    /// `weight_migrate`.
    Explicit,
    /// AUTO demotion under memory pressure.
    MemoryPressure,
    /// AUTO promotion on access.
    Access,
    /// Repair of a DEGRADED revision.
    Repair,
    /// `weight_remove` (or the base deletion of a `weight_upsert`).
    Removal,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum OperationStatus {
    Running,
    Succeeded,
    Failed,
}

/// Monotonic progress: counters only grow, rounds are numbered from 1.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    pub rounds_completed: u64,
    pub members_done: u64,
    pub bytes_done: u64,
    /// Known once planned (migration) or at start (deletion of a published revision).
    pub members_total: Option<u64>,
    pub bytes_total: Option<u64>,
}

/// A migration round whose new replicas are validated but whose memory is not yet released.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingRound {
    pub round: u64,
    pub units: u64,
    pub members: u64,
    pub bytes: u64,
}

/// An operation record, queryable by id after it ends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Operation {
    pub operation_id: String,
    pub kind: OperationKind,
    pub target: Option<ResidencyTarget>,
    pub trigger: OperationTrigger,
    pub status: OperationStatus,
    pub progress: Progress,
    /// Migration: a demotion round copied to cold and awaiting the release of memory.
    pub pending_round: Option<PendingRound>,
    /// Deletion: the manifest (always deleted last) is gone.
    pub manifest_deleted: bool,
    /// Failed attempts so far (reconciliation retries a running operation).
    pub attempts: u64,
    pub last_error: Option<String>,
    /// The metadata generation the operation's start produced (idempotent retries match it).
    pub started_generation: u64,
    pub started_at_ms: i64,
    pub updated_at_ms: i64,
    pub finished_at_ms: Option<i64>,
}

impl Operation {
    pub fn is_running(&self) -> bool {
        self.status == OperationStatus::Running
    }
}

/// The object type of a group member in the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ObjectType {
    /// The manifest.
    Metadata,
    /// A payload.
    Weight,
    /// Anything else (an ordinary KV object that must not be in a managed group).
    Other,
}

/// A group member as the store reports it at commit (object metadata, never its bytes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupMember {
    pub key: String,
    pub group_id: String,
    pub object_type: ObjectType,
    pub logical_bytes: u64,
    /// The put has ended on every replica.
    pub complete: bool,
    /// At least one readable memory replica.
    pub memory_readable: bool,
    /// Exempt from eviction.
    pub hard_pinned: bool,
    /// The content digest, when the store computed one (lowercase hex SHA-256).
    pub content_sha256: Option<String>,
}
