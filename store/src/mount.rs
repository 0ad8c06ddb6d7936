//! Mounting and unmounting segments, and dropping an expired owner's segments.

use std::sync::MutexGuard;

use crate::directory::ObjectDirectory;
use crate::error::StoreError;
use crate::segments::{MountSpec, SegmentIdx};
use crate::shard::Shard;
use crate::time::Ticks;

/// What an unmount or owner drop removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UnmountReport {
    pub segments: u64,
    /// Objects that lost their last replica and disappeared.
    pub objects_dropped: u64,
    /// Replicas removed (complete and in-progress).
    pub replicas_dropped: u64,
}

impl ObjectDirectory {
    /// Makes a segment available for placement. Mounting the same segment again with the same
    /// parameters is a no-op (`Ok(false)`); with other parameters, CONFLICT.
    pub fn mount_segment(&self, spec: MountSpec, _now_ms: i64) -> Result<bool, StoreError> {
        let _span = tracing::debug_span!("store.mount_segment").entered();
        let r = self
            .segments
            .write()
            .expect("segment table lock")
            .mount(spec);
        if let Ok((idx, true)) = r {
            let table = self.table();
            if let Some(seg) = table.get(idx) {
                self.metrics.bytes_capacity.add(seg.capacity() as i64);
                self.metrics.segments.inc();
                if seg.spec.endpoint.is_some() {
                    // A remote owner process: it is told what is released in its segments.
                    self.releases.track(&seg.spec.owner_id);
                }
                tracing::info!(segment = %seg.spec.segment_id, owner = %seg.spec.owner_id,
                    size = seg.spec.size, "segment mounted");
            }
        }
        self.metrics.op("mount_segment", &r);
        r.map(|(_, new)| new)
    }

    /// Unmounts a segment, dropping its replicas; objects left without a replica disappear.
    /// Refused with BUSY while a replica on it is under a read lease, unless `force` (the
    /// server forces when the owner expired: the bytes are gone anyway).
    pub fn unmount_segment(
        &self,
        segment_id: &str,
        force: bool,
        now_ms: i64,
    ) -> Result<UnmountReport, StoreError> {
        let _span = tracing::debug_span!("store.unmount_segment").entered();
        let r = (|| {
            let mut guards = self.lock_all();
            let idx = self
                .table()
                .find(segment_id)
                .ok_or_else(|| StoreError::not_found("segment", segment_id))?;
            self.unmount_locked(&mut guards, &[idx], force, self.now(now_ms), "unmount")
        })();
        self.metrics.op("unmount_segment", &r);
        r
    }

    /// Removes every segment of `owner_id` (forced: the owner stopped heartbeating). Unknown
    /// owners drop nothing.
    pub fn drop_owner(&self, owner_id: &str, now_ms: i64) -> UnmountReport {
        let _span = tracing::debug_span!("store.drop_owner").entered();
        let mut guards = self.lock_all();
        let idxs: Vec<SegmentIdx> = self
            .table()
            .iter()
            .filter(|(_, s)| s.spec.owner_id == owner_id)
            .map(|(i, _)| i)
            .collect();
        let r = self.unmount_locked(&mut guards, &idxs, true, self.now(now_ms), "owner_expired");
        self.metrics.op("drop_owner", &r);
        r.unwrap_or_default()
    }

    fn unmount_locked(
        &self,
        guards: &mut [MutexGuard<'_, Shard>],
        idxs: &[SegmentIdx],
        force: bool,
        now: Ticks,
        reason: &'static str,
    ) -> Result<UnmountReport, StoreError> {
        let on = |seg: SegmentIdx| idxs.contains(&seg);
        if !force {
            refuse_if_leased(guards, &on, now)?;
        }
        let mut report = UnmountReport::default();
        for shard in guards.iter_mut() {
            let Shard {
                scopes,
                slab,
                pending,
                deferred,
                cold,
                ..
            } = &mut **shard;
            let mut released = Vec::new();
            for (&scope, index) in scopes.iter_mut() {
                let usage = self.tenant_of(scope);
                index.retain(|_, slot| {
                    let e = slab[*slot as usize].as_mut().expect("indexed slot");
                    let mut dropped_complete = 0;
                    for &seg in idxs {
                        let n = e.replicas.drop_segment(seg);
                        dropped_complete += n;
                        report.replicas_dropped += n as u64;
                        if let Some(p) = e.pending.as_mut() {
                            report.replicas_dropped += p.replicas.drop_segment(seg) as u64;
                        }
                    }
                    let cold_only = cold.get(slot).is_some_and(|c| c.backing.is_materialized());
                    if e.is_complete() && e.replicas.is_empty() && !cold_only {
                        e.flags &= !crate::entry::COMPLETE;
                        usage.refund(e.size, 1);
                    }
                    if dropped_complete > 0 {
                        // Replicas left the route: another version of it.
                        e.route_rev = e.route_rev.saturating_add(1);
                    }
                    if let Some(p) = e.pending.take_if(|p| p.replicas.is_empty()) {
                        usage.release(p.reserved);
                        pending.remove(&p.put_id);
                    }
                    let keep = e.is_complete() || e.pending.is_some();
                    if !keep {
                        released.push(*slot);
                    }
                    keep
                });
            }
            scopes.retain(|_, index| !index.is_empty());
            deferred.retain(|d| !on(d.segment));
            report.objects_dropped += released.len() as u64;
            for slot in released {
                shard.release_slot(slot);
            }
        }
        let mut table = self.segments.write().expect("segment table lock");
        for &idx in idxs {
            if let Some(seg) = table.remove(idx) {
                // The owner forgets an unmounted segment whole; its queued releases are moot.
                self.releases
                    .drop_segment(&seg.spec.owner_id, &seg.spec.segment_id);
                if !table
                    .iter()
                    .any(|(_, s)| s.spec.owner_id == seg.spec.owner_id)
                {
                    self.releases.untrack(&seg.spec.owner_id);
                }
                let a = seg.allocator();
                self.metrics.bytes_capacity.sub(a.capacity() as i64);
                self.metrics.bytes_used.sub(a.used_bytes() as i64);
                self.metrics.segments.dec();
                report.segments += 1;
                tracing::info!(segment = %seg.spec.segment_id, owner = %seg.spec.owner_id,
                    reason, "segment unmounted");
            }
        }
        self.metrics.objects.sub(report.objects_dropped as i64);
        self.metrics.dropped(reason, report.objects_dropped);
        Ok(report)
    }
}

/// Refuses (BUSY) an unforced unmount while a complete entry or a deferred free with a replica
/// on a segment being unmounted (`on`) is under a read lease.
fn refuse_if_leased(
    guards: &[MutexGuard<'_, Shard>],
    on: &dyn Fn(SegmentIdx) -> bool,
    now: Ticks,
) -> Result<(), StoreError> {
    for shard in guards.iter() {
        let leased_entry = shard.slab.iter().flatten().any(|e| {
            e.is_complete() && e.leased(now) && e.replicas.as_slice().iter().any(|r| on(r.segment))
        });
        let leased_deferred = shard
            .deferred
            .iter()
            .any(|d| d.leased && d.at > now && on(d.segment));
        if leased_entry || leased_deferred {
            return Err(StoreError::busy(
                "replicas on the segment are under a read lease (retry, or force)",
            ));
        }
    }
    Ok(())
}
