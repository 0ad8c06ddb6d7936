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

pub(crate) type State = web::Data<Arc<NodeState>>;

pub async fn put_start(
    state: State,
    Wire(req): Wire<PutStartRequest>,
) -> Result<Reply<PutStartReply>, HttpError> {
    Ok(Reply(ops::put_start(&state, req)?))
}

pub async fn put_end(
    state: State,
    Wire(req): Wire<PutEndRequest>,
) -> Result<Reply<Ack>, HttpError> {
    Ok(Reply(ops::put_end(&state, req)?))
}

pub async fn put_revoke(
    state: State,
    Wire(req): Wire<PutEndRequest>,
) -> Result<Reply<Ack>, HttpError> {
    Ok(Reply(ops::put_revoke(&state, req)?))
}

/// On the blocking pool: a cold-only object's restore reads its device, or waits for the
/// device's storage owner, whose poll needs a free HTTP worker to answer (run on a worker,
/// a few concurrent restores could starve the owner's poll until it timed out).
pub async fn get(state: State, Wire(req): Wire<GetRequest>) -> Result<Reply<GetReply>, HttpError> {
    let node = state.get_ref().clone();
    let reply = web::block(move || ops::get(&node, req))
        .await
        .map_err(from_blocking)??;
    Ok(Reply(reply))
}

pub async fn exist(
    state: State,
    Wire(req): Wire<ObjectRequest>,
) -> Result<Reply<ExistReply>, HttpError> {
    Ok(Reply(ops::exist(&state, req)?))
}

pub async fn size(
    state: State,
    Wire(req): Wire<ObjectRequest>,
) -> Result<Reply<SizeReply>, HttpError> {
    Ok(Reply(ops::size(&state, req)?))
}

pub async fn remove(state: State, Wire(req): Wire<RemoveRequest>) -> Result<Reply<Ack>, HttpError> {
    Ok(Reply(ops::remove(&state, req)?))
}

pub async fn release(
    state: State,
    Wire(req): Wire<ReleaseRequest>,
) -> Result<Reply<ReleaseReply>, HttpError> {
    Ok(Reply(ops::release(&state, req)?))
}

pub async fn remove_prefix(
    state: State,
    Wire(req): Wire<RemovePrefixRequest>,
) -> Result<Reply<RemovePrefixReply>, HttpError> {
    state.rebuild.admit_object()?;
    let now = state.now_ms();
    let node = state.clone();
    let reply = web::block(move || crate::cold::ops::remove_prefix(&node, &req, now))
        .await
        .map_err(from_blocking)??;
    Ok(Reply(reply))
}

pub async fn list(
    state: State,
    Wire(req): Wire<ListRequest>,
) -> Result<Reply<ListReply>, HttpError> {
    state.rebuild.admit_object()?;
    Ok(Reply(state.directory.list(&req)?))
}
