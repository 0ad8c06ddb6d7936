//! The stable error codes of the wire API (docs/api.md, "Errors") and their one mapping to HTTP
//! statuses ([`ErrorCode::http_status`]).
//!
//! They live here, below every domain crate, so that each crate's error enum names its code as
//! a value of this type rather than as a string: a misspelt code does not compile.

use serde::{Deserialize, Serialize};

/// Stable error codes of the wire API (docs/api.md). Never renamed; new ones are only added.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ErrorCode {
    InvalidArgument,
    NotFound,
    NotReady,
    Conflict,
    StaleGeneration,
    Busy,
    LeaseExpired,
    DurabilityFailed,
    PolicyUnsatisfiable,
    QuotaExceeded,
    NotLeader,
    Unavailable,
    Fenced,
    Internal,
    /// A request body (or RPC frame) over the server's limit; the request did not run.
    PayloadTooLarge,
    /// The client did not send the whole request (body) within the server's timeout.
    RequestTimeout,
    /// No credential, or one that is malformed, expired, revoked or signed by an unknown key.
    Unauthenticated,
    /// A valid credential whose role or scope (tenant, owner) does not allow the request.
    PermissionDenied,
    /// The store has no room for the object even after eviction (or a bounded table is
    /// full); a tenant's own quota is `QuotaExceeded`.
    OutOfSpace,
    /// crescentd belongs to a mesh (docs/scale-out.md) whose current membership generation
    /// routes the object to another cluster: the answer names that generation and the
    /// authority cluster. Nothing ran.
    WrongCluster,
}

impl ErrorCode {
    pub const ALL: [ErrorCode; 20] = [
        ErrorCode::InvalidArgument,
        ErrorCode::NotFound,
        ErrorCode::NotReady,
        ErrorCode::Conflict,
        ErrorCode::StaleGeneration,
        ErrorCode::Busy,
        ErrorCode::LeaseExpired,
        ErrorCode::DurabilityFailed,
        ErrorCode::PolicyUnsatisfiable,
        ErrorCode::QuotaExceeded,
        ErrorCode::NotLeader,
        ErrorCode::Unavailable,
        ErrorCode::Fenced,
        ErrorCode::Internal,
        ErrorCode::PayloadTooLarge,
        ErrorCode::RequestTimeout,
        ErrorCode::Unauthenticated,
        ErrorCode::PermissionDenied,
        ErrorCode::OutOfSpace,
        ErrorCode::WrongCluster,
    ];

    /// The code as it appears on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidArgument => "INVALID_ARGUMENT",
            ErrorCode::NotFound => "NOT_FOUND",
            ErrorCode::NotReady => "NOT_READY",
            ErrorCode::Conflict => "CONFLICT",
            ErrorCode::StaleGeneration => "STALE_GENERATION",
            ErrorCode::Busy => "BUSY",
            ErrorCode::LeaseExpired => "LEASE_EXPIRED",
            ErrorCode::DurabilityFailed => "DURABILITY_FAILED",
            ErrorCode::PolicyUnsatisfiable => "POLICY_UNSATISFIABLE",
            ErrorCode::QuotaExceeded => "QUOTA_EXCEEDED",
            ErrorCode::NotLeader => "NOT_LEADER",
            ErrorCode::Unavailable => "UNAVAILABLE",
            ErrorCode::Fenced => "FENCED",
            ErrorCode::Internal => "INTERNAL",
            ErrorCode::PayloadTooLarge => "PAYLOAD_TOO_LARGE",
            ErrorCode::RequestTimeout => "REQUEST_TIMEOUT",
            ErrorCode::Unauthenticated => "UNAUTHENTICATED",
            ErrorCode::PermissionDenied => "PERMISSION_DENIED",
            ErrorCode::OutOfSpace => "OUT_OF_SPACE",
            ErrorCode::WrongCluster => "WRONG_CLUSTER",
        }
    }

    /// Parses a code as it appears on the wire.
    pub fn parse(s: &str) -> Option<ErrorCode> {
        ErrorCode::ALL.into_iter().find(|c| c.as_str() == s)
    }

    /// The one mapping from codes to HTTP statuses.
    pub fn http_status(self) -> u16 {
        match self {
            ErrorCode::InvalidArgument => 400,
            ErrorCode::NotFound => 404,
            ErrorCode::NotReady => 409,
            ErrorCode::Conflict => 409,
            ErrorCode::StaleGeneration => 412,
            ErrorCode::Busy => 429,
            ErrorCode::LeaseExpired => 410,
            ErrorCode::DurabilityFailed => 507,
            ErrorCode::PolicyUnsatisfiable => 422,
            ErrorCode::QuotaExceeded => 507,
            ErrorCode::NotLeader => 421,
            ErrorCode::Unavailable => 503,
            ErrorCode::Fenced => 421,
            ErrorCode::Internal => 500,
            ErrorCode::PayloadTooLarge => 413,
            ErrorCode::RequestTimeout => 408,
            ErrorCode::Unauthenticated => 401,
            ErrorCode::PermissionDenied => 403,
            ErrorCode::OutOfSpace => 507,
            // Misdirected Request: this server is not the one to answer for the key.
            ErrorCode::WrongCluster => 421,
        }
    }

    /// Whether a client may retry the same request unchanged.
    pub fn retryable(self) -> bool {
        matches!(
            self,
            ErrorCode::Busy | ErrorCode::NotLeader | ErrorCode::Unavailable | ErrorCode::NotReady
        )
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_round_trips_and_maps_to_an_error_status() {
        for code in ErrorCode::ALL {
            assert_eq!(ErrorCode::parse(code.as_str()), Some(code));
            let json = serde_json::to_string(&code).unwrap();
            assert_eq!(json, format!("\"{}\"", code.as_str()));
            let s = code.http_status();
            assert!((400..600).contains(&s), "{code}: {s}");
        }
    }

    #[test]
    fn mapping_is_stable() {
        let expect = [
            ("INVALID_ARGUMENT", 400),
            ("NOT_FOUND", 404),
            ("NOT_READY", 409),
            ("CONFLICT", 409),
            ("STALE_GENERATION", 412),
            ("BUSY", 429),
            ("LEASE_EXPIRED", 410),
            ("DURABILITY_FAILED", 507),
            ("POLICY_UNSATISFIABLE", 422),
            ("QUOTA_EXCEEDED", 507),
            ("NOT_LEADER", 421),
            ("UNAVAILABLE", 503),
            ("FENCED", 421),
            ("INTERNAL", 500),
            ("PAYLOAD_TOO_LARGE", 413),
            ("REQUEST_TIMEOUT", 408),
            ("UNAUTHENTICATED", 401),
            ("PERMISSION_DENIED", 403),
            ("OUT_OF_SPACE", 507),
            ("WRONG_CLUSTER", 421),
        ];
        assert_eq!(expect.len(), ErrorCode::ALL.len());
        for (name, status) in expect {
            let code = ErrorCode::parse(name).unwrap();
            assert_eq!(code.http_status(), status, "{name}");
        }
        assert_eq!(ErrorCode::parse("NOPE"), None);
    }

    #[test]
    fn retryable_codes() {
        assert!(ErrorCode::Unavailable.retryable());
        assert!(ErrorCode::NotLeader.retryable());
        assert!(!ErrorCode::InvalidArgument.retryable());
        assert!(!ErrorCode::Fenced.retryable());
        assert!(!ErrorCode::DurabilityFailed.retryable());
    }
}
