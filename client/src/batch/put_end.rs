//! Batch put_end: compact (op 19, feature `compact_put_end_v1`: the scope once, positional
//! `(key, put_id)` items, one `nil` or error per item in the answer) when the leader that
//! started the puts serves it, else the classic op with a full object id per item and a map
//! per answer.

use crescent_wire::rpc::RpcOp;
use crescent_wire::rpc_compact::{
    check_version, CompactAckReply, CompactItemError, COMPACT_VERSION, FEATURE_COMPACT_PUT_END,
};
use crescent_wire::store::{Ack, ItemResult, PutEndRequest, MAX_BATCH};
use serde::Serialize;

use crate::client::CrescentClient;
use crate::error::ClientError;
use crate::leader::Current;

/// A compact batch put_end body borrowing the keys (encodes exactly as
/// `CompactPutEndRequest`).
#[derive(Serialize)]
struct CompactPutEndRef<'a> {
    v: u16,
    #[serde(skip_serializing_if = "Option::is_none")]
    tenant: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    domain: Option<&'a str>,
    items: Vec<(&'a str, u64)>,
}

/// The classic answers of a compact acknowledgement of `sent` items; a malformed answer fails
/// the batch.
fn expand_acks(reply: CompactAckReply, sent: usize) -> Result<Vec<ItemResult<Ack>>, ClientError> {
    check_version(reply.v).map_err(|e| ClientError::Protocol(e.to_string()))?;
    if reply.items.len() != sent {
        return Err(ClientError::Protocol(format!(
            "batch of {sent} items answered with {}",
            reply.items.len()
        )));
    }
    Ok(reply
        .items
        .into_iter()
        .map(|item| match item {
            None => ItemResult::Ok(Ack {}),
            Some(CompactItemError(code, message)) => ItemResult::Err { code, message },
        })
        .collect())
}

impl CrescentClient {
    /// Ends `ends` on `leader` (the leader that started them: no other knows them), one
    /// answer per item, in order.
    pub(super) async fn batch_put_ends(
        &self,
        ends: Vec<PutEndRequest>,
        leader: &Current,
    ) -> Result<Vec<ItemResult<Ack>>, ClientError> {
        let mut out = Vec::with_capacity(ends.len());
        let one_scope = ends.first().is_some_and(|first| {
            ends.iter()
                .all(|e| e.id.tenant == first.id.tenant && e.id.domain == first.id.domain)
        });
        if one_scope {
            for chunk in ends.chunks(MAX_BATCH) {
                let body = CompactPutEndRef {
                    v: COMPACT_VERSION,
                    tenant: chunk[0].id.tenant.as_deref(),
                    domain: chunk[0].id.domain.as_deref(),
                    items: chunk
                        .iter()
                        .map(|e| (e.id.key.as_str(), e.put_id))
                        .collect(),
                };
                let answer: Option<CompactAckReply> = self
                    .call_feature_pinned(
                        leader,
                        FEATURE_COMPACT_PUT_END,
                        RpcOp::BatchPutEndCompact,
                        &body,
                    )
                    .await?;
                match answer {
                    Some(reply) => out.extend(expand_acks(reply, chunk.len())?),
                    // Not served (an older leader, or its fast path became unreachable):
                    // the rest goes the classic way.
                    None => break,
                }
            }
        }
        if out.len() < ends.len() {
            let rest = ends[out.len()..].to_vec();
            let (classic, _) = self
                .batch_call_to(RpcOp::BatchPutEnd, rest, Some(leader))
                .await?;
            out.extend(classic);
        }
        Ok(out)
    }
}
