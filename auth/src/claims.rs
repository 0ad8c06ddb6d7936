//! What a token says: role, scope (tenant or owner id), expiry and id.

use serde::{Deserialize, Serialize};

use crate::error::AuthError;

/// Version of the claims layout (the `v` claim). A verifier refuses a newer one.
pub const TOKEN_FORMAT_VERSION: u32 = 1;

/// Who the holder is, which decides what it may call (docs/security.md, roles table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Operators: everything.
    Admin,
    /// A storage owner process: its own segments, heartbeats and rebuild replay.
    Owner,
    /// An application: objects and weights of its own tenant.
    Client,
    /// The other node of an HA pair: replication only.
    Peer,
}

impl Role {
    pub const ALL: [Role; 4] = [Role::Admin, Role::Owner, Role::Client, Role::Peer];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Owner => "owner",
            Role::Client => "client",
            Role::Peer => "peer",
        }
    }

    pub fn parse(s: &str) -> Result<Role, AuthError> {
        Role::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| {
                AuthError::InvalidClaims(format!(
                    "unknown role {s:?}: one of admin, owner, client, peer"
                ))
            })
    }
}

/// The claims of one token (JWT registered names where there is one: `exp`, `iat`, `jti`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// Claims layout version ([`TOKEN_FORMAT_VERSION`]).
    pub v: u32,
    pub role: Role,
    /// Required for `client`: the only tenant it may act in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// Required for `owner`: the only owner id whose segments it may touch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Expiry, seconds since the Unix epoch.
    pub exp: u64,
    /// Issued at, seconds since the Unix epoch.
    pub iat: u64,
    /// Token id: what revocation names.
    pub jti: String,
}

impl Claims {
    /// Claims for a new token valid `ttl_secs` from `now_secs`, checked for their role.
    pub fn new(
        role: Role,
        tenant: Option<String>,
        owner: Option<String>,
        now_secs: u64,
        ttl_secs: u64,
        jti: String,
    ) -> Result<Claims, AuthError> {
        let claims = Claims {
            v: TOKEN_FORMAT_VERSION,
            role,
            tenant,
            owner,
            exp: now_secs.saturating_add(ttl_secs),
            iat: now_secs,
            jti,
        };
        claims.check()?;
        Ok(claims)
    }

    /// A `client` names a tenant, an `owner` an owner id; empty names are refused.
    pub fn check(&self) -> Result<(), AuthError> {
        let bad = |m: &str| Err(AuthError::InvalidClaims(m.to_string()));
        if self.v == 0 || self.v > TOKEN_FORMAT_VERSION {
            return bad("unsupported claims version");
        }
        if self.jti.is_empty() {
            return bad("empty token id");
        }
        if self.tenant.as_deref() == Some("") || self.owner.as_deref() == Some("") {
            return bad("empty tenant or owner id");
        }
        match self.role {
            Role::Client if self.tenant.is_none() => bad("a client token needs --tenant"),
            Role::Owner if self.owner.is_none() => bad("an owner token needs --owner"),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scope_is_required_by_role() {
        let c = |role, t: Option<&str>, o: Option<&str>| {
            Claims::new(
                role,
                t.map(Into::into),
                o.map(Into::into),
                0,
                1,
                "id".into(),
            )
        };
        assert!(c(Role::Client, None, None).is_err());
        assert!(c(Role::Client, Some("a"), None).is_ok());
        assert!(c(Role::Client, Some(""), None).is_err());
        assert!(c(Role::Owner, None, None).is_err());
        assert!(c(Role::Owner, None, Some("o1")).is_ok());
        assert!(c(Role::Admin, None, None).is_ok());
        assert!(c(Role::Peer, None, None).is_ok());
        for r in Role::ALL {
            assert_eq!(Role::parse(r.as_str()).unwrap(), r);
        }
        assert!(Role::parse("root").is_err());
    }
}
