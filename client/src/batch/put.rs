//! Batch put: batch put_start, the staging copy of every value, one transport submission of
//! every replica write, then batch put_end for the written items (`put_end.rs`) and
//! put_revoke for the failed ones.

use crescent_transport::TransferDescriptor;
use crescent_wire::rpc::RpcOp;
use crescent_wire::rpc_compact::{
    check_version, expand_replica, CompactPutOptions, CompactPutStartReply, CompactPutStarted,
    COMPACT_VERSION, FEATURE_COMPACT_BATCH,
};
use crescent_wire::store::{
    Ack, ItemResult, ObjectId, PutEndRequest, PutStartReply, PutStartRequest, ReplicaDesc,
    MAX_BATCH,
};
use serde::Serialize;
use tracing::Instrument;

use super::{item, object_ids, ItemResults};
use crate::buffer::RegisteredBuffer;
use crate::client::CrescentClient;
use crate::dataplane::{Committed, LocalSegment};
use crate::error::ClientError;
use crate::leader::Current;
use crate::options::PutOptions;
use crate::store::{write_descriptors, write_own_replicas, PutOutcome};

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
    async fn batch_put_starts(
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

    /// Puts `value` in place on each replica: our own segment's replicas straight into its
    /// memory (range-locked, done when this returns), the others as write descriptors from
    /// staging (the value is copied there only then). Every replica must be the value's
    /// length.
    async fn place_value(
        &self,
        replicas: &[ReplicaDesc],
        local: Option<&LocalSegment>,
        value: &[u8],
        staging: &RegisteredBuffer,
        staging_offset: usize,
        descs: &mut Vec<TransferDescriptor>,
    ) -> Result<(), ClientError> {
        let others = write_own_replicas(replicas, local, value).await?;
        if others.is_empty() {
            return Ok(());
        }
        staging.write(staging_offset, value).await?;
        write_descriptors(&others, local, staging, staging_offset, value.len(), descs)
    }

    /// Stores `values[i]` under `keys[i]` (default options).
    pub async fn put_batch<K: AsRef<str>, V: AsRef<[u8]>>(
        &self,
        keys: &[K],
        values: &[V],
    ) -> Result<ItemResults<PutOutcome>, ClientError> {
        self.put_batch_with(keys, values, &PutOptions::default())
            .await
    }

    /// Stores `values[i]` under `keys[i]`: batch put_start, one submission of every replica
    /// write, then batch put_end for the written items and put_revoke for the failed ones.
    pub async fn put_batch_with<K: AsRef<str>, V: AsRef<[u8]>>(
        &self,
        keys: &[K],
        values: &[V],
        opts: &PutOptions,
    ) -> Result<ItemResults<PutOutcome>, ClientError> {
        let total: usize = values.iter().map(|v| v.as_ref().len()).sum();
        let operation = self
            .put_batch_planned(keys, values, opts)
            .instrument(tracing::debug_span!("client.put_batch", items = keys.len()));
        self.data
            .metrics
            .metered("put_batch", operation, |_| total as u64)
            .await
    }

    /// Puts the batch as sub-batches within the client's budgets, each holding its bytes in
    /// flight for its tenant from before its put_start until it ended or failed
    /// (docs/tenants.md, "Soft isolation").
    async fn put_batch_planned<K: AsRef<str>, V: AsRef<[u8]>>(
        &self,
        keys: &[K],
        values: &[V],
        opts: &PutOptions,
    ) -> Result<ItemResults<PutOutcome>, ClientError> {
        if keys.len() != values.len() {
            return Err(ClientError::InvalidArgument(format!(
                "{} keys for {} values",
                keys.len(),
                values.len()
            )));
        }
        let sizes: Vec<u64> = values.iter().map(|v| v.as_ref().len() as u64).collect();
        let mut results = Vec::with_capacity(keys.len());
        for range in self.submission.plan(&sizes) {
            let bytes: u64 = sizes[range.clone()].iter().sum();
            let _inflight = self.submission.reserve(self.scope.tenant(), bytes).await;
            let (k, v) = (&keys[range.clone()], &values[range]);
            results.extend(self.put_batch_inner(k, v, opts, bytes as usize).await?);
        }
        Ok(results)
    }

    async fn put_batch_inner<K: AsRef<str>, V: AsRef<[u8]>>(
        &self,
        keys: &[K],
        values: &[V],
        opts: &PutOptions,
        total: usize,
    ) -> Result<ItemResults<PutOutcome>, ClientError> {
        // `put_batch_planned` checked that keys and values pair up.
        let transport = self.data.transport().await?;
        let staging = self.data.staging.take(transport, total)?;
        let buf = staging.buffer();
        let local = self.data.local();
        let own = local.as_ref().map(|l| &*l.remote.segment_id);
        let mut results: Vec<Option<Result<PutOutcome, ClientError>>> =
            (0..keys.len()).map(|_| None).collect();
        // (item index, offset in staging, length) of each item sent.
        let mut sent: Vec<(usize, usize, usize)> = Vec::with_capacity(keys.len());
        let mut requests: Vec<PutStartRequest> = Vec::with_capacity(keys.len());
        let mut offset = 0;
        for (i, id) in object_ids(self, keys).into_iter().enumerate() {
            let value = values[i].as_ref();
            let checksum = opts.checksum.then(|| crescent_checksum::crc32c(value));
            match id.and_then(|id| opts.request(id, value.len() as u64, checksum, own)) {
                Ok(req) => {
                    // Copied into staging later, and only if a replica is not our own.
                    sent.push((i, offset, value.len()));
                    requests.push(req);
                    offset += value.len();
                }
                Err(e) => results[i] = Some(Err(e)),
            }
        }
        let ids: Vec<ObjectId> = requests.iter().map(|r| r.id.clone()).collect();
        let metas: Vec<_> = requests.iter().map(|r| (r.checksum, r.data_type)).collect();
        let (starts, leader) = self.batch_put_starts(requests).await?;
        let Some(leader) = leader else {
            // The leader changed between the requests of this batch: the started items cannot
            // be ended on one leader. Their slots are reclaimed by each leader's discard
            // timeout.
            for (pos, start) in starts.into_iter().enumerate() {
                let (i, ..) = sent[pos];
                results[i] = Some(item(start).and_then(|reply| match reply.already_exists {
                    true => Ok(PutOutcome {
                        put_id: reply.put_id,
                        already_existed: true,
                        replicas: 0,
                    }),
                    false => Err(ClientError::Interrupted {
                        op: "batch_put_end",
                        detail: "the leader changed during the batch's put_start".into(),
                    }),
                }));
            }
            return Ok(results
                .into_iter()
                .map(|r| r.expect("every item gets a result"))
                .collect());
        };

        // Every replica write of every started item, in one submission.
        let mut descs: Vec<TransferDescriptor> = Vec::new();
        // (position in `sent`, put reply, descriptor range)
        let mut writing: Vec<(usize, PutStartReply, std::ops::Range<usize>)> = Vec::new();
        let mut revoke: Vec<PutEndRequest> = Vec::new();
        for (pos, start) in starts.into_iter().enumerate() {
            let (i, off, _) = sent[pos];
            let reply = match item(start) {
                Ok(r) => r,
                Err(e) => {
                    results[i] = Some(Err(e));
                    continue;
                }
            };
            if reply.already_exists {
                results[i] = Some(Ok(PutOutcome {
                    put_id: reply.put_id,
                    already_existed: true,
                    replicas: 0,
                }));
                continue;
            }
            let from = descs.len();
            let value = values[i].as_ref();
            let placed = self
                .place_value(&reply.replicas, local.as_ref(), value, buf, off, &mut descs)
                .await;
            match placed {
                Ok(()) => writing.push((pos, reply, from..descs.len())),
                Err(e) => {
                    descs.truncate(from);
                    revoke.push(PutEndRequest {
                        id: ids[pos].clone(),
                        put_id: reply.put_id,
                    });
                    results[i] = Some(Err(e));
                }
            }
        }
        let statuses = if descs.is_empty() {
            Vec::new()
        } else {
            transport.submit(&descs).await?.statuses
        };
        let mut ending: Vec<(usize, PutStartReply)> = Vec::with_capacity(writing.len());
        let mut ends: Vec<PutEndRequest> = Vec::with_capacity(writing.len());
        for (pos, reply, range) in writing {
            let (i, ..) = sent[pos];
            let failed = statuses[range.clone()]
                .iter()
                .zip(&descs[range])
                .find_map(|(s, d)| s.as_ref().err().map(|e| (e, d)));
            let end = PutEndRequest {
                id: ids[pos].clone(),
                put_id: reply.put_id,
            };
            match failed {
                Some((e, d)) => {
                    results[i] = Some(Err(ClientError::transfer(
                        format!("writing segment {}", d.remote.segment_id),
                        e.clone(),
                    )));
                    revoke.push(end);
                }
                None => {
                    ends.push(end);
                    ending.push((pos, reply));
                }
            }
        }
        // The owners in other processes record the written items before they are ended; an
        // item one of them could not record is revoked (it would not survive a restart).
        let unrecorded = self
            .data
            .record_at_owners(ending.iter().map(|(pos, reply)| {
                let (checksum, data_type) = metas[*pos];
                let put = Committed {
                    id: &ids[*pos],
                    put_id: reply.put_id,
                    checksum,
                    data_type,
                };
                (put, reply.replicas.as_slice())
            }))
            .await;
        if !unrecorded.is_empty() {
            let mut unrecorded = unrecorded;
            let mut kept = Vec::with_capacity(ending.len());
            let mut kept_ends = Vec::with_capacity(ends.len());
            for (tag, (entry, end)) in ending.into_iter().zip(ends).enumerate() {
                match unrecorded.remove(&tag) {
                    Some(e) => {
                        results[sent[entry.0].0] = Some(Err(e));
                        revoke.push(end);
                    }
                    None => {
                        kept.push(entry);
                        kept_ends.push(end);
                    }
                }
            }
            ending = kept;
            ends = kept_ends;
        }
        if !revoke.is_empty() {
            match self
                .batch_call_to::<_, Ack>(RpcOp::BatchPutRevoke, revoke, Some(&leader))
                .await
            {
                Ok((items, _)) => {
                    for r in items.into_iter().filter_map(|r| item(r).err()) {
                        tracing::warn!(error = %r, "put_revoke failed");
                    }
                }
                Err(e) => tracing::warn!(error = %e, "batch put_revoke failed"),
            }
        }
        // Only the leader that started the puts knows them.
        let ended = self.batch_put_ends(ends, &leader).await?;
        let mut committed = Vec::with_capacity(ending.len());
        for ((pos, reply), end) in ending.iter().zip(ended) {
            let (i, ..) = sent[*pos];
            results[i] = Some(item(end).map(|_| {
                let (checksum, data_type) = metas[*pos];
                committed.push((
                    Committed {
                        id: &ids[*pos],
                        put_id: reply.put_id,
                        checksum,
                        data_type,
                    },
                    reply.replicas.as_slice(),
                ));
                PutOutcome {
                    put_id: reply.put_id,
                    already_existed: false,
                    replicas: reply.replicas.len(),
                }
            }));
        }
        // Recorded together: one ownership-table lock for the whole batch.
        self.data.committed_all(committed);
        Ok(results
            .into_iter()
            .map(|r| r.expect("every item gets a result"))
            .collect())
    }
}
