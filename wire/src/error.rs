//! The wire error: one type carrying a stable code ([`ErrorCode`], defined in
//! `crescent-error-class` so every domain crate can name it), mapped to HTTP statuses in exactly
//! one place ([`ErrorCode::http_status`]).

pub use crescent_error_class::ErrorCode;
use serde::{Deserialize, Serialize};

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
}
