//! Allowances: what the tenant's home cluster lets each other cluster of a mesh admit
//! (docs/tenants.md, "Quota across a mesh").
//!
//! The home's quota root records, per other cluster, the bytes and objects that cluster may
//! hold of the tenant: the usage it holds plus the room it was granted. The home counts every
//! allowance as used when it admits its own puts and grants room, so the tenant's usage over
//! the whole mesh stays within the limit. The record is journaled before a grant is answered:
//! a home that restarts keeps charging what it granted.

use serde::{Deserialize, Serialize};

use super::command::invalid;
use super::event::{AllowanceRecorded, AllowanceReleased};
use super::{QuotaError, QuotaEvent, QuotaRoot};

/// Longest cluster name (the mesh's rule, docs/scale-out.md "Membership record").
pub const MAX_CLUSTER_NAME_BYTES: usize = 128;

/// What one other cluster may hold of the tenant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allowance {
    pub bytes: u64,
    pub objects: u64,
}

pub(super) fn check_cluster(cluster: &str) -> Result<(), QuotaError> {
    if cluster.is_empty() || cluster.len() > MAX_CLUSTER_NAME_BYTES {
        return Err(invalid(
            "cluster",
            format!(
                "{} bytes, 1..={MAX_CLUSTER_NAME_BYTES} allowed",
                cluster.len()
            ),
        ));
    }
    if cluster.chars().any(char::is_control) {
        return Err(invalid("cluster", "must not contain control characters"));
    }
    Ok(())
}

impl QuotaRoot {
    /// Records `cluster`'s allowance, unless it is already the record.
    pub(super) fn decide_record_allowance(
        &self,
        cluster: &str,
        allowance: Allowance,
    ) -> Vec<QuotaEvent> {
        if self.allowances.get(cluster) == Some(&allowance) {
            return vec![];
        }
        vec![QuotaEvent::AllowanceRecorded(AllowanceRecorded {
            cluster: cluster.to_string(),
            bytes: allowance.bytes,
            objects: allowance.objects,
        })]
    }

    /// Forgets `cluster`'s allowance (it left the mesh, or the tenant has no limit any more).
    pub(super) fn decide_release_allowance(&self, cluster: &str) -> Vec<QuotaEvent> {
        if !self.allowances.contains_key(cluster) {
            return vec![];
        }
        vec![QuotaEvent::AllowanceReleased(AllowanceReleased {
            cluster: cluster.to_string(),
        })]
    }

    pub(super) fn apply_allowance_recorded(&mut self, e: AllowanceRecorded) {
        self.allowances.insert(
            e.cluster,
            Allowance {
                bytes: e.bytes,
                objects: e.objects,
            },
        );
    }

    pub(super) fn apply_allowance_released(&mut self, e: AllowanceReleased) {
        self.allowances.remove(&e.cluster);
    }

    /// The allowance recorded for `cluster` (`None`: none).
    pub fn allowance(&self, cluster: &str) -> Option<Allowance> {
        self.allowances.get(cluster).copied()
    }

    /// Every recorded allowance, by cluster name.
    pub fn allowances(&self) -> impl Iterator<Item = (&String, &Allowance)> {
        self.allowances.iter()
    }

    /// The sum of every recorded allowance: what the home counts as held elsewhere.
    pub fn allowances_total(&self) -> Allowance {
        self.allowances
            .values()
            .fold(Allowance::default(), |sum, a| Allowance {
                bytes: sum.bytes.saturating_add(a.bytes),
                objects: sum.objects.saturating_add(a.objects),
            })
    }
}
