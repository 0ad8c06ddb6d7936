//! Single-object operations: put (put_start -> transfers to every replica -> put_end, revoked
//! on a transfer failure), get (a complete replica, local first, checksum verified), and the
//! metadata calls. The zero-copy forms work on [`RegisteredBuffer`]s.

use std::sync::Arc;

use crescent_transport::{SegmentMemory, TransferDescriptor, TransferOp, Transport, TransportKind};
use crescent_wire::rpc::RpcOp;
use crescent_wire::store::{
    Ack, ExistReply, GetReply, ListEntry, ListReply, ListRequest, ObjectId, ObjectRequest,
    PutEndRequest, PutStartReply, RemovePrefixReply, RemovePrefixRequest, RemoveRequest,
    ReplicaDesc, SizeReply, MAX_LIST_PAGE,
};
use crescent_wire::ErrorCode;
use serde::Serialize;
use tracing::Instrument;

use crate::buffer::RegisteredBuffer;
use crate::client::CrescentClient;
use crate::cold_restore::GetAnswer;
use crate::cold_restore_target::RestoreTarget;
use crate::dataplane::{grant_of, read_order, remote_for, Committed, LocalSegment};
use crate::error::ClientError;
use crate::failover::Retry;
use crate::lease::release_of;
use crate::options::PutOptions;
use destination::{Destination, IntoBuffer, IntoValue};

/// What a put did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PutOutcome {
    /// The put's id (0 when the key already held this content).
    pub put_id: u64,
    /// The key already held this content: nothing was written (an idempotent success).
    pub already_existed: bool,
    /// Replicas written.
    pub replicas: usize,
}

/// Write descriptors sending `[offset, offset+len)` of a local buffer to every replica.
pub(crate) fn write_descriptors(
    replicas: &[ReplicaDesc],
    local: Option<&LocalSegment>,
    src: &RegisteredBuffer,
    offset: usize,
    len: usize,
    out: &mut Vec<TransferDescriptor>,
) -> Result<(), ClientError> {
    for r in replicas {
        if r.length != len as u64 {
            return Err(ClientError::Protocol(format!(
                "replica on segment {} is {} bytes for a {len}-byte value",
                r.segment_id, r.length
            )));
        }
        if len == 0 {
            continue;
        }
        out.push(TransferDescriptor {
            op: TransferOp::Write,
            remote: remote_for(r, local)?,
            remote_offset: r.offset,
            local: src.handle,
            local_offset: offset as u64,
            length: len as u64,
            grant: grant_of(r),
        });
    }
    Ok(())
}

/// Reads a replica into `[dst_offset, dst_offset+size)` of `dst`.
pub(crate) async fn read_replica(
    transport: &dyn Transport,
    replica: &ReplicaDesc,
    local: Option<&LocalSegment>,
    dst: &RegisteredBuffer,
    dst_offset: usize,
    size: u64,
) -> Result<(), ClientError> {
    if size == 0 {
        return Ok(());
    }
    if replica.length != size {
        return Err(ClientError::Protocol(format!(
            "replica on segment {} is {} bytes for a {size}-byte object",
            replica.segment_id, replica.length
        )));
    }
    let desc = [TransferDescriptor {
        op: TransferOp::Read,
        remote: remote_for(replica, local)?,
        remote_offset: replica.offset,
        local: dst.handle,
        local_offset: dst_offset as u64,
        length: size,
        grant: grant_of(replica),
    }];
    let done = transport.submit(&desc).await?;
    done.into_result()
        .map_err(|e| ClientError::transfer(format!("reading segment {}", replica.segment_id), e))
}

/// Our own segment's id and memory, when this process owns one it can touch in place.
pub(crate) fn own_memory(local: Option<&LocalSegment>) -> Option<(&str, &Arc<SegmentMemory>)> {
    local.and_then(|l| Some((&*l.remote.segment_id, l.memory.as_ref()?)))
}

/// Whether the replica a read tries first is in our own segment.
fn own_first(replicas: &[ReplicaDesc], local: Option<&LocalSegment>) -> bool {
    match (own_memory(local), read_order(replicas, local).first()) {
        (Some((own, _)), Some(first)) => *own == *first.segment_id,
        _ => false,
    }
}

/// A replica in our own segment, copied straight out of its memory (range-locked, so never
/// while a transfer writes there).
async fn read_own_replica(
    memory: &SegmentMemory,
    replica: &ReplicaDesc,
    size: u64,
) -> Result<Vec<u8>, ClientError> {
    if replica.length != size {
        return Err(ClientError::Protocol(format!(
            "replica on segment {} is {} bytes for a {size}-byte object",
            replica.segment_id, replica.length
        )));
    }
    memory
        .read_to_vec(replica.offset, size)
        .await
        .map_err(|e| ClientError::transfer(format!("reading segment {}", replica.segment_id), e))
}

/// What a single put sends: a value's bytes, or a range of a registered buffer.
#[derive(Clone, Copy)]
enum PutSource<'a> {
    Bytes(&'a [u8]),
    Registered {
        src: &'a RegisteredBuffer,
        offset: usize,
        len: usize,
    },
}

impl PutSource<'_> {
    fn len(&self) -> usize {
        match self {
            PutSource::Bytes(value) => value.len(),
            PutSource::Registered { len, .. } => *len,
        }
    }
}

/// Writes `value` straight into our own segment's memory for each of `replicas` there
/// (range-locked like a transfer); returns the others, for the transport. Every replica must
/// be the value's length.
pub(crate) async fn write_own_replicas(
    replicas: &[ReplicaDesc],
    local: Option<&LocalSegment>,
    value: &[u8],
) -> Result<Vec<ReplicaDesc>, ClientError> {
    let own = own_memory(local);
    let mut others = Vec::new();
    for r in replicas {
        if r.length != value.len() as u64 {
            return Err(ClientError::Protocol(format!(
                "replica on segment {} is {} bytes for a {}-byte value",
                r.segment_id,
                r.length,
                value.len()
            )));
        }
        match own {
            Some((id, memory)) if *id == *r.segment_id => {
                if value.is_empty() {
                    continue;
                }
                memory
                    .write_at(r.offset, value)
                    .await
                    .map_err(|e| ClientError::transfer(format!("writing segment {id}"), e))?;
            }
            _ => others.push(r.clone()),
        }
    }
    Ok(others)
}

/// Smallest value a `get` over TCP reads straight into the `Vec` it returns: below it, the
/// copy out of a pooled staging buffer costs less than registering a fresh buffer.
const DIRECT_READ_MIN_BYTES: usize = 64 << 10;

fn no_replica(key: &str) -> ClientError {
    ClientError::item(
        ErrorCode::NotReady,
        format!("key {key:?} has no complete replica to read"),
    )
}

impl CrescentClient {
    /// Stores `value` under `key` (default options).
    ///
    /// ```no_run
    /// use crescent_client::{CrescentClient, PutOptions};
    ///
    /// # async fn run(client: &CrescentClient) -> Result<(), crescent_client::ClientError> {
    /// let first = client.put("k", b"v1").await?;
    /// // The same content again is an idempotent success; other content needs `upsert`.
    /// assert!(client.put("k", b"v1").await?.already_existed);
    /// let opts = PutOptions { upsert: true, replicas: 2, ..PutOptions::default() };
    /// let second = client.put_with("k", b"v2", &opts).await?;
    /// assert!(second.put_id > first.put_id);
    /// assert_eq!(client.get("k").await?, b"v2");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn put(&self, key: &str, value: &[u8]) -> Result<PutOutcome, ClientError> {
        self.put_with(key, value, &PutOptions::default()).await
    }

    /// Stores `value` under `key`. A replica in our own segment is written straight from
    /// `value`; the others are sent from a pooled staging buffer.
    pub async fn put_with(
        &self,
        key: &str,
        value: &[u8],
        opts: &PutOptions,
    ) -> Result<PutOutcome, ClientError> {
        let operation = async {
            let id = self.scope.object_id(key)?;
            let checksum = opts.checksum.then(|| crescent_checksum::crc32c(value));
            self.put_from_source(id, PutSource::Bytes(value), checksum, opts)
                .await
        }
        .instrument(tracing::debug_span!("client.put", size = value.len()));
        let bytes = value.len() as u64;
        self.data.metrics.metered("put", operation, |_| bytes).await
    }

    /// Stores `[offset, offset+len)` of a registered buffer under `key`, sent straight out of
    /// the buffer (zero copy).
    pub async fn put_from(
        &self,
        key: &str,
        src: &RegisteredBuffer,
        offset: usize,
        len: usize,
        opts: &PutOptions,
    ) -> Result<PutOutcome, ClientError> {
        let operation = async {
            let id = self.scope.object_id(key)?;
            src.check(offset, len)?;
            let checksum = match opts.checksum {
                true => Some(src.crc32c(offset, len).await?),
                false => None,
            };
            let source = PutSource::Registered { src, offset, len };
            self.put_from_source(id, source, checksum, opts).await
        }
        .instrument(tracing::debug_span!("client.put_from", size = len));
        self.data
            .metrics
            .metered("put_from", operation, |_| len as u64)
            .await
    }

    /// put_start, the bytes to every replica, then put_end (revoked if the transfer failed).
    async fn put_from_source(
        &self,
        id: ObjectId,
        source: PutSource<'_>,
        checksum: Option<u32>,
        opts: &PutOptions,
    ) -> Result<PutOutcome, ClientError> {
        let local = self.data.local();
        let own = local.as_ref().map(|l| &*l.remote.segment_id);
        let req = opts.request(id, source.len() as u64, checksum, own)?;
        let (started, leader): (PutStartReply, _) = self.call_at(RpcOp::PutStart, &req).await?;
        if started.already_exists {
            return Ok(PutOutcome {
                put_id: started.put_id,
                already_existed: true,
                replicas: 0,
            });
        }
        let end = PutEndRequest {
            id: req.id,
            put_id: started.put_id,
        };
        let transferred = self
            .place_source(&started.replicas, local.as_ref(), source)
            .await;
        self.finish_put(
            &leader,
            &end,
            transferred,
            checksum,
            req.data_type,
            &started.replicas,
        )
        .await?;
        Ok(PutOutcome {
            put_id: end.put_id,
            already_existed: false,
            replicas: started.replicas.len(),
        })
    }

    /// Writes the source to every replica. Bytes go to our own segment's replicas in place and
    /// to the others through the transport from a staging buffer (taken only for them); a
    /// registered buffer is sent straight out of itself to every replica.
    async fn place_source(
        &self,
        replicas: &[ReplicaDesc],
        local: Option<&LocalSegment>,
        source: PutSource<'_>,
    ) -> Result<(), ClientError> {
        let mut descs = Vec::with_capacity(replicas.len());
        match source {
            PutSource::Bytes(value) => {
                let others = write_own_replicas(replicas, local, value).await?;
                if others.is_empty() {
                    return Ok(());
                }
                let transport = self.data.transport().await?;
                let staging = self.data.staging.take(transport, value.len())?;
                staging.buffer().write(0, value).await?;
                write_descriptors(&others, local, staging.buffer(), 0, value.len(), &mut descs)?;
                self.write_all(&descs).await
            }
            PutSource::Registered { src, offset, len } => {
                write_descriptors(replicas, local, src, offset, len, &mut descs)?;
                self.write_all(&descs).await
            }
        }
    }

    /// Writes `value` to the replicas a put_start already allocated (for a put that was started
    /// by another route, e.g. a managed weight object), then ends it at `leader`, the leader
    /// that answered the put_start; a failed transfer revokes the put there. (Not whichever
    /// leader is current by then: after a failover between the two, the new leader never saw
    /// the put, and the put fails with FAILOVER_INTERRUPTED instead.)
    pub(crate) async fn write_started(
        &self,
        leader: &crate::leader::Current,
        id: ObjectId,
        started: &PutStartReply,
        value: &[u8],
        checksum: Option<u32>,
        data_type: crescent_wire::store::DataType,
    ) -> Result<(), ClientError> {
        let end = PutEndRequest {
            id,
            put_id: started.put_id,
        };
        let local = self.data.local();
        let transport = self.data.transport().await?;
        let staging = self.data.staging.take(transport, value.len())?;
        let mut descs = Vec::with_capacity(started.replicas.len());
        let transferred = async {
            staging.buffer().write(0, value).await?;
            write_descriptors(
                &started.replicas,
                local.as_ref(),
                staging.buffer(),
                0,
                value.len(),
                &mut descs,
            )?;
            self.write_all(&descs).await
        }
        .await;
        self.finish_put(
            leader,
            &end,
            transferred,
            checksum,
            data_type,
            &started.replicas,
        )
        .await
    }

    /// Runs write transfers; the first failure names its segment.
    async fn write_all(&self, descs: &[TransferDescriptor]) -> Result<(), ClientError> {
        if descs.is_empty() {
            return Ok(());
        }
        let transport = self.data.transport().await?;
        let done = transport.submit(descs).await?;
        match done.first_error() {
            None => Ok(()),
            Some((i, e)) => Err(ClientError::transfer(
                format!("writing segment {}", descs[i].remote.segment_id),
                e.clone(),
            )),
        }
    }

    /// The end of a put whose bytes were written (or failed to be): a failed transfer revokes
    /// the put; otherwise the owners of the replicas in other processes' segments record it
    /// (a put they could not record is revoked: it would not survive a crescentd restart),
    /// then put_end goes to the leader that started it (only it knows the put: there or
    /// nowhere) and a replica in our own segment enters our ownership table.
    async fn finish_put(
        &self,
        leader: &crate::leader::Current,
        end: &PutEndRequest,
        transferred: Result<(), ClientError>,
        checksum: Option<u32>,
        data_type: crescent_wire::store::DataType,
        replicas: &[crescent_wire::store::ReplicaDesc],
    ) -> Result<(), ClientError> {
        if let Err(e) = transferred {
            self.revoke_at(leader, end).await;
            return Err(e);
        }
        let put = Committed {
            id: &end.id,
            put_id: end.put_id,
            checksum,
            data_type,
        };
        let unrecorded = self.data.record_at_owners([(put, replicas)]).await;
        if let Some(e) = unrecorded.into_values().next() {
            self.revoke_at(leader, end).await;
            return Err(e);
        }
        let _: Ack = self.call_pinned(leader, RpcOp::PutEnd, end).await?;
        self.data.committed(put, replicas);
        Ok(())
    }

    pub(crate) async fn revoke_at(&self, leader: &crate::leader::Current, end: &PutEndRequest) {
        let revoked: Result<Ack, _> = self.call_pinned(leader, RpcOp::PutRevoke, end).await;
        if let Err(e) = revoked {
            tracing::warn!(key = %end.id.key, put_id = end.put_id, error = %e, "put_revoke failed");
        }
    }

    async fn get_meta(
        &self,
        id: ObjectId,
        accept_staged: bool,
        target: RestoreTarget,
    ) -> Result<GetAnswer, ClientError> {
        // A cold-only object's value comes back already verified, read from its device right
        // here or restored by the server (`crate::cold_restore`), or staged by the server for
        // this client to read like a replica (`GetReply::staged`).
        self.get_reply(id, accept_staged, &target).await
    }

    /// After reading (or failing to read) a get's replicas: a staged payload that could not
    /// be read or verified (token expired, owner restarted, bytes changed) is asked again
    /// inline (`true`); otherwise the staged read is counted.
    fn staged_retry<T>(&self, reply: &GetReply, read: &Result<T, ClientError>) -> bool {
        if reply.staged.is_none() {
            return false;
        }
        match read {
            Ok(_) => {
                self.cold_restore.count_staged("staged");
                false
            }
            Err(e) => {
                tracing::debug!(error = %e, "staged cold restore failed; reading inline");
                self.cold_restore.count_staged("fallback");
                true
            }
        }
    }

    /// The value stored under `key`.
    pub async fn get(&self, key: &str) -> Result<Vec<u8>, ClientError> {
        let operation = async { self.get_object(self.scope.object_id(key)?).await }
            .instrument(tracing::debug_span!("client.get"));
        self.data
            .metrics
            .metered("get", operation, |v| v.len() as u64)
            .await
    }

    /// The value of object `id` (any scope; the caller checked the id, as a storage owner
    /// does with the objects crescentd has it write to its cold devices). The get's read
    /// lease is released once the bytes are copied out.
    pub async fn get_object(&self, id: ObjectId) -> Result<Vec<u8>, ClientError> {
        self.get_with(&id, &IntoValue).await
    }

    /// One get of `id`, its value delivered by `dest`: already restored and verified (a
    /// cold-only object, `crate::cold_restore`), or read from the reply's replicas (a staged
    /// payload is read like one). The lease release that follows also acks a staged
    /// payload's token; a staged payload that could not be read or verified (token expired,
    /// crescentd restarted, bytes changed) is asked again without staging (inline).
    async fn get_with<D: Destination>(
        &self,
        id: &ObjectId,
        dest: &D,
    ) -> Result<D::Output, ClientError> {
        let mut accept_staged = true;
        loop {
            let GetAnswer { reply, value } = self
                .get_meta(id.clone(), accept_staged, dest.restore_target())
                .await?;
            let result = match (value, crate::cold_restore::staged_as_replica(&reply)) {
                (Some(restored), _) => dest.restored(self, restored).await,
                (None, Ok(Some(staged))) => dest.read(self, &id.key, &staged).await,
                (None, Ok(None)) => dest.read(self, &id.key, &reply).await,
                (None, Err(e)) => Err(e),
            };
            self.release_lease(release_of(id, &reply)).await;
            if accept_staged && self.staged_retry(&reply, &result) {
                accept_staged = false;
                continue;
            }
            return result;
        }
    }

    /// Copies the object a get answered out of its replicas (local first), checksum verified.
    /// A replica in our own segment is copied straight out of its memory; otherwise a large
    /// value over TCP lands straight in the `Vec` returned (registered for the one read) and a
    /// small one goes through a pooled staging buffer, then a copy.
    async fn read_object(&self, key: &str, reply: &GetReply) -> Result<Vec<u8>, ClientError> {
        let size = reply.size as usize;
        let transport = self.data.transport().await?;
        let local = self.data.local();
        let local = local.as_ref();
        if size >= DIRECT_READ_MIN_BYTES
            && transport.kind() == TransportKind::Tcp
            && !own_first(&reply.replicas, local)
        {
            return self.read_object_direct(key, reply, transport).await;
        }
        self.read_replicas_with(local, key, &reply.replicas, reply.size, reply.checksum)
            .await
    }

    /// The `size` bytes of the first of `replicas` (local first) that reads and, when a
    /// `checksum` is given, matches it. A replica in our own segment is copied straight out of
    /// its memory (range-locked like a transfer, as the batch get does); any other goes
    /// through a pooled staging buffer, taken only then. `None`: unchecked, for a caller that
    /// verifies the bytes itself (an owner's cold device writing an offload).
    pub async fn read_replicas(
        &self,
        key: &str,
        replicas: &[ReplicaDesc],
        size: u64,
        checksum: Option<u32>,
    ) -> Result<Vec<u8>, ClientError> {
        let local = self.data.local();
        self.read_replicas_with(local.as_ref(), key, replicas, size, checksum)
            .await
    }

    /// [`Self::read_replicas`] with our own segment already looked up.
    async fn read_replicas_with(
        &self,
        local: Option<&LocalSegment>,
        key: &str,
        replicas: &[ReplicaDesc],
        size: u64,
        checksum: Option<u32>,
    ) -> Result<Vec<u8>, ClientError> {
        let own = own_memory(local);
        let mut staging = None;
        let mut last = no_replica(key);
        for replica in read_order(replicas, local) {
            let read = match own {
                Some((id, memory)) if *id == *replica.segment_id => {
                    read_own_replica(memory, replica, size).await
                }
                _ => {
                    let transport = self.data.transport().await?;
                    if staging.is_none() {
                        staging = Some(self.data.staging.take(transport, size as usize)?);
                    }
                    let buffer = staging.as_ref().expect("taken above").buffer();
                    self.read_through(transport.as_ref(), replica, local, buffer, size)
                        .await
                }
            };
            let value = match read {
                Ok(value) => value,
                Err(e) => {
                    last = e;
                    continue;
                }
            };
            let checked = match checksum {
                Some(_) => verify(key, checksum, crescent_checksum::crc32c(&value)),
                None => Ok(()),
            };
            match checked {
                Ok(()) => return Ok(value),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// One replica read by the transport into `staging`, then copied out.
    async fn read_through(
        &self,
        transport: &dyn Transport,
        replica: &ReplicaDesc,
        local: Option<&LocalSegment>,
        staging: &RegisteredBuffer,
        size: u64,
    ) -> Result<Vec<u8>, ClientError> {
        read_replica(transport, replica, local, staging, 0, size).await?;
        let mut value = vec![0u8; size as usize];
        staging.read(0, &mut value).await?;
        Ok(value)
    }

    /// [`Self::read_object`] into a fresh buffer registered for this read only: the bytes
    /// arrive in the value returned, checked there (no staging buffer, no copy out of it).
    async fn read_object_direct(
        &self,
        key: &str,
        reply: &GetReply,
        transport: &Arc<dyn Transport>,
    ) -> Result<Vec<u8>, ClientError> {
        let size = reply.size as usize;
        let memory = Arc::new(SegmentMemory::from_boxed_slice(
            vec![0u8; size].into_boxed_slice(),
        )?);
        let handle = transport.register(memory.clone())?;
        let dst = RegisteredBuffer { handle, memory };
        let read = self.read_object_into(key, reply, &dst, 0).await;
        // Unregistered whatever happened: the transfer is over (`submit` completed).
        let _ = transport.unregister(handle);
        read?;
        match Arc::try_unwrap(dst.memory).map(SegmentMemory::into_boxed_slice) {
            Ok(Ok(value)) => Ok(value.into_vec()),
            // Still shared or not a boxed buffer (neither happens once the read is over):
            // copy it out rather than fail a read that succeeded.
            Ok(Err(memory)) => Ok(memory.read_to_vec(0, size as u64).await?),
            Err(memory) => Ok(memory.read_to_vec(0, size as u64).await?),
        }
    }

    /// Reads the value of `key` straight into `dst` at `offset` (zero copy); returns its size.
    /// The object must fit in `[offset, dst.len())`.
    ///
    /// ```no_run
    /// # async fn run(client: &crescent_client::CrescentClient) -> Result<(), crescent_client::ClientError> {
    /// // Registered once, reused for many transfers.
    /// let buffer = client.register_buffer(vec![0u8; 1 << 20]).await?;
    /// buffer.write(0, b"payload").await?;
    /// client.put_from("k", &buffer, 0, 7, &Default::default()).await?;
    /// let size = client.get_into("k", &buffer, 4096).await?;
    /// assert_eq!(size, 7);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn get_into(
        &self,
        key: &str,
        dst: &RegisteredBuffer,
        offset: usize,
    ) -> Result<usize, ClientError> {
        let operation = async {
            let id = self.scope.object_id(key)?;
            self.get_with(&id, &IntoBuffer { dst, offset }).await
        }
        .instrument(tracing::debug_span!("client.get_into"));
        self.data
            .metrics
            .metered("get_into", operation, |size| *size as u64)
            .await
    }

    /// [`Self::get_into`] of object `id` (any scope; the caller checked the id, as the
    /// managed-weight reader does with the keys of a verified manifest).
    pub(crate) async fn get_object_into(
        &self,
        id: &ObjectId,
        dst: &RegisteredBuffer,
        offset: usize,
    ) -> Result<usize, ClientError> {
        self.get_with(id, &IntoBuffer { dst, offset }).await
    }

    async fn read_object_into(
        &self,
        key: &str,
        reply: &GetReply,
        dst: &RegisteredBuffer,
        offset: usize,
    ) -> Result<usize, ClientError> {
        let size = reply.size as usize;
        dst.check(offset, size)?;
        let transport = self.data.transport().await?;
        let local = self.data.local();
        let mut last = no_replica(key);
        for replica in read_order(&reply.replicas, local.as_ref()) {
            let read = read_replica(
                transport.as_ref(),
                replica,
                local.as_ref(),
                dst,
                offset,
                reply.size,
            )
            .await;
            if let Err(e) = read {
                last = e;
                continue;
            }
            let checked = match reply.checksum {
                Some(_) => verify(key, reply.checksum, dst.crc32c(offset, size).await?),
                None => Ok(()),
            };
            match checked {
                Ok(()) => return Ok(size),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Writes a restored cold-only value (already verified) into `dst` at `offset`.
    async fn restored_into(
        &self,
        value: &[u8],
        dst: &RegisteredBuffer,
        offset: usize,
    ) -> Result<usize, ClientError> {
        dst.check(offset, value.len())?;
        dst.write(offset, value).await?;
        Ok(value.len())
    }

    /// Whether `key` holds a complete object.
    pub async fn is_exist(&self, key: &str) -> Result<bool, ClientError> {
        let operation = async {
            let id = self.scope.object_id(key)?;
            let r: ExistReply = self.call(RpcOp::Exist, &ObjectRequest { id }).await?;
            Ok(r.exists)
        };
        self.data.metrics.metered("exist", operation, |_| 0).await
    }

    /// The size of the value under `key`.
    pub async fn get_size(&self, key: &str) -> Result<u64, ClientError> {
        let operation = async {
            let id = self.scope.object_id(key)?;
            let r: SizeReply = self.call(RpcOp::Size, &ObjectRequest { id }).await?;
            Ok(r.size)
        };
        self.data
            .metrics
            .metered("get_size", operation, |_| 0)
            .await
    }

    /// Removes `key` (refused while it is read-leased; see [`CrescentClient::remove_forced`]).
    pub async fn remove(&self, key: &str) -> Result<(), ClientError> {
        self.remove_inner(key, false).await
    }

    /// Removes `key` even while read-leased (admin use: readers may then fail).
    pub async fn remove_forced(&self, key: &str) -> Result<(), ClientError> {
        self.remove_inner(key, true).await
    }

    async fn remove_inner(&self, key: &str, force: bool) -> Result<(), ClientError> {
        let operation = async {
            let id = self.scope.object_id(key)?;
            let req = RemoveRequest { id, force };
            let _: Ack = self.call(RpcOp::Remove, &req).await?;
            if let Some(local) = self.data.local() {
                local.table.forget(&req.id);
            }
            Ok(())
        };
        self.data.metrics.metered("remove", operation, |_| 0).await
    }

    /// Removes every key starting with `prefix` in this client's scope (leased, pinned and
    /// in-progress objects are skipped and counted).
    pub async fn remove_prefix(&self, prefix: &str) -> Result<RemovePrefixReply, ClientError> {
        let operation = async {
            let req = RemovePrefixRequest {
                tenant: self.scope.tenant().map(str::to_string),
                domain: self.scope.domain().map(str::to_string),
                prefix: prefix.to_string(),
            };
            let reply: RemovePrefixReply = self
                .post_to(
                    "remove_prefix",
                    Retry::NotIdempotent,
                    |r| &r.remove_prefix,
                    &req,
                )
                .await?;
            if let Some(local) = self.data.local() {
                let tenant = self
                    .scope
                    .tenant()
                    .unwrap_or(crescent_wire::store::DEFAULT_TENANT);
                local
                    .table
                    .forget_prefix(tenant, self.scope.domain(), prefix);
            }
            Ok(reply)
        };
        self.data
            .metrics
            .metered("remove_prefix", operation, |_| 0)
            .await
    }

    /// One page of keys under `prefix`, after `after` (exclusive), at most `limit` long.
    pub async fn list(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: Option<u32>,
    ) -> Result<ListReply, ClientError> {
        if limit.is_some_and(|l| l == 0 || l as usize > MAX_LIST_PAGE) {
            return Err(ClientError::InvalidArgument(format!(
                "list page size must be 1..={MAX_LIST_PAGE}"
            )));
        }
        let req = ListRequest {
            tenant: self.scope.tenant().map(str::to_string),
            domain: self.scope.domain().map(str::to_string),
            prefix: prefix.to_string(),
            after: after.map(str::to_string),
            limit,
        };
        self.post_to("list", Retry::Idempotent, |r| &r.list, &req)
            .await
    }

    /// Every key under `prefix`, following the pages.
    pub async fn list_all(&self, prefix: &str) -> Result<Vec<ListEntry>, ClientError> {
        let mut all = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let page = self
                .list(prefix, after.as_deref(), Some(MAX_LIST_PAGE as u32))
                .await?;
            all.extend(page.keys);
            match page.next {
                Some(next) if after.as_deref() != Some(next.as_str()) => after = Some(next),
                Some(next) => {
                    return Err(ClientError::Protocol(format!(
                        "listing did not advance past {next:?}"
                    )))
                }
                None => return Ok(all),
            }
        }
    }
}

/// An inline value (a restored cold-only object) must have the announced length and checksum.
pub(crate) fn inline_checked(
    key: &str,
    size: u64,
    checksum: Option<u32>,
    value: &[u8],
) -> Result<(), ClientError> {
    if value.len() as u64 != size {
        return Err(ClientError::Protocol(format!(
            "{key}: inline value of {} bytes, announced {size}",
            value.len()
        )));
    }
    match checksum {
        Some(_) => verify(key, checksum, crescent_checksum::crc32c(value)),
        None => Ok(()),
    }
}

/// Checks a read against the stored checksum (if any).
pub(crate) fn verify(key: &str, stored: Option<u32>, actual: u32) -> Result<(), ClientError> {
    match stored {
        Some(expected) if expected != actual => Err(ClientError::ChecksumMismatch {
            key: key.to_string(),
            expected,
            actual,
        }),
        _ => Ok(()),
    }
}

mod destination;
#[cfg(test)]
mod tests;
