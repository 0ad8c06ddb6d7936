//! The HTTP API: `/v1/...` (msgpack or JSON bodies), `/healthz`, `/metrics`, `/stats`.

pub mod admin;
pub(crate) mod allowance;
pub mod auth_guard;
pub mod auth_target;
pub mod cold;
pub mod error;
pub mod objects;
pub mod objects_batch;
pub mod ops;
pub mod owners;
pub mod rebuild;
pub mod segments;
pub mod tenants;
pub mod tokens;
pub mod weights;
pub mod wire;

use std::sync::Arc;
use std::time::Instant;

use actix_web::dev::{Service, ServiceFactory, ServiceRequest, ServiceResponse};
use actix_web::{middleware, web, App, Error};
use crescent_wire::store::routes;
use futures::future::{FutureExt, LocalBoxFuture};
use tracing::Instrument;

use crate::node::NodeState;

/// A `/v1/...` route constant relative to the `/v1` scope.
fn rel(route: &'static str) -> &'static str {
    route
        .strip_prefix("/v1")
        .expect("every wire route is under /v1")
}

/// The HTTP application of a node, as every crescentd worker serves it: the node's state and
/// body bounds, the authorization guard (docs/security.md), request metrics, path
/// normalization and every route. The in-process tests (server/tests) serve this one too.
pub fn app(
    state: web::Data<Arc<NodeState>>,
    limits: wire::BodyLimits,
) -> App<
    impl ServiceFactory<
        ServiceRequest,
        Config = (),
        Response = ServiceResponse,
        Error = Error,
        InitError = (),
    >,
> {
    App::new()
        .app_data(state)
        .app_data(web::PayloadConfig::new(limits.max_bytes))
        .app_data(limits)
        .wrap(auth_guard::Guard {
            max_body: limits.max_bytes,
        })
        .wrap_fn(observe)
        .wrap(middleware::NormalizePath::trim())
        .configure(configure)
}

/// Registers every route on an actix-web app.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/healthz", web::get().to(admin::healthz))
        .route("/readyz", web::get().to(admin::readyz))
        .route("/metrics", web::get().to(admin::metrics))
        .route("/v1/ha/replication", web::get().to(admin::ha_replication))
        .route("/v1/status", web::get().to(admin::healthz))
        .route(
            crescent_wire::rebuild::routes::REPLAY,
            web::post().to(rebuild::replay),
        )
        .route(
            crescent_wire::rebuild::routes::COMPLETE,
            web::post().to(rebuild::complete),
        )
        .route(
            crescent_wire::rebuild::routes::STATUS,
            web::get().to(rebuild::status),
        )
        .route("/stats", web::get().to(admin::stats))
        .route(
            crescent_wire::rpc::RPC_INFO_ROUTE,
            web::get().to(admin::rpc_info),
        )
        .service(
            weights::routes(web::scope("/v1"))
                .route("/owners/register", web::post().to(segments::register_owner))
                .route(rel(routes::HEARTBEAT), web::post().to(owners::heartbeat))
                .route(rel(routes::PUT_START), web::post().to(objects::put_start))
                .route(rel(routes::PUT_END), web::post().to(objects::put_end))
                .route(rel(routes::PUT_REVOKE), web::post().to(objects::put_revoke))
                .route(rel(routes::GET), web::post().to(objects::get))
                .route(rel(routes::EXIST), web::post().to(objects::exist))
                .route(rel(routes::SIZE), web::post().to(objects::size))
                .route(rel(routes::REMOVE), web::post().to(objects::remove))
                .route(rel(routes::RELEASE), web::post().to(objects::release))
                .route(
                    rel(routes::REMOVE_PREFIX),
                    web::post().to(objects::remove_prefix),
                )
                .route(rel(routes::LIST), web::post().to(objects::list))
                .route(
                    rel(crescent_wire::scan::SCAN_ROUTE),
                    web::post().to(objects::scan),
                )
                .route(
                    rel(routes::BATCH_PUT_START),
                    web::post().to(objects_batch::put_start),
                )
                .route(
                    rel(routes::BATCH_PUT_END),
                    web::post().to(objects_batch::put_end),
                )
                .route(
                    rel(routes::BATCH_PUT_REVOKE),
                    web::post().to(objects_batch::put_revoke),
                )
                .route(rel(routes::BATCH_GET), web::post().to(objects_batch::get))
                .route(
                    rel(routes::BATCH_EXIST),
                    web::post().to(objects_batch::exist),
                )
                .route(
                    rel(routes::BATCH_REMOVE),
                    web::post().to(objects_batch::remove),
                )
                .route(
                    rel(routes::BATCH_RELEASE),
                    web::post().to(objects_batch::release),
                )
                .route("/segments/mount", web::post().to(segments::mount))
                .route("/segments/unmount", web::post().to(segments::unmount))
                .route("/segments", web::get().to(segments::list))
                .route(
                    rel(crescent_wire::admin::routes::SNAPSHOT),
                    web::post().to(admin::snapshot_now),
                )
                .route(
                    rel(crescent_wire::auth::routes::REVOKE),
                    web::post().to(tokens::revoke),
                )
                .route(
                    rel(crescent_wire::tenants::routes::QUOTA_SET),
                    web::post().to(tenants::set_quota),
                )
                .route(
                    rel(crescent_wire::tenants::routes::SHOW),
                    web::post().to(tenants::show),
                )
                .route(
                    rel(crescent_wire::tenants::routes::LIST),
                    web::post().to(tenants::list),
                )
                .route(
                    rel(crescent_wire::tenants::routes::STATS),
                    web::get().to(tenants::stats),
                )
                .route(
                    rel(crescent_wire::mesh_quota::EXCHANGE_ROUTE),
                    web::post().to(tenants::mesh_exchange),
                )
                .configure(cold::configure),
        );
}

/// Middleware body: counts every request by route pattern (bounded), method and status, and
/// times it, inside an `http` tracing span.
pub fn observe<S>(
    req: ServiceRequest,
    srv: &S,
) -> LocalBoxFuture<'static, Result<ServiceResponse, Error>>
where
    S: Service<ServiceRequest, Response = ServiceResponse, Error = Error>,
    S::Future: 'static,
{
    let state = req.app_data::<web::Data<Arc<NodeState>>>().cloned();
    let route = req
        .match_pattern()
        .unwrap_or_else(|| "unmatched".to_string());
    let method = req.method().as_str().to_string();
    let span = tracing::debug_span!("http", %method, %route);
    let started = Instant::now();
    let fut = srv.call(req);
    async move {
        let res = fut.await;
        if let Some(state) = state {
            let status = match &res {
                Ok(r) => r.status().as_u16(),
                Err(e) => e.as_response_error().status_code().as_u16(),
            };
            let m = &state.metrics;
            m.http_requests
                .with_label_values(&[&route, &method, &status.to_string()])
                .inc();
            m.http_latency
                .with_label_values(&[&route])
                .observe(started.elapsed().as_secs_f64());
        }
        res
    }
    .instrument(span)
    .boxed_local()
}
