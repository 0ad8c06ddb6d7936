//! Token revocation on the wire (docs/security.md). Tokens themselves travel in the
//! `Authorization: Bearer TOKEN` header, never in a body.

use serde::{Deserialize, Serialize};

/// The HTTP header carrying a token, and its scheme.
pub const AUTHORIZATION_SCHEME: &str = "Bearer ";

/// Routes.
pub mod routes {
    pub const REVOKE: &str = "/v1/tokens/revoke";
}

/// `POST /v1/tokens/revoke` (admin).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevokeTokenRequest {
    /// The token id (`jti`) to refuse from now on.
    pub token_id: String,
    /// When the token expires (seconds since the Unix epoch), if known: the entry may be
    /// forgotten after that.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_secs: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevokeTokenReply {
    /// False when the id was already revoked (nothing new was journaled).
    pub newly_revoked: bool,
}
