//! [`LoadedWeights`]: a revision read whole by [`WeightStore::weight_get`], every payload
//! object landing in one region allocated for the load.
//!
//! The load knows the revision's size from its manifest before the first read, so it takes
//! one region for all of it, registers it once and has every payload read land in it straight
//! from its replica: no allocation or registration per object, which separate gets each pay.
//! When the caller drops the last object of a load, the region goes back to its
//! [`WeightStore`]'s cache (up to [`DEFAULT_REGION_CACHE_BYTES`], see
//! [`WeightStore::with_region_cache`]) and the next load reuses it, committed memory and all:
//! only the first load of a size pays a page fault and a zeroed page per 4 KiB
//! (docs/weights.md, "weight_get").
//!
//! [`WeightStore`]: super::WeightStore
//! [`WeightStore::with_region_cache`]: super::WeightStore::with_region_cache
//!
//! [`WeightStore::weight_get`]: super::WeightStore::weight_get

use std::collections::BTreeMap;
use std::ops::{Deref, Range};
use std::sync::{Arc, Mutex, Weak};

use crescent_transport::{FrozenMemory, SegmentMemory};
use crescent_wire::weights as w;

use super::manifest::{assemble_file, WeightManifest};
use super::reader::WeightReader;
use super::READ_PIPELINE;
use crate::client::CrescentClient;
use crate::error::ClientError;

/// A revision read by [`WeightStore::weight_get`](super::WeightStore::weight_get): its
/// metadata at lease time, its verified manifest and every payload object by key.
#[derive(Debug, Clone)]
pub struct LoadedWeights {
    pub metadata: w::WeightMetadata,
    pub manifest: WeightManifest,
    pub objects: BTreeMap<String, WeightBytes>,
}

impl LoadedWeights {
    /// The bytes of the object named `name` (a tensor `FILE:TENSOR` for safetensors).
    pub fn object(&self, name: &str) -> Option<&[u8]> {
        let o = self.manifest.objects.iter().find(|o| o.name == name)?;
        self.objects.get(&o.key).map(|b| &**b)
    }

    /// The safetensors files of the revision, rebuilt byte-identical: `(file name, bytes)`.
    pub fn files(&self) -> Result<Vec<(String, Vec<u8>)>, ClientError> {
        self.manifest
            .files
            .iter()
            .map(|f| Ok((f.name.clone(), assemble_file(f, &self.objects)?)))
            .collect()
    }
}

/// One payload object's bytes, in the region its load read the revision into (`Deref` to
/// `[u8]`). Cheap to clone: the region is shared, and freed with the last object of the load
/// that refers to it.
#[derive(Clone)]
pub struct WeightBytes {
    region: Arc<Region>,
    range: Range<usize>,
}

/// The largest load region a [`WeightStore`](super::WeightStore) keeps for reuse by default.
pub const DEFAULT_REGION_CACHE_BYTES: u64 = 4 << 30;

/// Where a load's region goes once no object of it is left: the next load of the same
/// [`WeightStore`](super::WeightStore) reuses it, so only the first load of a size pays for
/// fresh memory. One region is kept, the largest up to `max_bytes` (0: none).
#[derive(Debug)]
pub(super) struct RegionCache {
    idle: Mutex<Option<SegmentMemory>>,
    max_bytes: u64,
}

impl RegionCache {
    pub(super) fn new(max_bytes: u64) -> Self {
        Self {
            idle: Mutex::new(None),
            max_bytes,
        }
    }

    /// A region of at least `len` bytes: the idle one if it is large enough, else a new one.
    fn take(&self, len: usize) -> Result<SegmentMemory, ClientError> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        match idle.take() {
            Some(m) if m.len() >= len => Ok(m),
            other => {
                *idle = other;
                Ok(SegmentMemory::allocate(len)?)
            }
        }
    }

    fn give_back(&self, memory: SegmentMemory) {
        if memory.len() as u64 > self.max_bytes {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.as_ref().is_none_or(|m| m.len() < memory.len()) {
            *idle = Some(memory);
        }
    }
}

/// A load's region, handed back to its cache when the last object of the load is dropped.
struct Region {
    bytes: Option<FrozenMemory>,
    cache: Weak<RegionCache>,
}

impl Deref for Region {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.bytes.as_deref().expect("present until dropped")
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        if let (Some(bytes), Some(cache)) = (self.bytes.take(), self.cache.upgrade()) {
            cache.give_back(bytes.thaw());
        }
    }
}

impl Deref for WeightBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.region[self.range.clone()]
    }
}

impl AsRef<[u8]> for WeightBytes {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl std::fmt::Debug for WeightBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WeightBytes")
            .field("len", &self.range.len())
            .finish_non_exhaustive()
    }
}

/// Reads every payload object of the open revision into one region, [`READ_PIPELINE`] at a
/// time, each straight from its replica and checksum verified.
pub(super) async fn read_all(
    client: &CrescentClient,
    cache: &Arc<RegionCache>,
    reader: &WeightReader,
) -> Result<LoadedWeights, ClientError> {
    use futures::stream::{StreamExt, TryStreamExt};
    let manifest = reader.manifest();
    let mut placed = Vec::with_capacity(manifest.objects.len());
    let mut total = 0usize;
    for object in &manifest.objects {
        placed.push((object, total..total + object.bytes as usize));
        total += object.bytes as usize;
    }
    // An empty region cannot be mapped; a revision of empty objects reads into one byte.
    let buffer = client.register_memory(cache.take(total.max(1))?).await?;
    let read = futures::stream::iter(&placed)
        .map(|(object, range)| reader.read_object_into(object, &buffer, range.start))
        .buffered(READ_PIPELINE)
        .try_for_each(|_| async { Ok(()) })
        .await;
    let unregistered = client.unregister_buffer(&buffer).await;
    read?;
    unregistered?;
    let region = Arc::new(Region {
        bytes: Some(frozen(buffer.memory).await?),
        cache: Arc::downgrade(cache),
    });
    let objects = placed
        .into_iter()
        .map(|(object, range)| {
            let bytes = WeightBytes {
                region: region.clone(),
                range,
            };
            (object.key.clone(), bytes)
        })
        .collect();
    Ok(LoadedWeights {
        metadata: reader.metadata().clone(),
        manifest: manifest.clone(),
        objects,
    })
}

/// The load's region as plain bytes, once the transport has let go of it (unregistered,
/// every read done). A transport that still holds it (none does today) costs a copy, not the
/// load.
async fn frozen(memory: Arc<SegmentMemory>) -> Result<FrozenMemory, ClientError> {
    match Arc::try_unwrap(memory) {
        Ok(memory) => Ok(memory.freeze()),
        Err(shared) => {
            tracing::debug!("weight load region still shared after unregistering; copying it");
            let mut copy = vec![0u8; shared.len()];
            shared.read_at(0, &mut copy).await?;
            Ok(SegmentMemory::from_boxed_slice(copy.into_boxed_slice())?.freeze())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region_of(cache: &Arc<RegionCache>, len: usize) -> Region {
        Region {
            bytes: Some(cache.take(len).unwrap().freeze()),
            cache: Arc::downgrade(cache),
        }
    }

    #[test]
    fn a_dropped_load_region_is_reused_by_the_next_load_that_fits() {
        let cache = Arc::new(RegionCache::new(1 << 30));
        let first = region_of(&cache, 3 << 20);
        let base = first.as_ptr();
        drop(first);
        let second = region_of(&cache, 2 << 20);
        assert_eq!(second.as_ptr(), base, "the idle region is taken again");
        assert_eq!(second.len(), 3 << 20);
        // Nothing idle while it is in use: a concurrent load gets fresh memory.
        let third = region_of(&cache, 1 << 20);
        assert_ne!(third.as_ptr(), base);
    }

    #[test]
    fn the_cache_keeps_the_largest_region_within_its_limit() {
        let cache = Arc::new(RegionCache::new(4 << 20));
        let (small, large, huge) = (
            region_of(&cache, 1 << 20),
            region_of(&cache, 4 << 20),
            region_of(&cache, 8 << 20),
        );
        let large_base = large.as_ptr();
        drop(large);
        drop(small);
        drop(huge);
        let idle = cache.idle.lock().unwrap();
        let kept = idle.as_ref().expect("one region kept");
        assert_eq!(
            (kept.as_ptr().cast_const(), kept.len()),
            (large_base, 4 << 20)
        );
    }

    #[test]
    fn a_zero_limit_keeps_nothing() {
        let cache = Arc::new(RegionCache::new(0));
        drop(region_of(&cache, 1 << 20));
        assert!(cache.idle.lock().unwrap().is_none());
    }

    #[test]
    fn weight_bytes_read_their_range_of_the_region() {
        let cache = Arc::new(RegionCache::new(0));
        let memory = cache.take(16).unwrap();
        let bytes = Region {
            bytes: Some(memory.freeze()),
            cache: Arc::downgrade(&cache),
        };
        let region = Arc::new(bytes);
        let a = WeightBytes {
            region: region.clone(),
            range: 2..6,
        };
        assert_eq!(&*a, &[0, 0, 0, 0]);
        assert_eq!(a.as_ref().len(), 4);
        assert_eq!(format!("{a:?}"), "WeightBytes { len: 4, .. }");
    }
}
