//! A storage owner's remote-restore staging region (docs/cold-tier.md, "Restore on read"): a
//! remote reader of an object on this owner's cold device asks crescentd, crescentd asks this
//! owner (work `Stage`), and the owner reads and verifies the payload straight into a slot of
//! a fixed-capacity region its transfer listener serves, answering where the bytes lie and a
//! token. The reader pulls them from this owner over the data plane (no payload byte crosses
//! crescentd), checks length and CRC32C, and acks through crescentd (work `ReleaseStaged`).
//!
//! The bookkeeping is the same pure [`StagingPool`] crescentd uses for its own devices
//! (reader, transfer and promotion pins; expiry fences the token; a slot is recycled only
//! when every pin is released); this module owns the memory, fills slots, answers releases
//! and fences expired tokens, exactly as `server/src/cold/staging.rs` does for crescentd.
//!
//! The fences are the region's range locks (why one served region and not a segment per
//! token: see that module): a slot is filled only under an exclusive lock, an expired
//! token's transfer pin is released only once no transfer holds its range, and a transfer
//! that starts after its token was fenced reads whatever the slot holds then, which the
//! reader's checksum check refuses.

use std::sync::{Arc, Mutex};

use crescent_client::owner_staging_metrics::OwnerStagingMetrics;
use crescent_cold::local_dir::LocalDirDevice;
use crescent_cold::restore::staging::{
    AckOutcome, StagingConfig, StagingPool, StagingRefusal, StagingToken,
};
use crescent_cold::ColdError;
use crescent_transport::SegmentMemory;

/// Allocation unit of the owner's region.
pub const OWNER_STAGING_UNIT: u64 = 64 << 10;
/// Default region size (`crescent owner --cold-staging-bytes`): room for a few large
/// payloads; an anonymous mapping, committed as slots are first filled.
pub const DEFAULT_OWNER_STAGING_BYTES: u64 = 128 << 20;
/// Default reader deadline (`--cold-staging-ttl-ms`), as crescentd's `staging_ttl_ms`.
pub const DEFAULT_OWNER_STAGING_TTL_MS: u64 = 5_000;

/// The id of an owner's staging segment (served beside `<owner_id>/seg0`).
pub fn staging_segment_id_for(owner_id: &str) -> String {
    crescent_wire::cold_owner::staging_segment_id(owner_id)
}

/// Slot ids and tokens of an owner's pool: the top bit set (crescentd's own pool counts
/// from `now_ms << 16`, below it), so crescentd can tell an owner's token from its own when
/// a reader acks it; then the owner's start time, so a token of an earlier run is unknown.
pub fn first_owner_staging_id(now_ms: u64) -> u64 {
    (1 << 63) | ((now_ms & ((1 << 47) - 1)) << 16)
}

/// A payload staged for one reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StagedSlot {
    pub offset: u64,
    pub length: u64,
    pub token: StagingToken,
    pub expires_at_ms: u64,
}

struct Inner {
    pool: StagingPool,
    /// Fenced tokens whose range a transfer may still read.
    fenced: Vec<StagingToken>,
}

/// An owner's staging region and its pool.
pub struct OwnerStaging {
    inner: Mutex<Inner>,
    region: Arc<SegmentMemory>,
    segment_id: String,
    metrics: OwnerStagingMetrics,
}

impl std::fmt::Debug for OwnerStaging {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnerStaging")
            .field("segment_id", &self.segment_id)
            .field("capacity", &self.capacity_bytes())
            .finish_non_exhaustive()
    }
}

impl OwnerStaging {
    /// A region of `bytes` (rounded down to whole units; at least one unit) whose readers
    /// have `ttl_ms` to ack. The caller serves [`OwnerStaging::region`] as `segment_id`.
    pub fn new(
        segment_id: String,
        bytes: u64,
        ttl_ms: u64,
        metrics: OwnerStagingMetrics,
        first_id: u64,
    ) -> Result<Self, ColdError> {
        let capacity = bytes - bytes % OWNER_STAGING_UNIT;
        if capacity == 0 || ttl_ms == 0 {
            return Err(ColdError::InvalidArgument {
                field: "cold_staging_bytes",
                reason: format!(
                    "a staging region needs at least {OWNER_STAGING_UNIT} bytes and a positive \
                     ttl (got {bytes} bytes, {ttl_ms} ms)"
                ),
            });
        }
        let region = SegmentMemory::allocate(capacity as usize).map_err(|e| ColdError::Io {
            path: segment_id.clone(),
            kind: std::io::ErrorKind::OutOfMemory,
            message: format!("allocating the staging region: {e}"),
        })?;
        let config = StagingConfig {
            capacity_bytes: capacity,
            unit_bytes: OWNER_STAGING_UNIT,
            reader_ttl_ms: ttl_ms,
        };
        metrics.set_capacity(capacity);
        metrics.set_occupancy(0, 0);
        Ok(Self {
            inner: Mutex::new(Inner {
                pool: StagingPool::new(config, first_id),
                fenced: Vec::new(),
            }),
            region: Arc::new(region),
            segment_id,
            metrics,
        })
    }

    /// The memory to serve on the owner's transfer listener.
    pub fn region(&self) -> Arc<SegmentMemory> {
        self.region.clone()
    }

    pub fn segment_id(&self) -> &str {
        &self.segment_id
    }

    pub fn capacity_bytes(&self) -> u64 {
        self.lock().pool.config().capacity_bytes
    }

    /// Bytes of slots allocated now.
    pub fn used_bytes(&self) -> u64 {
        self.lock().pool.used_bytes()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reads and verifies the payload at `locator` into a fresh slot and admits one reader.
    /// Saturation is `Backpressure` at once (never a wait); a damaged payload fails with its
    /// checksum (or length, header) error and is never published. Blocking (file IO).
    pub fn stage(
        &self,
        device: &LocalDirDevice,
        locator: &str,
        length: u64,
        checksum: u32,
        now_ms: u64,
    ) -> Result<StagedSlot, ColdError> {
        let _span = tracing::debug_span!("owner.cold_stage", length).entered();
        let placed = {
            let mut inner = self.lock();
            self.sweep(&mut inner, now_ms);
            match inner.pool.reserve(length) {
                Ok(placed) => placed,
                Err(refusal) => {
                    let used = inner.pool.used_bytes();
                    let capacity = inner.pool.config().capacity_bytes;
                    drop(inner);
                    return Err(match refusal {
                        StagingRefusal::Busy => {
                            self.metrics.staged("busy");
                            ColdError::Backpressure {
                                queue: "owner restore staging",
                                reason: format!(
                                    "{used} of {capacity} bytes in use, {length} needed"
                                ),
                            }
                        }
                        StagingRefusal::NotStageable => {
                            self.metrics.staged("failed");
                            ColdError::InvalidArgument {
                                field: "length",
                                reason: format!(
                                    "a payload of {length} bytes cannot be staged in a region \
                                     of {capacity} bytes"
                                ),
                            }
                        }
                    });
                }
            }
        };
        // The slot is ours alone (Filling): read and verify straight into it, outside the
        // pool lock. The exclusive range lock keeps a late transfer of an earlier token from
        // reading it half written (and makes this fill refuse if one still holds it).
        let filled = self
            .region
            .try_with_write(placed.offset, placed.length, |slot| {
                device.read_into_slice(locator, checksum, slot)
            });
        let mut inner = self.lock();
        let failure = match filled {
            Ok(Some(Ok(()))) => None,
            Ok(Some(Err(e))) => Some(e),
            Ok(None) => Some(ColdError::Backpressure {
                queue: "owner restore staging",
                reason: "a late transfer still reads the free slot".into(),
            }),
            Err(e) => Some(ColdError::Io {
                path: self.segment_id.clone(),
                kind: std::io::ErrorKind::Other,
                message: format!("locking the staging slot: {e}"),
            }),
        };
        if let Some(e) = failure {
            let _ = inner.pool.abort(placed.slot);
            let label = match e {
                ColdError::Backpressure { .. } => "busy",
                _ => "failed",
            };
            self.metrics.staged(label);
            self.observe(&inner);
            return Err(e);
        }
        inner
            .pool
            .publish(placed.slot)
            .expect("a slot reserved above is filling");
        let (token, deadline) = inner
            .pool
            .admit_reader(placed.slot, now_ms)
            .expect("admitting a reader to a slot published above");
        inner
            .pool
            .release_owner(placed.slot)
            .expect("the owner holds a slot it reserved");
        self.metrics.staged("staged");
        self.observe(&inner);
        Ok(StagedSlot {
            offset: placed.offset,
            length: placed.length,
            token,
            expires_at_ms: deadline,
        })
    }

    /// Readers are done with `tokens` (their transfer finished before they acked): reader
    /// and transfer pins are released. Idempotent. Returns how many released a live pin.
    pub fn release(&self, tokens: &[StagingToken], now_ms: u64) -> u64 {
        let mut inner = self.lock();
        let mut released = 0;
        for &token in tokens {
            let outcome = inner.pool.ack(token);
            self.metrics.acked(outcome.label());
            if outcome == AckOutcome::Released {
                released += 1;
                let _ = inner.pool.transfer_terminal(token);
            }
        }
        self.sweep(&mut inner, now_ms);
        self.observe(&inner);
        released
    }

    /// Fences tokens past their deadline and retires those no transfer reads any more.
    pub fn expire(&self, now_ms: u64) {
        let mut inner = self.lock();
        self.sweep(&mut inner, now_ms);
        self.observe(&inner);
    }

    fn sweep(&self, inner: &mut Inner, now_ms: u64) {
        let fenced = inner.pool.expire(now_ms);
        if !fenced.is_empty() {
            self.metrics.fenced(fenced.len() as u64);
            tracing::debug!(
                tokens = fenced.len(),
                "owner staged payloads expired unacked"
            );
            inner.fenced.extend(fenced);
        }
        let fenced = std::mem::take(&mut inner.fenced);
        let (still, _released) = inner
            .pool
            .settle_fenced(fenced, |p| self.region.range_idle(p.offset, p.length));
        inner.fenced = still;
    }

    fn observe(&self, inner: &Inner) {
        self.metrics
            .set_occupancy(inner.pool.used_bytes(), inner.pool.live_tokens());
    }
}

#[cfg(test)]
#[path = "owner_staging_tests.rs"]
mod tests;
