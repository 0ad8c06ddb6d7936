//! The journaled revocation list: token ids refused until they would have expired anyway.
//!
//! One instance ([`INSTANCE_ID`]) of one aggregate kind, replayed with everything else, so a
//! revocation survives restarts and reaches the standby through replication. Entries whose
//! token has expired may be pruned: an expired token is refused without the list.

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use crescent_actors::aggregate::{Aggregate, Ctx, ErrorCode, WireCoded};
use serde::{Deserialize, Serialize};

/// Stream kind and the one instance id.
pub const STREAM_KIND: &str = "token_revocation";
pub const INSTANCE_ID: &str = "tokens";
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

crescent_actors::domain_events! {
    /// Version history: every kind is at v1.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub enum RevocationEvent for STREAM_KIND {
        Revoked(TokenRevoked): pub TOKEN_REVOKED = "token_revoked", version 1;
        Pruned(RevocationsPruned): pub REVOCATIONS_PRUNED = "revocations_pruned", version 1;
    }
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
