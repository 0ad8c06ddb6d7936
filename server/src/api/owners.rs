//! `POST /v1/owners/heartbeat`: a storage owner's liveness signal (kept in memory, never
//! journaled). Owners silent for `store.client_ttl_secs` are removed by housekeeping.

use crescent_wire::store::{HeartbeatReply, HeartbeatRequest};

use super::error::HttpError;
use super::objects::State;
use super::wire::{Reply, Wire};

pub async fn heartbeat(
    state: State,
    Wire(req): Wire<HeartbeatRequest>,
) -> Result<Reply<HeartbeatReply>, HttpError> {
    state
        .liveness
        .heartbeat(&req.owner_id, req.incarnation, state.now_ms())?;
    Ok(Reply(HeartbeatReply {
        interval_ms: state.store_settings.heartbeat_interval_ms(),
        term: state.runtime.term(),
    }))
}
