//! Request and response bodies: msgpack (the clients' format) or JSON (for tooling and curl).
//!
//! The request's `Content-Type` picks the decoder; the response follows `Accept`, defaulting to
//! the request's own format. Bodies are version 1 of the wire format, named by the `/v1/` path.

use actix_web::body::BoxBody;
use actix_web::dev::Payload;
use actix_web::http::header;
use actix_web::{web, FromRequest, HttpRequest, HttpResponse, Responder};
use futures::future::LocalBoxFuture;
use serde::de::DeserializeOwned;
use serde::Serialize;

use futures::StreamExt;

use super::error::HttpError;
use super::error::{ApiError, ErrorCode};

pub const MSGPACK: &str = "application/msgpack";
pub const JSON: &str = "application/json";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Msgpack,
    Json,
}

impl Format {
    fn of_content_type(req: &HttpRequest) -> Result<Format, ApiError> {
        let Some(ct) = req.headers().get(header::CONTENT_TYPE) else {
            return Ok(Format::Json);
        };
        let ct = ct.to_str().unwrap_or("").to_ascii_lowercase();
        if ct.starts_with(MSGPACK) || ct.starts_with("application/x-msgpack") {
            Ok(Format::Msgpack)
        } else if ct.starts_with(JSON) || ct.is_empty() {
            Ok(Format::Json)
        } else {
            Err(ApiError::invalid(format!(
                "unsupported content type {ct:?}: send {MSGPACK} or {JSON}"
            )))
        }
    }

    /// The body format of a request (its `Content-Type`).
    pub fn of_request(req: &HttpRequest) -> Result<Format, ApiError> {
        Self::of_content_type(req)
    }

    /// The response format for a request.
    pub fn for_response(req: &HttpRequest) -> Format {
        if let Some(accept) = req.headers().get(header::ACCEPT) {
            let accept = accept.to_str().unwrap_or("").to_ascii_lowercase();
            if accept.contains("msgpack") {
                return Format::Msgpack;
            }
            if accept.contains(JSON) {
                return Format::Json;
            }
        }
        Self::of_content_type(req).unwrap_or(Format::Json)
    }
}

/// Decodes a body in `format`; missing fields and bad types are INVALID_ARGUMENT.
pub fn decode<T: DeserializeOwned>(format: Format, bytes: &[u8]) -> Result<T, ApiError> {
    match format {
        Format::Json => serde_json::from_slice(bytes)
            .map_err(|e| ApiError::invalid(format!("invalid JSON body: {e}"))),
        Format::Msgpack => rmp_serde::from_slice(bytes)
            .map_err(|e| ApiError::invalid(format!("invalid msgpack body: {e}"))),
    }
}

pub use crate::http_bounds::BodyLimits;

/// The `Content-Length` header's value, when present and a number.
fn declared_length(req: &HttpRequest) -> Option<u64> {
    req.headers()
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn too_large(len: u64, max: usize) -> ApiError {
    ApiError::new(
        ErrorCode::PayloadTooLarge,
        format!("a {len}-byte request body is over the limit of {max} bytes (http.max_body_bytes)"),
    )
}

/// Reads a whole body: refused at once (413) when `Content-Length` is over the limit, grown
/// only as bytes arrive, and given up (408) when it is not complete within the timeout.
async fn read_body(
    mut payload: Payload,
    declared: Option<u64>,
    limits: BodyLimits,
) -> Result<web::Bytes, ApiError> {
    if let Some(len) = declared.filter(|&l| l > limits.max_bytes as u64) {
        return Err(too_large(len, limits.max_bytes));
    }
    let read = async {
        let mut body = web::BytesMut::new();
        while let Some(chunk) = payload.next().await {
            let chunk =
                chunk.map_err(|e| ApiError::invalid(format!("cannot read request body: {e}")))?;
            if body.len() + chunk.len() > limits.max_bytes {
                return Err(too_large(
                    (body.len() + chunk.len()) as u64,
                    limits.max_bytes,
                ));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body.freeze())
    };
    match actix_rt::time::timeout(limits.timeout, read).await {
        Ok(r) => r,
        Err(_) => Err(ApiError::new(
            ErrorCode::RequestTimeout,
            format!(
                "the request body did not arrive within {} ms (net.http_body_timeout_ms)",
                limits.timeout.as_millis()
            ),
        )),
    }
}

/// Reads `req`'s body as the handlers do (at most `max_bytes`, 413 for a larger declared
/// length, 408 past `net.http_body_timeout_ms`): for the auth guard, which reads a body before
/// the handler to scope it (docs/security.md), so that a slow or oversized body is bounded
/// there exactly as without auth.
pub(crate) async fn read_bounded_body(
    req: &HttpRequest,
    payload: Payload,
    max_bytes: usize,
) -> Result<web::Bytes, ApiError> {
    let limits = BodyLimits {
        max_bytes,
        ..req.app_data::<BodyLimits>().copied().unwrap_or_default()
    };
    read_body(payload, declared_length(req), limits).await
}

/// A request body extractor for either format.
#[derive(Debug)]
pub struct Wire<T>(pub T);

impl<T: DeserializeOwned + 'static> FromRequest for Wire<T> {
    type Error = HttpError;
    type Future = LocalBoxFuture<'static, Result<Self, HttpError>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let format = Format::of_content_type(req);
        let limits = req.app_data::<BodyLimits>().copied().unwrap_or_default();
        let declared = declared_length(req);
        let payload = payload.take();
        Box::pin(async move {
            let format = format?;
            let bytes = read_body(payload, declared, limits).await?;
            Ok(decode(format, &bytes).map(Wire)?)
        })
    }
}

/// A response body, encoded as the client asked.
#[derive(Debug)]
pub struct Reply<T>(pub T);

impl<T: Serialize> Responder for Reply<T> {
    type Body = BoxBody;

    fn respond_to(self, req: &HttpRequest) -> HttpResponse {
        match Format::for_response(req) {
            Format::Json => HttpResponse::Ok().json(&self.0),
            Format::Msgpack => match rmp_serde::to_vec_named(&self.0) {
                Ok(bytes) => HttpResponse::Ok().content_type(MSGPACK).body(bytes),
                Err(e) => actix_web::ResponseError::error_response(&HttpError(ApiError::internal(
                    format!("cannot encode response: {e}"),
                ))),
            },
        }
    }
}
