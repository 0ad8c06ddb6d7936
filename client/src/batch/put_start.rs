//! Batch put_start: compact (one request per [`MAX_BATCH`] items, the scope and the shared
//! options once, positional `(key, size, checksum)` items) when the leader serves it and the
//! items share their scope and options, else the classic op with a full request per item.

use crescent_wire::rpc::RpcOp;
use crescent_wire::rpc_compact::{
    check_version, expand_replica, CompactPutOptions, CompactPutStartReply, CompactPutStarted,
    COMPACT_VERSION, FEATURE_COMPACT_BATCH,
};
use crescent_wire::store::{ItemResult, PutStartReply, PutStartRequest, MAX_BATCH};
use serde::Serialize;

use crate::client::CrescentClient;
use crate::error::ClientError;
use crate::leader::Current;

/// A compact batch put_start body borrowing the keys (encodes exactly as
/// `CompactPutStartRequest`).
#[derive(Serialize)]
struct CompactPutStartRef<'a> {
    v: u16,
    #[serde(skip_serializing_if = "Option::is_none")]
    tenant: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    domain: Option<&'a str>,
    options: CompactPutOptions,
    items: Vec<(&'a str, u64, Option<u32>)>,
}

/// The options of `req` that a compact body shares between its items.
fn shared_options(req: &PutStartRequest) -> CompactPutOptions {
    CompactPutOptions {
        replicas: req.replicas,
        placement: req.placement,
        preferred_segment: req.preferred_segment.clone(),
        data_type: req.data_type,
        upsert: req.upsert,
        soft_pin_secs: req.soft_pin_secs,
        hard_pin: req.hard_pin,
    }
}

/// Whether `a` and `b` agree on every option a compact body shares (what [`shared_options`]
/// takes), compared in place: no copy per item.
fn same_shared_options(a: &PutStartRequest, b: &PutStartRequest) -> bool {
    // Destructured in full so that a new request field must be placed here (shared or per
    // item) before this compiles.
    let PutStartRequest {
        id: _,
        size: _,
        checksum: _,
        replicas,
        placement,
        preferred_segment,
        data_type,
        upsert,
        soft_pin_secs,
        hard_pin,
    } = a;
    *replicas == b.replicas
        && *placement == b.placement
        && *preferred_segment == b.preferred_segment
        && *data_type == b.data_type
        && *upsert == b.upsert
        && *soft_pin_secs == b.soft_pin_secs
        && *hard_pin == b.hard_pin
}

/// The classic answers of a compact batch put_start answer for items of `sizes` (a replica's
/// length is its item's size); a malformed answer fails the batch.
fn expand_put_reply(
    reply: CompactPutStartReply,
    sizes: &[u64],
) -> Result<Vec<ItemResult<PutStartReply>>, ClientError> {
    check_version(reply.v).map_err(|e| ClientError::Protocol(e.to_string()))?;
    if reply.items.len() != sizes.len() {
        return Err(ClientError::Protocol(format!(
            "batch of {} items answered with {}",
            sizes.len(),
            reply.items.len()
        )));
    }
    let segments = reply.segments;
    let mut out = Vec::with_capacity(sizes.len());
    for (item, &size) in reply.items.into_iter().zip(sizes) {
        out.push(match item {
            ItemResult::Ok(CompactPutStarted(put_id, already_exists, replicas, state)) => {
                let replicas = replicas
                    .into_iter()
                    .map(|c| expand_replica(&segments, c, size, state))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| ClientError::Protocol(e.to_string()))?;
                ItemResult::Ok(PutStartReply {
                    put_id,
                    already_exists,
                    replicas,
                })
            }
            ItemResult::Err { code, message } => ItemResult::Err { code, message },
        });
    }
    Ok(out)
}

impl CrescentClient {
    /// The batch put_start: compact (one request per [`MAX_BATCH`] items) when the leader
    /// serves it, else classic. Also returns the leader that answered every request, or
    /// `None` if the leader changed between the requests of a long batch.
    pub(super) async fn batch_put_starts(
        &self,
        requests: Vec<PutStartRequest>,
    ) -> Result<(Vec<ItemResult<PutStartReply>>, Option<Current>), ClientError> {
        let shareable = requests.first().is_some_and(|first| {
            requests.iter().all(|r| {
                r.id.tenant == first.id.tenant
                    && r.id.domain == first.id.domain
                    && same_shared_options(r, first)
            })
        });
        if shareable {
            let first = &requests[0];
            let mut out = Vec::with_capacity(requests.len());
            let mut answered: Option<Current> = None;
            let mut one_leader = true;
            for chunk in requests.chunks(MAX_BATCH) {
                let body = CompactPutStartRef {
                    v: COMPACT_VERSION,
                    tenant: first.id.tenant.as_deref(),
                    domain: first.id.domain.as_deref(),
                    options: shared_options(first),
                    items: chunk
                        .iter()
                        .map(|r| (r.id.key.as_str(), r.size, r.checksum))
                        .collect(),
                };
                let answer: Option<(CompactPutStartReply, Current)> = self
                    .call_feature_at(FEATURE_COMPACT_BATCH, RpcOp::BatchPutStartCompact, &body)
                    .await?;
                let Some((reply, at)) = answer else {
                    // Not served (only the first chunk can get here): go the classic way.
                    break;
                };
                match &answered {
                    Some(a) if a.epoch != at.epoch => one_leader = false,
                    Some(_) => {}
                    None => answered = Some(at),
                }
                let sizes: Vec<u64> = chunk.iter().map(|r| r.size).collect();
                out.extend(expand_put_reply(reply, &sizes)?);
            }
            if out.len() == requests.len() {
                return Ok((out, answered.filter(|_| one_leader)));
            }
        }
        self.batch_call_to(RpcOp::BatchPutStart, requests, None)
            .await
    }
}
