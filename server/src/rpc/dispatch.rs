//! Decodes one request body, checks it against the connection's credential (with `[auth]`,
//! `super::session`), runs the shared operation ([`crate::api::ops`]) and appends the
//! response frame. Counts and times it like the HTTP middleware does (bounded labels: the op and
//! the outcome code).

use std::time::Instant;

use crescent_wire::rpc::{decode_body, encode_response, RpcOp, RpcStatus};
use crescent_wire::{ApiError, ErrorCode};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::compact;
use super::scoped::Scoped;
use super::session::{Grant, Session};
use crate::api::ops;
use crate::node::NodeState;

/// The outcome label of a successful request.
const OK: &str = "OK";

/// Answers one request into `out`; true when it was refused because the connection's
/// credential expired or was revoked (the caller then closes the connection).
pub(super) fn handle(
    state: &NodeState,
    op: RpcOp,
    request_id: u64,
    body: &[u8],
    session: Option<&mut Session>,
    out: &mut Vec<u8>,
) -> bool {
    let span = tracing::debug_span!("rpc", op = op.as_str(), request_id);
    let _entered = span.enter();
    let started = Instant::now();
    let result = match session {
        None => run(&Request::new(state, request_id, body, None), op, out),
        Some(session) => session.admit(state, op).and_then(|grant| {
            run(
                &Request::new(state, request_id, body, Some(&grant)),
                op,
                out,
            )
        }),
    };
    let (code, credential_ended) = match result {
        Ok(()) => (OK, false),
        Err(e) => {
            let code = e.code.as_str();
            tracing::debug!(error = %e, "RPC request refused");
            encode_response(out, RpcStatus::Error, request_id, &e)
                .expect("an ApiError always encodes");
            (code, e.code == ErrorCode::Unauthenticated)
        }
    };
    let m = &state.metrics;
    m.rpc_requests.with_label_values(&[op.as_str(), code]).inc();
    m.rpc_latency
        .with_label_values(&[op.as_str()])
        .observe(started.elapsed().as_secs_f64());
    credential_ended
}

/// One request's context: the node, its id and body, and (with `[auth]`) what the table
/// allowed it.
struct Request<'a> {
    state: &'a NodeState,
    request_id: u64,
    body: &'a [u8],
    grant: Option<&'a Grant<'a>>,
}

impl<'a> Request<'a> {
    fn new(
        state: &'a NodeState,
        request_id: u64,
        body: &'a [u8],
        grant: Option<&'a Grant<'a>>,
    ) -> Self {
        Self {
            state,
            request_id,
            body,
            grant,
        }
    }
}

fn run(r: &Request<'_>, op: RpcOp, out: &mut Vec<u8>) -> Result<(), ApiError> {
    let state = r.state;
    match op {
        RpcOp::PutStart => call(r, out, |q| ops::put_start(state, q)),
        RpcOp::PutEnd => call(r, out, |q| ops::put_end(state, q)),
        RpcOp::PutRevoke => call(r, out, |q| ops::put_revoke(state, q)),
        RpcOp::Get => call(r, out, |q| ops::get(state, q)),
        RpcOp::Exist => call(r, out, |q| ops::exist(state, q)),
        RpcOp::Size => call(r, out, |q| ops::size(state, q)),
        RpcOp::Remove => call(r, out, |q| ops::remove(state, q)),
        RpcOp::BatchPutStart => call(r, out, |q| ops::batch_put_start(state, q)),
        RpcOp::BatchPutEnd => call(r, out, |q| ops::batch_put_end(state, q)),
        RpcOp::BatchPutRevoke => call(r, out, |q| ops::batch_put_revoke(state, q)),
        RpcOp::BatchGet => call(r, out, |q| ops::batch_get(state, q)),
        RpcOp::BatchExist => call(r, out, |q| ops::batch_exist(state, q)),
        RpcOp::BatchRemove => call(r, out, |q| ops::batch_remove(state, q)),
        RpcOp::Heartbeat => call(r, out, |q| ops::heartbeat(state, q)),
        RpcOp::Release => call(r, out, |q| ops::release(state, q)),
        RpcOp::BatchRelease => call(r, out, |q| ops::batch_release(state, q)),
        RpcOp::BatchGetCompact => call(r, out, |q| compact::batch_get(state, q)),
        RpcOp::BatchPutStartCompact => call(r, out, |q| compact::batch_put_start(state, q)),
        RpcOp::BatchPutEndCompact => call(r, out, |q| compact::batch_put_end(state, q)),
    }
}

/// Decodes the op's request type, scopes it to the credential, runs it and appends its
/// reply. A body that is not the op's request type is INVALID_ARGUMENT, as on HTTP.
fn call<Req, Rep>(
    r: &Request<'_>,
    out: &mut Vec<u8>,
    op: impl FnOnce(Req) -> Result<Rep, ApiError>,
) -> Result<(), ApiError>
where
    Req: DeserializeOwned + Scoped,
    Rep: Serialize,
{
    let mut req: Req =
        decode_body(r.body).map_err(|e| ApiError::invalid(format!("invalid msgpack body: {e}")))?;
    if let Some(grant) = r.grant {
        grant.scope(r.state, &mut req)?;
    }
    let reply = op(req)?;
    encode_response(out, RpcStatus::Ok, r.request_id, &reply)
        .map_err(|e| ApiError::internal(format!("cannot encode response: {e}")))
}
