//! Batch object routes: one answer per item, in order; a bad item never fails the others, and
//! a batch over `MAX_BATCH` items is refused whole (INVALID_ARGUMENT) before any item runs.

use crescent_store::StoreError;
use crescent_wire::store::{
    Ack, BatchReply, BatchRequest, ExistReply, GetReply, ItemResult, ObjectId, ObjectRequest,
    PutEndRequest, PutStartReply, PutStartRequest, RemoveRequest, MAX_BATCH,
};

use super::error::HttpError;
use super::objects::{with_default_placement, State};
use super::wire::{Reply, Wire};

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

pub async fn put_start(
    state: State,
    Wire(req): Wire<BatchRequest<PutStartRequest>>,
) -> Result<Reply<BatchReply<PutStartReply>>, HttpError> {
    let items: Vec<PutStartRequest> = req
        .items
        .into_iter()
        .map(|r| with_default_placement(&state, r))
        .collect();
    let done = state.directory.batch_put_start(&items, state.now_ms())?;
    Ok(Reply(BatchReply { items: done }))
}

pub async fn put_end(
    state: State,
    Wire(req): Wire<BatchRequest<PutEndRequest>>,
) -> Result<Reply<BatchReply<Ack>>, HttpError> {
    let done = state.directory.batch_put_end(&req.items, state.now_ms())?;
    Ok(Reply(map_items(done, |()| Ack {})))
}

pub async fn put_revoke(
    state: State,
    Wire(req): Wire<BatchRequest<PutEndRequest>>,
) -> Result<Reply<BatchReply<Ack>>, HttpError> {
    let done = state
        .directory
        .batch_put_revoke(&req.items, state.now_ms())?;
    Ok(Reply(map_items(done, |()| Ack {})))
}

pub async fn get(
    state: State,
    Wire(req): Wire<BatchRequest<ObjectRequest>>,
) -> Result<Reply<BatchReply<GetReply>>, HttpError> {
    let done = state.directory.batch_get(&ids(req.items), state.now_ms())?;
    Ok(Reply(BatchReply { items: done }))
}

pub async fn exist(
    state: State,
    Wire(req): Wire<BatchRequest<ObjectRequest>>,
) -> Result<Reply<BatchReply<ExistReply>>, HttpError> {
    let done = state
        .directory
        .batch_exist(&ids(req.items), state.now_ms())?;
    Ok(Reply(map_items(done, |exists| ExistReply { exists })))
}

/// Remove carries `force` per item, so items run one by one here (same limit as the store's
/// batch forms).
pub async fn remove(
    state: State,
    Wire(req): Wire<BatchRequest<RemoveRequest>>,
) -> Result<Reply<BatchReply<Ack>>, HttpError> {
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
    let items = req
        .items
        .iter()
        .map(|r| match state.directory.remove(&r.id, r.force, now) {
            Ok(()) => ItemResult::Ok(Ack {}),
            Err(e) => e.into(),
        })
        .collect();
    Ok(Reply(BatchReply { items }))
}
