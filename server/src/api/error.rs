//! The HTTP face of [`crescent_wire::ApiError`]: statuses come from the one mapping in
//! `ErrorCode::http_status`; bodies are always JSON so curl and every client can read them.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
pub use crescent_wire::{ApiError, ErrorCode};

use crate::error::CommandFailed;

/// An [`ApiError`] as an actix-web error.
#[derive(Debug)]
pub struct HttpError(pub ApiError);

impl std::fmt::Display for HttpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl From<ApiError> for HttpError {
    fn from(e: ApiError) -> Self {
        HttpError(e)
    }
}

impl ResponseError for HttpError {
    fn status_code(&self) -> StatusCode {
        StatusCode::from_u16(self.0.code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    fn error_response(&self) -> HttpResponse {
        HttpResponse::build(self.status_code()).json(&self.0)
    }
}

/// Runtime/domain errors as wire errors (the codes: [`CommandFailed`]).
pub fn from_runtime<E>(err: crescent_actors::runtime::RuntimeError<E>) -> HttpError
where
    E: std::error::Error + crescent_actors::WireCoded,
{
    HttpError(CommandFailed::from(err).into())
}

impl From<CommandFailed> for ApiError {
    fn from(e: CommandFailed) -> Self {
        ApiError::new(e.code, e.message)
    }
}

impl From<CommandFailed> for HttpError {
    fn from(e: CommandFailed) -> Self {
        HttpError(e.into())
    }
}

/// Tenant quota refusals: a bad tenant name or the quota root's.
impl From<crate::quotas::TenantQuotaError> for HttpError {
    fn from(e: crate::quotas::TenantQuotaError) -> Self {
        use crate::quotas::TenantQuotaError;
        match e {
            TenantQuotaError::Name(e) => e.into(),
            TenantQuotaError::Command(e) => e.into(),
        }
    }
}

/// Weight service refusals: the code the service names, the message unchanged.
impl From<crate::weights::WeightServiceError> for HttpError {
    fn from(e: crate::weights::WeightServiceError) -> Self {
        use crate::weights::WeightServiceError;
        match e {
            WeightServiceError::Command(e) => e.into(),
            WeightServiceError::Domain(e) => HttpError(ApiError::new(e.code(), e.to_string())),
            WeightServiceError::Refused(e) => HttpError(e),
        }
    }
}

/// Token revocations that were not journaled.
impl From<crate::auth::RevocationsError> for HttpError {
    fn from(e: crate::auth::RevocationsError) -> Self {
        use crate::auth::RevocationsError;
        match e {
            RevocationsError::Command(e) => e.into(),
        }
    }
}

/// Object directory refusals: the store's own stable code for each.
impl From<crescent_store::StoreError> for HttpError {
    fn from(e: crescent_store::StoreError) -> Self {
        HttpError(ApiError::from(e))
    }
}

/// Segment commands: a directory pre-check or the registry.
impl From<crate::segment_mirror::MirrorError> for HttpError {
    fn from(e: crate::segment_mirror::MirrorError) -> Self {
        use crate::segment_mirror::MirrorError;
        match e {
            MirrorError::Registry(r) => from_runtime(r),
            MirrorError::Store(s) => s.into(),
        }
    }
}

/// Heartbeat refusals: NOT_FOUND tells the owner to register again; STALE_GENERATION that a
/// newer process of it is registered.
impl From<crate::liveness::HeartbeatError> for ApiError {
    fn from(e: crate::liveness::HeartbeatError) -> Self {
        use crate::liveness::HeartbeatError;
        let code = match &e {
            HeartbeatError::UnknownOwner { .. } => ErrorCode::NotFound,
            HeartbeatError::StaleIncarnation { .. } => ErrorCode::StaleGeneration,
        };
        ApiError::new(code, e.to_string())
    }
}

impl From<crate::liveness::HeartbeatError> for HttpError {
    fn from(e: crate::liveness::HeartbeatError) -> Self {
        HttpError(e.into())
    }
}

/// A blocking task that did not finish (panicked or cancelled at shutdown).
pub fn from_blocking(e: actix_web::error::BlockingError) -> HttpError {
    HttpError(ApiError::new(
        ErrorCode::Unavailable,
        format!("the operation did not run: {e}"),
    ))
}

/// Cold tier refusals: the cold crate's own stable code for each (a damaged payload is
/// INTERNAL with the checksum or length mismatch named: its bytes are never returned).
pub fn from_cold(e: crescent_cold::ColdError) -> ApiError {
    ApiError::new(e.code(), e.to_string())
}

impl From<crescent_cold::ColdError> for HttpError {
    fn from(e: crescent_cold::ColdError) -> Self {
        HttpError(from_cold(e))
    }
}
