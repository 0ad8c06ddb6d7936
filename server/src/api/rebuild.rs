//! `/v1/rebuild/*`: storage owners replay their ownership tables after a restart or failover.

use crescent_wire::rebuild::{
    GateStatus, RebuildCompleteReply, RebuildCompleteRequest, RebuildReplayReply,
    RebuildReplayRequest,
};

use super::error::HttpError;
use super::objects::State;
use super::wire::{Reply, Wire};

pub async fn replay(
    state: State,
    Wire(req): Wire<RebuildReplayRequest>,
) -> Result<Reply<RebuildReplayReply>, HttpError> {
    let now = state.now_ms();
    let me = state.clone();
    // A batch of up to 4096 entries walks the directory: keep it off the async thread.
    let reply = actix_web::web::block(move || me.rebuild.replay(&req, now))
        .await
        .map_err(super::error::from_blocking)??;
    Ok(Reply(reply))
}

pub async fn complete(
    state: State,
    Wire(req): Wire<RebuildCompleteRequest>,
) -> Result<Reply<RebuildCompleteReply>, HttpError> {
    let reply = state.rebuild.complete(&req, state.now_ms())?;
    // The owner dropped every entry its replay was told was removed.
    state.removals.settle_replayed(&req.owner_id);
    Ok(Reply(reply))
}

pub async fn status(state: State) -> Reply<GateStatus> {
    Reply(state.rebuild.status())
}
