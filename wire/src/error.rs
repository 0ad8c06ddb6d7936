//! The wire error: one type, stable codes, mapped to HTTP statuses in exactly one place
//! ([`ErrorCode::http_status`]).

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

    /// Parses a wire code (what domain errors report through their `code()`).
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

/// The error body every failing request gets (wire format version 1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
    pub retryable: bool,
    /// For NOT_LEADER: the leader's address, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader: Option<String>,
    /// The server refused the request before running any part of it (for example the rebuild
    /// gate), so sending it again is safe even for a non-idempotent operation. Absent (false)
    /// from older servers and for every error that may follow an effect.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub not_run: bool,
    /// The server state behind the refusal, when it has one (`REBUILDING`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// For WRONG_CLUSTER: the authority cluster and the membership generation that names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redirect: Option<Redirect>,
}

/// Where a mesh routes an object (docs/scale-out.md, "Generations and redirects").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Redirect {
    /// The membership generation the answering cluster routed under.
    pub generation: u64,
    /// The authority cluster of the object under that generation.
    pub cluster: String,
}

impl Redirect {
    /// The message of a WRONG_CLUSTER answer. Batch items carry only a code and a message,
    /// so [`Redirect::parse`] reads the redirect back from it; the two are the one format.
    pub fn message(&self) -> String {
        format!(
            "mesh generation {} routes this object to cluster {}",
            self.generation, self.cluster
        )
    }

    /// The redirect of a WRONG_CLUSTER message written by [`Redirect::message`].
    pub fn parse(message: &str) -> Option<Redirect> {
        let rest = message.strip_prefix("mesh generation ")?;
        let (generation, cluster) = rest.split_once(" routes this object to cluster ")?;
        Some(Redirect {
            generation: generation.parse().ok()?,
            cluster: cluster.to_string(),
        })
    }
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            retryable: code.retryable(),
            leader: None,
            not_run: false,
            state: None,
            redirect: None,
        }
    }

    /// WRONG_CLUSTER naming `redirect` (refused before running).
    pub fn wrong_cluster(redirect: Redirect) -> Self {
        let mut e = Self::new(ErrorCode::WrongCluster, redirect.message());
        e.not_run = true;
        e.redirect = Some(redirect);
        e
    }

    /// Marks this error as a refusal made before anything ran, in server state `state`.
    pub fn refused_before_running(mut self, state: Option<&str>) -> Self {
        self.not_run = true;
        self.state = state.map(str::to_string);
        self
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidArgument, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Internal, message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusal_fields_are_optional_on_the_wire() {
        let plain = ApiError::new(ErrorCode::Unavailable, "closed");
        let json = serde_json::to_string(&plain).unwrap();
        assert!(
            !json.contains("not_run") && !json.contains("state"),
            "{json}"
        );
        let old: ApiError =
            serde_json::from_str(r#"{"code":"UNAVAILABLE","message":"x","retryable":true}"#)
                .unwrap();
        assert!(!old.not_run && old.state.is_none());
        let gated = plain.refused_before_running(Some("REBUILDING"));
        let back: ApiError = serde_json::from_str(&serde_json::to_string(&gated).unwrap()).unwrap();
        assert_eq!(back, gated);
        assert!(back.not_run);
        assert_eq!(back.state.as_deref(), Some("REBUILDING"));
        let packed = rmp_serde::to_vec_named(&gated).unwrap();
        assert_eq!(rmp_serde::from_slice::<ApiError>(&packed).unwrap(), gated);
    }

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
    fn a_redirect_round_trips_through_its_message_and_the_body() {
        let r = Redirect {
            generation: 7,
            cluster: "east-2".into(),
        };
        assert_eq!(Redirect::parse(&r.message()), Some(r.clone()));
        assert_eq!(
            Redirect::parse("mesh generation x routes this object to cluster a"),
            None
        );
        let e = ApiError::wrong_cluster(r.clone());
        assert_eq!(e.code.http_status(), 421);
        assert!(e.not_run && !e.retryable);
        let packed = rmp_serde::to_vec_named(&e).unwrap();
        assert_eq!(rmp_serde::from_slice::<ApiError>(&packed).unwrap(), e);
        let json = serde_json::to_string(&ApiError::invalid("x")).unwrap();
        assert!(!json.contains("redirect"), "{json}");
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
