//! The journaled revocation list: token ids refused until they would have expired anyway.
//!
//! One instance ([`INSTANCE_ID`]) of one aggregate kind, replayed with everything else, so a
//! revocation survives restarts and reaches the standby through replication. Entries whose
//! token has expired may be pruned: an expired token is refused without the list.

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use crescent_actors::aggregate::{Aggregate, Ctx, DecodeError, DomainEvent, ErrorCode, WireCoded};
use crescent_actors::event_payload::{check_version, from_msgpack, to_msgpack};
use serde::{Deserialize, Serialize};

/// Stream kind and the one instance id.
pub const STREAM_KIND: &str = "token_revocation";
pub const INSTANCE_ID: &str = "tokens";
/// Event kinds (v1: current).
pub const TOKEN_REVOKED: &str = "token_revoked";
pub const REVOCATIONS_PRUNED: &str = "revocations_pruned";
/// Longest token id accepted (ids this build issues are UUIDs).
pub const MAX_TOKEN_ID_BYTES: usize = 128;

/// Revoked token ids and when their tokens expire (seconds; `None`: unknown, kept forever).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevocationList {
    pub revoked: BTreeMap<String, Option<u64>>,
}

impl RevocationList {
    pub fn is_revoked(&self, token_id: &str) -> bool {
        self.revoked.contains_key(token_id)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RevocationCommand {
    /// Revoke `token_id`; `expires_secs` (when known) lets [`RevocationCommand::Prune`] drop it.
    Revoke {
        token_id: String,
        expires_secs: Option<u64>,
    },
    /// Forget entries whose token expired before `now_secs`.
    Prune { now_secs: u64 },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenRevoked {
    pub token_id: String,
    pub expires_secs: Option<u64>,
    pub at_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevocationsPruned {
    /// Entries with a known expiry before this (seconds) are dropped.
    pub expired_before_secs: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
// Serialized as the variant's payload: what tools show as the event's data.
#[serde(untagged)]
pub enum RevocationEvent {
    Revoked(TokenRevoked),
    Pruned(RevocationsPruned),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RevocationError {
    #[error("token id must be 1 to {MAX_TOKEN_ID_BYTES} bytes")]
    BadTokenId,
}

impl WireCoded for RevocationError {
    fn wire_code(&self) -> ErrorCode {
        match self {
            RevocationError::BadTokenId => ErrorCode::InvalidArgument,
        }
    }
}

impl DomainEvent for RevocationEvent {
    fn kind(&self) -> &'static str {
        match self {
            RevocationEvent::Revoked(_) => TOKEN_REVOKED,
            RevocationEvent::Pruned(_) => REVOCATIONS_PRUNED,
        }
    }

    fn version(&self) -> u16 {
        1
    }

    fn encode(&self) -> Vec<u8> {
        match self {
            RevocationEvent::Revoked(e) => to_msgpack(e),
            RevocationEvent::Pruned(e) => to_msgpack(e),
        }
    }

    fn decode(kind: &str, version: u16, payload: &[u8]) -> Result<Self, DecodeError> {
        check_version(STREAM_KIND, Self::schema(), kind, version)?;
        match kind {
            TOKEN_REVOKED => from_msgpack(kind, version, payload).map(RevocationEvent::Revoked),
            _ => from_msgpack(kind, version, payload).map(RevocationEvent::Pruned),
        }
    }

    fn schema() -> &'static [(&'static str, u16)] {
        &[(TOKEN_REVOKED, 1), (REVOCATIONS_PRUNED, 1)]
    }
}

impl Aggregate for RevocationList {
    const KIND: &'static str = STREAM_KIND;
    const SNAPSHOT_SCHEMA: u32 = 1;

    type Command = RevocationCommand;
    type Event = RevocationEvent;
    type Error = RevocationError;

    fn decide(
        &self,
        cmd: &RevocationCommand,
        ctx: &Ctx,
    ) -> Result<Vec<RevocationEvent>, RevocationError> {
        match cmd {
            RevocationCommand::Revoke {
                token_id,
                expires_secs,
            } => {
                if token_id.is_empty() || token_id.len() > MAX_TOKEN_ID_BYTES {
                    return Err(RevocationError::BadTokenId);
                }
                // Revoking twice is acknowledged without a second event.
                if self.is_revoked(token_id) {
                    return Ok(vec![]);
                }
                Ok(vec![RevocationEvent::Revoked(TokenRevoked {
                    token_id: token_id.clone(),
                    expires_secs: *expires_secs,
                    at_ms: ctx.now_ms,
                })])
            }
            RevocationCommand::Prune { now_secs } => {
                let any = self
                    .revoked
                    .values()
                    .any(|exp| exp.is_some_and(|e| e < *now_secs));
                Ok(if any {
                    vec![RevocationEvent::Pruned(RevocationsPruned {
                        expired_before_secs: *now_secs,
                    })]
                } else {
                    vec![]
                })
            }
        }
    }

    fn apply(&mut self, event: &RevocationEvent) {
        match event {
            RevocationEvent::Revoked(e) => {
                self.revoked.insert(e.token_id.clone(), e.expires_secs);
            }
            RevocationEvent::Pruned(e) => self
                .revoked
                .retain(|_, exp| exp.is_none_or(|x| x >= e.expired_before_secs)),
        }
    }
}
