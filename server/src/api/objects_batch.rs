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
use crate::node::NodeState;
use crate::rpc::scoped::Scoped;

/// A slot of the admission gate for a batch of `req.items` announcing `bytes` put bytes.
async fn admit<'a, T>(
    node: &'a NodeState,
    req: &mut BatchRequest<T>,
    bytes: u64,
) -> crate::sched::Permit<'a>
where
    BatchRequest<T>: Scoped,
{
    let items = req.items.len() as u64;
    super::objects::admit(node, req, items, bytes).await
}

pub async fn put_start(
    state: State,
    Wire(mut req): Wire<BatchRequest<PutStartRequest>>,
) -> Result<Reply<BatchReply<PutStartReply>>, HttpError> {
    let bytes = req.items.iter().fold(0u64, |s, i| s.saturating_add(i.size));
    let _permit = admit(&state, &mut req, bytes).await;
    Ok(Reply(ops::batch_put_start(&state, req)?))
}

pub async fn put_end(
    state: State,
    Wire(mut req): Wire<BatchRequest<PutEndRequest>>,
) -> Result<Reply<BatchReply<Ack>>, HttpError> {
    let node = state.get_ref().clone();
    let _permit = admit(&node, &mut req, 0).await;
    Ok(Reply(
        super::objects::off_worker_if_owner_io(state, move |s| ops::batch_put_end(s, req)).await?,
    ))
}

pub async fn put_revoke(
    state: State,
    Wire(mut req): Wire<BatchRequest<PutEndRequest>>,
) -> Result<Reply<BatchReply<Ack>>, HttpError> {
    let _permit = admit(&state, &mut req, 0).await;
    Ok(Reply(ops::batch_put_revoke(&state, req)?))
}

pub async fn get(
    state: State,
    Wire(mut req): Wire<BatchRequest<ObjectRequest>>,
) -> Result<Reply<BatchReply<GetReply>>, HttpError> {
    let node = state.get_ref().clone();
    let _permit = admit(&node, &mut req, 0).await;
    Ok(Reply(
        super::objects::off_worker_if_owner_io(state, move |s| ops::batch_get(s, req)).await?,
    ))
}

pub async fn exist(
    state: State,
    Wire(mut req): Wire<BatchRequest<ObjectRequest>>,
) -> Result<Reply<BatchReply<ExistReply>>, HttpError> {
    let _permit = admit(&state, &mut req, 0).await;
    Ok(Reply(ops::batch_exist(&state, req)?))
}

pub async fn remove(
    state: State,
    Wire(mut req): Wire<BatchRequest<RemoveRequest>>,
) -> Result<Reply<BatchReply<Ack>>, HttpError> {
    let removals = state.removals.clone();
    let node = state.get_ref().clone();
    let permit = admit(&node, &mut req, 0).await;
    let reply =
        super::objects::off_worker_if_owner_io(state, move |s| ops::batch_remove(s, req)).await?;
    drop(permit);
    // Acknowledged once what they removed is journaled (docs/rebuild.md).
    removals.wait_recorded().await?;
    Ok(Reply(reply))
}

pub async fn release(
    state: State,
    Wire(mut req): Wire<BatchRequest<ReleaseRequest>>,
) -> Result<Reply<BatchReply<ReleaseReply>>, HttpError> {
    let _permit = admit(&state, &mut req, 0).await;
    Ok(Reply(ops::batch_release(&state, req)?))
}
