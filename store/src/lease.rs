//! Read leases: granted (or renewed) by `get`, ended by the readers' releases or by their TTL.
//!
//! One lease protects an object version for every reader of it: the entry keeps one deadline
//! and a count of the readers holding it. A get counts its reader in; a release counts it out,
//! and the last one out ends the lease at once, so `get K` then `remove K` from the same
//! caller succeeds instead of answering BUSY until the TTL. A reader that never releases
//! (crashed, old client) costs only the TTL. The count is a `u8` that saturates: past
//! [`UNCOUNTED`] readers releases no longer end the lease early and the TTL does.

use crescent_wire::store::ReleaseRequest;

use crate::directory::ObjectDirectory;
use crate::entry::Entry;
use crate::error::StoreError;
use crate::identity::ObjectName;
use crate::time::Ticks;

/// A reader count that lost track (too many readers): only the TTL ends the lease.
pub(crate) const UNCOUNTED: u8 = u8::MAX;

/// What a lease request got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeaseOutcome {
    Granted,
    Renewed,
    /// The chain reached its cap: no extension (the reply's deadline may be past).
    Capped,
}

impl LeaseOutcome {
    pub(crate) fn label(self) -> &'static str {
        match self {
            LeaseOutcome::Granted => "granted",
            LeaseOutcome::Renewed => "renewed",
            LeaseOutcome::Capped => "capped",
        }
    }
}

/// Grants or renews a read lease on `e` and counts the reader in while a lease protects it.
///
/// A chain is a run of grants each arriving while the previous lease is active. No chain
/// protects the object past `chain start + max_lease`; once a chain ended at its cap, one TTL
/// of cool-down passes (gets still succeed, with no lease beyond the cap) before a new chain
/// can start. So a continuously read object is unprotected at least one TTL out of every
/// `max_lease + ttl`, and eviction, remove and unmount always get a window.
pub(crate) fn grant_lease(
    e: &mut Entry,
    now: Ticks,
    deadline: Ticks,
    ttl: Ticks,
    max: Ticks,
) -> LeaseOutcome {
    let outcome = extend_lease(e, now, deadline, ttl, max);
    if e.leased(now) {
        e.readers = match outcome {
            LeaseOutcome::Granted => 1,
            LeaseOutcome::Renewed | LeaseOutcome::Capped => e.readers.saturating_add(1),
        };
    }
    outcome
}

fn extend_lease(
    e: &mut Entry,
    now: Ticks,
    deadline: Ticks,
    ttl: Ticks,
    max: Ticks,
) -> LeaseOutcome {
    let cap = e.lease_chain_start.saturating_add(max);
    if e.leased(now) {
        let next = deadline.min(cap);
        if next > e.lease_until {
            e.lease_until = next;
            return LeaseOutcome::Renewed;
        }
        return if e.lease_until >= cap {
            LeaseOutcome::Capped
        } else {
            LeaseOutcome::Renewed
        };
    }
    let ended_capped = e.lease_chain_start != 0 && e.lease_until == cap;
    if ended_capped && now < cap.saturating_add(ttl) {
        return LeaseOutcome::Capped;
    }
    e.lease_chain_start = now;
    e.lease_until = deadline.min(now.saturating_add(max));
    LeaseOutcome::Granted
}

/// Counts one reader out of the lease it got (`held_until`: the deadline its get answered);
/// the last one out ends the lease now. Returns whether the release counted.
///
/// A release counts only while its own deadline is still ahead: then the lease has been
/// active without a break since its get, so its reader is one of those counted. A release of
/// another version (`put_id`), of a lease that already ran out, or of one whose count was lost
/// changes nothing.
fn release_lease(e: &mut Entry, put_id: u64, held_until: Ticks, now: Ticks) -> bool {
    let counted = e.is_complete()
        && e.put_id == put_id
        && held_until > now
        && e.leased(now)
        && e.readers != 0
        && e.readers != UNCOUNTED;
    if !counted {
        return false;
    }
    e.readers -= 1;
    if e.readers == 0 {
        e.lease_until = now;
    }
    true
}

impl ObjectDirectory {
    /// Ends the caller's hold on the read lease of a get (see the module docs). Unknown key:
    /// NOT_FOUND; a release that no longer applies (lease already over, version replaced)
    /// answers `false` and changes nothing.
    pub fn release(&self, req: &ReleaseRequest, now_ms: i64) -> Result<bool, StoreError> {
        let _span = tracing::debug_span!("store.release").entered();
        let r = self.release_inner(req, now_ms);
        self.metrics.op("release", &r);
        if let Ok(true) = r {
            self.metrics.lease("released", 1);
        }
        r
    }

    fn release_inner(&self, req: &ReleaseRequest, now_ms: i64) -> Result<bool, StoreError> {
        let name = ObjectName::parse(&req.id)?;
        let missing = || StoreError::not_found("object", req.id.key.clone());
        let scope = self.scopes.lookup(name.scope).ok_or_else(missing)?;
        let key = name.key.as_bytes();
        let mut shard = self.lock_shard(self.shard_of(scope, key));
        let slot = shard.lookup(scope, key).ok_or_else(missing)?;
        let now = self.now(now_ms);
        // The reply's deadline came from `Clock::to_ms`, so this is its exact tick.
        let held_until = self.now(req.lease_until_ms);
        Ok(release_lease(
            shard.entry_mut(slot),
            req.put_id,
            held_until,
            now,
        ))
    }
}
