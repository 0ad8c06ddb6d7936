//! `WeightRevision` events: compact msgpack, one schema version per kind.
//!
//! Version history: every kind is at v1. A later change of a kind's shape adds a version and
//! an upcaster here; stored bytes are never rewritten.

use serde::{Deserialize, Serialize};

use crescent_actors::{DecodeError, DomainEvent};

use crate::codec::{check_version, current_version, from_msgpack, to_msgpack};
use crate::identity::RevisionIdentity;
use crate::planner::MoveDirection;
use crate::policy::{ResidencyTarget, WeightStoragePolicy};

use super::types::{OperationKind, OperationStatus, OperationTrigger, PayloadSummary};

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

#[derive(Debug, Clone, PartialEq, Serialize)]
// Serialized as the variant's payload: what tools show as the event's data.
#[serde(untagged)]
pub enum WeightRevisionEvent {
    ImportBegun(ImportBegun),
    ImportCommitted(ImportCommitted),
    OperationStarted(OperationStarted),
    OperationPlanned(OperationPlanned),
    PolicyUpdated(PolicyUpdated),
    LeaseGranted(LeaseGranted),
    LeaseRenewed(LeaseRenewed),
    LeaseReleased(LeaseEnded),
    LeaseExpired(LeaseEnded),
    RoundCopied(RoundCopied),
    RoundReleased(RoundReleased),
    OperationAttemptFailed(OperationAttemptFailed),
    OperationFinished(OperationFinished),
    DeletionBatchDeleted(DeletionBatchDeleted),
    ManifestDeleted(ManifestDeleted),
    RevisionDeleted(RevisionDeleted),
    MembersLost(MembersLost),
    RevisionRetired(RevisionRetired),
}

const IMPORT_BEGUN: &str = "import_begun";
const IMPORT_COMMITTED: &str = "import_committed";
const OPERATION_STARTED: &str = "operation_started";
const OPERATION_PLANNED: &str = "operation_planned";
const POLICY_UPDATED: &str = "policy_updated";
const LEASE_GRANTED: &str = "lease_granted";
const LEASE_RENEWED: &str = "lease_renewed";
const LEASE_RELEASED: &str = "lease_released";
const LEASE_EXPIRED: &str = "lease_expired";
const ROUND_COPIED: &str = "round_copied";
const ROUND_RELEASED: &str = "round_released";
const OPERATION_ATTEMPT_FAILED: &str = "operation_attempt_failed";
const OPERATION_FINISHED: &str = "operation_finished";
const DELETION_BATCH_DELETED: &str = "deletion_batch_deleted";
const MANIFEST_DELETED: &str = "manifest_deleted";
const REVISION_DELETED: &str = "revision_deleted";
const MEMBERS_LOST: &str = "members_lost";
const REVISION_RETIRED: &str = "revision_retired";

const SCHEMA: &[(&str, u16)] = &[
    (IMPORT_BEGUN, 1),
    (IMPORT_COMMITTED, 1),
    (OPERATION_STARTED, 1),
    (OPERATION_PLANNED, 1),
    (POLICY_UPDATED, 1),
    (LEASE_GRANTED, 1),
    (LEASE_RENEWED, 1),
    (LEASE_RELEASED, 1),
    (LEASE_EXPIRED, 1),
    (ROUND_COPIED, 1),
    (ROUND_RELEASED, 1),
    (OPERATION_ATTEMPT_FAILED, 1),
    (OPERATION_FINISHED, 1),
    (DELETION_BATCH_DELETED, 1),
    (MANIFEST_DELETED, 1),
    (REVISION_DELETED, 1),
    (MEMBERS_LOST, 1),
    (REVISION_RETIRED, 1),
];

impl DomainEvent for WeightRevisionEvent {
    fn kind(&self) -> &'static str {
        use WeightRevisionEvent as E;
        match self {
            E::ImportBegun(_) => IMPORT_BEGUN,
            E::ImportCommitted(_) => IMPORT_COMMITTED,
            E::OperationStarted(_) => OPERATION_STARTED,
            E::OperationPlanned(_) => OPERATION_PLANNED,
            E::PolicyUpdated(_) => POLICY_UPDATED,
            E::LeaseGranted(_) => LEASE_GRANTED,
            E::LeaseRenewed(_) => LEASE_RENEWED,
            E::LeaseReleased(_) => LEASE_RELEASED,
            E::LeaseExpired(_) => LEASE_EXPIRED,
            E::RoundCopied(_) => ROUND_COPIED,
            E::RoundReleased(_) => ROUND_RELEASED,
            E::OperationAttemptFailed(_) => OPERATION_ATTEMPT_FAILED,
            E::OperationFinished(_) => OPERATION_FINISHED,
            E::DeletionBatchDeleted(_) => DELETION_BATCH_DELETED,
            E::ManifestDeleted(_) => MANIFEST_DELETED,
            E::RevisionDeleted(_) => REVISION_DELETED,
            E::MembersLost(_) => MEMBERS_LOST,
            E::RevisionRetired(_) => REVISION_RETIRED,
        }
    }

    fn version(&self) -> u16 {
        current_version(SCHEMA, self.kind())
    }

    fn encode(&self) -> Vec<u8> {
        use WeightRevisionEvent as E;
        match self {
            E::ImportBegun(e) => to_msgpack(e),
            E::ImportCommitted(e) => to_msgpack(e),
            E::OperationStarted(e) => to_msgpack(e),
            E::OperationPlanned(e) => to_msgpack(e),
            E::PolicyUpdated(e) => to_msgpack(e),
            E::LeaseGranted(e) => to_msgpack(e),
            E::LeaseRenewed(e) => to_msgpack(e),
            E::LeaseReleased(e) | E::LeaseExpired(e) => to_msgpack(e),
            E::RoundCopied(e) => to_msgpack(e),
            E::RoundReleased(e) => to_msgpack(e),
            E::OperationAttemptFailed(e) => to_msgpack(e),
            E::OperationFinished(e) => to_msgpack(e),
            E::DeletionBatchDeleted(e) => to_msgpack(e),
            E::ManifestDeleted(e) => to_msgpack(e),
            E::RevisionDeleted(e) => to_msgpack(e),
            E::MembersLost(e) => to_msgpack(e),
            E::RevisionRetired(e) => to_msgpack(e),
        }
    }

    fn decode(kind: &str, version: u16, payload: &[u8]) -> Result<Self, DecodeError> {
        use WeightRevisionEvent as E;
        check_version(super::STREAM_KIND, SCHEMA, kind, version)?;
        let p = payload;
        Ok(match kind {
            IMPORT_BEGUN => E::ImportBegun(from_msgpack(kind, version, p)?),
            IMPORT_COMMITTED => E::ImportCommitted(from_msgpack(kind, version, p)?),
            OPERATION_STARTED => E::OperationStarted(from_msgpack(kind, version, p)?),
            OPERATION_PLANNED => E::OperationPlanned(from_msgpack(kind, version, p)?),
            POLICY_UPDATED => E::PolicyUpdated(from_msgpack(kind, version, p)?),
            LEASE_GRANTED => E::LeaseGranted(from_msgpack(kind, version, p)?),
            LEASE_RENEWED => E::LeaseRenewed(from_msgpack(kind, version, p)?),
            LEASE_RELEASED => E::LeaseReleased(from_msgpack(kind, version, p)?),
            LEASE_EXPIRED => E::LeaseExpired(from_msgpack(kind, version, p)?),
            ROUND_COPIED => E::RoundCopied(from_msgpack(kind, version, p)?),
            ROUND_RELEASED => E::RoundReleased(from_msgpack(kind, version, p)?),
            OPERATION_ATTEMPT_FAILED => E::OperationAttemptFailed(from_msgpack(kind, version, p)?),
            OPERATION_FINISHED => E::OperationFinished(from_msgpack(kind, version, p)?),
            DELETION_BATCH_DELETED => E::DeletionBatchDeleted(from_msgpack(kind, version, p)?),
            MANIFEST_DELETED => E::ManifestDeleted(from_msgpack(kind, version, p)?),
            REVISION_DELETED => E::RevisionDeleted(from_msgpack(kind, version, p)?),
            MEMBERS_LOST => E::MembersLost(from_msgpack(kind, version, p)?),
            REVISION_RETIRED => E::RevisionRetired(from_msgpack(kind, version, p)?),
            _ => {
                return Err(DecodeError::UnknownKind {
                    aggregate: super::STREAM_KIND,
                    kind: kind.to_string(),
                })
            }
        })
    }

    fn schema() -> &'static [(&'static str, u16)] {
        SCHEMA
    }
}
