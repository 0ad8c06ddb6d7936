//! `POST /v1/tokens/revoke` (admin): journal a token id as revoked (docs/security.md).

use crescent_wire::auth::{RevokeTokenReply, RevokeTokenRequest};

use super::error::HttpError;
use super::objects::State;
use super::wire::{Reply, Wire};

pub async fn revoke(
    state: State,
    Wire(req): Wire<RevokeTokenRequest>,
) -> Result<Reply<RevokeTokenReply>, HttpError> {
    let newly_revoked = state.auth.revoke(req.token_id, req.expires_secs).await?;
    Ok(Reply(RevokeTokenReply { newly_revoked }))
}
