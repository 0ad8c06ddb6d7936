//! `crescent --mesh M bench`: the five figures of `crescent bench` (cli/src/bench.rs) through
//! a mesh of clusters (docs/scale-out.md, "Clients"). The client is a storage owner in every
//! serving cluster: one in-process owner per cluster, its segment registered with that
//! cluster's leader and sized for the cluster's weighted share of the keys by the
//! single-cluster rule. The phases then run through the [`MeshClient`]: single operations one
//! at a time, each to its key's authority; batches split by cluster and the parts sent in
//! parallel. Each cluster's client carries its own owner's segment, so every put is placed
//! local_first there, as in the single-cluster bench.

use crescent_client::{ClientError, MeshClient};
use crescent_owner::Owner;

use crate::bench::{self, BenchConfig, BenchReport};

/// A serving cluster of the mesh: its name and weight.
struct Serving {
    name: String,
    weight: f64,
}

/// Runs the benchmark through `mesh` and cleans up afterwards (removes its keys in every
/// cluster, unmounts every segment).
pub async fn run(mesh: &MeshClient, config: &BenchConfig) -> Result<BenchReport, ClientError> {
    config.validate()?;
    let serving: Vec<Serving> = mesh
        .membership()
        .clusters
        .into_iter()
        .filter(|c| c.state.as_str() == "serving")
        .map(|c| Serving {
            name: c.name,
            weight: c.weight,
        })
        .collect();
    if serving.is_empty() {
        return Err(ClientError::InvalidArgument(format!(
            "mesh {} has no serving cluster to bench",
            mesh.mesh()
        )));
    }
    let owners = start_owners(mesh, config, &serving).await?;
    let prefix = bench::key_prefix();
    let result = bench::phases(mesh, config, &prefix).await;
    let cleanup = remove_everywhere(mesh, &serving, &prefix).await;
    let stopped = stop_all(owners).await;
    let mut report = result?;
    cleanup?;
    stopped?;
    report.clusters = Some(serving.len());
    Ok(report)
}

/// One owner per serving cluster, each segment sized for the cluster's share of the weight;
/// on a failure the owners already started are stopped.
async fn start_owners(
    mesh: &MeshClient,
    config: &BenchConfig,
    serving: &[Serving],
) -> Result<Vec<Owner>, ClientError> {
    let total: f64 = serving.iter().map(|c| c.weight).sum();
    let mut owners = Vec::with_capacity(serving.len());
    for cluster in serving {
        let started = match mesh.cluster_client(&cluster.name) {
            Ok(client) => {
                let segment = config.segment_for(cluster.weight / total);
                bench::start_owner(&client, config, segment).await
            }
            Err(e) => Err(e),
        };
        match started {
            Ok(owner) => owners.push(owner),
            Err(e) => {
                tracing::error!(cluster = %cluster.name, error = %e, "bench owner did not start");
                // The first error is the one reported; stopping the others is best effort.
                let _ = stop_all(owners).await;
                return Err(e);
            }
        }
    }
    Ok(owners)
}

/// Removes the run's keys from every serving cluster, in parallel.
async fn remove_everywhere(
    mesh: &MeshClient,
    serving: &[Serving],
    prefix: &str,
) -> Result<(), ClientError> {
    let removals = serving.iter().map(|c| async move {
        mesh.cluster_client(&c.name)?.remove_prefix(prefix).await?;
        Ok::<(), ClientError>(())
    });
    futures::future::join_all(removals)
        .await
        .into_iter()
        .collect()
}

/// Stops every owner (each unmounts its segment); the first error, after trying them all.
async fn stop_all(owners: Vec<Owner>) -> Result<(), ClientError> {
    let mut first = Ok(());
    for owner in owners {
        if let Err(e) = owner.shutdown().await {
            if first.is_ok() {
                first = Err(e);
            }
        }
    }
    first
}
