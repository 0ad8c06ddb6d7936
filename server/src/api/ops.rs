//! The object operations themselves, shared by both transports: the HTTP routes
//! (`objects`, `objects_batch`, `owners`) and the RPC fast path (`crate::rpc`) decode a body,
//! call one of these and encode the answer. Errors are [`ApiError`]s converted in the one place
//! (`api::error`), so a refusal carries the same code whichever way it was asked.
//!
//! Directory operations are short and lock one shard, so they run inline on the caller's task.
//! Time is the server clock, read once per request. `store.*` spans and per-operation metrics
//! come from the store.

use crescent_crash::points;
use crescent_store::StoreError;
use crescent_wire::store::{
    Ack, BatchReply, BatchRequest, ExistReply, GetReply, GetRequest, HeartbeatReply,
    HeartbeatRequest, ItemResult, ObjectId, ObjectRequest, Placement, PutEndRequest, PutStartReply,
    PutStartRequest, ReleaseReply, ReleaseRequest, RemoveRequest, SizeReply, MAX_BATCH,
};
use crescent_wire::{ApiError, ErrorCode};

use crescent_transport::TransferOp;

use super::error::from_cold;
use crate::mesh::Split;
use crate::node::NodeState;
use crescent_transport::grant::put_subject;

/// The wire's default placement (`random`) stands for "the server's default".
pub fn with_default_placement(state: &NodeState, mut req: PutStartRequest) -> PutStartRequest {
    if req.placement == Placement::Random {
        req.placement = state.store_settings.default_placement;
    }
    req
}

pub fn put_start(state: &NodeState, req: PutStartRequest) -> Result<PutStartReply, ApiError> {
    state.authority(&req.id)?;
    state.rebuild.admit_object()?;
    let req = with_default_placement(state, req);
    if let Some(cold) = state.cold.get() {
        cold.admit_put()?;
    }
    let now = state.now_ms();
    let mut reply = super::allowance::put_start(state, &req, now)?;
    crescent_crash::point(points::PUT_START_AFTER_RESERVE);
    grant_put(state, &req.id, &mut reply, now);
    Ok(reply)
}

/// Attaches write grants to a put_start answer's replicas (with `[auth]`), bound to the put
/// (docs/security.md, "The data plane").
pub fn grant_put(state: &NodeState, id: &ObjectId, reply: &mut PutStartReply, now_ms: i64) {
    if let Some(grants) = state.auth.grants() {
        let subject = put_subject(id, reply.put_id);
        grants.grant_replicas(&mut reply.replicas, TransferOp::Write, now_ms, subject);
    }
}

/// Attaches read grants to a get answer's replicas and staged payload (with `[auth]`).
pub fn grant_get(state: &NodeState, reply: &mut GetReply, now_ms: i64) {
    let Some(grants) = state.auth.grants() else {
        return;
    };
    grants.grant_replicas(&mut reply.replicas, TransferOp::Read, now_ms, [0; 16]);
    if let Some(staged) = reply.staged.as_mut() {
        let owner = crate::cold::staging::staged_owner(&staged.segment_id);
        let g = grants.mint(
            owner,
            &staged.segment_id,
            TransferOp::Read,
            staged.offset,
            staged.length,
            now_ms,
            [0; 16],
        );
        staged.grant = Some(g.encode().to_vec());
    }
}

pub fn put_end(state: &NodeState, req: PutEndRequest) -> Result<Ack, ApiError> {
    state.authority(&req.id)?;
    state.rebuild.admit_object()?;
    crescent_crash::point(points::PUT_END_BEFORE_COMMIT);
    match state.cold.get() {
        // An overwrite makes the old content's cold copy obsolete: its reclaim is planned
        // before the swap and run after it.
        Some(cold) => cold
            .with_reclaim(&state.cold_context, &req.id, || {
                state.directory.put_end(&req, state.now_ms())
            })
            .map_err(from_cold)??,
        None => state.directory.put_end(&req, state.now_ms())?,
    }
    if let Some(cold) = state.cold.get() {
        cold.put_completed(&state.cold_context, &req.id);
    }
    crescent_crash::point(points::PUT_END_AFTER_COMMIT);
    Ok(Ack {})
}

pub fn put_revoke(state: &NodeState, req: PutEndRequest) -> Result<Ack, ApiError> {
    state.rebuild.admit_object()?;
    state.directory.put_revoke(&req, state.now_ms())?;
    Ok(Ack {})
}

// Reads are served during a rebuild for objects already replayed (their owner completed or
// is replaying); what is not found yet answers UNAVAILABLE/REBUILDING, never NOT_FOUND.

pub fn get(state: &NodeState, req: GetRequest) -> Result<GetReply, ApiError> {
    state.read_authority(&req.id)?;
    let open = state.rebuild.is_open();
    let found = state
        .directory
        .get(&req.id, state.now_ms())
        .map_err(ApiError::from);
    let reply = state.rebuild.read(open, found)?;
    let mut reply = match state.cold.get() {
        // No hot replica: a cold-only object, restored (verified) on read.
        Some(cold) if reply.replicas.is_empty() => crate::cold::restore::restore_get(
            &state.cold_context,
            cold,
            &req.id,
            reply,
            req.accept_cold_backing,
            req.accept_staged,
        )
        .map_err(from_cold)?,
        _ => reply,
    };
    grant_get(state, &mut reply, state.now_ms());
    Ok(reply)
}

pub fn exist(state: &NodeState, req: ObjectRequest) -> Result<ExistReply, ApiError> {
    state.read_authority(&req.id)?;
    let open = state.rebuild.is_open();
    let exists = state.directory.exist(&req.id, state.now_ms())?;
    if !exists && !open {
        return Err(state.rebuild.not_yet());
    }
    Ok(ExistReply { exists })
}

pub fn size(state: &NodeState, req: ObjectRequest) -> Result<SizeReply, ApiError> {
    state.read_authority(&req.id)?;
    let open = state.rebuild.is_open();
    let r = state.directory.get_size(&req.id).map_err(ApiError::from);
    state.rebuild.read(open, r).map(|size| SizeReply { size })
}

pub fn remove(state: &NodeState, req: RemoveRequest) -> Result<Ack, ApiError> {
    state.read_authority(&req.id)?;
    state.rebuild.admit_object()?;
    match state.cold.get() {
        // A managed object is refused before a reclaim of its cold copy is planned.
        Some(cold) => {
            state.directory.refuse_if_managed(&req.id)?;
            cold.with_reclaim(&state.cold_context, &req.id, || {
                state.directory.remove(&req.id, req.force, state.now_ms())
            })
            .map_err(from_cold)??
        }
        None => state.directory.remove(&req.id, req.force, state.now_ms())?,
    }
    Ok(Ack {})
}

/// Ends the caller's hold on a get's read lease. Not held back by the rebuild gate: a release
/// only ever shortens a lease, and an object not replayed yet has none to release.
pub fn release(state: &NodeState, req: ReleaseRequest) -> Result<ReleaseReply, ApiError> {
    crate::cold::staging::ack_released(&state.cold_context, std::slice::from_ref(&req));
    let released = state.directory.release(&req, state.now_ms())?;
    Ok(ReleaseReply { released })
}

/// A storage owner's heartbeat. The answer also carries the replicas crescentd released in
/// the owner's segments since it last acknowledged (docs/rebuild.md, "Releases"), so a later
/// replay cannot bring removed objects back.
pub fn heartbeat(state: &NodeState, req: HeartbeatRequest) -> Result<HeartbeatReply, ApiError> {
    let _span = tracing::debug_span!("owner.heartbeat", owner = %req.owner_id).entered();
    state
        .liveness
        .heartbeat(&req.owner_id, req.incarnation, state.now_ms())?;
    let (acked, released) = state.directory.releases().exchange_acked(
        &req.owner_id,
        req.releases_applied,
        crescent_store::releases::MAX_RELEASES_PER_HEARTBEAT,
    );
    if !acked.is_empty() {
        state.removals.settle(&req.owner_id, acked);
    }
    Ok(HeartbeatReply {
        interval_ms: state.store_settings.heartbeat_interval_ms(),
        term: state.runtime.term(),
        released,
        data_key: owner_data_key(state, &req.owner_id),
    })
}

/// The grant key an owner's listener verifies with (with `[auth]`; a secret, sent only to
/// the owner itself: heartbeat and register are owner-scoped routes).
pub fn owner_data_key(state: &NodeState, owner_id: &str) -> Option<Vec<u8>> {
    state
        .auth
        .grants()
        .map(|g| g.owner_key(owner_id).bytes().to_vec())
}

fn map_items<T, U>(items: Vec<ItemResult<T>>, f: impl Fn(T) -> U) -> BatchReply<U> {
    BatchReply {
        items: items
            .into_iter()
            .map(|r| match r {
                ItemResult::Ok(v) => ItemResult::Ok(f(v)),
                ItemResult::Err { code, message } => ItemResult::Err { code, message },
            })
            .collect(),
    }
}

fn ids(items: Vec<ObjectRequest>) -> Vec<ObjectId> {
    items.into_iter().map(|r| r.id).collect()
}

// Batch forms: one answer per item, in order; a bad item never fails the others, and a batch
// over `MAX_BATCH` items is refused whole (INVALID_ARGUMENT) before any item runs.

pub fn batch_put_start(
    state: &NodeState,
    req: BatchRequest<PutStartRequest>,
) -> Result<BatchReply<PutStartReply>, ApiError> {
    state.rebuild.admit_object()?;
    let (items, split) = Split::items(state.mesh_role(), req.items, |r| &r.id);
    let items: Vec<PutStartRequest> = items
        .into_iter()
        .map(|r| with_default_placement(state, r))
        .collect();
    let now = state.now_ms();
    let mut done = state.directory.batch_put_start(&items, now)?;
    super::allowance::batch_items(state, &items, &mut done, now);
    for (req, item) in items.iter().zip(done.iter_mut()) {
        if let ItemResult::Ok(reply) = item {
            grant_put(state, &req.id, reply, now);
        }
    }
    Ok(BatchReply {
        items: split.merge(done),
    })
}

pub fn batch_put_end(
    state: &NodeState,
    req: BatchRequest<PutEndRequest>,
) -> Result<BatchReply<Ack>, ApiError> {
    state.rebuild.admit_object()?;
    let (items, split) = Split::items(state.mesh_role(), req.items, |r| &r.id);
    let req = BatchRequest { items };
    let mut done = state.directory.batch_put_end(&req.items, state.now_ms())?;
    // Items whose old content has a materialized cold copy are refused by the directory
    // until its reclaim is planned: end those one by one through the cold tier.
    if state.cold.get().is_some() {
        for (item, result) in req.items.iter().zip(done.iter_mut()) {
            let cold_backed = matches!(result, ItemResult::Err { code, .. } if *code == crescent_wire::ErrorCode::Busy)
                && state
                    .directory
                    .route(&item.id)
                    .ok()
                    .flatten()
                    .is_some_and(|r| r.cold.is_some());
            if cold_backed {
                *result = match put_end(state, item.clone()) {
                    Ok(_) => ItemResult::Ok(()),
                    Err(e) => ItemResult::Err {
                        code: e.code,
                        message: e.message,
                    },
                };
            }
        }
    }
    if let Some(cold) = state.cold.get() {
        for (item, result) in req.items.iter().zip(done.iter()) {
            if matches!(result, ItemResult::Ok(())) {
                cold.put_completed(&state.cold_context, &item.id);
            }
        }
    }
    Ok(map_items(split.merge(done), |()| Ack {}))
}

pub fn batch_put_revoke(
    state: &NodeState,
    req: BatchRequest<PutEndRequest>,
) -> Result<BatchReply<Ack>, ApiError> {
    state.rebuild.admit_object()?;
    let done = state
        .directory
        .batch_put_revoke(&req.items, state.now_ms())?;
    Ok(map_items(done, |()| Ack {}))
}

pub fn batch_get(
    state: &NodeState,
    req: BatchRequest<ObjectRequest>,
) -> Result<BatchReply<GetReply>, ApiError> {
    let open = state.rebuild.is_open();
    let (items, split) = Split::reads(
        state.mesh_role(),
        |id| state.holds(id),
        req.items,
        |r| &r.id,
    );
    let ids = ids(items);
    let mut done = state.directory.batch_get(&ids, state.now_ms())?;
    if !open {
        for item in &mut done {
            if matches!(
                item,
                ItemResult::Err {
                    code: ErrorCode::NotFound,
                    ..
                }
            ) {
                let e = state.rebuild.not_yet();
                *item = ItemResult::Err {
                    code: e.code,
                    message: e.message,
                };
            }
        }
    }
    if let Some(cold) = state.cold.get() {
        // Cold-only items are restored (verified) grouped by device; a failure fails only
        // its items.
        let cold_only: Vec<(usize, ObjectId, GetReply)> = ids
            .iter()
            .zip(done.iter())
            .enumerate()
            .filter_map(|(i, (id, item))| match item {
                ItemResult::Ok(reply) if reply.replicas.is_empty() => {
                    Some((i, id.clone(), reply.clone()))
                }
                _ => None,
            })
            .collect();
        if !cold_only.is_empty() {
            for (i, restored) in
                crate::cold::restore_batch::restore_batch(&state.cold_context, cold, cold_only)
            {
                done[i] = match restored {
                    Ok(r) => ItemResult::Ok(r),
                    Err(e) => {
                        let e = from_cold(e);
                        ItemResult::Err {
                            code: e.code,
                            message: e.message,
                        }
                    }
                };
            }
        }
    }
    let now = state.now_ms();
    for item in done.iter_mut() {
        if let ItemResult::Ok(reply) = item {
            grant_get(state, reply, now);
        }
    }
    Ok(BatchReply {
        items: split.merge(done),
    })
}

pub fn batch_release(
    state: &NodeState,
    req: BatchRequest<ReleaseRequest>,
) -> Result<BatchReply<ReleaseReply>, ApiError> {
    crate::cold::staging::ack_released(&state.cold_context, &req.items);
    let done = state.directory.batch_release(&req.items, state.now_ms())?;
    Ok(map_items(done, |released| ReleaseReply { released }))
}

pub fn batch_exist(
    state: &NodeState,
    req: BatchRequest<ObjectRequest>,
) -> Result<BatchReply<ExistReply>, ApiError> {
    let open = state.rebuild.is_open();
    let (items, split) = Split::reads(
        state.mesh_role(),
        |id| state.holds(id),
        req.items,
        |r| &r.id,
    );
    let done = state.directory.batch_exist(&ids(items), state.now_ms())?;
    let mut items = map_items(done, |exists| ExistReply { exists }).items;
    if !open {
        for item in &mut items {
            if matches!(item, ItemResult::Ok(ExistReply { exists: false })) {
                let e = state.rebuild.not_yet();
                *item = ItemResult::Err {
                    code: e.code,
                    message: e.message,
                };
            }
        }
    }
    Ok(BatchReply {
        items: split.merge(items),
    })
}

/// Remove carries `force` per item, so items run one by one here (same limit as the store's
/// batch forms).
pub fn batch_remove(
    state: &NodeState,
    req: BatchRequest<RemoveRequest>,
) -> Result<BatchReply<Ack>, ApiError> {
    state.rebuild.admit_object()?;
    if req.items.len() > MAX_BATCH {
        return Err(StoreError::InvalidArgument {
            field: "items",
            reason: format!(
                "{} items; a batch holds at most {MAX_BATCH}",
                req.items.len()
            ),
        }
        .into());
    }
    let now = state.now_ms();
    let (items, split) = Split::reads(
        state.mesh_role(),
        |id| state.holds(id),
        req.items,
        |r| &r.id,
    );
    let items = items
        .iter()
        .map(|r| {
            let removed = match state.cold.get() {
                Some(cold) => state
                    .directory
                    .refuse_if_managed(&r.id)
                    .map_err(ApiError::from)
                    .and_then(|()| {
                        cold.with_reclaim(&state.cold_context, &r.id, || {
                            state.directory.remove(&r.id, r.force, now)
                        })
                        .map_err(from_cold)
                    })
                    .and_then(|r| r.map_err(ApiError::from)),
                None => state
                    .directory
                    .remove(&r.id, r.force, now)
                    .map_err(ApiError::from),
            };
            match removed {
                Ok(()) => ItemResult::Ok(Ack {}),
                Err(e) => ItemResult::Err {
                    code: e.code,
                    message: e.message,
                },
            }
        })
        .collect();
    Ok(BatchReply {
        items: split.merge(items),
    })
}
