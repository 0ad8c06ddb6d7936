//! `crescent --mesh M ...`: object commands routed to each object's authority cluster through
//! [`MeshClient`], `crescent --mesh M bench` (cli/src/mesh_bench.rs) and `crescent mesh ls`
//! (docs/scale-out.md).

use clap::Subcommand;
use crescent_client::{ClientError, MeshClient, PutOptions};
use serde_json::json;

use super::{Cli, Command};
use crate::bench::BenchConfig;
use crate::run::{print_bench, print_json, read_input};

#[derive(Debug, Subcommand)]
pub enum MeshCommand {
    /// The mesh's clusters with name, leader, weight, state and objects (each cluster's
    /// stats), and the membership generation.
    Ls,
    /// Drains cluster --cluster C out of the mesh: marks it draining, moves every object it
    /// holds to its authority, then marks it leaving (docs/scale-out.md, "Draining a
    /// cluster"). Run it again after a failure to resume; --cancel makes a draining cluster
    /// serve again.
    Drain {
        /// Cancel the drain: the draining cluster serves again (objects already moved stay
        /// at their authorities until `mesh rebalance`).
        #[arg(long)]
        cancel: bool,
    },
    /// Moves every object a cluster holds without being its authority (after a join) to its
    /// authority (docs/scale-out.md, "Rebalancing after a join").
    Rebalance,
}

pub(super) async fn run(cli: Cli) -> Result<u8, ClientError> {
    if cli.mesh.is_none() {
        return Err(ClientError::InvalidArgument(
            "`crescent mesh` needs the mesh: --mesh M with --etcd or --redis".into(),
        ));
    }
    let drain = matches!(
        cli.command,
        Command::Mesh {
            command: MeshCommand::Drain { .. }
        }
    );
    if cli.cluster.is_some() != drain {
        return Err(ClientError::InvalidArgument(
            "--cluster goes with --mesh only in `mesh drain --cluster C`, which needs it".into(),
        ));
    }
    let options = crescent_client::ClientOptions {
        cluster: None,
        ..cli.client_options()
    };
    let client = MeshClient::connect(options.clone())
        .await?
        .with_scope(cli.tenant.as_deref(), cli.domain.as_deref())?;
    let json = cli.json;
    match cli.command {
        Command::Put {
            key,
            file,
            upsert,
            replicas,
        } => put(&client, &key, &file, upsert, replicas, json).await?,
        Command::Get { key, output } => get(&client, &key, output.as_deref(), json).await?,
        Command::Exist { key } => return exist(&client, &key, json).await,
        Command::Rm { key, force } => rm(&client, &key, force, json).await?,
        Command::Mesh {
            command: MeshCommand::Ls,
        } => ls(&client, json).await?,
        Command::Mesh {
            command: MeshCommand::Rebalance,
        } => return super::mesh_drain::rebalance(&client, json).await,
        Command::Tenant { command } => {
            return crate::tenant_mesh::run(&client, cli.tenant.as_deref(), command, json).await
        }
        Command::Weights { command } => {
            return crate::weights_mesh::run(&client, cli.tenant.as_deref(), command, json).await
        }
        Command::Bench {
            n,
            size,
            batch,
            only,
            owner_token,
            owner_id,
        } => {
            let config =
                BenchConfig::from_args(n, size, batch, &only, owner_token, owner_id, json)?;
            let report = crate::mesh_bench::run(&client, &config).await?;
            print_bench(&report, json)?;
        }
        Command::Mesh {
            command: MeshCommand::Drain { cancel },
        } => {
            let endpoint = match options.redis {
                Some(url) => crescent_ha::CoordinationEndpoint::Redis(url),
                None => crescent_ha::CoordinationEndpoint::Etcd(options.etcd_endpoints),
            };
            let cluster = cli.cluster.as_deref().unwrap_or_default();
            if cancel {
                return super::mesh_drain::cancel(&client, &endpoint, cluster, json).await;
            }
            return super::mesh_drain::drain(&client, &endpoint, cluster, json).await;
        }
        _ => return Err(ClientError::InvalidArgument(
            "through a mesh (--mesh) only put, get, exist, rm, bench, weights (but its bench), \
                 tenant show and quota set, and mesh ls, drain and rebalance run; reach one \
                 cluster with --cluster or --server for the rest"
                .into(),
        )),
    }
    Ok(0)
}

async fn put(
    client: &MeshClient,
    key: &str,
    file: &str,
    upsert: bool,
    replicas: u32,
    json: bool,
) -> Result<(), ClientError> {
    let value = read_input(file)?;
    let opts = PutOptions {
        upsert,
        replicas,
        ..PutOptions::default()
    };
    let out = client.put_with(key, &value, &opts).await?;
    let cluster = client.authority(key)?;
    if json {
        print_json(
            &json!({"key": key, "size": value.len(), "put_id": out.put_id,
            "already_existed": out.already_existed, "replicas": out.replicas,
            "cluster": cluster}),
        )
    } else {
        outln!("{key}: stored {} bytes in cluster {cluster}", value.len())
    }
}

async fn get(
    client: &MeshClient,
    key: &str,
    output: Option<&str>,
    json: bool,
) -> Result<(), ClientError> {
    let value = client.get(key).await?;
    // The lease release runs without waiting: let it finish before this process exits.
    client.settle().await;
    crate::objects::write_value(key, &value, output, json)
}

async fn exist(client: &MeshClient, key: &str, json: bool) -> Result<u8, ClientError> {
    crate::objects::print_exists(key, client.is_exist(key).await?, json)
}

async fn rm(client: &MeshClient, key: &str, force: bool, json: bool) -> Result<(), ClientError> {
    match force {
        true => client.remove_forced(key).await?,
        false => client.remove(key).await?,
    }
    crate::objects::print_removed(key, json)
}

/// One cluster's objects from its leader's stats, or why they could not be read.
async fn objects(client: &MeshClient, name: &str) -> Result<u64, ClientError> {
    let stats = client.cluster_client(name)?.stats().await?;
    stats["store"]["objects"]
        .as_u64()
        .ok_or_else(|| ClientError::Protocol(format!("stats of cluster {name} carry no objects")))
}

/// `crescent mesh ls`: every cluster of the membership, its objects read in parallel.
async fn ls(client: &MeshClient, json: bool) -> Result<(), ClientError> {
    let m = client.membership();
    let counts =
        futures::future::join_all(m.clusters.iter().map(|c| objects(client, &c.name))).await;
    let rows: Vec<serde_json::Value> = m
        .clusters
        .iter()
        .zip(&counts)
        .map(|(c, n)| {
            let mut row = json!({"name": c.name, "leader": c.leader, "weight": c.weight,
                "state": c.state.as_str(), "objects": n.as_ref().ok()});
            if let Err(e) = n {
                row["error"] = json!({"code": e.code_str(), "message": e.to_string()});
            }
            row
        })
        .collect();
    if json {
        return print_json(&json!({"mesh": m.mesh, "generation": m.generation, "clusters": rows}));
    }
    outln!("mesh {} generation {}", m.mesh, m.generation)?;
    outln!(
        "{:<24} {:<10} {:>8} {:>12}  LEADER",
        "CLUSTER",
        "STATE",
        "WEIGHT",
        "OBJECTS"
    )?;
    for (c, n) in m.clusters.iter().zip(&counts) {
        let objects = n
            .as_ref()
            .map_or_else(|e| e.code_str().to_string(), |n| n.to_string());
        outln!(
            "{:<24} {:<10} {:>8} {:>12}  {}",
            c.name,
            c.state.as_str(),
            c.weight,
            objects,
            c.leader.as_deref().unwrap_or("-")
        )?;
    }
    Ok(())
}
