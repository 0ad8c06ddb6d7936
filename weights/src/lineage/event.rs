//! `LineageClaim` events: compact msgpack, one schema version per kind.
//!
//! Version history: every kind is at v1.

use serde::{Deserialize, Serialize};

use crescent_actors::{DecodeError, DomainEvent};

use crate::codec::{check_version, current_version, from_msgpack, to_msgpack};
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

// One claim start per upsert: the size of the rare large variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize)]
// Serialized as the variant's payload: what tools show as the event's data.
#[serde(untagged)]
pub enum LineageClaimEvent {
    ClaimStarted(ClaimStarted),
    ClaimAdvanced(ClaimAdvanced),
    ClaimFailed(ClaimFailed),
}

const CLAIM_STARTED: &str = "claim_started";
const CLAIM_ADVANCED: &str = "claim_advanced";
const CLAIM_FAILED: &str = "claim_failed";

const SCHEMA: &[(&str, u16)] = &[(CLAIM_STARTED, 1), (CLAIM_ADVANCED, 1), (CLAIM_FAILED, 1)];

impl DomainEvent for LineageClaimEvent {
    fn kind(&self) -> &'static str {
        match self {
            LineageClaimEvent::ClaimStarted(_) => CLAIM_STARTED,
            LineageClaimEvent::ClaimAdvanced(_) => CLAIM_ADVANCED,
            LineageClaimEvent::ClaimFailed(_) => CLAIM_FAILED,
        }
    }

    fn version(&self) -> u16 {
        current_version(SCHEMA, self.kind())
    }

    fn encode(&self) -> Vec<u8> {
        match self {
            LineageClaimEvent::ClaimStarted(e) => to_msgpack(e),
            LineageClaimEvent::ClaimAdvanced(e) => to_msgpack(e),
            LineageClaimEvent::ClaimFailed(e) => to_msgpack(e),
        }
    }

    fn decode(kind: &str, version: u16, payload: &[u8]) -> Result<Self, DecodeError> {
        check_version(super::STREAM_KIND, SCHEMA, kind, version)?;
        Ok(match kind {
            CLAIM_STARTED => Self::ClaimStarted(from_msgpack(kind, version, payload)?),
            CLAIM_ADVANCED => Self::ClaimAdvanced(from_msgpack(kind, version, payload)?),
            CLAIM_FAILED => Self::ClaimFailed(from_msgpack(kind, version, payload)?),
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
