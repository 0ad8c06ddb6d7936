//! `crescent --mesh M weights ...`: managed weight revisions through a mesh (docs/scale-out.md,
//! "Clients"). A command naming a revision runs at the revision's authority cluster, chosen by
//! its lineage, so every generation, manifest and payload of it stays in one cluster; `ls`
//! lists every serving and draining cluster's revisions; `op` asks each cluster for the
//! operation until one knows it.

use crescent_client::weights::WeightStore;
use crescent_client::{ClientError, MeshClient};
use crescent_wire::ErrorCode;
use serde_json::json;

use crate::weights::{print_meta, WeightsCommand};
use crate::weights_args::RevisionArgs;

/// The revision a command names, if it names one.
fn revision_of(command: &WeightsCommand) -> Option<&RevisionArgs> {
    match command {
        WeightsCommand::Put { id, .. }
        | WeightsCommand::Get { id, .. }
        | WeightsCommand::Meta { id }
        | WeightsCommand::Policy { id, .. }
        | WeightsCommand::Migrate { id, .. }
        | WeightsCommand::Rm { id, .. } => Some(&id.revision),
        WeightsCommand::Upsert { id, .. } => Some(id),
        WeightsCommand::Ls { .. } | WeightsCommand::Op { .. } | WeightsCommand::Bench(_) => None,
    }
}

/// The clusters that may hold revisions: serving and draining ones.
fn holders(client: &MeshClient) -> Vec<String> {
    client
        .membership()
        .clusters
        .into_iter()
        .filter(|c| c.state.holds_objects())
        .map(|c| c.name)
        .collect()
}

pub async fn run(
    client: &MeshClient,
    tenant: Option<&str>,
    command: WeightsCommand,
    json: bool,
) -> Result<u8, ClientError> {
    if let Some(r) = revision_of(&command) {
        let cluster = client.revision_authority(&r.namespace, &r.resource, &r.revision)?;
        let at = client.cluster_client(&cluster)?;
        let done = crate::weights::run(&at, tenant, json, command).await;
        // Reads release their leases without waiting: make sure they ran before exiting.
        at.settle().await;
        return done;
    }
    match command {
        WeightsCommand::Ls {
            namespace,
            resource,
        } => list(client, tenant, namespace, resource, json).await,
        WeightsCommand::Op { operation_id } => {
            let mut last = None;
            for cluster in holders(client) {
                let at = client.cluster_client(&cluster)?;
                let op = WeightsCommand::Op {
                    operation_id: operation_id.clone(),
                };
                match crate::weights::run(&at, tenant, json, op).await {
                    Err(e) if e.code() == Some(ErrorCode::NotFound) => last = Some(e),
                    done => return done,
                }
            }
            Err(last.unwrap_or_else(|| {
                ClientError::InvalidArgument("the mesh has no serving cluster".into())
            }))
        }
        _ => Err(ClientError::InvalidArgument(
            "weights bench runs at one cluster: --cluster C or --server ADDR".into(),
        )),
    }
}

/// Every serving and draining cluster's revisions, each listed where it lives.
async fn list(
    client: &MeshClient,
    tenant: Option<&str>,
    namespace: Option<String>,
    resource_id: Option<String>,
    json_out: bool,
) -> Result<u8, ClientError> {
    let req = crate::weights::list_request(tenant, namespace, resource_id);
    let mut all = Vec::new();
    for cluster in holders(client) {
        let at = client.cluster_client(&cluster)?;
        let revisions = WeightStore::new(&at).weight_list_all(&req).await?;
        all.extend(revisions.into_iter().map(|m| (cluster.clone(), m)));
    }
    if json_out {
        let rows: Vec<serde_json::Value> = all
            .iter()
            .map(|(cluster, m)| {
                let mut row = serde_json::to_value(m).expect("json output");
                row["cluster"] = json!(cluster);
                row
            })
            .collect();
        outln!("{}", json!({ "revisions": rows }))?;
        return Ok(0);
    }
    for (cluster, m) in &all {
        outln!("cluster {cluster}:")?;
        print_meta(m, false)?;
    }
    outln!("{} revision(s)", all.len())?;
    Ok(0)
}
