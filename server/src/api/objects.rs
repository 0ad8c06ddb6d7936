//! Object routes (`crescent_wire::store::routes`): put_start / put_end / put_revoke, get,
//! exist, size, remove, remove_prefix, list. Batch forms are in `objects_batch`.
//!
//! Directory operations are short and lock one shard, so they run inline on the HTTP worker;
//! the ones that walk every shard (remove_prefix) run on the blocking pool. Time is the server
//! clock, read once per request. `store.*` spans and per-operation metrics come from the store.

use std::sync::Arc;

use actix_web::web;
use crescent_wire::store::{
    Ack, ExistReply, GetReply, ListReply, ListRequest, ObjectRequest, Placement, PutEndRequest,
    PutStartReply, PutStartRequest, RemovePrefixReply, RemovePrefixRequest, RemoveRequest,
    SizeReply,
};

use super::error::{from_blocking, HttpError};
use super::wire::{Reply, Wire};
use crate::node::NodeState;

pub(crate) type State = web::Data<Arc<NodeState>>;

/// The wire's default placement (`random`) stands for "the server's default".
pub(crate) fn with_default_placement(
    state: &NodeState,
    mut req: PutStartRequest,
) -> PutStartRequest {
    if req.placement == Placement::Random {
        req.placement = state.store_settings.default_placement;
    }
    req
}

pub async fn put_start(
    state: State,
    Wire(req): Wire<PutStartRequest>,
) -> Result<Reply<PutStartReply>, HttpError> {
    let req = with_default_placement(&state, req);
    Ok(Reply(state.directory.put_start(&req, state.now_ms())?))
}

pub async fn put_end(
    state: State,
    Wire(req): Wire<PutEndRequest>,
) -> Result<Reply<Ack>, HttpError> {
    state.directory.put_end(&req, state.now_ms())?;
    Ok(Reply(Ack {}))
}

pub async fn put_revoke(
    state: State,
    Wire(req): Wire<PutEndRequest>,
) -> Result<Reply<Ack>, HttpError> {
    state.directory.put_revoke(&req, state.now_ms())?;
    Ok(Reply(Ack {}))
}

pub async fn get(
    state: State,
    Wire(req): Wire<ObjectRequest>,
) -> Result<Reply<GetReply>, HttpError> {
    Ok(Reply(state.directory.get(&req.id, state.now_ms())?))
}

pub async fn exist(
    state: State,
    Wire(req): Wire<ObjectRequest>,
) -> Result<Reply<ExistReply>, HttpError> {
    let exists = state.directory.exist(&req.id, state.now_ms())?;
    Ok(Reply(ExistReply { exists }))
}

pub async fn size(
    state: State,
    Wire(req): Wire<ObjectRequest>,
) -> Result<Reply<SizeReply>, HttpError> {
    let size = state.directory.get_size(&req.id)?;
    Ok(Reply(SizeReply { size }))
}

pub async fn remove(state: State, Wire(req): Wire<RemoveRequest>) -> Result<Reply<Ack>, HttpError> {
    state.directory.remove(&req.id, req.force, state.now_ms())?;
    Ok(Reply(Ack {}))
}

pub async fn remove_prefix(
    state: State,
    Wire(req): Wire<RemovePrefixRequest>,
) -> Result<Reply<RemovePrefixReply>, HttpError> {
    let now = state.now_ms();
    let directory = state.directory.clone();
    let reply = web::block(move || directory.remove_prefix(&req, now))
        .await
        .map_err(from_blocking)??;
    Ok(Reply(reply))
}

pub async fn list(
    state: State,
    Wire(req): Wire<ListRequest>,
) -> Result<Reply<ListReply>, HttpError> {
    Ok(Reply(state.directory.list(&req)?))
}
