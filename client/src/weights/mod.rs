//! [`WeightStore`]: managed weight revisions (docs/weights.md) from the Rust client. The
//! revision's metadata lives in crescentd; its bytes are ordinary objects of domain `_weights`
//! (payloads, then a manifest this client defines, see [`manifest`]) written through the
//! `/v1/weights/put/...` routes and read with the ordinary object reads under a lease.

pub mod layout;
#[cfg(test)]
mod layout_tests;
mod lease;
#[cfg(test)]
mod lease_tests;
mod loaded;
pub mod manifest;
#[cfg(test)]
mod manifest_tests;
mod ranged;
mod reader;
pub mod shard;
mod writer;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crescent_wire::store::ObjectId;
use crescent_wire::weights::{self as w, routes};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tracing::Instrument;

pub use layout::{SplitRule, TargetLayout, TensorRule};
pub use loaded::{LoadedWeights, WeightBytes, DEFAULT_REGION_CACHE_BYTES};
pub use manifest::{assemble_file, ManifestObject, WeightManifest};
pub use reader::{Placement, WeightReader};
pub use shard::{ShardStats, ShardedFile, ShardedWeights, TensorShard};
pub use writer::WeightWriter;

use crate::client::CrescentClient;
use crate::error::ClientError;
use crate::failover::Retry;

/// The domain crescentd keeps managed weight objects in.
pub const WEIGHTS_DOMAIN: &str = "_weights";

/// Default lease of a `weight_get` (renewed while the read runs, released as soon as it ends).
pub const DEFAULT_READ_LEASE_MS: u64 = 60_000;

/// The read lease TTLs [`WeightStore::with_read_lease`] accepts: crescentd grants 1 ms to 1 h
/// (docs/weights.md, `AcquireLease`); under 100 ms a renewal every third of it would be
/// mostly round trips.
pub const READ_LEASE_RANGE_MS: std::ops::RangeInclusive<u64> = 100..=3_600_000;

/// Object ids of managed weights carry no tenant: the tenant is part of the key.
fn object_id(key: &str) -> ObjectId {
    ObjectId::scoped(None, Some(WEIGHTS_DOMAIN), key)
}

/// A revision read by [`WeightStore::weight_get_into`] into the caller's buffers: the metadata
/// at lease time and the verified manifest (which object went where is the caller's).
#[derive(Debug, Clone)]
pub struct PlacedWeights {
    pub metadata: w::WeightMetadata,
    pub manifest: WeightManifest,
}

/// The eleven managed-weight operations, on the leader the client follows.
#[derive(Debug, Clone)]
pub struct WeightStore {
    client: CrescentClient,
    /// TTL of the revision lease a read takes (renewed after each third of it).
    read_lease: Duration,
    /// The last weight_get's region, for the next one to reuse.
    regions: std::sync::Arc<loaded::RegionCache>,
}

impl WeightStore {
    pub fn new(client: &CrescentClient) -> Self {
        Self {
            client: client.clone(),
            read_lease: Duration::from_millis(DEFAULT_READ_LEASE_MS),
            regions: std::sync::Arc::new(loaded::RegionCache::new(DEFAULT_REGION_CACHE_BYTES)),
        }
    }

    /// The same store with reads leased for `ttl` (within [`READ_LEASE_RANGE_MS`]): a shorter
    /// lease frees the revision sooner after a reader crashes, at the cost of more renewals.
    pub fn with_read_lease(mut self, ttl: Duration) -> Result<Self, ClientError> {
        let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        if !READ_LEASE_RANGE_MS.contains(&ms) {
            return Err(ClientError::InvalidArgument(format!(
                "read lease of {ms} ms: expected {} to {} ms",
                READ_LEASE_RANGE_MS.start(),
                READ_LEASE_RANGE_MS.end()
            )));
        }
        self.read_lease = ttl;
        Ok(self)
    }

    /// The same store keeping, for its next [`Self::weight_get`], the region of a load whose
    /// objects were all dropped, if it is at most `max_bytes` (default
    /// [`DEFAULT_REGION_CACHE_BYTES`]; 0 keeps none, so every load's memory is freed when its
    /// objects are). A kept region stays resident until a later load takes it or the store
    /// (and every clone of it) is dropped.
    pub fn with_region_cache(mut self, max_bytes: u64) -> Self {
        self.regions = std::sync::Arc::new(loaded::RegionCache::new(max_bytes));
        self
    }

    /// A weight command: not idempotent, so sent again after a failover only when crescentd
    /// certainly did not run it (docs/ha.md, "Clients").
    async fn post<B: Serialize, T: DeserializeOwned>(
        &self,
        route: &'static str,
        body: &B,
    ) -> Result<T, ClientError> {
        self.client
            .post_route(route, Retry::NotIdempotent, route, body)
            .await
    }

    /// [`WeightStore::post`], also returning the leader that answered (a put_start whose
    /// put_end must go to the same leader).
    async fn post_at<B: Serialize, T: DeserializeOwned>(
        &self,
        route: &'static str,
        body: &B,
    ) -> Result<(T, crate::leader::Current), ClientError> {
        self.client
            .post_route_at(route, Retry::NotIdempotent, route, body)
            .await
    }

    /// A weight read: retried across a failover.
    async fn read<B: Serialize, T: DeserializeOwned>(
        &self,
        route: &'static str,
        body: &B,
    ) -> Result<T, ClientError> {
        self.client
            .post_route(route, Retry::Idempotent, route, body)
            .await
    }

    /// Runs `f` as one client operation: a tracing span and the client's op metrics.
    async fn op<T>(
        &self,
        name: &'static str,
        f: impl std::future::Future<Output = Result<T, ClientError>>,
    ) -> Result<T, ClientError> {
        let started = Instant::now();
        let result = f
            .instrument(tracing::debug_span!("weights.op", op = name))
            .await;
        self.client.data.metrics.record(name, started, &result, 0);
        result
    }

    /// weight_put: begins (or resumes) the IMPORTING revision and returns its writer.
    pub async fn weight_put(
        &self,
        id: w::WeightId,
        policy: Option<w::WeightPolicy>,
    ) -> Result<WeightWriter, ClientError> {
        self.weight_put_with(w::PutBeginRequest {
            id,
            policy,
            request_id: None,
        })
        .await
    }

    /// weight_put with every begin option (`request_id`: the upsert this import is the target of).
    pub async fn weight_put_with(
        &self,
        req: w::PutBeginRequest,
    ) -> Result<WeightWriter, ClientError> {
        let begun: w::PutBeginReply = self
            .op("weight_put_begin", self.post(routes::PUT_BEGIN, &req))
            .await?;
        Ok(WeightWriter::new(self.clone(), req.id, begun))
    }

    /// weight_get: leases the revision, reads and verifies the manifest (SHA-256 against the
    /// committed digest), reads every payload object, and releases the lease on every path.
    pub async fn weight_get(
        &self,
        id: &w::WeightId,
        holder: &str,
    ) -> Result<LoadedWeights, ClientError> {
        let started = Instant::now();
        let result = async {
            let reader = self.weight_open(id, holder).await?;
            let read = loaded::read_all(&self.client, &self.regions, &reader).await;
            reader.finish(read).await
        }
        .instrument(tracing::debug_span!("weights.get"))
        .await;
        let bytes = result.as_ref().map_or(0, |l| l.manifest.payload_bytes());
        self.client
            .data
            .metrics
            .record("weight_get", started, &result, bytes);
        result
    }

    /// weight_get with a target layout: under the same lease and manifest check, reads only
    /// the byte ranges of each tensor that `layout`'s rank needs (docs/weights.md, "Target
    /// layouts") and returns them per tensor.
    pub async fn weight_get_layout(
        &self,
        id: &w::WeightId,
        holder: &str,
        layout: &TargetLayout,
    ) -> Result<ShardedWeights, ClientError> {
        let started = Instant::now();
        let compiled = layout.compile()?;
        let result = async {
            let reader = self.weight_open(id, holder).await?;
            let read = self.read_layout(&reader, compiled).await;
            reader.finish(read).await
        }
        .instrument(tracing::debug_span!(
            "weights.get_layout",
            tp_size = layout.world_size,
            tp_rank = layout.rank
        ))
        .await;
        let bytes = result.as_ref().map_or(0, |s| s.stats.transferred_bytes);
        self.client
            .data
            .metrics
            .record("weight_get_layout", started, &result, bytes);
        result
    }

    /// Opens the revision for reading: leases it for `holder` (renewed while the reader lives,
    /// released by [`WeightReader::close`] or when the reader is dropped) and reads its
    /// manifest, verified against the committed digest. For a caller that streams the payload
    /// objects one at a time.
    pub async fn weight_open(
        &self,
        id: &w::WeightId,
        holder: &str,
    ) -> Result<WeightReader, ClientError> {
        WeightReader::open(self, id, holder, self.read_lease).await
    }

    /// weight_get into the caller's buffers: under the same lease and manifest check as
    /// [`WeightStore::weight_get`], reads each payload object, in manifest order, where
    /// `place` says (a registered buffer and offset with room for `object.bytes`), straight
    /// from its replica. Nothing of the revision is held by the client.
    pub async fn weight_get_into<F>(
        &self,
        id: &w::WeightId,
        holder: &str,
        mut place: F,
    ) -> Result<PlacedWeights, ClientError>
    where
        F: FnMut(&WeightManifest, &ManifestObject) -> Result<Placement, ClientError>,
    {
        let started = Instant::now();
        let result = async {
            let reader = self.weight_open(id, holder).await?;
            let read = read_all_into(&reader, &mut place).await;
            let placed = PlacedWeights {
                metadata: reader.metadata().clone(),
                manifest: reader.manifest().clone(),
            };
            reader.finish(read).await.map(|()| placed)
        }
        .instrument(tracing::debug_span!("weights.get_into"))
        .await;
        let bytes = result.as_ref().map_or(0, |p| p.manifest.payload_bytes());
        self.client
            .data
            .metrics
            .record("weight_get_into", started, &result, bytes);
        result
    }

    async fn read_layout(
        &self,
        reader: &WeightReader,
        layout: layout::CompiledLayout,
    ) -> Result<ShardedWeights, ClientError> {
        let manifest = reader.manifest();
        let plan = shard::plan_revision(manifest, &layout)?;
        let mut stats = ShardStats {
            full_bytes: manifest.payload_bytes(),
            shard_bytes: plan.bytes(),
            ..ShardStats::default()
        };
        let mut files = Vec::with_capacity(plan.files.len());
        for file in plan.files {
            let mut tensors = Vec::with_capacity(file.tensors.len());
            for tensor in file.tensors {
                let (data, read) = ranged::read_ranges(
                    &self.client,
                    object_id(&tensor.key),
                    tensor.object_bytes,
                    &tensor.plan.ranges,
                )
                .await?;
                stats.transferred_bytes += read.bytes_transferred;
                stats.ranges += tensor.plan.ranges.len() as u64;
                tensors.push(TensorShard { tensor, data });
            }
            files.push(ShardedFile {
                name: file.name,
                metadata: file.metadata,
                tensors,
            });
        }
        let mut loose_objects = BTreeMap::new();
        for (key, bytes) in plan.loose_objects {
            let whole = [layout::ByteRange {
                offset: 0,
                len: bytes,
            }];
            let (data, read) = ranged::read_ranges(
                &self.client,
                object_id(&key),
                bytes,
                &whole[..usize::from(bytes > 0)],
            )
            .await?;
            stats.transferred_bytes += read.bytes_transferred;
            stats.ranges += u64::from(bytes > 0);
            loose_objects.insert(key, data);
        }
        reader.check_lease()?;
        Ok(ShardedWeights {
            metadata: reader.metadata().clone(),
            layout: layout.layout().clone(),
            files,
            loose_objects,
            stats,
        })
    }

    pub async fn weight_is_exist(&self, id: &w::WeightId) -> Result<bool, ClientError> {
        let req = w::WeightRequest { id: id.clone() };
        let r: w::WeightExistReply = self
            .op("weight_is_exist", self.read(routes::EXIST, &req))
            .await?;
        Ok(r.exists)
    }

    pub async fn weight_get_metadata(
        &self,
        id: &w::WeightId,
    ) -> Result<w::WeightMetadata, ClientError> {
        let req = w::WeightRequest { id: id.clone() };
        self.op("weight_get_metadata", self.read(routes::METADATA, &req))
            .await
    }

    /// The committed logical payload bytes.
    pub async fn weight_get_size(&self, id: &w::WeightId) -> Result<u64, ClientError> {
        let req = w::WeightRequest { id: id.clone() };
        let r: w::WeightSizeReply = self
            .op("weight_get_size", self.read(routes::SIZE, &req))
            .await?;
        Ok(r.size)
    }

    /// One page of revisions (metadata only); pass the reply's `next` as `after`.
    pub async fn weight_list(
        &self,
        req: &w::WeightListRequest,
    ) -> Result<w::WeightListReply, ClientError> {
        self.op("weight_list", self.read(routes::LIST, req)).await
    }

    /// Every revision matching the filter of `req` (all pages).
    pub async fn weight_list_all(
        &self,
        req: &w::WeightListRequest,
    ) -> Result<Vec<w::WeightMetadata>, ClientError> {
        let mut page = req.clone();
        let mut all = Vec::new();
        loop {
            let reply = self.weight_list(&page).await?;
            all.extend(reply.revisions);
            match reply.next {
                Some(next) => page.after = Some(next),
                None => return Ok(all),
            }
        }
    }

    pub async fn weight_update_policy(
        &self,
        req: &w::UpdatePolicyRequest,
    ) -> Result<w::WeightMetadata, ClientError> {
        self.op("weight_update_policy", self.post(routes::POLICY, req))
            .await
    }

    /// Starts (or resumes) a replacement claim; when its `next_step` is `import_target`, write
    /// the target with [`WeightStore::weight_put_with`] under the reply's `request_id`, then
    /// call this again to drive the claim on.
    pub async fn weight_upsert(
        &self,
        req: &w::UpsertRequest,
    ) -> Result<w::UpsertReply, ClientError> {
        self.op("weight_upsert", self.post(routes::UPSERT, req))
            .await
    }

    /// The persisted state of a replacement claim.
    pub async fn weight_upsert_status(
        &self,
        req: &w::UpsertStatusRequest,
    ) -> Result<w::UpsertReply, ClientError> {
        self.op(
            "weight_upsert_status",
            self.read(routes::UPSERT_STATUS, req),
        )
        .await
    }

    pub async fn weight_migrate(
        &self,
        req: &w::MigrateRequest,
    ) -> Result<w::OperationReply, ClientError> {
        self.op("weight_migrate", self.post(routes::MIGRATE, req))
            .await
    }

    pub async fn weight_get_operation(
        &self,
        operation_id: &str,
    ) -> Result<w::OperationReply, ClientError> {
        let req = w::OperationRequest {
            operation_id: operation_id.to_string(),
        };
        self.op("weight_get_operation", self.read(routes::OPERATION, &req))
            .await
    }

    /// Starts (or returns the running) deletion; poll it with
    /// [`WeightStore::weight_get_operation`].
    pub async fn weight_remove(
        &self,
        req: &w::RemoveWeightRequest,
    ) -> Result<w::OperationReply, ClientError> {
        self.op("weight_remove", self.post(routes::REMOVE, req))
            .await
    }
}

/// Every payload object of an open revision, read into owned buffers.
/// Payload objects weight_get reads at once: one object's round trips (lookup, lease release)
/// overlap another's transfer and copy, so a load beats the same objects fetched one by one
/// (docs/weights.md, "Benchmark and model round trip"). Few enough that a revision's reads do
/// not crowd out other requests of the client.
const READ_PIPELINE: usize = 4;

/// Reads every payload object where `place` says (asked in manifest order, before any read),
/// [`READ_PIPELINE`] at a time.
async fn read_all_into<F>(reader: &WeightReader, place: &mut F) -> Result<(), ClientError>
where
    F: FnMut(&WeightManifest, &ManifestObject) -> Result<Placement, ClientError>,
{
    use futures::stream::{StreamExt, TryStreamExt};
    let manifest = reader.manifest();
    let placed = manifest
        .objects
        .iter()
        .map(|object| Ok((object, place(manifest, object)?)))
        .collect::<Result<Vec<_>, ClientError>>()?;
    futures::stream::iter(placed)
        .map(|(object, (dst, offset))| async move {
            reader.read_object_into(object, &dst, offset).await
        })
        .buffered(READ_PIPELINE)
        .try_for_each(|_| async { Ok(()) })
        .await
}
