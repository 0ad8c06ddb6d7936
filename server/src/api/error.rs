//! The HTTP face of [`crescent_wire::ApiError`]: statuses come from the one mapping in
//! `ErrorCode::http_status`; bodies are always JSON so curl and every client can read them.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
pub use crescent_wire::{ApiError, ErrorCode};

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

/// The one conversion from runtime/domain errors to wire errors.
pub fn from_runtime<E>(err: crescent_actors::runtime::RuntimeError<E>) -> HttpError
where
    E: std::error::Error + crescent_actors::WireCoded,
{
    use crescent_actors::runtime::RuntimeError;
    use crescent_journal::JournalError;
    let api = match &err {
        RuntimeError::Domain(e) => ApiError::new(e.wire_code(), e.to_string()),
        RuntimeError::Journal(j) => match j {
            JournalError::Fenced { .. } => ApiError::new(ErrorCode::Fenced, j.to_string()),
            JournalError::RecordTooLarge { .. } => {
                ApiError::new(ErrorCode::InvalidArgument, j.to_string())
            }
            JournalError::Closed => ApiError::new(ErrorCode::Unavailable, j.to_string()),
            _ => ApiError::new(ErrorCode::DurabilityFailed, j.to_string()),
        },
        other => ApiError::new(ErrorCode::Unavailable, other.to_string()),
    };
    HttpError(api)
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
