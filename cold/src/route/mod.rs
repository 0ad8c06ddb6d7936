//! The pure route model of the cold tier (docs/cold-tier.md, "Model"): an object route has hot
//! replicas (readable directly) and at most one active cold backing for its current content. Every
//! change is a compare-and-set on the expected fenced route version, content operation and cold
//! identity; the functions here decide, the route authority (the store's ObjectDirectory) applies.

mod materialized;
#[cfg(test)]
mod tests;

pub use materialized::Materialized;

use serde::{Deserialize, Serialize};

use crate::device::{ColdOpState, ReclaimRecord};
use crate::error::ColdError;
use crate::ids::ColdOpId;

/// A hot (DRAM) replica: a slot in a mounted segment.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct HotReplica {
    pub segment_id: String,
    pub offset: u64,
}

/// The active cold backing of a route's current content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum ActiveColdBacking {
    /// Published together with the put; the offload worker materializes it.
    PendingOffload {
        cold_op: ColdOpId,
        content_op: u64,
        owner: String,
        device_id: String,
        expected_length: u64,
        expected_checksum: u32,
    },
    /// The payload is on the device at `locator`.
    Materialized {
        cold_op: ColdOpId,
        content_op: u64,
        owner: String,
        device_id: String,
        locator: String,
        length: u64,
        checksum: u32,
    },
}

impl ActiveColdBacking {
    pub fn cold_op(&self) -> ColdOpId {
        match self {
            Self::PendingOffload { cold_op, .. } | Self::Materialized { cold_op, .. } => *cold_op,
        }
    }

    pub fn content_op(&self) -> u64 {
        match self {
            Self::PendingOffload { content_op, .. } | Self::Materialized { content_op, .. } => {
                *content_op
            }
        }
    }

    pub fn device_id(&self) -> &str {
        match self {
            Self::PendingOffload { device_id, .. } | Self::Materialized { device_id, .. } => {
                device_id
            }
        }
    }

    pub fn owner(&self) -> &str {
        match self {
            Self::PendingOffload { owner, .. } | Self::Materialized { owner, .. } => owner,
        }
    }

    pub fn locator(&self) -> Option<&str> {
        match self {
            Self::Materialized { locator, .. } => Some(locator),
            Self::PendingOffload { .. } => None,
        }
    }

    pub fn is_materialized(&self) -> bool {
        matches!(self, Self::Materialized { .. })
    }

    /// The identity a CAS matches: operation, device and (once materialized) locator.
    pub fn identity(&self) -> ColdIdentity {
        ColdIdentity {
            cold_op: self.cold_op(),
            device_id: self.device_id().to_string(),
            locator: self.locator().map(str::to_string),
        }
    }
}

/// The cold identity part of a CAS expectation.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ColdIdentity {
    pub cold_op: ColdOpId,
    pub device_id: String,
    /// The materialized locator (its fingerprint in the CAS); `None` while pending.
    pub locator: Option<String>,
}

/// What a route mutation expects to find.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RouteExpectation {
    pub version: u64,
    pub content_op: u64,
    pub cold: Option<ColdIdentity>,
}

/// The route of one object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectRoute {
    pub key: String,
    /// The fenced route version: bumped by every placement, offload, eviction, restore and
    /// cleanup CAS.
    pub version: u64,
    /// The accounting/content operation id: stable while the value moves between tiers.
    pub content_op: u64,
    pub length: u64,
    pub checksum: u32,
    pub replicas: Vec<HotReplica>,
    pub cold: Option<ActiveColdBacking>,
}

fn route_conflict(key: &str, reason: impl Into<String>) -> ColdError {
    ColdError::RouteConflict {
        key: key.to_string(),
        reason: reason.into(),
    }
}

fn refused(key: &str, reason: impl Into<String>) -> ColdError {
    ColdError::EvictionRefused {
        key: key.to_string(),
        reason: reason.into(),
    }
}

impl ObjectRoute {
    /// The identities a mutation of this route expects.
    pub fn expectation(&self) -> RouteExpectation {
        RouteExpectation {
            version: self.version,
            content_op: self.content_op,
            cold: self.cold.as_ref().map(ActiveColdBacking::identity),
        }
    }

    /// No hot replica, a materialized backing.
    pub fn is_cold_only(&self) -> bool {
        self.replicas.is_empty() && self.cold.as_ref().is_some_and(|c| c.is_materialized())
    }

    /// The compare part of every compare-and-set.
    pub fn check(&self, expected: &RouteExpectation) -> Result<(), ColdError> {
        if self.version != expected.version {
            return Err(route_conflict(
                &self.key,
                format!("version is {}, expected {}", self.version, expected.version),
            ));
        }
        if self.content_op != expected.content_op {
            return Err(route_conflict(
                &self.key,
                format!(
                    "content is {}, expected {}",
                    self.content_op, expected.content_op
                ),
            ));
        }
        let actual = self.cold.as_ref().map(ActiveColdBacking::identity);
        if actual != expected.cold {
            return Err(route_conflict(
                &self.key,
                format!("cold backing is {actual:?}, expected {:?}", expected.cold),
            ));
        }
        Ok(())
    }

    fn next(&self) -> Self {
        let mut next = self.clone();
        next.version += 1;
        next
    }

    /// Adds a `PendingOffload` to a route without a cold backing (the put publishes it with
    /// its replicas; this is the `crescent offload KEY` path for an existing object).
    pub fn attach_pending(
        &self,
        expected: &RouteExpectation,
        cold_op: ColdOpId,
        owner: &str,
        device_id: &str,
    ) -> Result<Self, ColdError> {
        self.check(expected)?;
        if let Some(c) = &self.cold {
            return Err(route_conflict(
                &self.key,
                format!(
                    "already has an active cold backing (operation {})",
                    c.cold_op()
                ),
            ));
        }
        if self.replicas.is_empty() {
            return Err(route_conflict(&self.key, "no hot replica to offload from"));
        }
        let mut next = self.next();
        next.cold = Some(ActiveColdBacking::PendingOffload {
            cold_op,
            content_op: self.content_op,
            owner: owner.to_string(),
            device_id: device_id.to_string(),
            expected_length: self.length,
            expected_checksum: self.checksum,
        });
        Ok(next)
    }

    /// `PendingOffload(cold_op)` -> `Materialized(cold_op)`, preserving the content operation.
    pub fn materialize(
        &self,
        expected: &RouteExpectation,
        cold_op: ColdOpId,
        locator: &str,
        length: u64,
        checksum: u32,
    ) -> Result<Self, ColdError> {
        self.check(expected)?;
        let Some(ActiveColdBacking::PendingOffload {
            cold_op: pending_op,
            content_op,
            owner,
            device_id,
            expected_length,
            expected_checksum,
        }) = &self.cold
        else {
            return Err(route_conflict(
                &self.key,
                "no pending offload to materialize",
            ));
        };
        if *pending_op != cold_op {
            return Err(route_conflict(
                &self.key,
                format!("pending offload is operation {pending_op}, not {cold_op}"),
            ));
        }
        if *expected_length != length || *expected_checksum != checksum {
            return Err(route_conflict(
                &self.key,
                "the written payload differs from the pending offload's length or checksum",
            ));
        }
        let mut next = self.next();
        next.cold = Some(ActiveColdBacking::Materialized {
            cold_op,
            content_op: *content_op,
            owner: owner.clone(),
            device_id: device_id.clone(),
            locator: locator.to_string(),
            length,
            checksum,
        });
        Ok(next)
    }

    /// Removes one hot replica. Removing the last one is the last-hot eviction: allowed only
    /// when [`check_last_hot_eviction`] allows it. Allocator bytes may be freed only after the
    /// returned route has been installed.
    pub fn evict_hot(
        &self,
        expected: &RouteExpectation,
        replica: &HotReplica,
        cold_op_state: Option<ColdOpState>,
        device_readable: bool,
    ) -> Result<Self, ColdError> {
        self.check(expected)?;
        if !self.replicas.contains(replica) {
            return Err(route_conflict(
                &self.key,
                format!(
                    "hot replica {}@{} is not in the route",
                    replica.segment_id, replica.offset
                ),
            ));
        }
        if self.replicas.len() == 1 {
            check_last_hot_eviction(self, cold_op_state, device_readable)?;
        }
        let mut next = self.next();
        next.replicas.retain(|r| r != replica);
        Ok(next)
    }

    /// Adds a hot replica (re-promotion after a restore). Best-effort for the caller: a
    /// conflict means the route moved on and the staged copy is simply freed.
    pub fn promote(
        &self,
        expected: &RouteExpectation,
        replica: HotReplica,
    ) -> Result<Self, ColdError> {
        self.check(expected)?;
        if self.replicas.contains(&replica) {
            return Err(route_conflict(&self.key, "replica already in the route"));
        }
        let mut next = self.next();
        next.replicas.push(replica);
        Ok(next)
    }

    /// Drops a pending offload (its operation is cancelled). A materialized backing is never
    /// dropped this way: it leaves through a reclaim record.
    pub fn drop_pending(&self, expected: &RouteExpectation) -> Result<Self, ColdError> {
        self.check(expected)?;
        match &self.cold {
            Some(ActiveColdBacking::PendingOffload { .. }) => {
                let mut next = self.next();
                next.cold = None;
                Ok(next)
            }
            _ => Err(route_conflict(&self.key, "no pending offload to drop")),
        }
    }
}

/// The last-hot eviction rule: the active backing is `Materialized`, its cold operation is
/// `UsageCommitted` and its device is readable. Otherwise removing the last hot replica would
/// remove the last readable copy.
pub fn check_last_hot_eviction(
    route: &ObjectRoute,
    cold_op_state: Option<ColdOpState>,
    device_readable: bool,
) -> Result<(), ColdError> {
    match &route.cold {
        None => Err(refused(&route.key, "no cold backing")),
        Some(ActiveColdBacking::PendingOffload { .. }) => Err(refused(
            &route.key,
            "the cold backing is not materialized yet",
        )),
        Some(ActiveColdBacking::Materialized { .. }) => {
            if cold_op_state != Some(ColdOpState::UsageCommitted) {
                let state = cold_op_state.map_or("unknown", |s| s.as_str());
                return Err(refused(
                    &route.key,
                    format!("its cold operation is {state}, not usage_committed"),
                ));
            }
            if !device_readable {
                return Err(refused(&route.key, "its cold device is not readable"));
            }
            Ok(())
        }
    }
}

/// Whether an authoritative route references the locator of `cold_op` on `device_id`.
pub fn references(route: Option<&ObjectRoute>, device_id: &str, cold_op: ColdOpId) -> bool {
    route
        .and_then(|r| r.cold.as_ref())
        .is_some_and(|c| c.cold_op() == cold_op && c.device_id() == device_id)
}

/// Cleanup may delete a reclaim record's locator only when exact lookup of the authoritative
/// route proves it is no longer referenced.
pub fn check_cleanup(
    route: Option<&ObjectRoute>,
    reclaim: &ReclaimRecord,
    device_id: &str,
) -> Result<(), ColdError> {
    if references(route, device_id, reclaim.op_id) {
        return Err(ColdError::Conflict {
            what: "locator",
            id: reclaim.locator.clone(),
            reason: format!("the route of {} still references it", reclaim.object_key),
        });
    }
    Ok(())
}

/// What the offload worker does with an operation whose payload is written, given the
/// authoritative route found by exact lookup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MaterializeCheck {
    /// The same content and pending operation are still authoritative: (re)try the CAS
    /// against this expectation (a rebase after a conflict).
    Pending(RouteExpectation),
    /// The route already materialized this operation (the CAS succeeded before a crash).
    AlreadyMaterialized { version: u64 },
    /// The route no longer references the operation: its payload is an orphan to reclaim.
    Obsolete,
}

pub fn check_materialize(
    route: Option<&ObjectRoute>,
    device_id: &str,
    cold_op: ColdOpId,
) -> MaterializeCheck {
    match route {
        Some(r) if references(Some(r), device_id, cold_op) => match &r.cold {
            Some(ActiveColdBacking::Materialized { .. }) => {
                MaterializeCheck::AlreadyMaterialized { version: r.version }
            }
            _ => MaterializeCheck::Pending(r.expectation()),
        },
        _ => MaterializeCheck::Obsolete,
    }
}
