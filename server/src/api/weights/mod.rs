//! `/v1/weights/...`: the eleven managed-weight operations (see `crescent_wire::weights`).
//! Mutations run through [`crate::weights::WeightService`], which journals each step.

use std::sync::Arc;

use actix_web::web;
use crescent_weights::{resolve_policy, RevisionIdentity, WeightRevisionCommand, DEFAULT_TENANT};
use crescent_wire::store::{DataType, PutStartReply, PutStartRequest};
use crescent_wire::weights as w;
use crescent_wire::{ApiError, ErrorCode};

use super::error::HttpError;
use super::wire::{Reply, Wire};
use crate::node::NodeState;
use crate::weights::convert;
use crate::weights::workflows::{not_found, object_id, payload_prefix};

mod upsert;

use upsert::{upsert, upsert_status};

pub(super) type State = web::Data<Arc<NodeState>>;

/// How long `weight_migrate` waits for its operation before answering it RUNNING.
const MIGRATE_REPLY_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

fn view(
    state: &crescent_weights::WeightRevision,
    now_ms: i64,
    identity: &RevisionIdentity,
) -> Result<w::WeightMetadata, HttpError> {
    state
        .view(now_ms)
        .map(|v| convert::metadata(&v))
        .ok_or_else(|| not_found(identity).into())
}

/// The revision `id` names; in a mesh, refused WRONG_CLUSTER when its lineage routes to another
/// cluster (docs/scale-out.md, "Authority by rendezvous"): a revision's generations, manifest
/// and payloads stay in one cluster.
pub(super) fn identity(state: &NodeState, id: &w::WeightId) -> Result<RevisionIdentity, HttpError> {
    let identity = convert::identity(id)?;
    if let Some(mesh) = state.mesh_role() {
        mesh.check_revision(&crescent_mesh::Lineage {
            tenant: &identity.tenant_id,
            namespace: &identity.namespace,
            resource_id: &identity.resource_id,
            revision: &identity.revision,
        })?;
    }
    Ok(identity)
}

pub(super) fn domain(e: crescent_weights::WeightError) -> HttpError {
    HttpError(ApiError::new(e.code(), e.to_string()))
}

/// The HA gates of `[weights]` (docs/weights.md, "Policy and configuration"), fail closed: on a
/// replicated cluster (this node is an HA active) a weight mutation needs
/// `weight_management_oplog_capability_confirmed`, and an upsert (a lineage mutation)
/// `weight_lineage_oplog_capability_confirmed` too: UNAVAILABLE otherwise. Reads and lease releases
/// are never gated.
pub(super) fn require_mutations(state: &NodeState, lineage: bool) -> Result<(), HttpError> {
    let replicated = state.ha.get().is_some();
    let config = &state.weights.config;
    if lineage {
        config.require_lineage_mutations(replicated)
    } else {
        config.require_weight_mutations(replicated)
    }
    .map_err(domain)
}

/// weight_put, step 1: the IMPORTING revision and its group (same identity again: same group).
pub async fn put_begin(
    state: State,
    Wire(req): Wire<w::PutBeginRequest>,
) -> Result<Reply<w::PutBeginReply>, HttpError> {
    require_mutations(&state, false)?;
    let svc = &state.weights;
    let identity = identity(&state, &req.id)?;
    let cluster = svc.config.cluster_default_policy();
    let put = req.policy.as_ref().map(convert::policy_override);
    let policy = resolve_policy(put.as_ref(), None, &cluster).map_err(domain)?;
    svc.check_reachable(policy.preferred_residency)?;
    let lineage = svc.read_lineage(&identity.lineage()).await?;
    lineage
        .admit_import(identity.weight_generation, req.request_id.as_deref())
        .map_err(domain)?;
    let after = svc
        .revision(
            &identity,
            WeightRevisionCommand::BeginImport {
                identity: identity.clone(),
                policy,
            },
        )
        .await?;
    let rec = after.record().ok_or_else(|| not_found(&identity))?;
    Ok(Reply(w::PutBeginReply {
        group_id: rec.group_id.clone(),
        manifest_key: rec.manifest_key.clone(),
        payload_prefix: payload_prefix(&identity),
        metadata_generation: rec.metadata_generation,
        availability: rec.availability.as_str().into(),
    }))
}

/// weight_put, step 2: put_start of one object into the IMPORTING revision's group.
pub async fn put_object(
    state: State,
    Wire(req): Wire<w::WeightObjectRequest>,
) -> Result<Reply<PutStartReply>, HttpError> {
    require_mutations(&state, false)?;
    let svc = &state.weights;
    let identity = identity(&state, &req.id)?;
    let current = svc.read_revision(&identity).await?;
    let rec = current.record().ok_or_else(|| not_found(&identity))?;
    if rec.availability != crescent_weights::Availability::Importing {
        return Err(HttpError(ApiError::new(
            ErrorCode::Conflict,
            format!(
                "revision {identity} is {}: objects are written only while IMPORTING",
                rec.availability.as_str()
            ),
        )));
    }
    let prefix = payload_prefix(&identity);
    let (data_type, hard_pin) = match req.kind {
        w::WeightObjectKind::Manifest if req.key == rec.manifest_key => (DataType::Metadata, true),
        w::WeightObjectKind::Payload
            if req.key.starts_with(&prefix) && req.key.len() > prefix.len() =>
        {
            (DataType::Weight, false)
        }
        _ => {
            return Err(HttpError(ApiError::invalid(format!(
            "key {:?} is not a {:?} key of {identity} (manifest {:?}, payloads under {prefix:?})",
            req.key, req.kind, rec.manifest_key
        ))))
        }
    };
    let put = PutStartRequest {
        id: object_id(&req.key),
        size: req.size,
        replicas: 1,
        placement: Default::default(),
        preferred_segment: None,
        data_type,
        checksum: req.checksum,
        upsert: false,
        soft_pin_secs: None,
        hard_pin,
    };
    let group = svc.groups.intern(&rec.group_id);
    let now = state.now_ms();
    let id = put.id.clone();
    let mut reply = start_in_group(&state, put, group, now).await?;
    crate::api::ops::grant_put(&state, &id, &mut reply, now);
    Ok(Reply(reply))
}

/// The directory's put_start in the revision's group, off the async threads; a refusal for
/// want of this cluster's allowance in a mesh goes to the quota exchange like a plain put's
/// (docs/tenants.md, "Quota across a mesh").
async fn start_in_group(
    state: &NodeState,
    put: PutStartRequest,
    group: crescent_store::GroupId,
    now: i64,
) -> Result<PutStartReply, HttpError> {
    let put = Arc::new(put);
    for _ in 0..2 {
        let (directory, req) = (state.directory.clone(), put.clone());
        let started = web::block(move || directory.put_start_in_group(&req, Some(group), now))
            .await
            .map_err(super::error::from_blocking)?;
        match started {
            Err(e @ crescent_store::StoreError::AllowanceShort { .. }) => {
                crate::api::allowance::after_short(state, &put, e)?
            }
            other => return Ok(other?),
        }
    }
    Err(
        ApiError::new(ErrorCode::Unavailable, "the allowance is short again")
            .refused_before_running(None)
            .into(),
    )
}

/// weight_put, last step: whole-group validation, READY + HOT.
pub async fn put_commit(
    state: State,
    Wire(req): Wire<w::PutCommitRequest>,
) -> Result<Reply<w::WeightMetadata>, HttpError> {
    require_mutations(&state, false)?;
    let svc = state.weights.clone();
    let identity = identity(&state, &req.id)?;
    let units = req
        .affinity_units
        .into_iter()
        .map(|u| crescent_weights::AffinityUnit {
            unit_id: u.unit_id,
            member_keys: u.member_keys,
            bytes: u.bytes,
        })
        .collect();
    let after = svc
        .commit_import(
            &identity,
            req.expected_metadata_generation,
            req.manifest_sha256,
            units,
        )
        .await?;
    Ok(Reply(view(&after, state.now_ms(), &identity)?))
}

pub async fn lease_acquire(
    state: State,
    Wire(req): Wire<w::LeaseRequest>,
) -> Result<Reply<w::LeaseReply>, HttpError> {
    require_mutations(&state, false)?;
    let svc = &state.weights;
    let identity = identity(&state, &req.id)?;
    let before = svc.read_revision(&identity).await?;
    let known: std::collections::BTreeSet<String> = before.leases().keys().cloned().collect();
    let after = svc
        .revision(
            &identity,
            WeightRevisionCommand::AcquireLease {
                holder: req.holder,
                ttl_ms: req.ttl_ms,
                expected_metadata_generation: req.expected_metadata_generation,
                limits: svc.config.migration_limits(),
            },
        )
        .await?;
    let (lease_id, lease) = after
        .leases()
        .iter()
        .filter(|(id, _)| !known.contains(*id))
        .max_by_key(|(_, l)| l.granted_at_ms)
        .ok_or_else(|| HttpError(ApiError::internal("the granted lease is missing")))?;
    if after.active_operation().is_some() {
        let me = svc.clone();
        let id = identity.clone();
        actix_rt::spawn(async move { me.drive_revision(&id).await });
    }
    Ok(Reply(w::LeaseReply {
        lease_id: lease_id.clone(),
        expires_at_ms: lease.expires_at_ms,
        metadata: view(&after, state.now_ms(), &identity)?,
    }))
}

pub async fn lease_renew(
    state: State,
    Wire(req): Wire<w::LeaseRenewRequest>,
) -> Result<Reply<w::LeaseReply>, HttpError> {
    require_mutations(&state, false)?;
    let identity = identity(&state, &req.id)?;
    let after = state
        .weights
        .revision(
            &identity,
            WeightRevisionCommand::RenewLease {
                lease_id: req.lease_id.clone(),
                ttl_ms: req.ttl_ms,
            },
        )
        .await?;
    let lease = after.lease(&req.lease_id).ok_or_else(|| {
        HttpError(ApiError::new(
            ErrorCode::LeaseExpired,
            format!("lease {} has ended", req.lease_id),
        ))
    })?;
    Ok(Reply(w::LeaseReply {
        lease_id: req.lease_id.clone(),
        expires_at_ms: lease.expires_at_ms,
        metadata: view(&after, state.now_ms(), &identity)?,
    }))
}

pub async fn lease_release(
    state: State,
    Wire(req): Wire<w::LeaseReleaseRequest>,
) -> Result<Reply<crescent_wire::store::Ack>, HttpError> {
    let identity = identity(&state, &req.id)?;
    state
        .weights
        .revision(
            &identity,
            WeightRevisionCommand::ReleaseLease {
                lease_id: req.lease_id,
            },
        )
        .await?;
    Ok(Reply(crescent_wire::store::Ack {}))
}

pub async fn exist(
    state: State,
    Wire(req): Wire<w::WeightRequest>,
) -> Result<Reply<w::WeightExistReply>, HttpError> {
    let identity = identity(&state, &req.id)?;
    let s = state.weights.read_revision(&identity).await?;
    Ok(Reply(w::WeightExistReply {
        exists: s.is_exist(),
    }))
}

pub async fn metadata(
    state: State,
    Wire(req): Wire<w::WeightRequest>,
) -> Result<Reply<w::WeightMetadata>, HttpError> {
    let identity = identity(&state, &req.id)?;
    let s = state.weights.read_revision(&identity).await?;
    Ok(Reply(view(&s, state.now_ms(), &identity)?))
}

pub async fn size(
    state: State,
    Wire(req): Wire<w::WeightRequest>,
) -> Result<Reply<w::WeightSizeReply>, HttpError> {
    let identity = identity(&state, &req.id)?;
    let s = state.weights.read_revision(&identity).await?;
    if s.record().is_none() {
        return Err(not_found(&identity).into());
    }
    Ok(Reply(w::WeightSizeReply {
        size: s.size().map_err(domain)?,
    }))
}

/// weight_list: metadata views only (no manifest reads), paginated by identity.
pub async fn list(
    state: State,
    Wire(req): Wire<w::WeightListRequest>,
) -> Result<Reply<w::WeightListReply>, HttpError> {
    let limit = req.limit.unwrap_or(100);
    if limit == 0 || limit > w::MAX_WEIGHT_LIST_PAGE {
        return Err(HttpError(ApiError::invalid(format!(
            "limit {limit}: allowed 1..={}",
            w::MAX_WEIGHT_LIST_PAGE
        ))));
    }
    let tenant = req.tenant.clone().unwrap_or_else(|| DEFAULT_TENANT.into());
    let filter = |i: &RevisionIdentity| {
        i.tenant_id == tenant
            && req.namespace.as_ref().is_none_or(|n| &i.namespace == n)
            && req.resource_id.as_ref().is_none_or(|r| &i.resource_id == r)
    };
    let (identities, next) =
        state
            .weights
            .list_identities(filter, false, req.after.as_deref(), limit as usize);
    let now = state.now_ms();
    let mut revisions = Vec::with_capacity(identities.len());
    for identity in identities {
        let s = state.weights.read_revision(&identity).await?;
        if let Some(v) = s.view(now) {
            revisions.push(convert::metadata(&v));
        }
    }
    Ok(Reply(w::WeightListReply { revisions, next }))
}

async fn current_generation(
    state: &State,
    identity: &RevisionIdentity,
    given: Option<u64>,
) -> Result<u64, HttpError> {
    if let Some(g) = given {
        return Ok(g);
    }
    let s = state.weights.read_revision(identity).await?;
    s.record()
        .map(|r| r.metadata_generation)
        .ok_or_else(|| not_found(identity).into())
}

pub async fn update_policy(
    state: State,
    Wire(req): Wire<w::UpdatePolicyRequest>,
) -> Result<Reply<w::WeightMetadata>, HttpError> {
    require_mutations(&state, false)?;
    let svc = &state.weights;
    let identity = identity(&state, &req.id)?;
    let s = svc.read_revision(&identity).await?;
    let rec = s.record().ok_or_else(|| not_found(&identity))?;
    let policy = resolve_policy(
        Some(&convert::policy_override(&req.policy)),
        None,
        &rec.policy,
    )
    .map_err(domain)?;
    svc.check_reachable(policy.preferred_residency)?;
    let expected = current_generation(&state, &identity, req.expected_metadata_generation).await?;
    let after = svc
        .revision(
            &identity,
            WeightRevisionCommand::UpdatePolicy {
                policy,
                expected_metadata_generation: expected,
            },
        )
        .await?;
    Ok(Reply(view(&after, state.now_ms(), &identity)?))
}

pub async fn migrate(
    state: State,
    Wire(req): Wire<w::MigrateRequest>,
) -> Result<Reply<w::OperationReply>, HttpError> {
    require_mutations(&state, false)?;
    let svc = state.weights.clone();
    let identity = identity(&state, &req.id)?;
    let s = svc.read_revision(&identity).await?;
    let rec = s.record().ok_or_else(|| not_found(&identity))?;
    let target = convert::target(req.to, req.hot_ratio, &rec.policy);
    if !matches!(target, crescent_weights::ResidencyTarget::Hot) {
        svc.cold(&format!("migration to {:?}", req.to))?;
    }
    let expected = current_generation(&state, &identity, req.expected_metadata_generation).await?;
    let after = svc
        .revision(
            &identity,
            WeightRevisionCommand::Migrate {
                target,
                expected_metadata_generation: expected,
            },
        )
        .await?;
    let op = after
        .active_operation()
        .cloned()
        .ok_or_else(|| HttpError(ApiError::internal("the migration operation is missing")))?;
    // The operation is durable: it is driven in the background (a large revision moves for
    // minutes; a disconnecting client must not cut it short), and the reply waits a little so
    // a small migration answers finished. Callers poll `weights op` otherwise.
    let driver = svc.clone();
    let id = identity.clone();
    let driving = actix_rt::spawn(async move { driver.drive_revision(&id).await });
    let _ = tokio::time::timeout(MIGRATE_REPLY_WAIT, driving).await;
    let done = svc.read_revision(&identity).await?;
    let op = done.operation(&op.operation_id).unwrap_or(&op);
    Ok(Reply(convert::operation(&identity, op)))
}

pub async fn operation(
    state: State,
    Wire(req): Wire<w::OperationRequest>,
) -> Result<Reply<w::OperationReply>, HttpError> {
    let missing = || {
        HttpError(ApiError::new(
            ErrorCode::NotFound,
            format!("operation {} not found", req.operation_id),
        ))
    };
    let identity = state
        .weights
        .operation_owner(&req.operation_id)
        .ok_or_else(missing)?;
    let s = state.weights.read_revision(&identity).await?;
    let op = s.operation(&req.operation_id).ok_or_else(missing)?;
    Ok(Reply(convert::operation(&identity, op)))
}

/// weight_remove: DELETING, payloads in batches, the manifest last, DELETED. Waits for the
/// workflow; a failure leaves it to resume (the operation id stays the same).
pub async fn remove(
    state: State,
    Wire(req): Wire<w::RemoveWeightRequest>,
) -> Result<Reply<w::OperationReply>, HttpError> {
    require_mutations(&state, false)?;
    let svc = state.weights.clone();
    let identity = identity(&state, &req.id)?;
    let expected = current_generation(&state, &identity, req.expected_metadata_generation).await?;
    let after = svc
        .revision(
            &identity,
            WeightRevisionCommand::Remove {
                expected_metadata_generation: expected,
            },
        )
        .await?;
    let op_id = after
        .operations()
        .values()
        .filter(|o| o.kind == crescent_weights::revision::OperationKind::Deleting)
        .max_by_key(|o| o.started_at_ms)
        .map(|o| o.operation_id.clone())
        .ok_or_else(|| HttpError(ApiError::internal("the deletion operation is missing")))?;
    let driver = svc.clone();
    let id = identity.clone();
    // Spawned so a disconnecting client does not cut the workflow short.
    let _ = actix_rt::spawn(async move { driver.drive_revision(&id).await }).await;
    let done = svc.read_revision(&identity).await?;
    let op = done.operation(&op_id).ok_or_else(|| not_found(&identity))?;
    Ok(Reply(convert::operation(&identity, op)))
}

/// Registers the weight routes on the `/v1` scope.
pub fn routes(scope: actix_web::Scope) -> actix_web::Scope {
    use w::routes as r;
    let rel = |route: &'static str| route.strip_prefix("/v1").expect("under /v1");
    scope
        .route(rel(r::PUT_BEGIN), web::post().to(put_begin))
        .route(rel(r::PUT_OBJECT), web::post().to(put_object))
        .route(rel(r::PUT_COMMIT), web::post().to(put_commit))
        .route(rel(r::LEASE_ACQUIRE), web::post().to(lease_acquire))
        .route(rel(r::LEASE_RENEW), web::post().to(lease_renew))
        .route(rel(r::LEASE_RELEASE), web::post().to(lease_release))
        .route(rel(r::EXIST), web::post().to(exist))
        .route(rel(r::METADATA), web::post().to(metadata))
        .route(rel(r::SIZE), web::post().to(size))
        .route(rel(r::LIST), web::post().to(list))
        .route(rel(r::POLICY), web::post().to(update_policy))
        .route(rel(r::UPSERT), web::post().to(upsert))
        .route(rel(r::UPSERT_STATUS), web::post().to(upsert_status))
        .route(rel(r::MIGRATE), web::post().to(migrate))
        .route(rel(r::OPERATION), web::post().to(operation))
        .route(rel(r::REMOVE), web::post().to(remove))
}
