//! Batch put: batch put_start, the staging copy of every value, one transport submission of
//! every replica write, then batch put_end for the written items (`put_end.rs`) and
//! put_revoke for the failed ones.

use std::ops::Range;

use crescent_transport::{TransferDescriptor, TransportError};
use crescent_wire::rpc::RpcOp;
use crescent_wire::store::{
    Ack, DataType, ItemResult, ObjectId, PutEndRequest, PutStartReply, PutStartRequest, ReplicaDesc,
};
use tracing::Instrument;

use super::{item, object_ids, ItemResults};
use crate::buffer::RegisteredBuffer;
use crate::client::CrescentClient;
use crate::dataplane::{Committed, LocalSegment};
use crate::error::ClientError;
use crate::leader::Current;
use crate::options::PutOptions;
use crate::store::{write_descriptors, write_own_replicas, PutOutcome};

impl CrescentClient {
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

    /// One sub-batch, phase by phase: the requests, batch put_start, the replica writes in
    /// one submission, recording at the owners, put_revoke of the failed items, batch put_end.
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
        let (mut batch, requests) = PutBatch::requests(self, keys, values, opts, own);
        let (starts, leader) = self.batch_put_starts(requests).await?;
        let Some(leader) = leader else {
            // The leader changed between the requests of this batch: the started items cannot
            // be ended on one leader. Their slots are reclaimed by each leader's discard
            // timeout.
            return Ok(batch.leader_changed(starts));
        };
        // Every replica write of every started item, in one submission.
        let mut descs: Vec<TransferDescriptor> = Vec::new();
        let writing = self
            .place_started(&mut batch, starts, values, local.as_ref(), buf, &mut descs)
            .await;
        let statuses = if descs.is_empty() {
            Vec::new()
        } else {
            transport.submit(&descs).await?.statuses
        };
        let (ending, ends) = batch.written(writing, &descs, &statuses);
        let (ending, ends) = self.record_written(&mut batch, ending, ends).await;
        self.revoke_puts(std::mem::take(&mut batch.revoke), &leader)
            .await;
        // Only the leader that started the puts knows them.
        let ended = self.batch_put_ends(ends, &leader).await?;
        Ok(batch.ended(self, &ending, ended))
    }

    /// Places the value of every started item (`starts`, one per sent request): its write
    /// descriptors go to `descs`; returns the items being written as (position in `sent`, put
    /// reply, descriptor range). An item that fails here is revoked.
    async fn place_started<V: AsRef<[u8]>>(
        &self,
        batch: &mut PutBatch,
        starts: Vec<ItemResult<PutStartReply>>,
        values: &[V],
        local: Option<&LocalSegment>,
        buf: &RegisteredBuffer,
        descs: &mut Vec<TransferDescriptor>,
    ) -> Vec<Writing> {
        let mut writing: Vec<Writing> = Vec::new();
        for (pos, start) in starts.into_iter().enumerate() {
            let (i, off, _) = batch.sent[pos];
            let reply = match item(start) {
                Ok(r) => r,
                Err(e) => {
                    batch.results[i] = Some(Err(e));
                    continue;
                }
            };
            if reply.already_exists {
                batch.results[i] = Some(Ok(existed(&reply)));
                continue;
            }
            let from = descs.len();
            let value = values[i].as_ref();
            let placed = self
                .place_value(&reply.replicas, local, value, buf, off, descs)
                .await;
            match placed {
                Ok(()) => writing.push((pos, reply, from..descs.len())),
                Err(e) => {
                    descs.truncate(from);
                    batch.revoke.push(PutEndRequest {
                        id: batch.ids[pos].clone(),
                        put_id: reply.put_id,
                    });
                    batch.results[i] = Some(Err(e));
                }
            }
        }
        writing
    }

    /// Has the owners in other processes record the written items before they are ended; an
    /// item one of them could not record is revoked (it would not survive a restart). Returns
    /// the items still to end and their put_end requests.
    async fn record_written(
        &self,
        batch: &mut PutBatch,
        ending: Vec<Ending>,
        ends: Vec<PutEndRequest>,
    ) -> (Vec<Ending>, Vec<PutEndRequest>) {
        let mut unrecorded = self
            .data
            .record_at_owners(
                ending
                    .iter()
                    .map(|(pos, reply)| (batch.committed(*pos, reply), reply.replicas.as_slice())),
            )
            .await;
        if unrecorded.is_empty() {
            return (ending, ends);
        }
        let mut kept = Vec::with_capacity(ending.len());
        let mut kept_ends = Vec::with_capacity(ends.len());
        for (tag, (entry, end)) in ending.into_iter().zip(ends).enumerate() {
            match unrecorded.remove(&tag) {
                Some(e) => {
                    batch.results[batch.sent[entry.0].0] = Some(Err(e));
                    batch.revoke.push(end);
                }
                None => {
                    kept.push(entry);
                    kept_ends.push(end);
                }
            }
        }
        (kept, kept_ends)
    }

    /// Revokes the puts of the failed items on `leader`; a failed revoke is only logged (the
    /// leader's discard timeout reclaims the slot).
    async fn revoke_puts(&self, revoke: Vec<PutEndRequest>, leader: &Current) {
        if revoke.is_empty() {
            return;
        }
        match self
            .batch_call_to::<_, Ack>(RpcOp::BatchPutRevoke, revoke, Some(leader))
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
}

/// An item being written: (position in `sent`, put reply, range of its write descriptors).
type Writing = (usize, PutStartReply, Range<usize>);

/// An item written and to be ended: (position in `sent`, put reply).
type Ending = (usize, PutStartReply);

/// The items of one sub-batch between its phases.
struct PutBatch {
    /// The outcome of each item, filled in by the phase that decides it.
    results: Vec<Option<Result<PutOutcome, ClientError>>>,
    /// (item index, offset in staging, length) of each item sent.
    sent: Vec<(usize, usize, usize)>,
    /// The id of each item sent.
    ids: Vec<ObjectId>,
    /// The checksum and data type of each item sent.
    metas: Vec<(Option<u32>, DataType)>,
    /// The puts to revoke: started, then failed.
    revoke: Vec<PutEndRequest>,
}

impl PutBatch {
    /// The put_start request of each item that can be sent, with its place in staging; an
    /// item refused here (bad key or options) has its result already.
    fn requests<K: AsRef<str>, V: AsRef<[u8]>>(
        client: &CrescentClient,
        keys: &[K],
        values: &[V],
        opts: &PutOptions,
        own: Option<&str>,
    ) -> (Self, Vec<PutStartRequest>) {
        let mut results: Vec<Option<Result<PutOutcome, ClientError>>> =
            (0..keys.len()).map(|_| None).collect();
        let mut sent: Vec<(usize, usize, usize)> = Vec::with_capacity(keys.len());
        let mut requests: Vec<PutStartRequest> = Vec::with_capacity(keys.len());
        let mut offset = 0;
        for (i, id) in object_ids(client, keys).into_iter().enumerate() {
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
        let batch = PutBatch {
            results,
            sent,
            ids,
            metas,
            revoke: Vec::new(),
        };
        (batch, requests)
    }

    /// The results when the leader changed during put_start: the items that already existed
    /// are done, the others are interrupted.
    fn leader_changed(mut self, starts: Vec<ItemResult<PutStartReply>>) -> ItemResults<PutOutcome> {
        for (pos, start) in starts.into_iter().enumerate() {
            let (i, ..) = self.sent[pos];
            self.results[i] = Some(item(start).and_then(|reply| match reply.already_exists {
                true => Ok(existed(&reply)),
                false => Err(ClientError::Interrupted {
                    op: "batch_put_end",
                    detail: "the leader changed during the batch's put_start".into(),
                }),
            }));
        }
        self.into_results()
    }

    /// Sorts the items being written by the submission's `statuses`: those whose every write
    /// succeeded are to be ended (returned with their put_end requests), the others revoked.
    fn written(
        &mut self,
        writing: Vec<Writing>,
        descs: &[TransferDescriptor],
        statuses: &[Result<(), TransportError>],
    ) -> (Vec<Ending>, Vec<PutEndRequest>) {
        let mut ending: Vec<Ending> = Vec::with_capacity(writing.len());
        let mut ends: Vec<PutEndRequest> = Vec::with_capacity(writing.len());
        for (pos, reply, range) in writing {
            let (i, ..) = self.sent[pos];
            let failed = statuses[range.clone()]
                .iter()
                .zip(&descs[range])
                .find_map(|(s, d)| s.as_ref().err().map(|e| (e, d)));
            let end = PutEndRequest {
                id: self.ids[pos].clone(),
                put_id: reply.put_id,
            };
            match failed {
                Some((e, d)) => {
                    self.results[i] = Some(Err(ClientError::transfer(
                        format!("writing segment {}", d.remote.segment_id),
                        e.clone(),
                    )));
                    self.revoke.push(end);
                }
                None => {
                    ends.push(end);
                    ending.push((pos, reply));
                }
            }
        }
        (ending, ends)
    }

    /// The results once put_end answered (`ended`, one per `ending` item); the committed items
    /// are recorded in our own segment's ownership table together (one lock for the batch).
    fn ended(
        mut self,
        client: &CrescentClient,
        ending: &[Ending],
        ended: Vec<ItemResult<Ack>>,
    ) -> ItemResults<PutOutcome> {
        let mut committed = Vec::with_capacity(ending.len());
        for ((pos, reply), end) in ending.iter().zip(ended) {
            let (i, ..) = self.sent[*pos];
            self.results[i] = Some(item(end).map(|_| {
                let (checksum, data_type) = self.metas[*pos];
                committed.push((
                    Committed {
                        id: &self.ids[*pos],
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
        client.data.committed_all(committed);
        self.into_results()
    }

    /// What the owners record for the item sent at `pos` under `reply`.
    fn committed<'a>(&'a self, pos: usize, reply: &PutStartReply) -> Committed<'a> {
        let (checksum, data_type) = self.metas[pos];
        Committed {
            id: &self.ids[pos],
            put_id: reply.put_id,
            checksum,
            data_type,
        }
    }

    fn into_results(self) -> ItemResults<PutOutcome> {
        self.results
            .into_iter()
            .map(|r| r.expect("every item gets a result"))
            .collect()
    }
}

/// The outcome of an item whose key already held an object.
fn existed(reply: &PutStartReply) -> PutOutcome {
    PutOutcome {
        put_id: reply.put_id,
        already_existed: true,
        replicas: 0,
    }
}
