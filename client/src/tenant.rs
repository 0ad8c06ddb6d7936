//! Tenant quota calls (docs/tenants.md, "Admin API").

use crescent_wire::tenants::{
    routes, ListTenantsReply, ListTenantsRequest, SetTenantQuotaReply, SetTenantQuotaRequest,
    ShowTenantRequest, TenantQuota,
};

use crate::client::CrescentClient;
use crate::error::ClientError;
use crate::failover::Retry;

impl CrescentClient {
    /// Sets `tenant`'s hard limits (admin; `None`: unlimited). Setting the same limits again
    /// changes nothing, so it is retried across a failover.
    pub async fn set_tenant_quota(
        &self,
        tenant: &str,
        max_bytes: Option<u64>,
        max_objects: Option<u64>,
    ) -> Result<SetTenantQuotaReply, ClientError> {
        let req = SetTenantQuotaRequest {
            tenant: tenant.to_string(),
            max_bytes,
            max_objects,
        };
        self.post_route(
            "tenant_quota_set",
            Retry::Idempotent,
            routes::QUOTA_SET,
            &req,
        )
        .await
    }

    /// `tenant`'s quota policy and usage (an admin, or a client of that tenant).
    pub async fn tenant_quota(&self, tenant: &str) -> Result<TenantQuota, ClientError> {
        let req = ShowTenantRequest {
            tenant: tenant.to_string(),
        };
        self.post_route("tenant_show", Retry::Idempotent, routes::SHOW, &req)
            .await
    }

    /// Every tenant with a policy or with objects, and its usage (admin).
    pub async fn tenant_list(&self) -> Result<Vec<TenantQuota>, ClientError> {
        let req = ListTenantsRequest {};
        let reply: ListTenantsReply = self
            .post_route("tenant_list", Retry::Idempotent, routes::LIST, &req)
            .await?;
        Ok(reply.tenants)
    }
}
