//! [`WeightReader`]: a revision open for reading under its lease ([`super::lease`]), read one
//! payload object at a time into the caller's own buffers or owned ones. What
//! [`WeightStore::weight_get`] and [`WeightStore::weight_get_into`] do in one call, for a caller
//! that streams the revision (the CLI writes each tensor to its file as it arrives, holding one
//! object at a time, never the whole revision).

use std::time::Duration;

use crescent_wire::weights as w;
use sha2::{Digest, Sha256};

use super::layout::TargetLayout;
use super::lease::RevisionLease;
use super::manifest::ManifestObject;
use super::shard::{plan_revision, PlannedTensor, RevisionPlan};
use super::{object_id, WeightManifest, WeightStore};
use crate::buffer::RegisteredBuffer;
use crate::error::ClientError;

/// Where [`WeightStore::weight_get_into`] reads one payload object: a registered buffer and
/// the offset in it (the object's bytes must fit from there).
pub type Placement = (RegisteredBuffer, usize);

/// An open revision: its lease is renewed while this lives, released by
/// [`WeightReader::close`] or, if the reader is dropped (a cancelled load), in the background.
#[derive(Debug)]
pub struct WeightReader {
    store: WeightStore,
    lease: RevisionLease,
    metadata: w::WeightMetadata,
    manifest: WeightManifest,
}

impl WeightReader {
    /// Leases the revision and reads its manifest, verified against the committed digest.
    pub(super) async fn open(
        store: &WeightStore,
        id: &w::WeightId,
        holder: &str,
        ttl: Duration,
    ) -> Result<Self, ClientError> {
        let (lease, metadata) = RevisionLease::acquire(store, id, holder, ttl).await?;
        match verified_manifest(store, &metadata).await {
            Ok(manifest) => Ok(Self {
                store: store.clone(),
                lease,
                metadata,
                manifest,
            }),
            Err(e) => Err(with_release(lease, e).await),
        }
    }

    /// The revision's metadata when the lease was granted.
    pub fn metadata(&self) -> &w::WeightMetadata {
        &self.metadata
    }

    /// The verified manifest: the payload objects and the files they rebuild.
    pub fn manifest(&self) -> &WeightManifest {
        &self.manifest
    }

    /// The id of the revision lease this reader holds.
    pub fn lease_id(&self) -> &str {
        self.lease.lease_id()
    }

    /// Reads payload object `object` (one of [`Self::manifest`]'s) into `dst` at `offset`,
    /// checksum verified, straight from its replica (zero copy); returns its size.
    pub async fn read_object_into(
        &self,
        object: &ManifestObject,
        dst: &RegisteredBuffer,
        offset: usize,
    ) -> Result<usize, ClientError> {
        self.lease.check()?;
        let size = self
            .store
            .client
            .get_object_into(&object_id(&object.key), dst, offset)
            .await?;
        check_size(object, size as u64)?;
        self.lease.check()?;
        Ok(size)
    }

    /// Reads payload object `object` into a new buffer, checksum verified.
    pub async fn read_object(&self, object: &ManifestObject) -> Result<Vec<u8>, ClientError> {
        self.lease.check()?;
        let value = self.store.client.get_object(object_id(&object.key)).await?;
        check_size(object, value.len() as u64)?;
        self.lease.check()?;
        Ok(value)
    }

    /// The reads `layout`'s rank needs from this revision (docs/weights.md, "Target
    /// layouts"), for a caller that streams them with [`Self::read_shard`].
    pub fn plan(&self, layout: &TargetLayout) -> Result<RevisionPlan, ClientError> {
        plan_revision(&self.manifest, &layout.compile()?)
    }

    /// The rank's part of one planned tensor (its ranges, concatenated) and the bytes that
    /// crossed the data plane for it (a cold-only object arrives whole).
    pub async fn read_shard(&self, tensor: &PlannedTensor) -> Result<(Vec<u8>, u64), ClientError> {
        self.lease.check()?;
        let (data, read) = super::ranged::read_ranges(
            &self.store.client,
            object_id(&tensor.key),
            tensor.object_bytes,
            &tensor.plan.ranges,
        )
        .await?;
        self.lease.check()?;
        Ok((data, read.bytes_transferred))
    }

    /// `Err(LEASE_EXPIRED)` if the lease was lost while reading (a renewal refused).
    pub(super) fn check_lease(&self) -> Result<(), ClientError> {
        self.lease.check()
    }

    /// Ends the read: releases the lease.
    pub async fn close(self) -> Result<(), ClientError> {
        self.lease.release().await
    }

    /// Ends the read with `result`: the lease is released on both paths; a failed release
    /// fails a successful read, a failed read keeps its own error (the lease then expires by
    /// its TTL).
    pub(super) async fn finish<T>(self, result: Result<T, ClientError>) -> Result<T, ClientError> {
        match result {
            Ok(value) => self.close().await.map(|()| value),
            Err(e) => Err(with_release(self.lease, e).await),
        }
    }
}

/// Releases `lease` after a failed read and returns the read's error.
async fn with_release(lease: RevisionLease, error: ClientError) -> ClientError {
    let lease_id = lease.lease_id().to_string();
    if let Err(r) = lease.release().await {
        // The read's error is what the caller needs; the lease expires by its TTL.
        tracing::warn!(lease = %lease_id, error = %r, "lease release failed");
    }
    error
}

fn check_size(object: &ManifestObject, size: u64) -> Result<(), ClientError> {
    if size == object.bytes {
        return Ok(());
    }
    Err(ClientError::Protocol(format!(
        "object {:?} is {size} bytes, the manifest says {}",
        object.key, object.bytes
    )))
}

/// The revision's manifest, checked against the digest the leased metadata committed.
pub(super) async fn verified_manifest(
    store: &WeightStore,
    metadata: &w::WeightMetadata,
) -> Result<WeightManifest, ClientError> {
    let expected = metadata.manifest_sha256.clone().ok_or_else(|| {
        ClientError::Protocol("a leased revision has no committed manifest digest".into())
    })?;
    let body = store
        .client
        .get_object(object_id(&metadata.manifest_key))
        .await?;
    let actual = hex::encode(Sha256::digest(&body));
    if actual != expected {
        return Err(ClientError::Protocol(format!(
            "manifest {} has SHA-256 {actual}, the revision committed {expected}",
            metadata.manifest_key
        )));
    }
    WeightManifest::decode(&body)
}
