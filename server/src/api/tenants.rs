//! `POST /v1/tenants/quota` (admin) and `POST /v1/tenants/show`: a tenant's quota policy and
//! usage; `POST /v1/tenants/list` and `GET /v1/stats?tenant=T` (admin): every tenant's, and one
//! tenant's as plain JSON (docs/tenants.md, "Admin API"). Usage comes from the directory's
//! exact per-tenant counters, never a scan.

use actix_web::web;
use crescent_actors::quota_root::{PolicyMode, QuotaLimits};
use crescent_wire::tenants::{
    ListTenantsReply, ListTenantsRequest, SetTenantQuotaReply, SetTenantQuotaRequest,
    ShowTenantRequest, TenantQuota, TenantStatsQuery,
};

use super::error::HttpError;
use super::objects::State;
use super::wire::{Reply, Wire};

pub async fn set_quota(
    state: State,
    Wire(req): Wire<SetTenantQuotaRequest>,
) -> Result<Reply<SetTenantQuotaReply>, HttpError> {
    let limits = QuotaLimits {
        max_bytes: req.max_bytes,
        max_objects: req.max_objects,
    };
    let changed = state
        .quotas
        .set_policy(&req.tenant, limits, PolicyMode::Change)
        .await?;
    let quota = state.quotas.show(&req.tenant).await?;
    Ok(Reply(SetTenantQuotaReply { changed, quota }))
}

/// `POST /v1/mesh/quota/exchange` (`peer` or admin): another cluster of the mesh reports what
/// it holds of tenants homed here and asks for room (docs/tenants.md, "Quota across a mesh").
/// Refused while the rebuild gate is closed: usage is not known until it opens.
pub async fn mesh_exchange(
    state: State,
    Wire(req): Wire<crescent_wire::mesh_quota::ExchangeRequest>,
) -> Result<Reply<crescent_wire::mesh_quota::ExchangeReply>, HttpError> {
    let Some(quota) = state.mesh_quota.get() else {
        return Err(crescent_wire::ApiError::new(
            crescent_wire::ErrorCode::InvalidArgument,
            "this cluster is not in a mesh",
        )
        .into());
    };
    state.rebuild.admit_object()?;
    Ok(Reply(quota.exchange(req).await?))
}

pub async fn show(
    state: State,
    Wire(req): Wire<ShowTenantRequest>,
) -> Result<Reply<TenantQuota>, HttpError> {
    Ok(Reply(state.quotas.show(&req.tenant).await?))
}

pub async fn list(
    state: State,
    Wire(_): Wire<ListTenantsRequest>,
) -> Result<Reply<ListTenantsReply>, HttpError> {
    let tenants = state.quotas.list().await?;
    Ok(Reply(ListTenantsReply { tenants }))
}

pub async fn stats(
    state: State,
    query: web::Query<TenantStatsQuery>,
) -> Result<web::Json<TenantQuota>, HttpError> {
    Ok(web::Json(state.quotas.show(&query.tenant).await?))
}
