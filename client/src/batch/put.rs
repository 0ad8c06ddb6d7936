//! Batch put: batch put_start, the staging copy of every value, one transport submission of
//! every replica write, then batch put_end for the written items and put_revoke for the
//! failed ones.

use crescent_transport::TransferDescriptor;
use crescent_wire::rpc::RpcOp;
use crescent_wire::store::{
    Ack, ItemResult, ObjectId, PutEndRequest, PutStartReply, PutStartRequest,
};
use tracing::Instrument;

use super::{item, object_ids, ItemResults};
use crate::client::CrescentClient;
use crate::dataplane::Committed;
use crate::error::ClientError;
use crate::options::PutOptions;
use crate::store::{write_descriptors, PutOutcome};

impl CrescentClient {
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
            .put_batch_inner(keys, values, opts, total)
            .instrument(tracing::debug_span!("client.put_batch", items = keys.len()));
        self.data
            .metrics
            .metered("put_batch", operation, |_| total as u64)
            .await
    }

    async fn put_batch_inner<K: AsRef<str>, V: AsRef<[u8]>>(
        &self,
        keys: &[K],
        values: &[V],
        opts: &PutOptions,
        total: usize,
    ) -> Result<ItemResults<PutOutcome>, ClientError> {
        if keys.len() != values.len() {
            return Err(ClientError::InvalidArgument(format!(
                "{} keys for {} values",
                keys.len(),
                values.len()
            )));
        }
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
            let checksum = opts.checksum.then(|| crc32c::crc32c(value));
            match id.and_then(|id| opts.request(id, value.len() as u64, checksum, own)) {
                Ok(req) => {
                    buf.write(offset, value).await?;
                    sent.push((i, offset, value.len()));
                    requests.push(req);
                    offset += value.len();
                }
                Err(e) => results[i] = Some(Err(e)),
            }
        }
        let ids: Vec<ObjectId> = requests.iter().map(|r| r.id.clone()).collect();
        let metas: Vec<_> = requests.iter().map(|r| (r.checksum, r.data_type)).collect();
        let (starts, leader): (Vec<ItemResult<PutStartReply>>, _) = self
            .batch_call_to(RpcOp::BatchPutStart, requests, None)
            .await?;
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
            let (i, off, len) = sent[pos];
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
            match write_descriptors(&reply.replicas, local.as_ref(), buf, off, len, &mut descs) {
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
        let (ended, _): (Vec<ItemResult<Ack>>, _) = self
            .batch_call_to(RpcOp::BatchPutEnd, ends, Some(&leader))
            .await?;
        for ((pos, reply), end) in ending.into_iter().zip(ended) {
            let (i, ..) = sent[pos];
            results[i] = Some(item(end).map(|_| {
                let (checksum, data_type) = metas[pos];
                self.data.committed(
                    Committed {
                        id: &ids[pos],
                        put_id: reply.put_id,
                        checksum,
                        data_type,
                    },
                    &reply.replicas,
                );
                PutOutcome {
                    put_id: reply.put_id,
                    already_existed: false,
                    replicas: reply.replicas.len(),
                }
            }));
        }
        Ok(results
            .into_iter()
            .map(|r| r.expect("every item gets a result"))
            .collect())
    }
}
