//! Batch object routes: thin HTTP adapters over the shared batch operations in [`super::ops`]
//! (one answer per item, in order; a batch over `MAX_BATCH` items is refused whole).

use crescent_wire::store::{
    Ack, BatchReply, BatchRequest, ExistReply, GetReply, ObjectRequest, PutEndRequest,
    PutStartReply, PutStartRequest, ReleaseReply, ReleaseRequest, RemoveRequest,
};

use super::error::HttpError;
use super::objects::State;
use super::ops;
use super::wire::{Reply, Wire};

pub async fn put_start(
    state: State,
    Wire(req): Wire<BatchRequest<PutStartRequest>>,
) -> Result<Reply<BatchReply<PutStartReply>>, HttpError> {
    Ok(Reply(ops::batch_put_start(&state, req)?))
}

pub async fn put_end(
    state: State,
    Wire(req): Wire<BatchRequest<PutEndRequest>>,
) -> Result<Reply<BatchReply<Ack>>, HttpError> {
    Ok(Reply(
        super::objects::off_worker_if_owner_io(state, move |s| ops::batch_put_end(s, req)).await?,
    ))
}

pub async fn put_revoke(
    state: State,
    Wire(req): Wire<BatchRequest<PutEndRequest>>,
) -> Result<Reply<BatchReply<Ack>>, HttpError> {
    Ok(Reply(ops::batch_put_revoke(&state, req)?))
}

pub async fn get(
    state: State,
    Wire(req): Wire<BatchRequest<ObjectRequest>>,
) -> Result<Reply<BatchReply<GetReply>>, HttpError> {
    Ok(Reply(
        super::objects::off_worker_if_owner_io(state, move |s| ops::batch_get(s, req)).await?,
    ))
}

pub async fn exist(
    state: State,
    Wire(req): Wire<BatchRequest<ObjectRequest>>,
) -> Result<Reply<BatchReply<ExistReply>>, HttpError> {
    Ok(Reply(ops::batch_exist(&state, req)?))
}

pub async fn remove(
    state: State,
    Wire(req): Wire<BatchRequest<RemoveRequest>>,
) -> Result<Reply<BatchReply<Ack>>, HttpError> {
    let removals = state.removals.clone();
    let reply =
        super::objects::off_worker_if_owner_io(state, move |s| ops::batch_remove(s, req)).await?;
    // Acknowledged once what they removed is journaled (docs/rebuild.md).
    removals.wait_recorded().await?;
    Ok(Reply(reply))
}

pub async fn release(
    state: State,
    Wire(req): Wire<BatchRequest<ReleaseRequest>>,
) -> Result<Reply<BatchReply<ReleaseReply>>, HttpError> {
    Ok(Reply(ops::batch_release(&state, req)?))
}
