//! Puts that found this cluster's allowance of a tenant's quota short, in a mesh
//! (docs/tenants.md, "Quota across a mesh"): the exchange decides whether the put runs again
//! at once (the home lifted its own cap), waits for room (UNAVAILABLE, not run: the client
//! sends it again) or is refused QUOTA_EXCEEDED (the home has no room left).

use crescent_store::StoreError;
use crescent_wire::mesh_quota::Amount;
use crescent_wire::store::{ItemResult, PutStartReply, PutStartRequest};
use crescent_wire::ApiError;

use crate::mesh::quota::Short;
use crate::node::NodeState;

/// What a put of `req` asks of its tenant's quota: its bytes and one object (an overwrite
/// adds none, but asking for one costs at most one object of room).
fn want(req: &PutStartRequest) -> Amount {
    Amount {
        bytes: req.size,
        objects: 1,
    }
}

/// What to do after the directory refused `req` for want of this cluster's allowance
/// (`short`): `Ok` to run it again now (the home lifted its own cap), else the answer, the
/// exchange's refusal (or `short` itself outside a mesh).
pub fn after_short(
    state: &NodeState,
    req: &PutStartRequest,
    short: StoreError,
) -> Result<(), ApiError> {
    match state.mesh_quota.get() {
        Some(quota) => match quota.on_short(req.id.tenant(), want(req)) {
            Short::Retry => Ok(()),
            Short::Refuse(refusal) => Err(refusal),
        },
        None => Err(short.into()),
    }
}

/// The directory's put_start, with a refusal for want of allowance handed to the exchange.
pub fn put_start(
    state: &NodeState,
    req: &PutStartRequest,
    now: i64,
) -> Result<PutStartReply, ApiError> {
    match state.directory.put_start(req, now) {
        Err(e @ StoreError::AllowanceShort { .. }) => {
            after_short(state, req, e)?;
            Ok(state.directory.put_start(req, now)?)
        }
        other => Ok(other?),
    }
}

/// The batch form: each item refused for want of allowance is answered as a single put would
/// be (run again alone, or the exchange's refusal).
pub fn batch_items(
    state: &NodeState,
    items: &[PutStartRequest],
    done: &mut [ItemResult<PutStartReply>],
    now: i64,
) {
    if state.mesh_quota.get().is_none() {
        return;
    }
    for (req, result) in items.iter().zip(done.iter_mut()) {
        let ItemResult::Err { code, message } = result else {
            continue;
        };
        if !StoreError::is_allowance_short_item(*code, message) {
            continue;
        }
        let short = StoreError::AllowanceShort {
            tenant: req.id.tenant().to_string(),
            reason: message.clone(),
        };
        *result = match after_short(state, req, short) {
            Ok(()) => match state.directory.put_start(req, now) {
                Ok(reply) => ItemResult::Ok(reply),
                Err(e) => e.into(),
            },
            Err(refusal) => ItemResult::Err {
                code: refusal.code,
                message: refusal.message,
            },
        };
    }
}
