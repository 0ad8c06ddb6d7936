//! `tick`: the periodic housekeeping the server calls (about once a second): reclaims puts
//! past the release timeout, releases deferred space whose time came, and retires expired
//! read leases. Soft pins need no work: they are deadlines compared at use.

use std::cmp::Reverse;

use crate::directory::ObjectDirectory;
use crate::entry::LEASE_TRACKED;
use crate::shard::Shard;
use crate::time::Ticks;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TickReport {
    /// Puts reclaimed after the release timeout (never ended, or pre-empted and removed).
    pub stale_puts_released: u64,
    /// Deferred slots (leased old versions, pre-empted puts) returned to their segments.
    pub deferred_released: u64,
    pub leases_expired: u64,
}

impl ObjectDirectory {
    pub fn tick(&self, now_ms: i64) -> TickReport {
        let _span = tracing::debug_span!("store.tick").entered();
        let now = self.now(now_ms);
        let mut report = TickReport::default();
        for i in 0..self.shards.len() {
            let mut shard = self.lock_shard(i);
            report.stale_puts_released += self.release_stale_puts(&mut shard, now);
            report.deferred_released += self.release_deferred(&mut shard, now);
            report.leases_expired += expire_leases(&mut shard, now);
        }
        self.metrics.lease("expired", report.leases_expired);
        report
    }

    fn release_deferred(&self, shard: &mut Shard, now: Ticks) -> u64 {
        if !shard.deferred.iter().any(|d| d.at <= now) {
            return 0;
        }
        let (due, keep): (Vec<_>, Vec<_>) = shard.deferred.drain(..).partition(|d| d.at <= now);
        shard.deferred = keep;
        let table = self.table();
        for d in &due {
            self.free_replicas(
                &table,
                &[crate::entry::Replica {
                    offset: d.offset,
                    segment: d.segment,
                }],
                d.size,
                d.put_id,
            );
        }
        due.len() as u64
    }
}

/// Pops lease records that are due. A record whose version's lease was renewed goes back with
/// the new deadline; one whose version is gone (removed, replaced) just counts as expired.
fn expire_leases(shard: &mut Shard, now: Ticks) -> u64 {
    let mut expired = 0;
    while let Some(&Reverse((at, slot, put_id))) = shard.leases.peek() {
        if at > now {
            break;
        }
        shard.leases.pop();
        let live = shard
            .slab
            .get_mut(slot as usize)
            .and_then(Option::as_mut)
            .filter(|e| e.put_id == put_id && e.flags & LEASE_TRACKED != 0);
        match live {
            Some(e) if e.lease_until > now => {
                let until = e.lease_until;
                shard.leases.push(Reverse((until, slot, put_id)));
            }
            Some(e) => {
                e.flags &= !LEASE_TRACKED;
                expired += 1;
            }
            None => expired += 1,
        }
    }
    expired
}
