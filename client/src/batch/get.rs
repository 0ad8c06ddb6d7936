//! Batch get: one batch get for the whole batch, one transport submission reading the
//! preferred replica of each item (local first), per-item fallback to the other replicas, and
//! the values the server returned inline (cold-only objects restored on read).

use crescent_transport::{TransferDescriptor, TransferOp};
use crescent_wire::rpc::RpcOp;
use crescent_wire::store::{GetReply, ItemResult, ObjectId};
use serde::Serialize;
use tracing::Instrument;

use super::{item, object_ids, ItemResults};
use crate::client::CrescentClient;
use crate::dataplane::{read_order, remote_for};
use crate::error::ClientError;
use crate::lease::release_of;
use crate::store::{inline_checked, read_replica, verify};

/// A get request borrowing its id (encodes exactly as `ObjectRequest`).
#[derive(Serialize)]
struct ObjectRequestRef<'a> {
    id: &'a ObjectId,
}

impl CrescentClient {
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
        let requests: Vec<ObjectRequestRef<'_>> =
            ids.iter().map(|id| ObjectRequestRef { id }).collect();
        let replies: Vec<ItemResult<GetReply>> = self.batch_call(RpcOp::BatchGet, requests).await?;
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
                        results[asked[pos]] = Some(checked.map(|()| value));
                        continue;
                    }
                    let size = r.size as usize;
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
}
