//! `crescent mesh drain --cluster C` (docs/scale-out.md, "Draining a cluster"): marks `C`
//! draining in the membership record, moves every object `C` holds to its authority in the
//! draining membership, and marks `C` leaving once its stats count no object.
//!
//! Client-side and idempotent: every step reads what is there now (the record, the objects `C`
//! still holds), so running the command again after a crash resumes where it stopped.
//!
//! `crescent mesh rebalance` (docs/scale-out.md, "Rebalancing after a join") moves the same
//! way every object that a serving or draining cluster holds but is not the authority of.

use std::time::Duration;

use crescent_client::{ClientError, MeshClient, PutOptions};
use crescent_ha::{CoordinationEndpoint, HaError, MembershipStore};
use crescent_mesh::{Membership, MeshError};
use crescent_wire::scan::{ScanEntry, MAX_SCAN_PAGE};
use crescent_wire::ErrorCode;
use futures::StreamExt;
use serde_json::json;
use tracing::Instrument;

use crate::run::print_json;

/// Attempts per object before it is reported failed.
const ATTEMPTS: u32 = 3;
/// Objects moved at once.
const PARALLEL: usize = 8;
/// Passes over `C`'s objects: a later pass picks up what an earlier one could not take (puts
/// in progress, writes of clients that routed by an older generation).
const PASSES: u32 = 3;
/// Bound on one backend request.
const BACKEND_TIMEOUT: Duration = Duration::from_secs(5);
/// Compare-and-set attempts before giving up on a busy record.
const CAS_ATTEMPTS: u32 = 20;
/// How long the mesh client waits for the generation the drain wrote.
const GENERATION_WAIT: Duration = Duration::from_secs(10);

/// What one drain did.
#[derive(Debug, Default)]
struct Tally {
    moved: u64,
    skipped_newer: u64,
    failed: u64,
}

/// What became of one object.
enum Outcome {
    Moved,
    /// The authority held the key already: the object there is kept.
    SkippedNewer,
    /// Gone from `C` before it was read (removed meanwhile, or moved by an earlier run).
    Gone,
    InProgress,
    /// The cluster holding it is its authority: nothing to move.
    InPlace,
}

/// Runs the drain of `cluster`; its exit status (non-zero when an object failed to move or
/// `C` still holds objects).
pub(super) async fn drain(
    client: &MeshClient,
    endpoint: &CoordinationEndpoint,
    cluster: &str,
    json: bool,
) -> Result<u8, ClientError> {
    let span = tracing::info_span!("mesh.drain", mesh = %client.mesh(), cluster = %cluster);
    drain_inner(client, endpoint, cluster, json)
        .instrument(span)
        .await
}

async fn drain_inner(
    client: &MeshClient,
    endpoint: &CoordinationEndpoint,
    cluster: &str,
    json: bool,
) -> Result<u8, ClientError> {
    let store = membership_store(client, endpoint).await?;
    preflight(&store, client, cluster).await?;
    let draining = step(&store, |m| crescent_mesh::drain_step(m, cluster)).await?;
    client
        .wait_for_generation(draining.generation, GENERATION_WAIT)
        .await;
    if !json {
        outln!(
            "cluster {cluster} draining in generation {}",
            draining.generation
        )?;
    }
    let mut tally = Tally::default();
    let mut remaining = 0;
    for pass in 1..=PASSES {
        move_all(client, cluster, &mut tally, json).await?;
        remaining = objects_of(client, cluster).await?;
        if remaining == 0 || tally.failed > 0 {
            break;
        }
        tracing::info!(pass, remaining, "objects left after a pass; going again");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let mut generation = draining.generation;
    if remaining == 0 && tally.failed == 0 {
        generation = step(&store, |m| crescent_mesh::drained_step(m, cluster))
            .await?
            .generation;
    }
    report(cluster, &tally, remaining, generation, json)?;
    Ok(if remaining == 0 && tally.failed == 0 {
        0
    } else {
        9
    })
}

/// `mesh drain --cancel --cluster C`: a draining `C` serves again (a serving one is no
/// change); refused like a drain for a cluster the record does not list or one leaving.
pub(super) async fn cancel(
    client: &MeshClient,
    endpoint: &CoordinationEndpoint,
    cluster: &str,
    json: bool,
) -> Result<u8, ClientError> {
    let store = membership_store(client, endpoint).await?;
    let serving = step(&store, |m| crescent_mesh::cancel_drain_step(m, cluster)).await?;
    tracing::info!(cluster, generation = serving.generation, "drain cancelled");
    if json {
        print_json(&json!({"cluster": cluster, "state": "serving",
            "generation": serving.generation}))?;
    } else {
        outln!(
            "cluster {cluster} serving in generation {}; run `crescent mesh rebalance` to bring \
             back the objects the drain moved",
            serving.generation
        )?;
    }
    Ok(0)
}

/// Refuses a drain that would stop after its first step: the record refuses it, or `cluster`
/// does not let this credential scan it (a client token: `PERMISSION_DENIED`), or cannot be
/// reached. Nothing is written before this passes.
async fn preflight(
    store: &MembershipStore,
    client: &MeshClient,
    cluster: &str,
) -> Result<(), ClientError> {
    if let Some(current) = store.read().await.map_err(refused)? {
        crescent_mesh::drain_step(&current.membership, cluster)
            .map_err(ClientError::MeshRefused)?;
    }
    client
        .cluster_client(cluster)?
        .scan_objects(None, Some(1))
        .await
        .map(drop)
}

/// Applies `plan` to the stored record by compare-and-set until it lands or has nothing left
/// to do (re-reading after `STALE_GENERATION`); the record as it then stands.
async fn step(
    store: &MembershipStore,
    plan: impl Fn(&Membership) -> Result<Option<Membership>, MeshError>,
) -> Result<Membership, ClientError> {
    for _ in 0..CAS_ATTEMPTS {
        let current = store.read().await.map_err(refused)?.ok_or_else(|| {
            ClientError::InvalidArgument(format!("mesh {} has no membership record", store.key()))
        })?;
        let Some(next) = plan(&current.membership).map_err(ClientError::MeshRefused)? else {
            return Ok(current.membership);
        };
        match store.compare_and_set(Some(&current), next).await {
            Ok(written) => return Ok(written.membership),
            Err(HaError::Mesh(MeshError::StaleGeneration { .. })) => continue,
            Err(e) => return Err(refused(e)),
        }
    }
    Err(ClientError::Api(crescent_wire::ApiError::new(
        ErrorCode::Unavailable,
        "the membership record kept changing; run the drain again".to_string(),
    )))
}

/// The mesh's membership record in its coordination backend.
async fn membership_store(
    client: &MeshClient,
    endpoint: &CoordinationEndpoint,
) -> Result<MembershipStore, ClientError> {
    MembershipStore::connect(endpoint, client.mesh(), BACKEND_TIMEOUT)
        .await
        .map_err(refused)
}

/// A backend error: a refusal of the update rule keeps the mesh's code.
fn refused(e: HaError) -> ClientError {
    match e {
        HaError::Mesh(m) => ClientError::MeshRefused(m),
        other => ClientError::Discovery(other),
    }
}

/// One pass over every object `cluster` holds, page by page.
async fn move_all(
    client: &MeshClient,
    cluster: &str,
    tally: &mut Tally,
    json: bool,
) -> Result<(), ClientError> {
    let source = client.cluster_client(cluster)?;
    let mut cursor = None;
    loop {
        let page = source.scan_objects(cursor, Some(MAX_SCAN_PAGE)).await?;
        let outcomes: Vec<Result<Outcome, ClientError>> = futures::stream::iter(&page.objects)
            .map(|o| {
                move_with_retries(client, cluster, o)
                    .instrument(tracing::debug_span!("mesh.drain_object", tenant = %o.tenant))
            })
            .buffer_unordered(PARALLEL)
            .collect()
            .await;
        for (o, outcome) in page.objects.iter().zip(outcomes) {
            match outcome {
                Ok(Outcome::Moved) => tally.moved += 1,
                Ok(Outcome::SkippedNewer) => tally.skipped_newer += 1,
                // A put in progress is taken by a later pass, once complete (or revoked).
                Ok(Outcome::Gone | Outcome::InProgress | Outcome::InPlace) => {}
                Err(e) => {
                    tally.failed += 1;
                    tracing::warn!(tenant = %o.tenant, key = %o.key, error = %e, "not moved");
                    if !json {
                        eprintln!("crescent: {}: {}: {e}", o.key, e.code_str());
                    }
                }
            }
        }
        if !json && !page.objects.is_empty() {
            eprintln!(
                "moved {}, kept newer {}, failed {}",
                tally.moved, tally.skipped_newer, tally.failed
            );
        }
        match page.next {
            Some(next) => cursor = Some(next),
            None => return Ok(()),
        }
    }
}

async fn move_with_retries(
    client: &MeshClient,
    cluster: &str,
    o: &ScanEntry,
) -> Result<Outcome, ClientError> {
    let mut attempt = 1;
    loop {
        match move_one(client, cluster, o).await {
            Err(e)
                if attempt < ATTEMPTS
                    && e.code() != Some(ErrorCode::PermissionDenied)
                    && !matches!(e, ClientError::InvalidArgument(_)) =>
            {
                tracing::debug!(key = %o.key, attempt, error = %e, "moving again");
                tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt))).await;
                attempt += 1;
            }
            other => return other,
        }
    }
}

/// Moves one object: read at `cluster`, put (without upsert) at its authority through the
/// mesh, removed at `cluster`. An object the authority holds already is kept there.
async fn move_one(
    client: &MeshClient,
    cluster: &str,
    o: &ScanEntry,
) -> Result<Outcome, ClientError> {
    if !o.complete {
        return Ok(Outcome::InProgress);
    }
    // A managed weight revision's objects move only with their revision (routed by its
    // lineage, docs/scale-out.md): a plain copy would be an unmanaged object elsewhere. At a
    // serving cluster they are where their revision is; a draining one cannot leave with
    // them.
    if o.domain.as_deref() == Some(crescent_client::weights::WEIGHTS_DOMAIN) {
        let draining = client
            .membership()
            .cluster(cluster)
            .is_some_and(|c| c.state == crescent_mesh::ClusterState::Draining);
        if !draining {
            return Ok(Outcome::InPlace);
        }
        return Err(ClientError::InvalidArgument(format!(
            "{} belongs to a managed weight revision: move the revision (weights get, put at its \
             authority, rm here), then drain again",
            o.key
        )));
    }
    let scoped = client.with_scope(Some(&o.tenant), o.domain.as_deref())?;
    // Never the case in a drain (a draining cluster is no authority); in a rebalance, most.
    if scoped.authority(&o.key)? == cluster {
        return Ok(Outcome::InPlace);
    }
    let source = scoped.cluster_client(cluster)?;
    let value = match source.get(&o.key).await {
        Ok(v) => v,
        Err(e) if e.code() == Some(ErrorCode::NotFound) => return Ok(Outcome::Gone),
        Err(e) => return Err(e),
    };
    // The copy keeps what the object was put with: its replica count, data type and hard
    // pin (a soft pin's remaining time is not carried).
    let opts = PutOptions {
        replicas: o.replicas.max(1),
        data_type: o.data_type,
        hard_pin: o.hard_pin,
        ..PutOptions::default()
    };
    let outcome = match scoped.put_with(&o.key, &value, &opts).await {
        Ok(put) if put.already_existed => Outcome::SkippedNewer,
        Ok(_) => Outcome::Moved,
        Err(e) if e.code() == Some(ErrorCode::Conflict) => Outcome::SkippedNewer,
        Err(e) => return Err(e),
    };
    // Forced: the value is safe at its authority, and this process's own read lease (released
    // without waiting) must not hold the removal up. Readers at `cluster` keep their bytes
    // until their leases end (docs/api.md, "Objects").
    match source.remove_forced(&o.key).await {
        Ok(()) => Ok(outcome),
        Err(e) if e.code() == Some(ErrorCode::NotFound) => Ok(outcome),
        Err(e) => Err(e),
    }
}

/// Moves every object held away from its authority, cluster by cluster (serving and
/// draining ones: a leaving cluster holds none); its exit status (non-zero when an object
/// failed to move).
pub(super) async fn rebalance(client: &MeshClient, json: bool) -> Result<u8, ClientError> {
    let span = tracing::info_span!("mesh.rebalance", mesh = %client.mesh());
    async {
        let membership = client.membership();
        let mut tally = Tally::default();
        let holders = membership
            .clusters
            .iter()
            .filter(|c| c.state.holds_objects());
        for c in holders {
            move_all(client, &c.name, &mut tally, json).await?;
        }
        if json {
            print_json(
                &json!({"moved": tally.moved, "skipped_newer": tally.skipped_newer,
                "failed": tally.failed, "generation": membership.generation}),
            )?;
        } else {
            outln!(
                "moved {}, kept newer {}, failed {} (generation {})",
                tally.moved,
                tally.skipped_newer,
                tally.failed,
                membership.generation
            )?;
        }
        Ok(if tally.failed == 0 { 0 } else { 9 })
    }
    .instrument(span)
    .await
}

/// `cluster`'s object count from its leader's stats.
async fn objects_of(client: &MeshClient, cluster: &str) -> Result<u64, ClientError> {
    let stats = client.cluster_client(cluster)?.stats().await?;
    stats["store"]["objects"].as_u64().ok_or_else(|| {
        ClientError::Protocol(format!("stats of cluster {cluster} carry no objects"))
    })
}

fn report(
    cluster: &str,
    tally: &Tally,
    remaining: u64,
    generation: u64,
    json: bool,
) -> Result<(), ClientError> {
    let state = if remaining == 0 && tally.failed == 0 {
        "leaving"
    } else {
        "draining"
    };
    if json {
        return print_json(&json!({"cluster": cluster, "moved": tally.moved,
            "skipped_newer": tally.skipped_newer, "failed": tally.failed,
            "remaining": remaining, "state": state, "generation": generation}));
    }
    outln!(
        "cluster {cluster}: moved {}, kept newer {}, failed {}; {remaining} objects left, \
         {state} in generation {generation}",
        tally.moved,
        tally.skipped_newer,
        tally.failed
    )?;
    if state == "draining" {
        outln!("run `crescent mesh drain --cluster {cluster}` again to finish")?;
    }
    Ok(())
}
