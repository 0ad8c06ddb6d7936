//! `crescent --mesh M tenant ...`: a tenant's quota across the clusters of a mesh
//! (docs/tenants.md, "Quota across a mesh"). `show` asks every serving and draining cluster
//! and sums their usage; `quota set` sets the policy at each of them, the tenant's home first,
//! so the limits hold from the next put everywhere.

use crescent_client::{ClientError, MeshClient};
use crescent_mesh::{Membership, RouteKey, RouteTable};
use crescent_wire::tenants::TenantQuota;
use serde_json::json;

use crate::run::print_json;
use crate::tenant::{print_quota, QuotaCommand, TenantCommand};

/// The clusters that may hold a tenant's objects, its home first.
fn clusters_home_first(m: &Membership, tenant: &str) -> Result<Vec<String>, ClientError> {
    let home = RouteTable::new(m)
        .route(RouteKey::quota_home(tenant))
        .map_err(|e| {
            ClientError::Api(crescent_wire::ApiError::new(
                crescent_wire::ErrorCode::Unavailable,
                e.to_string(),
            ))
        })?
        .to_string();
    let mut names: Vec<String> = m
        .clusters
        .iter()
        .filter(|c| c.state.holds_objects())
        .map(|c| c.name.clone())
        .filter(|n| *n != home)
        .collect();
    names.insert(0, home);
    Ok(names)
}

pub async fn run(
    client: &MeshClient,
    tenant: Option<&str>,
    command: TenantCommand,
    json: bool,
) -> Result<u8, ClientError> {
    let Some(tenant) = tenant else {
        return Err(ClientError::InvalidArgument(
            "through a mesh, tenant show and tenant quota set need --tenant NAME".into(),
        ));
    };
    let m = client.membership();
    let clusters = clusters_home_first(&m, tenant)?;
    match command {
        TenantCommand::Show => show(client, &m, tenant, &clusters, json).await?,
        TenantCommand::Quota {
            command:
                QuotaCommand::Set {
                    max_bytes,
                    max_objects,
                },
        } => {
            for name in &clusters {
                let reply = client
                    .cluster_client(name)?
                    .set_tenant_quota(tenant, Some(max_bytes), max_objects)
                    .await
                    .map_err(|e| in_cluster(name, e))?;
                match json {
                    true => print_json(&json!({"cluster": name, "changed": reply.changed,
                        "quota": reply.quota}))?,
                    false => {
                        outln!("cluster {name}:")?;
                        print_quota(&reply.quota)?;
                    }
                }
            }
        }
        TenantCommand::Ls => {
            return Err(ClientError::InvalidArgument(
                "tenant ls runs at one cluster: --cluster C or --server ADDR".into(),
            ))
        }
    }
    Ok(0)
}

/// Which cluster refused: the rest of the command did not run there (run it again: setting
/// the same policy twice changes nothing).
fn in_cluster(name: &str, e: ClientError) -> ClientError {
    tracing::warn!(cluster = name, error = %e, "tenant command refused");
    e
}

async fn show(
    client: &MeshClient,
    m: &Membership,
    tenant: &str,
    clusters: &[String],
    json: bool,
) -> Result<(), ClientError> {
    let asks = clusters.iter().map(|name| async move {
        let quota = client.cluster_client(name)?.tenant_quota(tenant).await;
        quota.map_err(|e| in_cluster(name, e))
    });
    let quotas: Vec<TenantQuota> = futures::future::try_join_all(asks).await?;
    let used = |f: fn(&TenantQuota) -> u64| quotas.iter().map(f).sum::<u64>();
    let (used_bytes, used_objects) = (used(|q| q.used_bytes), used(|q| q.used_objects));
    let home = &quotas[0];
    if json {
        let rows: Vec<serde_json::Value> = clusters
            .iter()
            .zip(&quotas)
            .map(|(name, q)| json!({"cluster": name, "quota": q}))
            .collect();
        return print_json(&json!({"tenant": tenant, "home": clusters[0],
            "generation": m.generation, "max_bytes": home.max_bytes,
            "max_objects": home.max_objects, "used_bytes": used_bytes,
            "used_objects": used_objects, "clusters": rows}));
    }
    outln!(
        "tenant {tenant} across mesh {} (generation {}), home {}: used {used_bytes} bytes in \
         {used_objects} objects",
        m.mesh,
        m.generation,
        clusters[0]
    )?;
    for (name, q) in clusters.iter().zip(&quotas) {
        outln!("cluster {name}:")?;
        print_quota(q)?;
    }
    Ok(())
}
