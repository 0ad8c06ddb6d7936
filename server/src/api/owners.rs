//! `POST /v1/owners/heartbeat`: a storage owner's liveness signal (kept in memory, never
//! journaled). Owners silent for `store.client_ttl_secs` are removed by housekeeping.

use crescent_wire::store::{HeartbeatReply, HeartbeatRequest};

use super::error::HttpError;
use super::objects::State;
use super::ops;
use super::wire::{Reply, Wire};

pub async fn heartbeat(
    state: State,
    Wire(req): Wire<HeartbeatRequest>,
) -> Result<Reply<HeartbeatReply>, HttpError> {
    Ok(Reply(ops::heartbeat(&state, req)?))
}
