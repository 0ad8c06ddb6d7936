//! `LineageClaim` events: compact msgpack, one schema version per kind.
//!
//! Version history: every kind is at v1.

use serde::{Deserialize, Serialize};

use super::STREAM_KIND;
use crate::identity::RevisionIdentity;
use crate::policy::WeightStoragePolicy;

use super::command::{ClaimPhase, UpsertMode};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClaimStarted {
    pub request_id: String,
    pub base: RevisionIdentity,
    pub target: RevisionIdentity,
    pub mode: UpsertMode,
    pub expected_base_metadata_generation: u64,
    pub policy: Option<WeightStoragePolicy>,
    /// 1 for a new claim; a failed request retried with the same arguments counts up.
    pub attempt: u64,
    pub at_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClaimAdvanced {
    pub request_id: String,
    pub phase: ClaimPhase,
    pub at_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClaimFailed {
    pub request_id: String,
    pub reason: String,
    pub at_ms: i64,
}

crescent_actors::domain_events! {
    // One claim start per upsert: the size of the rare large variant does not matter.
    #[allow(clippy::large_enum_variant)]
    #[derive(Debug, Clone, PartialEq)]
    pub enum LineageClaimEvent for STREAM_KIND {
        ClaimStarted(ClaimStarted): CLAIM_STARTED = "claim_started", version 1;
        ClaimAdvanced(ClaimAdvanced): CLAIM_ADVANCED = "claim_advanced", version 1;
        ClaimFailed(ClaimFailed): CLAIM_FAILED = "claim_failed", version 1;
    }
}
