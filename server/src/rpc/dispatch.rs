//! Decodes one request body, runs the shared operation ([`crate::api::ops`]) and appends the
//! response frame. Counts and times it like the HTTP middleware does (bounded labels: the op and
//! the outcome code).

use std::time::Instant;

use crescent_wire::rpc::{decode_body, encode_response, RpcOp, RpcStatus};
use crescent_wire::ApiError;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::compact;
use crate::api::ops;
use crate::node::NodeState;

/// The outcome label of a successful request.
const OK: &str = "OK";

pub(super) fn handle(
    state: &NodeState,
    op: RpcOp,
    request_id: u64,
    body: &[u8],
    out: &mut Vec<u8>,
) {
    let span = tracing::debug_span!("rpc", op = op.as_str(), request_id);
    let _entered = span.enter();
    let started = Instant::now();
    let result = match op {
        RpcOp::PutStart => call(body, out, request_id, |r| ops::put_start(state, r)),
        RpcOp::PutEnd => call(body, out, request_id, |r| ops::put_end(state, r)),
        RpcOp::PutRevoke => call(body, out, request_id, |r| ops::put_revoke(state, r)),
        RpcOp::Get => call(body, out, request_id, |r| ops::get(state, r)),
        RpcOp::Exist => call(body, out, request_id, |r| ops::exist(state, r)),
        RpcOp::Size => call(body, out, request_id, |r| ops::size(state, r)),
        RpcOp::Remove => call(body, out, request_id, |r| ops::remove(state, r)),
        RpcOp::BatchPutStart => call(body, out, request_id, |r| ops::batch_put_start(state, r)),
        RpcOp::BatchPutEnd => call(body, out, request_id, |r| ops::batch_put_end(state, r)),
        RpcOp::BatchPutRevoke => call(body, out, request_id, |r| ops::batch_put_revoke(state, r)),
        RpcOp::BatchGet => call(body, out, request_id, |r| ops::batch_get(state, r)),
        RpcOp::BatchExist => call(body, out, request_id, |r| ops::batch_exist(state, r)),
        RpcOp::BatchRemove => call(body, out, request_id, |r| ops::batch_remove(state, r)),
        RpcOp::Heartbeat => call(body, out, request_id, |r| ops::heartbeat(state, r)),
        RpcOp::Release => call(body, out, request_id, |r| ops::release(state, r)),
        RpcOp::BatchRelease => call(body, out, request_id, |r| ops::batch_release(state, r)),
        RpcOp::BatchGetCompact => call(body, out, request_id, |r| compact::batch_get(state, r)),
        RpcOp::BatchPutStartCompact => call(body, out, request_id, |r| {
            compact::batch_put_start(state, r)
        }),
        RpcOp::BatchPutEndCompact => {
            call(body, out, request_id, |r| compact::batch_put_end(state, r))
        }
    };
    let code = match result {
        Ok(()) => OK,
        Err(e) => {
            let code = e.code.as_str();
            tracing::debug!(error = %e, "RPC request refused");
            encode_response(out, RpcStatus::Error, request_id, &e)
                .expect("an ApiError always encodes");
            code
        }
    };
    let m = &state.metrics;
    m.rpc_requests.with_label_values(&[op.as_str(), code]).inc();
    m.rpc_latency
        .with_label_values(&[op.as_str()])
        .observe(started.elapsed().as_secs_f64());
}

/// Decodes the op's request type, runs it and appends its reply. A body that is not the op's
/// request type is INVALID_ARGUMENT, as on HTTP.
fn call<Req, Rep>(
    body: &[u8],
    out: &mut Vec<u8>,
    request_id: u64,
    op: impl FnOnce(Req) -> Result<Rep, ApiError>,
) -> Result<(), ApiError>
where
    Req: DeserializeOwned,
    Rep: Serialize,
{
    let req: Req =
        decode_body(body).map_err(|e| ApiError::invalid(format!("invalid msgpack body: {e}")))?;
    let reply = op(req)?;
    encode_response(out, RpcStatus::Ok, request_id, &reply)
        .map_err(|e| ApiError::internal(format!("cannot encode response: {e}")))
}
