//! The one authorization table: which role may call which operation, and in what scope.
//!
//! docs/security.md carries the same table ([`table_markdown`] prints it; a test keeps the two
//! equal). A `client` acts only in its own tenant: a request naming another tenant is refused,
//! one naming none acts in the token's tenant. An `owner` acts only on its own owner id.

#[cfg(test)]
mod tests;

use crate::claims::{Claims, Role};

/// What a request does, by class (every route maps to exactly one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// Status, stats, RPC info, rebuild status: read-only views of the node.
    Status,
    /// Object reads: get, exist, size, list (single and batch).
    ObjectRead,
    /// Object writes: put, revoke, remove, release, remove by prefix (single and batch).
    ObjectWrite,
    /// Weight reads: exist, metadata, size, list, leases.
    WeightRead,
    /// Weight writes: put begin/object/commit and every other weight change.
    WeightWrite,
    /// Registering a storage owner.
    OwnerRegister,
    /// An owner's heartbeat.
    OwnerHeartbeat,
    SegmentMount,
    SegmentUnmount,
    SegmentList,
    /// An owner replaying its table after a restart (docs/rebuild.md).
    RebuildReplay,
    /// An owner reporting its replay done (docs/rebuild.md).
    RebuildComplete,
    /// Cold tier: devices, offload, evict, stat.
    Cold,
    /// Taking a snapshot now.
    Snapshot,
    /// The HA replication stream and its status.
    Replication,
    /// Revoking a token.
    TokenRevoke,
    /// A tenant's quota policy and usage (a client: its own tenant's).
    TenantRead,
    /// Setting a tenant's quota policy.
    TenantQuotaSet,
    /// Every tenant's policy and usage.
    TenantList,
    /// Every object of every tenant and domain, page by page (what a mesh drain moves).
    ObjectScan,
    /// Another cluster of a mesh reporting what it holds of a tenant's quota and asking the
    /// tenant's home for room (docs/tenants.md, "Quota across a mesh").
    MeshQuota,
}

impl Operation {
    pub const ALL: [Operation; 21] = [
        Operation::Status,
        Operation::ObjectRead,
        Operation::ObjectWrite,
        Operation::WeightRead,
        Operation::WeightWrite,
        Operation::OwnerRegister,
        Operation::OwnerHeartbeat,
        Operation::SegmentMount,
        Operation::SegmentUnmount,
        Operation::SegmentList,
        Operation::RebuildReplay,
        Operation::RebuildComplete,
        Operation::Cold,
        Operation::Snapshot,
        Operation::Replication,
        Operation::TokenRevoke,
        Operation::TenantRead,
        Operation::TenantQuotaSet,
        Operation::TenantList,
        Operation::ObjectScan,
        Operation::MeshQuota,
    ];

    /// A bounded metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Status => "status",
            Operation::ObjectRead => "object_read",
            Operation::ObjectWrite => "object_write",
            Operation::WeightRead => "weight_read",
            Operation::WeightWrite => "weight_write",
            Operation::OwnerRegister => "owner_register",
            Operation::OwnerHeartbeat => "owner_heartbeat",
            Operation::SegmentMount => "segment_mount",
            Operation::SegmentUnmount => "segment_unmount",
            Operation::SegmentList => "segment_list",
            Operation::RebuildReplay => "rebuild_replay",
            Operation::RebuildComplete => "rebuild_complete",
            Operation::Cold => "cold",
            Operation::Snapshot => "snapshot",
            Operation::Replication => "replication",
            Operation::TokenRevoke => "token_revoke",
            Operation::TenantRead => "tenant_read",
            Operation::TenantQuotaSet => "tenant_quota_set",
            Operation::TenantList => "tenant_list",
            Operation::ObjectScan => "object_scan",
            Operation::MeshQuota => "mesh_quota",
        }
    }

    /// The roles besides `admin` (who may do everything) that may call this operation.
    pub fn roles(self) -> &'static [Role] {
        use Operation::*;
        match self {
            Status => &[Role::Client, Role::Owner, Role::Peer],
            ObjectRead | ObjectWrite | WeightRead | TenantRead => &[Role::Client],
            OwnerRegister | OwnerHeartbeat | SegmentMount | SegmentUnmount | RebuildReplay
            | RebuildComplete => &[Role::Owner],
            Replication | MeshQuota => &[Role::Peer],
            WeightWrite | SegmentList | Cold | Snapshot | TokenRevoke | TenantQuotaSet
            | TenantList | ObjectScan => &[],
        }
    }

    /// Whether the operation acts in a tenant (a client's scope) or on an owner's segments.
    fn scoping(self) -> Scoping {
        use Operation::*;
        match self {
            ObjectRead | ObjectWrite | WeightRead | WeightWrite | TenantRead => Scoping::Tenant,
            OwnerRegister | OwnerHeartbeat | SegmentMount | SegmentUnmount | RebuildReplay
            | RebuildComplete => Scoping::Owner,
            _ => Scoping::Node,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scoping {
    Tenant,
    Owner,
    Node,
}

/// What a request names: the tenant it acts in, the owner whose segments it touches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Target<'a> {
    pub tenant: Option<&'a str>,
    pub owner: Option<&'a str>,
}

/// Where an allowed request may act.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Anywhere (admin, and node-wide operations of other roles).
    All,
    /// Only this tenant: a request naming no tenant acts in it.
    Tenant(String),
    /// Only this owner id's segments.
    Owner(String),
}

/// Why a request is refused (all PERMISSION_DENIED on the wire).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Denied {
    #[error("role {role} may not call {op}", role = .role.as_str(), op = .op.as_str())]
    Role { role: Role, op: Operation },
    #[error("this credential acts only in its own tenant")]
    OtherTenant,
    #[error("this credential acts only on its own owner id's segments")]
    OtherOwner,
}

impl Denied {
    /// A bounded metric label.
    pub fn reason(&self) -> &'static str {
        match self {
            Denied::Role { .. } => "role",
            Denied::OtherTenant => "tenant",
            Denied::OtherOwner => "owner",
        }
    }
}

/// Whether `principal` may call `op` on `target`, and in which scope.
pub fn authorize(principal: &Claims, op: Operation, target: Target<'_>) -> Result<Scope, Denied> {
    let role = principal.role;
    if role == Role::Admin {
        return Ok(Scope::All);
    }
    if !op.roles().contains(&role) {
        return Err(Denied::Role { role, op });
    }
    match (op.scoping(), role) {
        // A client names its own tenant or none, whatever the operation.
        (Scoping::Tenant | Scoping::Node, Role::Client) => {
            let own = principal.tenant.as_deref().ok_or(Denied::OtherTenant)?;
            match target.tenant {
                Some(t) if t != own => Err(Denied::OtherTenant),
                _ => Ok(Scope::Tenant(own.to_string())),
            }
        }
        (Scoping::Owner, Role::Owner) => {
            let own = principal.owner.as_deref().ok_or(Denied::OtherOwner)?;
            match target.owner {
                Some(o) if o != own => Err(Denied::OtherOwner),
                _ => Ok(Scope::Owner(own.to_string())),
            }
        }
        (Scoping::Node, _) => Ok(Scope::All),
        // The table never lets a role into another role's scoping.
        _ => Err(Denied::Role { role, op }),
    }
}

/// The table as docs/security.md shows it.
pub fn table_markdown() -> String {
    let mut out = String::from("| operation | admin | owner | client | peer |\n");
    out.push_str("| --- | --- | --- | --- | --- |\n");
    for op in Operation::ALL {
        let cell = |r: Role| {
            if r == Role::Admin || op.roles().contains(&r) {
                "yes"
            } else {
                "no"
            }
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            op.as_str(),
            cell(Role::Admin),
            cell(Role::Owner),
            cell(Role::Client),
            cell(Role::Peer)
        ));
    }
    out
}
