//! Every route's operation class in the authorization table (crescent_auth::authz).

use crescent_auth::Operation;
use crescent_wire::store::routes as store;
use crescent_wire::weights::routes as weights;

/// Routes any caller may reach without a token.
pub const PUBLIC: [&str; 3] = ["/healthz", "/readyz", "/metrics"];

/// The operation a matched route pattern performs; `None` for a route this table does not
/// know (refused: a new route must be classed here before it can be reached with auth on).
pub fn operation_of(pattern: &str) -> Option<Operation> {
    use Operation::*;
    let op = match pattern {
        "/v1/status" | "/stats" | crescent_wire::rpc::RPC_INFO_ROUTE => Status,
        crescent_wire::rebuild::routes::STATUS => Status,
        store::GET
        | store::EXIST
        | store::SIZE
        | store::LIST
        | store::BATCH_GET
        | store::BATCH_EXIST => ObjectRead,
        crescent_wire::cold::routes::STAT => ObjectRead,
        store::PUT_START
        | store::PUT_END
        | store::PUT_REVOKE
        | store::REMOVE
        | store::RELEASE
        | store::REMOVE_PREFIX
        | store::BATCH_PUT_START
        | store::BATCH_PUT_END
        | store::BATCH_PUT_REVOKE
        | store::BATCH_REMOVE
        | store::BATCH_RELEASE => ObjectWrite,
        weights::LEASE_ACQUIRE
        | weights::LEASE_RENEW
        | weights::LEASE_RELEASE
        | weights::EXIST
        | weights::METADATA
        | weights::SIZE
        | weights::LIST
        | weights::UPSERT_STATUS
        | weights::OPERATION => WeightRead,
        weights::PUT_BEGIN
        | weights::PUT_OBJECT
        | weights::PUT_COMMIT
        | weights::POLICY
        | weights::UPSERT
        | weights::MIGRATE
        | weights::REMOVE => WeightWrite,
        "/v1/owners/register" | crescent_wire::cold_owner::routes::REGISTER => OwnerRegister,
        store::HEARTBEAT | crescent_wire::cold_owner::routes::POLL => OwnerHeartbeat,
        "/v1/segments/mount" => SegmentMount,
        "/v1/segments/unmount" => SegmentUnmount,
        "/v1/segments" => SegmentList,
        crescent_wire::rebuild::routes::REPLAY => RebuildReplay,
        crescent_wire::rebuild::routes::COMPLETE => RebuildComplete,
        crescent_wire::cold::routes::COLD_DEVICES
        | crescent_wire::cold::routes::OFFLOAD
        | crescent_wire::cold::routes::EVICT_HOT => Cold,
        "/v1/admin/snapshot" => Snapshot,
        "/v1/ha/replication" => Replication,
        crescent_wire::auth::routes::REVOKE => TokenRevoke,
        crescent_wire::tenants::routes::SHOW => TenantRead,
        crescent_wire::tenants::routes::QUOTA_SET => TenantQuotaSet,
        crescent_wire::tenants::routes::LIST | crescent_wire::tenants::routes::STATS => TenantList,
        crescent_wire::scan::SCAN_ROUTE => ObjectScan,
        crescent_wire::mesh_quota::EXCHANGE_ROUTE => MeshQuota,
        _ => return None,
    };
    Some(op)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_routes_are_client_routes_and_admin_routes_are_not() {
        assert_eq!(operation_of(store::GET), Some(Operation::ObjectRead));
        assert_eq!(operation_of(store::LIST), Some(Operation::ObjectRead));
        assert_eq!(
            operation_of(store::BATCH_PUT_END),
            Some(Operation::ObjectWrite)
        );
        assert_eq!(
            operation_of("/v1/segments/unmount"),
            Some(Operation::SegmentUnmount)
        );
        assert_eq!(
            operation_of(crescent_wire::rebuild::routes::COMPLETE),
            Some(Operation::RebuildComplete)
        );
        assert_eq!(
            operation_of(crescent_wire::tenants::routes::SHOW),
            Some(Operation::TenantRead)
        );
        assert_eq!(
            operation_of(crescent_wire::tenants::routes::QUOTA_SET),
            Some(Operation::TenantQuotaSet)
        );
        assert_eq!(
            operation_of(crescent_wire::tenants::routes::STATS),
            Some(Operation::TenantList)
        );
        assert_eq!(operation_of("/v1/nope"), None);
        for p in PUBLIC {
            assert_eq!(operation_of(p), None);
        }
    }
}
