//! `WeightRevision` events and their codec (`domain_events!`): compact msgpack, one schema
//! version per kind.
//!
//! Version history: every kind is at v1. A later change of a kind's shape adds a version and
//! an `upcast` entry to its line below; stored bytes are never rewritten.

use serde::{Deserialize, Serialize};

use crate::identity::RevisionIdentity;
use crate::planner::MoveDirection;
use crate::policy::{ResidencyTarget, WeightStoragePolicy};

use super::types::{OperationKind, OperationStatus, OperationTrigger, PayloadSummary};
use super::STREAM_KIND;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImportBegun {
    pub identity: RevisionIdentity,
    pub group_id: String,
    pub manifest_key: String,
    pub policy: WeightStoragePolicy,
    pub metadata_generation: u64,
    pub at_ms: i64,
}

/// READY + HOT with the immutable summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImportCommitted {
    pub summary: PayloadSummary,
    pub metadata_generation: u64,
    pub at_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OperationStarted {
    pub operation_id: String,
    pub kind: OperationKind,
    pub target: Option<ResidencyTarget>,
    pub trigger: OperationTrigger,
    pub members_total: Option<u64>,
    pub bytes_total: Option<u64>,
    pub metadata_generation: u64,
    pub at_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OperationPlanned {
    pub operation_id: String,
    pub members_total: u64,
    pub bytes_total: u64,
    pub at_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyUpdated {
    pub policy: WeightStoragePolicy,
    pub metadata_generation: u64,
    pub at_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeaseGranted {
    pub lease_id: String,
    pub holder: String,
    pub expires_at_ms: i64,
    pub at_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeaseRenewed {
    pub lease_id: String,
    pub expires_at_ms: i64,
    pub at_ms: i64,
}

/// Released by its holder (`lease_released`) or expired by the timer (`lease_expired`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeaseEnded {
    pub lease_id: String,
    pub at_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoundCopied {
    pub operation_id: String,
    pub round: u64,
    pub direction: MoveDirection,
    pub units: u64,
    pub members: u64,
    pub bytes: u64,
    pub hot_bytes: u64,
    pub metadata_generation: u64,
    pub at_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoundReleased {
    pub operation_id: String,
    pub round: u64,
    pub hot_bytes: u64,
    pub metadata_generation: u64,
    pub at_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OperationAttemptFailed {
    pub operation_id: String,
    pub error: String,
    pub at_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OperationFinished {
    pub operation_id: String,
    pub status: OperationStatus,
    pub error: Option<String>,
    /// The observed HOT bytes at the end (a successful migration or repair).
    pub hot_bytes: Option<u64>,
    pub metadata_generation: u64,
    pub at_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeletionBatchDeleted {
    pub operation_id: String,
    pub batch: u64,
    pub members: u64,
    pub bytes: u64,
    pub at_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ManifestDeleted {
    pub operation_id: String,
    pub at_ms: i64,
}

/// DELETED + ABSENT: the tombstone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RevisionDeleted {
    pub operation_id: String,
    pub metadata_generation: u64,
    pub at_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MembersLost {
    pub lost_members: u64,
    pub metadata_generation: u64,
    pub at_ms: i64,
    /// The memory bytes that survived (residency correction). Optional addition to v1:
    /// events written before it decode with `None` (residency unchanged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hot_bytes: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RevisionRetired {
    pub request_id: String,
    pub successor_generation: u64,
    pub metadata_generation: u64,
    pub at_ms: i64,
}

crescent_actors::domain_events! {
    #[derive(Debug, Clone, PartialEq)]
    pub enum WeightRevisionEvent for STREAM_KIND {
        ImportBegun(ImportBegun): IMPORT_BEGUN = "import_begun", version 1;
        ImportCommitted(ImportCommitted): IMPORT_COMMITTED = "import_committed", version 1;
        OperationStarted(OperationStarted): OPERATION_STARTED = "operation_started", version 1;
        OperationPlanned(OperationPlanned): OPERATION_PLANNED = "operation_planned", version 1;
        PolicyUpdated(PolicyUpdated): POLICY_UPDATED = "policy_updated", version 1;
        LeaseGranted(LeaseGranted): LEASE_GRANTED = "lease_granted", version 1;
        LeaseRenewed(LeaseRenewed): LEASE_RENEWED = "lease_renewed", version 1;
        LeaseReleased(LeaseEnded): LEASE_RELEASED = "lease_released", version 1;
        LeaseExpired(LeaseEnded): LEASE_EXPIRED = "lease_expired", version 1;
        RoundCopied(RoundCopied): ROUND_COPIED = "round_copied", version 1;
        RoundReleased(RoundReleased): ROUND_RELEASED = "round_released", version 1;
        OperationAttemptFailed(OperationAttemptFailed):
            OPERATION_ATTEMPT_FAILED = "operation_attempt_failed", version 1;
        OperationFinished(OperationFinished):
            OPERATION_FINISHED = "operation_finished", version 1;
        DeletionBatchDeleted(DeletionBatchDeleted):
            DELETION_BATCH_DELETED = "deletion_batch_deleted", version 1;
        ManifestDeleted(ManifestDeleted): MANIFEST_DELETED = "manifest_deleted", version 1;
        RevisionDeleted(RevisionDeleted): REVISION_DELETED = "revision_deleted", version 1;
        MembersLost(MembersLost): MEMBERS_LOST = "members_lost", version 1;
        RevisionRetired(RevisionRetired): REVISION_RETIRED = "revision_retired", version 1;
    }
}
