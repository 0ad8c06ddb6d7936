//! Batch get: one batch get for the whole batch, one transport submission reading the
//! preferred replica of each item (local first), per-item fallback to the other replicas, and
//! the values the server returned inline (cold-only objects restored on read).

use std::sync::Arc;

use crescent_transport::{SegmentMemory, TransferDescriptor, TransferOp, Transport};
use crescent_wire::rpc::RpcOp;
use crescent_wire::rpc_compact::{
    check_version, expand_replica, CompactGetReply, COMPACT_VERSION, FEATURE_COMPACT_BATCH,
};
use crescent_wire::store::{GetReply, ItemResult, ObjectId, ReplicaState, MAX_BATCH};
use serde::Serialize;
use tracing::Instrument;

use super::{item, object_ids, ItemResults};
use crate::buffer::RegisteredBuffer;
use crate::client::CrescentClient;
use crate::dataplane::{grant_of, read_order, remote_for, LocalSegment};
use crate::error::ClientError;
use crate::lease::release_of;
use crate::store::{inline_checked, read_replica, verify};

/// A get request borrowing its id (encodes exactly as `ObjectRequest`).
#[derive(Serialize)]
struct ObjectRequestRef<'a> {
    id: &'a ObjectId,
}

/// A compact batch get body borrowing the keys (encodes exactly as `CompactKeysRequest`).
#[derive(Serialize)]
struct CompactKeysRef<'a> {
    v: u16,
    #[serde(skip_serializing_if = "Option::is_none")]
    tenant: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    domain: Option<&'a str>,
    keys: Vec<&'a str>,
}

/// The classic answers of a compact batch get answer for `asked` keys; a malformed answer
/// (unknown format, wrong item count, a replica naming no listed segment) fails the batch.
fn expand_get_reply(
    reply: CompactGetReply,
    asked: usize,
) -> Result<Vec<ItemResult<GetReply>>, ClientError> {
    check_version(reply.v).map_err(|e| ClientError::Protocol(e.to_string()))?;
    if reply.items.len() != asked {
        return Err(ClientError::Protocol(format!(
            "batch of {asked} items answered with {}",
            reply.items.len()
        )));
    }
    let segments = reply.segments;
    reply
        .items
        .into_iter()
        .map(|item| {
            Ok(match item {
                ItemResult::Ok(mut r) => {
                    let size = r.size();
                    let replicas = r
                        .take_replicas()
                        .into_iter()
                        .map(|c| expand_replica(&segments, c, size, ReplicaState::Complete))
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(|e| ClientError::Protocol(e.to_string()))?;
                    ItemResult::Ok(GetReply {
                        size: r.size(),
                        put_id: r.put_id(),
                        data_type: r.data_type(),
                        checksum: r.checksum(),
                        replicas,
                        lease_until_ms: r.lease_until_ms(),
                        inline: r.take_inline(),
                        // Batch gets never ask for a backing reference: cold-only items
                        // arrive inline (restored by the server, grouped per device).
                        cold_backing: None,
                        staged: None,
                    })
                }
                ItemResult::Err { code, message } => ItemResult::Err { code, message },
            })
        })
        .collect()
}

/// How the first read of a found object is done.
#[derive(Clone, Copy)]
enum FirstRead {
    /// Descriptor `i` of the batch's one submission.
    Transfer(usize),
    /// In place from our own segment's memory, at this offset.
    OwnSegment(u64),
    /// No usable replica (or an empty value).
    Nothing,
}

impl CrescentClient {
    /// The values of `keys`: one batch get, one submission reading the preferred replica of
    /// each (local first); an item whose read fails falls back to its other replicas.
    pub async fn get_batch<K: AsRef<str>>(
        &self,
        keys: &[K],
    ) -> Result<ItemResults<Vec<u8>>, ClientError> {
        self.get_batch_with(keys, |bytes| bytes.to_vec()).await
    }

    /// [`Self::get_batch`], handing each value to `take` while it is still borrowed (in place
    /// in this process's own segment, or in the staging buffer), checked against its
    /// checksum, instead of copying it into a new vector: `take` copies or decodes it where
    /// the caller wants it. `take` runs once per found item, in the order the items are read.
    ///
    /// ```no_run
    /// # async fn f(client: crescent_client::CrescentClient) -> Result<(), crescent_client::ClientError> {
    /// // Every value appended to one buffer, each item's range in it.
    /// let mut all = Vec::new();
    /// let ranges = client
    ///     .get_batch_with(&["a", "b"], |value| {
    ///         all.extend_from_slice(value);
    ///         all.len() - value.len()..all.len()
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn get_batch_with<K, T, F>(
        &self,
        keys: &[K],
        mut take: F,
    ) -> Result<ItemResults<T>, ClientError>
    where
        K: AsRef<str>,
        F: FnMut(&[u8]) -> T + Send,
        T: Send,
    {
        let mut moved = 0u64;
        let counted = |bytes: &[u8]| {
            moved += bytes.len() as u64;
            take(bytes)
        };
        let started = std::time::Instant::now();
        let result = self
            .get_batch_inner(keys, counted)
            .instrument(tracing::debug_span!("client.get_batch", items = keys.len()))
            .await;
        self.data
            .metrics
            .record("get_batch", started, &result, moved);
        result
    }

    async fn get_batch_inner<K: AsRef<str>, T, F: FnMut(&[u8]) -> T + Send>(
        &self,
        keys: &[K],
        mut take: F,
    ) -> Result<ItemResults<T>, ClientError> {
        let mut results: Vec<Option<Result<T, ClientError>>> =
            (0..keys.len()).map(|_| None).collect();
        let mut asked: Vec<usize> = Vec::with_capacity(keys.len());
        let mut ids = Vec::with_capacity(keys.len());
        for (i, id) in object_ids(self, keys).into_iter().enumerate() {
            match id {
                Ok(id) => {
                    asked.push(i);
                    ids.push(id);
                }
                Err(e) => results[i] = Some(Err(e)),
            }
        }
        let replies = self.batch_get_replies(&ids).await?;
        let mut found: Vec<(usize, GetReply, usize)> = Vec::with_capacity(replies.len());
        let mut releases = Vec::with_capacity(replies.len());
        let mut total = 0usize;
        for (pos, reply) in replies.into_iter().enumerate() {
            match item(reply) {
                Ok(mut r) => {
                    releases.extend(release_of(&ids[pos], &r));
                    if let Some(value) = r.inline.take() {
                        // A cold-only object the server restored and returned itself.
                        let key = keys[asked[pos]].as_ref();
                        let checked = inline_checked(key, r.size, r.checksum, &value);
                        results[asked[pos]] = Some(checked.map(|()| take(&value)));
                        continue;
                    }
                    let size = r.size as usize;
                    found.push((asked[pos], r, total));
                    total += size;
                }
                Err(e) => results[asked[pos]] = Some(Err(e)),
            }
        }
        let copied = self
            .copy_found(keys, found, total, &mut results, &mut take)
            .await;
        // Whatever the copy did, the leases are no longer needed.
        self.release_leases(releases).await;
        copied?;
        Ok(results
            .into_iter()
            .map(|r| r.expect("every item gets a result"))
            .collect())
    }

    /// The server's answer for each id: one compact batch get per [`MAX_BATCH`] ids when the
    /// leader serves it (the scope and the segments once, positional items), else the classic
    /// batch get.
    async fn batch_get_replies(
        &self,
        ids: &[ObjectId],
    ) -> Result<Vec<ItemResult<GetReply>>, ClientError> {
        if let Some(first) = ids.first() {
            let one_scope = ids
                .iter()
                .all(|id| id.tenant == first.tenant && id.domain == first.domain);
            if one_scope {
                let mut out = Vec::with_capacity(ids.len());
                for chunk in ids.chunks(MAX_BATCH) {
                    let body = CompactKeysRef {
                        v: COMPACT_VERSION,
                        tenant: first.tenant.as_deref(),
                        domain: first.domain.as_deref(),
                        keys: chunk.iter().map(|id| id.key.as_str()).collect(),
                    };
                    let answer: Option<(CompactGetReply, _)> = self
                        .call_feature_at(FEATURE_COMPACT_BATCH, RpcOp::BatchGetCompact, &body)
                        .await?;
                    let Some((reply, _)) = answer else {
                        // Not served: the whole batch goes the classic way (only the first
                        // chunk can get here; the answer is the same for the next ones).
                        break;
                    };
                    out.extend(expand_get_reply(reply, chunk.len())?);
                }
                if out.len() == ids.len() {
                    return Ok(out);
                }
            }
        }
        let requests: Vec<ObjectRequestRef<'_>> =
            ids.iter().map(|id| ObjectRequestRef { id }).collect();
        self.batch_call(RpcOp::BatchGet, requests).await
    }

    /// Copies the objects a batch get found: the first choice of each in one submission, then
    /// the other replicas of those whose read failed.
    async fn copy_found<K: AsRef<str>, T, F: FnMut(&[u8]) -> T + Send>(
        &self,
        keys: &[K],
        found: Vec<(usize, GetReply, usize)>,
        total: usize,
        results: &mut [Option<Result<T, ClientError>>],
        take: &mut F,
    ) -> Result<(), ClientError> {
        let transport = self.data.transport().await?;
        let staging = self.data.staging.take(transport, total)?;
        let local = self.data.local();
        // The first choice of each item, all in one submission.
        let own_memory = local.as_ref().and_then(|l| {
            let memory = l.memory.clone()?;
            Some((l.remote.segment_id.clone(), memory))
        });
        let reads = BatchReads {
            transport: transport.as_ref(),
            local: local.as_ref(),
            buf: staging.buffer(),
            own_memory: own_memory.as_ref(),
        };
        let (descs, first) = reads.plan(&found);
        let statuses = if descs.is_empty() {
            Vec::new()
        } else {
            transport.submit(&descs).await?.statuses
        };
        for ((i, reply, off), choice) in found.into_iter().zip(first) {
            let key = keys[i].as_ref();
            let mut outcome = match choice {
                FirstRead::Transfer(d) => match &statuses[d] {
                    Ok(()) => reads.staged(key, &reply, off, take).await?,
                    Err(e) => Err(ClientError::transfer(
                        format!("reading segment {}", descs[d].remote.segment_id),
                        e.clone(),
                    )),
                },
                FirstRead::OwnSegment(offset) => reads.in_place(key, &reply, offset, take).await,
                FirstRead::Nothing if reply.size == 0 => Ok(take(&[])),
                FirstRead::Nothing => Err(ClientError::item(
                    crescent_wire::ErrorCode::NotReady,
                    format!("key {key:?} has no readable replica"),
                )),
            };
            if outcome.is_err() {
                // Fall back, one replica at a time, to the others (rare).
                let skip = usize::from(!matches!(choice, FirstRead::Nothing));
                if let Some(value) = reads.fall_back(key, &reply, off, skip).await? {
                    outcome = Ok(take(&value));
                }
            }
            results[i] = Some(outcome);
        }
        Ok(())
    }
}

/// What every read of one batch get's copy shares.
struct BatchReads<'a> {
    transport: &'a dyn Transport,
    local: Option<&'a LocalSegment>,
    /// The staging buffer, `total` bytes: each found item at its offset.
    buf: &'a RegisteredBuffer,
    /// Our own segment's id and memory, read in place when it holds a replica.
    own_memory: Option<&'a (Arc<str>, Arc<SegmentMemory>)>,
}

impl BatchReads<'_> {
    /// The first read of each found item (`(item index, reply, offset in staging)`): the
    /// descriptors of the one submission and how each item is read first.
    fn plan(
        &self,
        found: &[(usize, GetReply, usize)],
    ) -> (Vec<TransferDescriptor>, Vec<FirstRead>) {
        let mut descs = Vec::with_capacity(found.len());
        let mut first: Vec<FirstRead> = Vec::with_capacity(found.len());
        for (_, reply, off) in found {
            let replica = read_order(&reply.replicas, self.local)
                .first()
                .copied()
                .filter(|r| reply.size > 0 && r.length == reply.size);
            let Some(r) = replica else {
                first.push(FirstRead::Nothing);
                continue;
            };
            // Our own segment is read in place: no transfer into staging and copy out of it.
            if let Some((own, _)) = self.own_memory {
                if **own == *r.segment_id {
                    first.push(FirstRead::OwnSegment(r.offset));
                    continue;
                }
            }
            match remote_for(r, self.local) {
                Ok(remote) => {
                    descs.push(TransferDescriptor {
                        op: TransferOp::Read,
                        remote,
                        remote_offset: r.offset,
                        local: self.buf.handle,
                        local_offset: *off as u64,
                        length: reply.size,
                        grant: grant_of(r),
                    });
                    first.push(FirstRead::Transfer(descs.len() - 1));
                }
                Err(_) => first.push(FirstRead::Nothing),
            }
        }
        (descs, first)
    }

    /// The value the submission read into staging at `off`, checked against its checksum.
    async fn staged<T>(
        &self,
        key: &str,
        reply: &GetReply,
        off: usize,
        take: &mut (impl FnMut(&[u8]) -> T + Send),
    ) -> Result<Result<T, ClientError>, ClientError> {
        let memory = &self.buf.memory;
        memory
            .with_read(off as u64, reply.size, |bytes| {
                checked(key, reply, bytes, take)
            })
            .await
            .map_err(ClientError::from)
    }

    /// The value read in place from our own segment's memory at `offset`, checked.
    async fn in_place<T>(
        &self,
        key: &str,
        reply: &GetReply,
        offset: u64,
        take: &mut (impl FnMut(&[u8]) -> T + Send),
    ) -> Result<T, ClientError> {
        let (own, memory) = self.own_memory.expect("chosen only with memory");
        let read = memory.with_read(offset, reply.size, |bytes| checked(key, reply, bytes, take));
        match read.await {
            Ok(value) => value,
            Err(e) => Err(ClientError::transfer(format!("reading segment {own}"), e)),
        }
    }

    /// The value from the first of the item's replicas after the first `skip` (in read order)
    /// that reads and verifies, through staging at `off`; `None` if none does.
    async fn fall_back(
        &self,
        key: &str,
        reply: &GetReply,
        off: usize,
        skip: usize,
    ) -> Result<Option<Vec<u8>>, ClientError> {
        let mut value = vec![0u8; reply.size as usize];
        for replica in read_order(&reply.replicas, self.local)
            .into_iter()
            .skip(skip)
        {
            let read = read_replica(
                self.transport,
                replica,
                self.local,
                self.buf,
                off,
                reply.size,
            )
            .await;
            if read.is_err() {
                continue;
            }
            self.buf.read(off, &mut value).await?;
            if verify(key, reply.checksum, crescent_checksum::crc32c(&value)).is_ok() {
                return Ok(Some(value));
            }
        }
        Ok(None)
    }
}

/// `take(bytes)` if `bytes` match the checksum `reply` carries (if any).
fn checked<T>(
    key: &str,
    reply: &GetReply,
    bytes: &[u8],
    take: &mut impl FnMut(&[u8]) -> T,
) -> Result<T, ClientError> {
    if reply.checksum.is_some() {
        verify(key, reply.checksum, crescent_checksum::crc32c(bytes))?;
    }
    Ok(take(bytes))
}
