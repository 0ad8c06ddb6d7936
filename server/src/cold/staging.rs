//! Remote restore through the bounded staging pool (docs/cold-tier.md, "Restore on read"):
//! crescentd reads and verifies a cold-only payload straight into a slot of a fixed-capacity
//! region that its transfer listener serves (segment [`STAGING_SEGMENT_ID`]), and answers the
//! get with where the bytes are and a token ([`StagedPayload`]) instead of the bytes. The
//! reader pulls them over the data plane into its own buffer, checks length and CRC32C, and
//! acks the token with its lease release (`ReleaseRequest::staged_token`).
//!
//! The pool's bookkeeping is the pure [`StagingPool`]; this module owns the memory, serves it,
//! fills slots, answers acks, fences expired tokens and exports the metrics.
//!
//! Why one served region rather than one segment per token: a transfer client OPENs every
//! segment id once and caches its handle, so a segment per token would cost every restore an
//! extra round trip and leave one cache entry per restore in every reader. The fences are the
//! memory's range locks instead: a slot is filled only under an exclusive lock (a transfer
//! still reading it makes the fill refuse, never see half-written bytes), an expired token's
//! transfer pin is released only once no transfer holds its range, and a reader that reads
//! after its token was fenced reads whatever the slot holds now, which its checksum check
//! refuses (it then asks for the bytes inline).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crescent_cold::io::ColdIo;
use crescent_cold::restore::staging::{
    AckOutcome, Release, SlotId, StagingConfig, StagingPool, StagingRefusal, StagingToken,
};
use crescent_cold::restore::RestoreKey;
use crescent_cold::route::ObjectRoute;
use crescent_cold::ColdError;
use crescent_transport::tcp::TcpTransport;
use crescent_transport::{SegmentMemory, Transport};
use crescent_wire::store::{StagedPayload, STAGED_PAYLOAD_VERSION};
use prometheus::{IntCounterVec, IntGauge, Opts, Registry};

/// Segment id of the staging region on crescentd's transfer listener.
pub const STAGING_SEGMENT_ID: &str = "crescentd-staging-0";

/// The owner whose listener serves a staged payload's segment: crescentd's own (the embedded
/// segment's listener) or the storage owner whose staging region it is
/// (`crescent_wire::cold_owner::staging_segment_id`). Its key signs the payload's read grant.
pub fn staged_owner(segment_id: &str) -> &str {
    if segment_id == STAGING_SEGMENT_ID {
        return crescent_wire::segments::EMBEDDED_OWNER_ID;
    }
    crescent_wire::cold_owner::staging_owner(segment_id).unwrap_or(segment_id)
}

/// Outcomes of a remote restore's staging attempt (the `outcome` label).
pub const STAGE_OUTCOMES: [&str; 5] = ["staged", "shared", "busy", "small", "failed"];
/// Outcomes of a staged reader's ack (the `outcome` label).
pub const ACK_OUTCOMES: [&str; 4] = ["released", "repeat", "fenced", "unknown"];

pub use crate::config::cold::StagingSettings;

impl StagingSettings {
    fn pool_config(&self) -> StagingConfig {
        StagingConfig {
            capacity_bytes: self.bytes - self.bytes % self.unit_bytes,
            unit_bytes: self.unit_bytes,
            reader_ttl_ms: self.ttl_ms,
        }
    }
}

/// The staging pool's metrics (no ids or keys as labels).
#[derive(Clone)]
struct StagingMetrics {
    capacity_bytes: IntGauge,
    used_bytes: IntGauge,
    live_tokens: IntGauge,
    stages: IntCounterVec,
    acks: IntCounterVec,
    expired: prometheus::IntCounter,
}

impl StagingMetrics {
    fn new() -> Self {
        let gauge = |name: &str, help: &str| IntGauge::new(name, help).expect("valid metric");
        let counter_vec = |name: &str, help: &str| {
            IntCounterVec::new(Opts::new(name, help), &["outcome"]).expect("valid metric")
        };
        Self {
            capacity_bytes: gauge(
                "crescent_cold_staging_capacity_bytes",
                "Bytes of the remote-restore staging region.",
            ),
            used_bytes: gauge(
                "crescent_cold_staging_used_bytes",
                "Bytes of staging slots allocated (filling, read, or waiting for their pins).",
            ),
            live_tokens: gauge(
                "crescent_cold_staging_tokens",
                "Staged payload tokens not yet acked or fenced and retired.",
            ),
            stages: counter_vec(
                "crescent_cold_staging_total",
                "Remote restores offered to the staging pool, by outcome (staged; shared: a \
                 ready slot of the same payload; busy: pool saturated, answered inline; small: \
                 below staging_min_bytes, inline; failed: the read or check failed).",
            ),
            acks: counter_vec(
                "crescent_cold_staging_acks_total",
                "Acks of staged payloads, by outcome (released; repeat; fenced: after expiry; \
                 unknown: retired or from an earlier run).",
            ),
            expired: prometheus::IntCounter::new(
                "crescent_cold_staging_expired_total",
                "Staged payload tokens fenced because their reader did not ack in time.",
            )
            .expect("valid metric"),
        }
    }

    fn register(&self, registry: &Registry) {
        let all: [Box<dyn prometheus::core::Collector>; 6] = [
            Box::new(self.capacity_bytes.clone()),
            Box::new(self.used_bytes.clone()),
            Box::new(self.live_tokens.clone()),
            Box::new(self.stages.clone()),
            Box::new(self.acks.clone()),
            Box::new(self.expired.clone()),
        ];
        for c in all {
            // A second start in one process (HA re-promotion) keeps the first registration.
            if let Err(e) = registry.register(c) {
                tracing::debug!(error = %e, "staging metric already registered");
            }
        }
    }
}

struct Inner {
    pool: StagingPool,
    /// Ready slots by payload, so concurrent readers of one backing share one read.
    by_key: HashMap<RestoreKey, SlotId>,
    key_of: HashMap<SlotId, RestoreKey>,
    /// Fenced tokens whose range a transfer may still read.
    fenced: Vec<StagingToken>,
}

/// The staging pool of one crescentd: its region, served by the transfer listener.
pub struct StagedRestores {
    inner: Mutex<Inner>,
    region: Arc<SegmentMemory>,
    transport: Arc<TcpTransport>,
    endpoint: String,
    settings: StagingSettings,
    metrics: StagingMetrics,
}

impl std::fmt::Debug for StagedRestores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StagedRestores")
            .field("endpoint", &self.endpoint)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// A staging attempt that did not stage: the caller answers inline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotStaged {
    /// Below `staging_min_bytes`, or larger than the whole pool.
    Small,
    /// The pool is saturated (explicit backpressure).
    Busy,
}

impl StagedRestores {
    /// Allocates the region (an anonymous mapping: memory is committed as slots are first
    /// filled) and serves it on `transport`. `first_id` seeds slot ids and tokens (unique per
    /// run: a token from an earlier run is unknown here).
    pub fn start(
        settings: StagingSettings,
        transport: Arc<TcpTransport>,
        endpoint: String,
        registry: &Registry,
        first_id: u64,
    ) -> Result<Arc<Self>, String> {
        let config = settings.pool_config();
        let region = Arc::new(
            SegmentMemory::allocate(config.capacity_bytes as usize)
                .map_err(|e| format!("staging region: {e}"))?,
        );
        transport
            .serve_segment(STAGING_SEGMENT_ID, region.clone())
            .map_err(|e| format!("serving the staging region: {e}"))?;
        let metrics = StagingMetrics::new();
        metrics.register(registry);
        metrics.capacity_bytes.set(config.capacity_bytes as i64);
        metrics.used_bytes.set(0);
        metrics.live_tokens.set(0);
        tracing::info!(
            segment = STAGING_SEGMENT_ID,
            bytes = config.capacity_bytes,
            unit = config.unit_bytes,
            "remote-restore staging region served"
        );
        Ok(Arc::new(Self {
            inner: Mutex::new(Inner {
                pool: StagingPool::new(config, first_id),
                by_key: HashMap::new(),
                key_of: HashMap::new(),
                fenced: Vec::new(),
            }),
            region,
            transport,
            endpoint,
            settings,
            metrics,
        }))
    }

    /// Stops serving the region (the embedded segment is stopping).
    pub fn withdraw(&self) {
        let _ = self.transport.withdraw_segment(STAGING_SEGMENT_ID);
    }

    /// Bytes allocated in the pool now.
    pub fn used_bytes(&self) -> u64 {
        self.lock().pool.used_bytes()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().expect("staging pool lock")
    }

    /// Stages the materialized backing of `route` for one reader: reads and verifies it into
    /// a slot (or shares a ready slot of the same payload) and returns where it lies and the
    /// reader's token. `Ok(Err(_))`: not staged, answer inline. `Err`: the read or the check
    /// failed (a damaged payload: never staged, never returned).
    pub fn stage(
        &self,
        io: &dyn ColdIo,
        route: &ObjectRoute,
        now_ms: i64,
    ) -> Result<Result<StagedPayload, NotStaged>, ColdError> {
        let backing = route.require_materialized()?;
        let (length, checksum, locator) = (backing.length, backing.checksum, backing.locator);
        let now = now_ms.max(0) as u64;
        if length < self.settings.min_bytes {
            self.metrics.stages.with_label_values(&["small"]).inc();
            return Ok(Err(NotStaged::Small));
        }
        let key = backing.restore_key();
        let placed = {
            let mut inner = self.lock();
            self.sweep(&mut inner, now);
            if let Some(&slot) = inner.by_key.get(&key) {
                if inner.pool.is_ready(slot) {
                    let staged = self.admit(&mut inner, slot, checksum, now);
                    self.metrics.stages.with_label_values(&["shared"]).inc();
                    return Ok(Ok(staged));
                }
            }
            match inner.pool.reserve(length) {
                Ok(placed) => placed,
                Err(refusal) => {
                    let outcome = match refusal {
                        StagingRefusal::Busy => NotStaged::Busy,
                        StagingRefusal::NotStageable => NotStaged::Small,
                    };
                    let label = if outcome == NotStaged::Busy {
                        "busy"
                    } else {
                        "small"
                    };
                    self.metrics.stages.with_label_values(&[label]).inc();
                    return Ok(Err(outcome));
                }
            }
        };
        // The slot is ours alone (Filling): read and verify straight into it, outside the
        // pool lock. The exclusive range lock keeps a late transfer of an earlier token from
        // reading it half written (and makes this fill refuse if one still holds it).
        let filled = self
            .region
            .try_with_write(placed.offset, placed.length, |slot| {
                io.read_into_slice(locator, checksum, slot)
            })
            .map_err(|e| ColdError::Backpressure {
                queue: "restore staging",
                reason: e.to_string(),
            });
        let mut inner = self.lock();
        let outcome = match filled {
            Ok(Some(Ok(()))) => Ok(()),
            Ok(None) => Err(None),
            Ok(Some(Err(e))) | Err(e) => Err(Some(e)),
        };
        if let Err(error) = outcome {
            let _ = inner.pool.abort(placed.slot);
            self.observe(&inner);
            return match error {
                None => {
                    self.metrics.stages.with_label_values(&["busy"]).inc();
                    Ok(Err(NotStaged::Busy))
                }
                Some(e) => {
                    self.metrics.stages.with_label_values(&["failed"]).inc();
                    Err(e)
                }
            };
        }
        inner
            .pool
            .publish(placed.slot)
            .expect("a slot reserved above is filling");
        let staged = self.admit(&mut inner, placed.slot, checksum, now);
        let released = inner
            .pool
            .release_owner(placed.slot)
            .expect("the owner holds a slot it reserved");
        self.forget_if_recycled(&mut inner, released);
        inner.by_key.insert(key.clone(), placed.slot);
        inner.key_of.insert(placed.slot, key);
        self.metrics.stages.with_label_values(&["staged"]).inc();
        self.observe(&inner);
        Ok(Ok(staged))
    }

    fn admit(&self, inner: &mut Inner, slot: SlotId, checksum: u32, now: u64) -> StagedPayload {
        let (token, deadline) = inner
            .pool
            .admit_reader(slot, now)
            .expect("admitting a reader to a ready slot");
        let placed = inner
            .pool
            .placement(slot)
            .expect("an allocated slot has a placement");
        StagedPayload {
            version: STAGED_PAYLOAD_VERSION,
            endpoint: self.endpoint.clone(),
            segment_id: STAGING_SEGMENT_ID.to_string(),
            offset: placed.offset,
            length: placed.length,
            checksum,
            token,
            expires_at_ms: deadline as i64,
            grant: None,
        }
    }

    /// A reader's ack (its lease release named the token): its reader pin, and with it the
    /// transfer pin (the reader's transfer completed before it acked), are released.
    /// Idempotent: repeats, late acks and unknown tokens change nothing.
    pub fn ack(&self, token: StagingToken, now_ms: i64) -> AckOutcome {
        let mut inner = self.lock();
        let outcome = inner.pool.ack(token);
        self.metrics
            .acks
            .with_label_values(&[outcome.label()])
            .inc();
        if outcome == AckOutcome::Released {
            if let Ok(released) = inner.pool.transfer_terminal(token) {
                self.forget_if_recycled(&mut inner, released);
            }
        }
        self.sweep(&mut inner, now_ms.max(0) as u64);
        self.observe(&inner);
        outcome
    }

    /// Fences tokens past their deadline, and releases the transfer pin of each fenced token
    /// whose range no transfer holds any more.
    pub fn expire(&self, now_ms: i64) {
        let mut inner = self.lock();
        self.sweep(&mut inner, now_ms.max(0) as u64);
        self.observe(&inner);
    }

    fn sweep(&self, inner: &mut Inner, now: u64) {
        let fenced = inner.pool.expire(now);
        if !fenced.is_empty() {
            self.metrics.expired.inc_by(fenced.len() as u64);
            tracing::debug!(tokens = fenced.len(), "staged payloads expired unacked");
            inner.fenced.extend(fenced);
        }
        let fenced = std::mem::take(&mut inner.fenced);
        let (still, released) = inner
            .pool
            .settle_fenced(fenced, |p| self.region.range_idle(p.offset, p.length));
        inner.fenced = still;
        for r in released {
            self.forget_if_recycled(inner, r);
        }
    }

    fn forget_if_recycled(&self, inner: &mut Inner, released: Release) {
        if let Release::Recycled(slot) = released {
            if let Some(key) = inner.key_of.remove(&slot) {
                if inner.by_key.get(&key) == Some(&slot) {
                    inner.by_key.remove(&key);
                }
            }
        }
    }

    fn observe(&self, inner: &Inner) {
        self.metrics.used_bytes.set(inner.pool.used_bytes() as i64);
        self.metrics
            .live_tokens
            .set(inner.pool.live_tokens() as i64);
    }
}

/// Acks the staged tokens that lease releases name (the reader is done with the staged
/// bytes). Runs before the releases themselves, whose outcome it never changes.
pub fn ack_released(
    state: &super::context::ColdContext,
    releases: &[crescent_wire::store::ReleaseRequest],
) {
    if releases.iter().all(|r| r.staged_token.is_none()) {
        return;
    }
    // Tokens of a storage owner's staging region are forwarded to that owner; they never
    // collide with crescentd's own (the owner's have the top bit set).
    let tokens = releases.iter().filter_map(|r| r.staged_token);
    let (owner_tokens, own_tokens): (Vec<u64>, Vec<u64>) =
        tokens.partition(|t| *t >= OWNER_TOKEN_BIT);
    if !owner_tokens.is_empty() {
        if let Some(tier) = state.cold.get() {
            forward_owner_acks(tier, owner_tokens);
        }
    }
    if own_tokens.is_empty() {
        return;
    }
    let Some(staging) = state.embedded_staging() else {
        return;
    };
    let now = state.now_ms();
    for token in own_tokens {
        staging.ack(token, now);
    }
}

/// The bit every token of an owner's staging region carries (`crescent_owner::owner_staging`
/// seeds its pool with it); crescentd's own pool counts from `now_ms << 16`, below it.
pub const OWNER_TOKEN_BIT: u64 = 1 << 63;

/// Forwards readers' acks to the owners that issued the tokens (one `ReleaseStaged` per
/// owner device); a token no device remembers is counted unknown and dropped (the owner's
/// expiry frees its slot).
fn forward_owner_acks(tier: &super::ColdTier, tokens: Vec<u64>) {
    let devices: Vec<_> = tier
        .all_devices()
        .into_iter()
        .filter_map(|d| d.owner_io.clone())
        .collect();
    let mut unknown = 0u64;
    let mut by_device: Vec<Vec<u64>> = vec![Vec::new(); devices.len()];
    for token in tokens {
        match devices.iter().position(|io| io.staging().take(token)) {
            Some(i) => by_device[i].push(token),
            None => unknown += 1,
        }
    }
    for (io, tokens) in devices.iter().zip(by_device) {
        io.release_staged(tokens);
    }
    if unknown > 0 {
        tracing::debug!(
            unknown,
            "acks of owner staged tokens no owner device remembers"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::StagingSettings;

    fn settings(bytes: u64, unit_bytes: u64, ttl_ms: u64) -> StagingSettings {
        StagingSettings {
            bytes,
            unit_bytes,
            ttl_ms,
            min_bytes: 0,
        }
    }

    #[test]
    fn settings_are_validated_and_round_the_region_down_to_whole_units() {
        assert!(
            settings(0, 0, 0).validate().is_ok(),
            "off needs nothing else"
        );
        assert!(settings(64 << 20, 64 << 10, 5_000).validate().is_ok());
        assert!(settings(64 << 20, 1024, 5_000).validate().is_err());
        assert!(settings(32 << 10, 64 << 10, 5_000).validate().is_err());
        assert!(settings(64 << 20, 64 << 10, 50).validate().is_err());
        let config = settings((1 << 20) + 100, 64 << 10, 1_000).pool_config();
        assert_eq!(config.capacity_bytes, 1 << 20);
        assert_eq!(config.reader_ttl_ms, 1_000);
    }
}
