//! Batch operations: one control-plane round trip per phase for the whole batch and one
//! transport submission for all its transfers. One bad item never fails the others; the
//! outer `Result` is for the batch as a whole (server unreachable, malformed answer).
//! Batches longer than the wire limit are split into several requests.

use crescent_transport::{TransferDescriptor, TransferOp};
use crescent_wire::rpc::RpcOp;
use crescent_wire::store::{
    Ack, BatchReply, BatchRequest, ExistReply, GetReply, ItemResult, ObjectId, ObjectRequest,
    PutEndRequest, PutStartReply, PutStartRequest, RemoveRequest, MAX_BATCH,
};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tracing::Instrument;

use crate::client::CrescentClient;
use crate::dataplane::Committed;
use crate::dataplane::{read_order, remote_for};
use crate::error::ClientError;
use crate::leader::Current;
use crate::lease::release_of;
use crate::options::PutOptions;
use crate::store::{read_replica, verify, write_descriptors, PutOutcome};

type ItemResults<T> = Vec<Result<T, ClientError>>;

fn item<T>(r: ItemResult<T>) -> Result<T, ClientError> {
    match r {
        ItemResult::Ok(v) => Ok(v),
        ItemResult::Err { code, message } => Err(ClientError::item(code, message)),
    }
}

/// Scopes every key; `Err` entries are items refused before anything is sent.
fn object_ids<K: AsRef<str>>(
    client: &CrescentClient,
    keys: &[K],
) -> Vec<Result<ObjectId, ClientError>> {
    keys.iter()
        .map(|k| client.scope.object_id(k.as_ref()))
        .collect()
}

impl CrescentClient {
    /// Sends `items` (at most [`MAX_BATCH`] per request) and returns one answer per item.
    async fn batch_call<Req: Serialize, Rep: DeserializeOwned>(
        &self,
        op: RpcOp,
        items: Vec<Req>,
    ) -> Result<Vec<ItemResult<Rep>>, ClientError> {
        self.batch_call_to(op, items, None).await.map(|(v, _)| v)
    }

    /// [`Self::batch_call`] to the leader (`pinned` `None`, following failovers) or only to
    /// the leader `pinned` (the second phase of a put). Also returns the leader that answered
    /// every request, or `None` if the leader changed between the requests of a long batch.
    async fn batch_call_to<Req: Serialize, Rep: DeserializeOwned>(
        &self,
        op: RpcOp,
        items: Vec<Req>,
        pinned: Option<&Current>,
    ) -> Result<(Vec<ItemResult<Rep>>, Option<Current>), ClientError> {
        let mut out = Vec::with_capacity(items.len());
        let mut rest = items;
        let mut answered: Option<Current> = pinned.cloned();
        let mut one_leader = true;
        while !rest.is_empty() {
            let tail = rest.split_off(rest.len().min(MAX_BATCH));
            let sent = rest.len();
            let body = BatchRequest { items: rest };
            let reply: BatchReply<Rep> = match pinned {
                Some(at) => self.call_pinned(at, op, &body).await?,
                None => {
                    let (reply, at) = self.call_at(op, &body).await?;
                    match &answered {
                        Some(first) if first.epoch != at.epoch => one_leader = false,
                        Some(_) => {}
                        None => answered = Some(at),
                    }
                    reply
                }
            };
            if reply.items.len() != sent {
                return Err(ClientError::Protocol(format!(
                    "batch of {sent} items answered with {}",
                    reply.items.len()
                )));
            }
            out.extend(reply.items);
            rest = tail;
        }
        Ok((out, answered.filter(|_| one_leader)))
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

    /// The values of `keys`: one batch get, one submission reading the preferred replica of
    /// each (local first); an item whose read fails falls back to its other replicas.
    pub async fn get_batch<K: AsRef<str>>(
        &self,
        keys: &[K],
    ) -> Result<ItemResults<Vec<u8>>, ClientError> {
        let operation = self
            .get_batch_inner(keys)
            .instrument(tracing::debug_span!("client.get_batch", items = keys.len()));
        self.data
            .metrics
            .metered("get_batch", operation, |items| {
                items.iter().flatten().map(|v| v.len() as u64).sum()
            })
            .await
    }

    async fn get_batch_inner<K: AsRef<str>>(
        &self,
        keys: &[K],
    ) -> Result<ItemResults<Vec<u8>>, ClientError> {
        let mut results: Vec<Option<Result<Vec<u8>, ClientError>>> =
            (0..keys.len()).map(|_| None).collect();
        let mut asked: Vec<usize> = Vec::with_capacity(keys.len());
        let mut requests = Vec::with_capacity(keys.len());
        for (i, id) in object_ids(self, keys).into_iter().enumerate() {
            match id {
                Ok(id) => {
                    asked.push(i);
                    requests.push(ObjectRequest { id });
                }
                Err(e) => results[i] = Some(Err(e)),
            }
        }
        let replies: Vec<ItemResult<GetReply>> =
            self.batch_call(RpcOp::BatchGet, requests.clone()).await?;
        let mut found: Vec<(usize, GetReply, usize)> = Vec::with_capacity(replies.len());
        let mut releases = Vec::with_capacity(replies.len());
        let mut total = 0usize;
        for (pos, reply) in replies.into_iter().enumerate() {
            match item(reply) {
                Ok(r) => {
                    let size = r.size as usize;
                    releases.extend(release_of(&requests[pos].id, &r));
                    found.push((asked[pos], r, total));
                    total += size;
                }
                Err(e) => results[asked[pos]] = Some(Err(e)),
            }
        }
        let copied = self.copy_found(keys, found, total, &mut results).await;
        // Whatever the copy did, the leases are no longer needed.
        self.release_leases(releases).await;
        copied?;
        Ok(results
            .into_iter()
            .map(|r| r.expect("every item gets a result"))
            .collect())
    }

    /// Copies the objects a batch get found: the first choice of each in one submission, then
    /// the other replicas of those whose read failed.
    async fn copy_found<K: AsRef<str>>(
        &self,
        keys: &[K],
        found: Vec<(usize, GetReply, usize)>,
        total: usize,
        results: &mut [Option<Result<Vec<u8>, ClientError>>],
    ) -> Result<(), ClientError> {
        let transport = self.data.transport().await?;
        let staging = self.data.staging.take(transport, total)?;
        let buf = staging.buffer();
        let local = self.data.local();
        // The first choice of each item, all in one submission.
        let mut descs = Vec::with_capacity(found.len());
        let mut first: Vec<Option<usize>> = Vec::with_capacity(found.len());
        for (_, reply, off) in &found {
            let choice = read_order(&reply.replicas, local.as_ref())
                .first()
                .copied()
                .filter(|_| reply.size > 0)
                .and_then(|r| remote_for(r, local.as_ref()).ok().map(|remote| (r, remote)))
                .filter(|(r, _)| r.length == reply.size);
            first.push(choice.map(|(r, remote)| {
                descs.push(TransferDescriptor {
                    op: TransferOp::Read,
                    remote,
                    remote_offset: r.offset,
                    local: buf.handle,
                    local_offset: *off as u64,
                    length: reply.size,
                });
                descs.len() - 1
            }));
        }
        let statuses = if descs.is_empty() {
            Vec::new()
        } else {
            transport.submit(&descs).await?.statuses
        };
        for ((i, reply, off), choice) in found.into_iter().zip(first) {
            let key = keys[i].as_ref();
            let size = reply.size as usize;
            let mut value = vec![0u8; size];
            let mut outcome = match choice {
                Some(d) if statuses[d].is_ok() => {
                    buf.read(off, &mut value).await?;
                    match reply.checksum {
                        Some(_) => verify(key, reply.checksum, crc32c::crc32c(&value)),
                        None => Ok(()),
                    }
                }
                Some(d) => Err(ClientError::transfer(
                    format!("reading segment {}", descs[d].remote.segment_id),
                    statuses[d].clone().expect_err("checked above"),
                )),
                None if size == 0 => Ok(()),
                None => Err(ClientError::item(
                    crescent_wire::ErrorCode::NotReady,
                    format!("key {key:?} has no readable replica"),
                )),
            };
            if outcome.is_err() {
                // Fall back, one replica at a time, to the others (rare).
                let skip = usize::from(choice.is_some());
                for replica in read_order(&reply.replicas, local.as_ref())
                    .into_iter()
                    .skip(skip)
                {
                    let read = read_replica(
                        transport.as_ref(),
                        replica,
                        local.as_ref(),
                        buf,
                        off,
                        reply.size,
                    )
                    .await;
                    if read.is_err() {
                        continue;
                    }
                    buf.read(off, &mut value).await?;
                    if verify(key, reply.checksum, crc32c::crc32c(&value)).is_ok() {
                        outcome = Ok(());
                        break;
                    }
                }
            }
            results[i] = Some(outcome.map(|()| value));
        }
        Ok(())
    }

    /// Whether each key holds a complete object.
    pub async fn batch_is_exist<K: AsRef<str>>(
        &self,
        keys: &[K],
    ) -> Result<ItemResults<bool>, ClientError> {
        let operation = self.simple_batch(
            RpcOp::BatchExist,
            keys,
            |id| ObjectRequest { id },
            |r: ExistReply| r.exists,
        );
        self.data
            .metrics
            .metered("batch_exist", operation, |_| 0)
            .await
    }

    /// Removes each key (refused per item while read-leased).
    pub async fn remove_batch<K: AsRef<str>>(
        &self,
        keys: &[K],
    ) -> Result<ItemResults<()>, ClientError> {
        let operation = async {
            let items = self
                .simple_batch(
                    RpcOp::BatchRemove,
                    keys,
                    |id| RemoveRequest { id, force: false },
                    |_: Ack| (),
                )
                .await?;
            if let Some(local) = self.data.local() {
                for (k, r) in keys.iter().zip(&items) {
                    if r.is_ok() {
                        if let Ok(id) = self.scope.object_id(k.as_ref()) {
                            local.table.forget(&id);
                        }
                    }
                }
            }
            Ok(items)
        };
        self.data
            .metrics
            .metered("remove_batch", operation, |_| 0)
            .await
    }

    async fn simple_batch<K, Req, Rep, T>(
        &self,
        op: RpcOp,
        keys: &[K],
        request: impl Fn(ObjectId) -> Req,
        answer: impl Fn(Rep) -> T,
    ) -> Result<ItemResults<T>, ClientError>
    where
        K: AsRef<str>,
        Req: Serialize,
        Rep: DeserializeOwned,
    {
        let mut results: Vec<Option<Result<T, ClientError>>> =
            (0..keys.len()).map(|_| None).collect();
        let mut asked = Vec::with_capacity(keys.len());
        let mut requests = Vec::with_capacity(keys.len());
        for (i, id) in object_ids(self, keys).into_iter().enumerate() {
            match id {
                Ok(id) => {
                    asked.push(i);
                    requests.push(request(id));
                }
                Err(e) => results[i] = Some(Err(e)),
            }
        }
        let replies: Vec<ItemResult<Rep>> = self.batch_call(op, requests).await?;
        for (pos, r) in replies.into_iter().enumerate() {
            results[asked[pos]] = Some(item(r).map(&answer));
        }
        Ok(results
            .into_iter()
            .map(|r| r.expect("every item gets a result"))
            .collect())
    }
}
