//! The crate's one error type, each variant carrying its wire code.

use crescent_wire::error::ErrorCode;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// The secret file is missing, too short or readable by group/others.
    #[error("secret file {path}: {reason}")]
    SecretFile { path: String, reason: String },
    /// Claims that cannot make a valid token (a `client` without tenant, an unknown role).
    #[error("invalid claims: {0}")]
    InvalidClaims(String),
    /// No token where one is required.
    #[error("no credential: send Authorization: Bearer TOKEN")]
    Missing,
    /// Not a token, bad signature, unknown key, or a format version this build cannot read.
    #[error("invalid token: {0}")]
    Invalid(String),
    #[error("token expired")]
    Expired,
    #[error("token revoked")]
    Revoked,
}

impl AuthError {
    /// The wire code of this error (mapped to HTTP in crescent-wire's one place).
    pub fn code(&self) -> ErrorCode {
        match self {
            AuthError::SecretFile { .. } | AuthError::InvalidClaims(_) => {
                ErrorCode::InvalidArgument
            }
            AuthError::Missing
            | AuthError::Invalid(_)
            | AuthError::Expired
            | AuthError::Revoked => ErrorCode::Unauthenticated,
        }
    }

    /// A bounded label for the refusal metric (never the token or its id).
    pub fn reason(&self) -> &'static str {
        match self {
            AuthError::SecretFile { .. } => "secret_file",
            AuthError::InvalidClaims(_) => "invalid_claims",
            AuthError::Missing => "missing",
            AuthError::Invalid(_) => "invalid",
            AuthError::Expired => "expired",
            AuthError::Revoked => "revoked",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_failures_are_unauthenticated() {
        for e in [
            AuthError::Missing,
            AuthError::Invalid("x".into()),
            AuthError::Expired,
            AuthError::Revoked,
        ] {
            assert_eq!(e.code(), ErrorCode::Unauthenticated, "{e}");
            assert_eq!(e.code().http_status(), 401);
        }
        assert_eq!(
            AuthError::InvalidClaims("x".into()).code(),
            ErrorCode::InvalidArgument
        );
    }

    #[test]
    fn every_refusal_has_a_code_other_than_internal() {
        use crate::revocation::RevocationError;
        use crescent_error_class::coverage::{assert_wire_coded, assert_wire_map};
        use crescent_error_class::every_variant;
        let all = every_variant!(AuthError {
            SecretFile => AuthError::SecretFile { path: "p".into(), reason: "r".into() },
            InvalidClaims => AuthError::InvalidClaims("x".into()),
            Missing => AuthError::Missing,
            Invalid => AuthError::Invalid("x".into()),
            Expired => AuthError::Expired,
            Revoked => AuthError::Revoked,
        });
        assert_wire_map(&all, AuthError::code, &[]);
        let revocations = every_variant!(RevocationError {
            BadTokenId => RevocationError::BadTokenId,
        });
        assert_wire_coded(&revocations, &[]);
    }
}
