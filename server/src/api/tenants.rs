//! `POST /v1/tenants/quota` (admin) and `POST /v1/tenants/show`: a tenant's quota policy and
//! usage (docs/tenants.md, "Admin API").

use crescent_actors::quota_root::{PolicyMode, QuotaLimits};
use crescent_wire::tenants::{
    SetTenantQuotaReply, SetTenantQuotaRequest, ShowTenantRequest, TenantQuota,
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

pub async fn show(
    state: State,
    Wire(req): Wire<ShowTenantRequest>,
) -> Result<Reply<TenantQuota>, HttpError> {
    Ok(Reply(state.quotas.show(&req.tenant).await?))
}
