//! Object routes (`crescent_wire::store::routes`): put_start / put_end / put_revoke, get,
//! exist, size, remove, release (of a get's read lease), remove_prefix, list. Batch forms are in `objects_batch`. Each route
//! decodes its body and calls the shared operation in [`super::ops`] (the RPC fast path calls
//! the same ones).
//!
//! remove_prefix walks every shard, so it runs on the blocking pool; list is bounded by its page.

use std::sync::Arc;

use actix_web::web;
use crescent_wire::store::{
    Ack, ExistReply, GetReply, GetRequest, ListReply, ListRequest, ObjectRequest, PutEndRequest,
    PutStartReply, PutStartRequest, ReleaseReply, ReleaseRequest, RemovePrefixReply,
    RemovePrefixRequest, RemoveRequest, SizeReply,
};

use super::error::{from_blocking, HttpError};
use super::ops;
use super::wire::{Reply, Wire};
use crate::node::NodeState;
use crate::rpc::scoped::Scoped;

pub(crate) type State = web::Data<Arc<NodeState>>;

pub async fn put_start(
    state: State,
    Wire(mut req): Wire<PutStartRequest>,
) -> Result<Reply<PutStartReply>, HttpError> {
    let size = req.size;
    let _permit = admit(&state, &mut req, 1, size).await;
    Ok(Reply(ops::put_start(&state, req)?))
}

pub async fn put_end(
    state: State,
    Wire(mut req): Wire<PutEndRequest>,
) -> Result<Reply<Ack>, HttpError> {
    let node = state.get_ref().clone();
    let _permit = admit(&node, &mut req, 1, 0).await;
    Ok(Reply(
        off_worker_if_owner_io(state, move |s| ops::put_end(s, req)).await?,
    ))
}

pub async fn put_revoke(
    state: State,
    Wire(mut req): Wire<PutEndRequest>,
) -> Result<Reply<Ack>, HttpError> {
    let _permit = admit(&state, &mut req, 1, 0).await;
    Ok(Reply(ops::put_revoke(&state, req)?))
}

/// A cold-only object's restore may wait for the device's storage owner, whose poll needs a
/// free HTTP worker to answer: see [`off_worker_if_owner_io`].
pub async fn get(
    state: State,
    Wire(mut req): Wire<GetRequest>,
) -> Result<Reply<GetReply>, HttpError> {
    let node = state.get_ref().clone();
    let _permit = admit(&node, &mut req, 1, 0).await;
    Ok(Reply(
        off_worker_if_owner_io(state, move |s| ops::get(s, req)).await?,
    ))
}

pub async fn exist(
    state: State,
    Wire(mut req): Wire<ObjectRequest>,
) -> Result<Reply<ExistReply>, HttpError> {
    let _permit = admit(&state, &mut req, 1, 0).await;
    Ok(Reply(ops::exist(&state, req)?))
}

pub async fn size(
    state: State,
    Wire(mut req): Wire<ObjectRequest>,
) -> Result<Reply<SizeReply>, HttpError> {
    let _permit = admit(&state, &mut req, 1, 0).await;
    Ok(Reply(ops::size(&state, req)?))
}

/// Acknowledged once what it removed from owners' segments is journaled (docs/rebuild.md,
/// "Removes are journaled"); so are the batch and prefix forms.
pub async fn remove(
    state: State,
    Wire(mut req): Wire<RemoveRequest>,
) -> Result<Reply<Ack>, HttpError> {
    let removals = state.removals.clone();
    let node = state.get_ref().clone();
    let permit = admit(&node, &mut req, 1, 0).await;
    let ack = off_worker_if_owner_io(state, move |s| ops::remove(s, req)).await?;
    drop(permit);
    removals.wait_recorded().await?;
    Ok(Reply(ack))
}

/// Runs `op` on the blocking pool when the node has a cold device on a storage owner, inline
/// otherwise. A get of a cold-only object (remote restore), a remove or an overwrite (the
/// reclaim's payload delete) may wait for a storage owner's answer, which arrives with the
/// owner's next HTTP poll: run on an HTTP worker, the wait could hold the very worker that
/// poll's connection is served by, so nothing is answered until the owner counts as silent
/// (6 s) and the operation fails (a reclaim is then left active). Found by the HA test
/// `tests/tests/ha_cold_owner.rs` (HTTP only; the RPC fast path runs on its own threads).
/// A slot of the node's admission gate for a store request of `items` items announcing
/// `bytes` put bytes (docs/tenants.md, "Soft isolation"); at once when nobody waits.
pub(crate) async fn admit<'a, R: Scoped>(
    node: &'a NodeState,
    req: &mut R,
    items: u64,
    bytes: u64,
) -> crate::sched::Permit<'a> {
    node.gate
        .admit(|| crate::sched::Ticket::of_typed(|f| req.tenants(f), items, bytes))
        .await
}

pub(crate) async fn off_worker_if_owner_io<T: Send + 'static>(
    state: State,
    op: impl FnOnce(&NodeState) -> Result<T, crescent_wire::ApiError> + Send + 'static,
) -> Result<T, HttpError> {
    if !state.cold.get().is_some_and(|c| c.has_owner_devices()) {
        return Ok(op(&state)?);
    }
    let node = state.into_inner();
    Ok(web::block(move || op(&node))
        .await
        .map_err(from_blocking)??)
}

pub async fn release(
    state: State,
    Wire(mut req): Wire<ReleaseRequest>,
) -> Result<Reply<ReleaseReply>, HttpError> {
    let _permit = admit(&state, &mut req, 1, 0).await;
    Ok(Reply(ops::release(&state, req)?))
}

pub async fn remove_prefix(
    state: State,
    Wire(req): Wire<RemovePrefixRequest>,
) -> Result<Reply<RemovePrefixReply>, HttpError> {
    state.rebuild.admit_object()?;
    let now = state.now_ms();
    let node = state.cold_context.clone();
    let reply = web::block(move || crate::cold::ops::remove_prefix(&node, &req, now))
        .await
        .map_err(from_blocking)??;
    state.removals.wait_recorded().await?;
    Ok(Reply(reply))
}

pub async fn list(
    state: State,
    Wire(req): Wire<ListRequest>,
) -> Result<Reply<ListReply>, HttpError> {
    state.rebuild.admit_object()?;
    Ok(Reply(state.directory.list(&req)?))
}

/// `POST /v1/objects/scan` (admin): a page of every object of every scope (docs/api.md,
/// "Scanning every object"). Bounded by its page, like list.
pub async fn scan(
    state: State,
    Wire(req): Wire<crescent_wire::scan::ScanRequest>,
) -> Result<Reply<crescent_wire::scan::ScanReply>, HttpError> {
    state.rebuild.admit_object()?;
    Ok(Reply(state.directory.scan(&req)?))
}
