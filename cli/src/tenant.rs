//! `crescent tenant show`, `crescent tenant ls` and `crescent tenant quota set`
//! (docs/tenants.md, "Admin API").

use clap::Subcommand;
use crescent_wire::tenants::TenantQuota;
use serde_json::json;

use crescent_client::ClientError;
use crescent_client::CrescentClient;

#[derive(Debug, Subcommand)]
pub enum TenantCommand {
    /// The --tenant's quota policy and usage (an admin, or a client of that tenant).
    Show,
    /// Every tenant with a policy or with objects, and its usage (admin; no --tenant).
    Ls,
    /// Quota policy (admin).
    Quota {
        #[command(subcommand)]
        command: QuotaCommand,
    },
}

#[derive(Debug, Subcommand)]
pub enum QuotaCommand {
    /// Set the --tenant's hard limits (journaled; replaces the stored policy and bumps its
    /// version). Usage above a lowered limit stays; only growth is refused.
    Set {
        /// Bytes, with an optional K, M, G or T (powers of 1024; "1.5G" too).
        #[arg(long, value_parser = crate::parse_size)]
        max_bytes: u64,
        /// Default: unlimited.
        #[arg(long)]
        max_objects: Option<u64>,
    },
}

fn print_json(v: &impl serde::Serialize) -> Result<(), ClientError> {
    outln!("{}", serde_json::to_string(v).expect("json output"))
}

fn limit(v: Option<u64>) -> String {
    v.map_or_else(|| "unlimited".to_string(), |n| n.to_string())
}

pub(crate) fn print_quota(q: &TenantQuota) -> Result<(), ClientError> {
    let policy = q
        .policy_version
        .map_or_else(|| "no policy".to_string(), |v| format!("policy v{v}"));
    outln!(
        "tenant {}: max_bytes {}, max_objects {} ({policy}); used {} bytes in {} objects, \
         pending {} bytes ({} operations), {} in doubt",
        q.tenant,
        limit(q.max_bytes),
        limit(q.max_objects),
        q.used_bytes,
        q.used_objects,
        q.pending_bytes,
        q.pending_operations,
        q.in_doubt_operations
    )?;
    if let Some(r) = &q.reconciliation {
        outln!(
            "  last reconciliation: recorded {} bytes in {} objects, rebuilt {} bytes in {} \
             objects",
            r.recorded_bytes,
            r.recorded_objects,
            r.rebuilt_bytes,
            r.rebuilt_objects
        )?;
    }
    if let Some(m) = &q.mesh {
        outln!(
            "  in the mesh: this cluster may hold {} bytes, {} objects; other clusters hold \
             {} bytes, {} objects of it here",
            limit(m.cap_bytes),
            limit(m.cap_objects),
            m.granted_bytes,
            m.granted_objects
        )?;
    }
    Ok(())
}

pub async fn run(
    client: &CrescentClient,
    tenant: Option<&str>,
    command: TenantCommand,
    json: bool,
) -> Result<u8, ClientError> {
    let tenant = || {
        tenant.ok_or_else(|| {
            ClientError::InvalidArgument("this tenant command needs --tenant NAME".to_string())
        })
    };
    match command {
        TenantCommand::Ls => {
            let tenants = client.tenant_list().await?;
            match json {
                true => print_json(&json!({ "tenants": tenants }))?,
                false => {
                    for q in &tenants {
                        print_quota(q)?;
                    }
                }
            }
        }
        TenantCommand::Show => {
            let quota = client.tenant_quota(tenant()?).await?;
            match json {
                true => print_json(&quota)?,
                false => print_quota(&quota)?,
            }
        }
        TenantCommand::Quota {
            command:
                QuotaCommand::Set {
                    max_bytes,
                    max_objects,
                },
        } => {
            let reply = client
                .set_tenant_quota(tenant()?, Some(max_bytes), max_objects)
                .await?;
            match json {
                true => print_json(&json!({"changed": reply.changed, "quota": reply.quota}))?,
                false => print_quota(&reply.quota)?,
            }
        }
    }
    Ok(0)
}
