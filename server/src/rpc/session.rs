//! The credential of one RPC connection, with `[auth]` on (docs/security.md, "The RPC fast
//! path"). The handshake's token is verified like an `Authorization` header (same keys, same
//! revocation list, [`crate::auth::AuthState::authenticate_token`]). Before every request the
//! token's expiry is checked again, and its id whenever a revocation was committed since the
//! last look, so a revocation applies from the connection's next request on. Each request is
//! authorized as a request to its HTTP route (`RpcOp::http_route`, classed by the one table
//! of [`crate::auth::routes::operation_of`]), then its body is scoped as the HTTP guard scopes
//! it: a client's tenants must be its own (unnamed ones become its own), an owner's owner id
//! its own. Every refusal is counted in the guard's refusal metric before anything runs.

use std::net::IpAddr;

use crescent_auth::{authorize, AuthError, Claims, Denied, Operation, Scope, Target};
use crescent_wire::rpc::RpcOp;
use crescent_wire::{ApiError, ErrorCode};

use super::scoped::Scoped;
use crate::auth::routes::operation_of;
use crate::node::NodeState;

/// The refusal metric's class for a refused handshake (it names no operation yet).
pub(super) const HANDSHAKE_CLASS: &str = "rpc_handshake";

/// A verified credential, re-checked at every request.
#[derive(Debug)]
pub(super) struct Session {
    claims: Claims,
    /// [`crate::auth::AuthState::revocation_generation`] when the token id was last found
    /// not revoked.
    checked_generation: u64,
    peer: IpAddr,
}

/// What the table allowed one request: its class and where it may act.
#[derive(Debug)]
pub(super) struct Grant<'a> {
    session: &'a Session,
    op: Operation,
    scope: Scope,
}

fn now_secs(state: &NodeState) -> u64 {
    u64::try_from(state.now_ms() / 1000).unwrap_or(0)
}

/// Counts and logs a refusal (as the HTTP guard does), giving back the wire error.
fn refuse(state: &NodeState, class: &str, reason: &str, peer: IpAddr, error: ApiError) -> ApiError {
    state
        .auth
        .refused(class, reason, Some(peer), &error.message);
    error.refused_before_running(None)
}

fn unauthenticated(state: &NodeState, class: &str, peer: IpAddr, e: AuthError) -> ApiError {
    refuse(
        state,
        class,
        e.reason(),
        peer,
        ApiError::new(e.code(), e.to_string()),
    )
}

fn denied(state: &NodeState, op: Operation, peer: IpAddr, d: Denied) -> ApiError {
    refuse(
        state,
        op.as_str(),
        d.reason(),
        peer,
        ApiError::new(ErrorCode::PermissionDenied, d.to_string()),
    )
}

impl Session {
    /// Verifies a handshake's token (`None`: the client sent none).
    pub(super) fn open(
        state: &NodeState,
        token: Option<&str>,
        peer: IpAddr,
    ) -> Result<Session, ApiError> {
        // Read before the check: a revocation committed meanwhile moves it, and the next
        // request looks again.
        let checked_generation = state.auth.revocation_generation();
        match state.auth.authenticate_token(token, now_secs(state)) {
            Ok(claims) => Ok(Session {
                claims,
                checked_generation,
                peer,
            }),
            Err(e) => Err(unauthenticated(state, HANDSHAKE_CLASS, peer, e)),
        }
    }

    /// Checks the credential is still valid and `op` allowed by the table; an `Err` of code
    /// UNAUTHENTICATED means the credential is dead (the caller closes the connection).
    pub(super) fn admit(&mut self, state: &NodeState, op: RpcOp) -> Result<Grant<'_>, ApiError> {
        let class = operation_of(op.http_route());
        let label = class.map_or("unknown", Operation::as_str);
        if now_secs(state) >= self.claims.exp {
            return Err(unauthenticated(state, label, self.peer, AuthError::Expired));
        }
        let generation = state.auth.revocation_generation();
        if generation != self.checked_generation {
            if state.auth.is_revoked(&self.claims.jti) {
                return Err(unauthenticated(state, label, self.peer, AuthError::Revoked));
            }
            self.checked_generation = generation;
        }
        let Some(op) = class else {
            // Every op names a classed route (tested); one that did not is admin only, as
            // on HTTP.
            if self.claims.role == crescent_auth::Role::Admin {
                return Ok(Grant {
                    session: self,
                    op: Operation::Status,
                    scope: Scope::All,
                });
            }
            let e = ApiError::new(
                ErrorCode::PermissionDenied,
                "this operation is not in the authorization table: admin only",
            );
            return Err(refuse(state, label, "role", self.peer, e));
        };
        match authorize(&self.claims, op, Target::default()) {
            Ok(scope) => Ok(Grant {
                session: self,
                op,
                scope,
            }),
            Err(d) => Err(denied(state, op, self.peer, d)),
        }
    }
}

impl Session {
    /// The tenant of a client credential (what a request naming none acts in).
    pub(super) fn own_tenant(&self) -> Option<&str> {
        self.claims.tenant.as_deref()
    }
}

impl Grant<'_> {
    /// Scopes a decoded request: a client's named tenants must be its own and unnamed ones
    /// become its own; an owner operation must name the owner's own id.
    pub(super) fn scope<R: Scoped>(&self, state: &NodeState, req: &mut R) -> Result<(), ApiError> {
        let claims = &self.session.claims;
        let refused = match &self.scope {
            Scope::All => None,
            Scope::Tenant(own) => {
                let mut refused = None;
                req.tenants(&mut |tenant| {
                    if let Some(named) = tenant.as_deref() {
                        let target = Target {
                            tenant: Some(named),
                            owner: None,
                        };
                        if let Err(d) = authorize(claims, self.op, target) {
                            refused.get_or_insert(d);
                        }
                    } else {
                        *tenant = Some(own.clone());
                    }
                });
                refused
            }
            Scope::Owner(_) => {
                let target = Target {
                    tenant: None,
                    owner: req.owner_id(),
                };
                authorize(claims, self.op, target).err()
            }
        };
        match refused {
            None => Ok(()),
            Some(d) => Err(denied(state, self.op, self.session.peer, d)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rpc_op_is_in_the_authorization_table() {
        for op in RpcOp::ALL {
            let class = operation_of(op.http_route());
            assert!(
                matches!(
                    class,
                    Some(Operation::ObjectRead | Operation::ObjectWrite)
                        | Some(Operation::OwnerHeartbeat)
                ),
                "{op:?} -> {class:?}"
            );
        }
        assert_eq!(
            operation_of(RpcOp::BatchGetCompact.http_route()),
            Some(Operation::ObjectRead)
        );
        assert_eq!(
            operation_of(RpcOp::BatchPutEndCompact.http_route()),
            Some(Operation::ObjectWrite)
        );
        assert_eq!(
            operation_of(RpcOp::Release.http_route()),
            Some(Operation::ObjectWrite)
        );
    }
}
