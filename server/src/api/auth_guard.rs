//! The HTTP middleware: authenticate, find the route's operation class, check the table, and
//! scope the body (a client's tenant, an owner's id) before the handler runs. Every refusal
//! happens before anything runs and is counted and rate-limited in the log
//! ([`crate::auth::AuthState::refused`]).

use std::rc::Rc;
use std::sync::Arc;

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{forward_ready, Payload, Service, ServiceRequest, ServiceResponse, Transform};
use actix_web::{web, Error, HttpMessage, ResponseError};
use crescent_auth::{authorize, Claims, Denied, Operation, Role, Scope, Target};
use crescent_wire::{ApiError, ErrorCode};
use futures::future::{ready, LocalBoxFuture, Ready};

use super::auth_target::Body;
use crate::api::error::HttpError;
use crate::api::wire::Format;
use crate::auth::routes::{operation_of, PUBLIC};
use crate::node::NodeState;

/// The middleware factory; `max_body` bounds the bodies it reads (as the handlers do).
#[derive(Debug, Clone, Copy)]
pub struct Guard {
    pub max_body: usize,
}

impl<S, B> Transform<S, ServiceRequest> for Guard
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = Error> + 'static,
    B: MessageBody + 'static,
{
    type Response = ServiceResponse<BoxBody>;
    type Error = Error;
    type Transform = GuardService<S>;
    type InitError = ();
    type Future = Ready<Result<GuardService<S>, ()>>;

    fn new_transform(&self, service: S) -> Self::Future {
        ready(Ok(GuardService {
            service: Rc::new(service),
            max_body: self.max_body,
        }))
    }
}

pub struct GuardService<S> {
    service: Rc<S>,
    max_body: usize,
}

impl<S, B> Service<ServiceRequest> for GuardService<S>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = Error> + 'static,
    B: MessageBody + 'static,
{
    type Response = ServiceResponse<BoxBody>;
    type Error = Error;
    type Future = LocalBoxFuture<'static, Result<ServiceResponse<BoxBody>, Error>>;

    forward_ready!(service);

    fn call(&self, mut req: ServiceRequest) -> Self::Future {
        let service = self.service.clone();
        let max_body = self.max_body;
        Box::pin(async move {
            match admit(&mut req, max_body).await {
                Ok(()) => Ok(service.call(req).await?.map_into_boxed_body()),
                Err(e) => {
                    let resp = HttpError(e).error_response();
                    Ok(req.into_response(resp).map_into_boxed_body())
                }
            }
        })
    }
}

/// Why the guard stopped a request: a refusal, or a body it could not read within the HTTP
/// bounds (answered as the handler would answer it, and not counted as a refusal).
enum Stop {
    Refused(Refusal),
    Body(ApiError),
}

impl From<Refusal> for Stop {
    fn from(r: Refusal) -> Self {
        Stop::Refused(r)
    }
}

/// A refusal: counted, logged (rate-limited) and turned into the wire error.
struct Refusal {
    class: &'static str,
    reason: &'static str,
    error: ApiError,
}

impl Refusal {
    fn denied(op: Operation, d: Denied) -> Self {
        Refusal {
            class: op.as_str(),
            reason: d.reason(),
            error: ApiError::new(ErrorCode::PermissionDenied, d.to_string())
                .refused_before_running(None),
        }
    }
}

async fn admit(req: &mut ServiceRequest, max_body: usize) -> Result<(), ApiError> {
    let Some(state) = req.app_data::<web::Data<Arc<NodeState>>>().cloned() else {
        return Ok(());
    };
    let auth = &state.auth;
    if !auth.enabled() || PUBLIC.contains(&req.path()) {
        return Ok(());
    }
    let peer = req.peer_addr().map(|a| a.ip());
    match check(&state, req, max_body).await {
        Ok(claims) => {
            req.extensions_mut().insert(claims);
            Ok(())
        }
        Err(Stop::Refused(r)) => {
            auth.refused(r.class, r.reason, peer, &r.error.message);
            Err(r.error)
        }
        Err(Stop::Body(e)) => Err(e),
    }
}

async fn check(
    state: &NodeState,
    req: &mut ServiceRequest,
    max_body: usize,
) -> Result<Claims, Stop> {
    let pattern = req.match_pattern();
    let op = pattern.as_deref().and_then(operation_of);
    let class = op.map_or("unknown", Operation::as_str);
    let header = req
        .headers()
        .get(actix_web::http::header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok());
    let now_secs = u64::try_from(state.now_ms() / 1000).unwrap_or(0);
    let claims = state
        .auth
        .authenticate(header, now_secs)
        .map_err(|e| Refusal {
            class,
            reason: e.reason(),
            error: ApiError::new(e.code(), e.to_string()).refused_before_running(None),
        })?;
    let Some(op) = op else {
        // Unmatched paths get the router's 404; a matched route missing from the table is
        // reachable by admins only.
        if pattern.is_none() || claims.role == Role::Admin {
            return Ok(claims);
        }
        return Err(Stop::Refused(Refusal {
            class,
            reason: "role",
            error: ApiError::new(
                ErrorCode::PermissionDenied,
                "this route is not in the authorization table: admin only",
            ),
        }));
    };
    let scope = authorize(&claims, op, Target::default()).map_err(|d| Refusal::denied(op, d))?;
    match scope {
        Scope::Tenant(tenant) if req.method() == actix_web::http::Method::POST => {
            scope_tenant(req, &claims, op, &tenant, max_body).await?
        }
        Scope::Owner(_) => check_owner(state, req, &claims, op, max_body).await?,
        _ => {}
    }
    Ok(claims)
}

/// Reads the whole body within the HTTP bounds the handlers apply (size, declared length,
/// `net.http_body_timeout_ms`), leaving the request without one until it is put back.
async fn read_body(req: &mut ServiceRequest, max_body: usize) -> Result<web::Bytes, Stop> {
    let payload = req.take_payload();
    crate::api::wire::read_bounded_body(req.request(), payload, max_body)
        .await
        .map_err(Stop::Body)
}

fn put_back(req: &mut ServiceRequest, bytes: web::Bytes) {
    req.set_payload(Payload::from(bytes));
}

/// A client's body: every tenant it names must be the token's; selectors naming none act in
/// the token's tenant.
async fn scope_tenant(
    req: &mut ServiceRequest,
    claims: &Claims,
    op: Operation,
    tenant: &str,
    max_body: usize,
) -> Result<(), Stop> {
    let bytes = read_body(req, max_body).await?;
    let format = Format::of_request(req.request());
    let Some(mut body) = format.ok().and_then(|f| Body::decode(f, &bytes)) else {
        put_back(req, bytes); // the handler reports the bad body
        return Ok(());
    };
    for named in body.named_tenants() {
        let target = Target {
            tenant: Some(&named),
            owner: None,
        };
        authorize(claims, op, target).map_err(|d| Refusal::denied(op, d))?;
    }
    if body.fill_tenant(tenant) {
        put_back(req, web::Bytes::from(body.encode()));
    } else {
        put_back(req, bytes);
    }
    Ok(())
}

/// An owner's body: the owner id it names (or, for an unmount, the owner of the segment it
/// names) must be the token's.
async fn check_owner(
    state: &NodeState,
    req: &mut ServiceRequest,
    claims: &Claims,
    op: Operation,
    max_body: usize,
) -> Result<(), Stop> {
    let bytes = read_body(req, max_body).await?;
    let body = Format::of_request(req.request())
        .ok()
        .and_then(|f| Body::decode(f, &bytes));
    put_back(req, bytes);
    let Some(body) = body else {
        return Ok(());
    };
    let named = match op {
        Operation::SegmentUnmount => match body.string_field("segment_id") {
            Some(segment) => segment_owner(state, segment).await,
            None => None,
        },
        _ => body.owner_id(),
    };
    let target = Target {
        tenant: None,
        owner: named.as_deref(),
    };
    authorize(claims, op, target).map_err(|d| Refusal::denied(op, d))?;
    Ok(())
}

/// The owner of a mounted segment, if it is mounted.
async fn segment_owner(state: &NodeState, segment: String) -> Option<String> {
    use crescent_actors::segment_registry::{SegmentRegistry, INSTANCE_ID};
    state
        .segments
        .read(INSTANCE_ID, move |r: &SegmentRegistry| {
            r.segments()
                .find(|(id, _)| **id == segment)
                .map(|(_, s)| s.owner_id.clone())
        })
        .await
        .ok()
        .flatten()
}
