//! The tenant's usage as journaled: a write-behind record of the object directory's exact
//! counters, and the reconciliation of that record with the directory rebuilt after a restart
//! or a promotion (docs/tenants.md, "Journaled usage and reconciliation").
//!
//! The directory admits every put against the limits and keeps the usage exact; the root
//! records it when it changed (at most once per housekeeping pass), so a standby and
//! `crescent-replay` know it, and a node that rebuilt its directory can say by how much the
//! rebuilt usage differs from the last record, instead of silently starting from the rebuilt one.

use serde::{Deserialize, Serialize};

use super::event::{UsageReconciled, UsageRecorded};
use super::{QuotaEvent, QuotaRoot};

/// The usage last recorded: committed bytes and objects of the tenant, and when.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedUsage {
    pub used_bytes: u64,
    pub used_objects: u64,
    pub at_ms: i64,
}

/// The last reconciliation: the usage recorded before the rebuild and the rebuilt one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reconciliation {
    pub recorded_bytes: u64,
    pub recorded_objects: u64,
    pub rebuilt_bytes: u64,
    pub rebuilt_objects: u64,
    pub at_ms: i64,
}

impl Reconciliation {
    /// Rebuilt minus recorded: bytes, objects (negative: less came back than was recorded).
    pub fn difference(&self) -> (i128, i128) {
        (
            i128::from(self.rebuilt_bytes) - i128::from(self.recorded_bytes),
            i128::from(self.rebuilt_objects) - i128::from(self.recorded_objects),
        )
    }

    pub fn converged(&self) -> bool {
        self.difference() == (0, 0)
    }
}

impl QuotaRoot {
    /// Records the directory's usage, unless the last record says the same.
    pub(super) fn decide_record_usage(
        &self,
        used_bytes: u64,
        used_objects: u64,
        at_ms: i64,
    ) -> Vec<QuotaEvent> {
        let last = self.recorded.map(|r| (r.used_bytes, r.used_objects));
        if last.unwrap_or((0, 0)) == (used_bytes, used_objects) {
            return vec![];
        }
        vec![QuotaEvent::UsageRecorded(UsageRecorded {
            used_bytes,
            used_objects,
            at_ms,
        })]
    }

    /// Compares the last record (none: nothing) with the rebuilt usage and records both; a
    /// tenant with no record and nothing rebuilt has nothing to reconcile.
    pub(super) fn decide_reconcile(
        &self,
        rebuilt_bytes: u64,
        rebuilt_objects: u64,
        at_ms: i64,
    ) -> Vec<QuotaEvent> {
        let recorded = self.recorded.unwrap_or_default();
        if self.recorded.is_none() && (rebuilt_bytes, rebuilt_objects) == (0, 0) {
            return vec![];
        }
        vec![QuotaEvent::UsageReconciled(UsageReconciled {
            recorded_bytes: recorded.used_bytes,
            recorded_objects: recorded.used_objects,
            rebuilt_bytes,
            rebuilt_objects,
            at_ms,
        })]
    }

    pub(super) fn apply_usage_recorded(&mut self, e: UsageRecorded) {
        self.recorded = Some(RecordedUsage {
            used_bytes: e.used_bytes,
            used_objects: e.used_objects,
            at_ms: e.at_ms,
        });
    }

    /// The rebuilt usage becomes the record: the difference is kept as the last
    /// reconciliation, not carried into the next one.
    pub(super) fn apply_usage_reconciled(&mut self, e: UsageReconciled) {
        self.recorded = Some(RecordedUsage {
            used_bytes: e.rebuilt_bytes,
            used_objects: e.rebuilt_objects,
            at_ms: e.at_ms,
        });
        self.reconciliation = Some(Reconciliation {
            recorded_bytes: e.recorded_bytes,
            recorded_objects: e.recorded_objects,
            rebuilt_bytes: e.rebuilt_bytes,
            rebuilt_objects: e.rebuilt_objects,
            at_ms: e.at_ms,
        });
    }

    /// The usage last recorded (`None`: never).
    pub fn recorded_usage(&self) -> Option<RecordedUsage> {
        self.recorded
    }

    /// The last reconciliation after a rebuild (`None`: none yet).
    pub fn last_reconciliation(&self) -> Option<Reconciliation> {
        self.reconciliation
    }
}
