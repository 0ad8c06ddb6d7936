//! The business rules of `QuotaRoot`: which events each command produces, or why not
//! (docs/tenants.md, "Transitions").

use super::command::{ObjectChange, PolicyMode, QuotaCommand, ReserveItem, MAX_PAGE};
use super::error::{QuotaError, QuotaLimit};
use super::event::*;
use super::state::{AbortReason, OpKind, OpState, QuotaLimits, QuotaOperation, POLICY_SCHEMA};
use super::{QuotaEvent, QuotaRoot};

type Decision = Result<Vec<QuotaEvent>, QuotaError>;

fn transition(op: &QuotaOperation, action: &'static str) -> QuotaError {
    QuotaError::InvalidTransition {
        op_id: op.op_id.clone(),
        state: op.state.as_str(),
        action,
    }
}

fn conflict(op_id: &str, reason: String) -> QuotaError {
    QuotaError::OperationConflict {
        op_id: op_id.to_string(),
        reason,
    }
}

/// What one limit check needs: the limit, committed use, pending (including earlier items
/// of the same batch) and what this item asks for.
struct Admission {
    limit: QuotaLimit,
    max: Option<u64>,
    used: u64,
    pending: u64,
    requested: u64,
}

impl Admission {
    /// Only growth is checked: an operation asking for nothing (a shrinking overwrite, a
    /// delete) is admitted even above a lowered limit.
    fn check(self, key: &str) -> Result<(), QuotaError> {
        let Some(max) = self.max else {
            return Ok(());
        };
        let total = u128::from(self.used) + u128::from(self.pending) + u128::from(self.requested);
        if self.requested == 0 || total <= u128::from(max) {
            return Ok(());
        }
        Err(QuotaError::QuotaExceeded {
            limit: self.limit,
            key: key.to_string(),
            max,
            used: self.used,
            pending: self.pending,
            requested: self.requested,
        })
    }
}

impl QuotaRoot {
    pub(super) fn decide_command(&self, cmd: &QuotaCommand) -> Decision {
        match cmd {
            QuotaCommand::SetPolicy { limits, mode } => self.decide_policy(limits, *mode),
            QuotaCommand::Reserve { item, deadline_ms } => {
                self.decide_reserve(std::slice::from_ref(item), *deadline_ms)
            }
            QuotaCommand::ReserveBatch { items, deadline_ms } => {
                self.decide_reserve(items, *deadline_ms)
            }
            QuotaCommand::Publish {
                op_id,
                route_version,
                deadline_ms,
            } => self.decide_publish(op_id, *route_version, *deadline_ms),
            QuotaCommand::Finalize {
                op_id,
                route_version,
            } => self.decide_finalize(op_id, *route_version),
            QuotaCommand::Abort { op_id, reason } => {
                let op = self.op(op_id)?;
                match op.state {
                    OpState::Pending => Ok(vec![aborted(op, *reason)]),
                    OpState::Aborted => Ok(vec![]),
                    OpState::Publishing | OpState::Finalized => Err(transition(op, "abort")),
                }
            }
            QuotaCommand::ExpireDue { now_ms, limit } => Ok(self
                .due_pending(*now_ms, *limit as usize)
                .into_iter()
                .map(|op| aborted(op, AbortReason::Expired))
                .collect()),
            QuotaCommand::PruneTerminal { keep } => {
                let excess = self.terminal.len().saturating_sub(*keep as usize);
                let op_ids: Vec<String> = self
                    .terminal
                    .values()
                    .take(excess.min(MAX_PAGE as usize))
                    .cloned()
                    .collect();
                Ok(match op_ids.is_empty() {
                    true => vec![],
                    false => vec![QuotaEvent::TerminalPruned(TerminalPruned { op_ids })],
                })
            }
            QuotaCommand::RecordUsage {
                used_bytes,
                used_objects,
                at_ms,
            } => Ok(self.decide_record_usage(*used_bytes, *used_objects, *at_ms)),
            QuotaCommand::ReconcileUsage {
                rebuilt_bytes,
                rebuilt_objects,
                at_ms,
            } => Ok(self.decide_reconcile(*rebuilt_bytes, *rebuilt_objects, *at_ms)),
            QuotaCommand::RecordAllowance { cluster, allowance } => {
                Ok(self.decide_record_allowance(cluster, *allowance))
            }
            QuotaCommand::ReleaseAllowance { cluster } => {
                Ok(self.decide_release_allowance(cluster))
            }
        }
    }

    fn op(&self, op_id: &str) -> Result<&QuotaOperation, QuotaError> {
        self.operations
            .get(op_id)
            .ok_or_else(|| QuotaError::NotFound {
                op_id: op_id.to_string(),
            })
    }

    /// Bootstrap creates a missing policy and accepts only the same limits after that; a
    /// change creates or replaces. The same limits again are an idempotent success.
    fn decide_policy(&self, limits: &QuotaLimits, mode: PolicyMode) -> Decision {
        let fingerprint = limits.fingerprint();
        let policy_version = match (&self.policy, mode) {
            (None, _) => 1,
            (Some(p), _) if p.limits == *limits => return Ok(vec![]),
            (Some(p), PolicyMode::Bootstrap) => {
                return Err(QuotaError::PolicyMismatch {
                    policy_version: p.policy_version,
                    stored: p.limits,
                    stored_fingerprint: p.fingerprint.clone(),
                    offered: *limits,
                    offered_fingerprint: fingerprint,
                })
            }
            (Some(p), PolicyMode::Change) => p.policy_version + 1,
        };
        Ok(vec![QuotaEvent::PolicySet(PolicySet {
            max_bytes: limits.max_bytes,
            max_objects: limits.max_objects,
            schema_version: POLICY_SCHEMA,
            policy_version,
            fingerprint,
        })])
    }

    /// Admits the items in canonical key order against `used + pending + positive delta`,
    /// counting the items admitted before in the same command; any refusal refuses all.
    /// An op id already recorded with the same facts is skipped (a retry), whatever its
    /// state.
    fn decide_reserve(&self, items: &[ReserveItem], deadline_ms: i64) -> Decision {
        let mut order: Vec<&ReserveItem> = items.iter().collect();
        order.sort_unstable_by(|a, b| a.key.cmp(&b.key));
        let (mut batch_bytes, mut batch_objects) = (0u64, 0u64);
        let mut events = Vec::with_capacity(order.len());
        for item in order {
            if let Some(op) = self.operations.get(&item.op_id) {
                same_reservation(op, item)?;
                continue;
            }
            if let Some(holder) = self.locks.get(&item.key) {
                return Err(QuotaError::ObjectBusy {
                    key: item.key.clone(),
                    holder: holder.clone(),
                });
            }
            let reserved = self.admit(item, deadline_ms, batch_bytes, batch_objects)?;
            // Saturating: without a policy nothing bounds the sum of a batch.
            batch_bytes = batch_bytes.saturating_add(reserved.reserved_bytes);
            batch_objects = batch_objects.saturating_add(reserved.reserved_objects);
            events.push(QuotaEvent::Reserved(reserved));
        }
        Ok(events)
    }

    /// Derives the operation from the key's committed row and checks the limits.
    fn admit(
        &self,
        item: &ReserveItem,
        deadline_ms: i64,
        batch_bytes: u64,
        batch_objects: u64,
    ) -> Result<Reserved, QuotaError> {
        let row = self.objects.get(&item.key);
        let (kind, next_bytes) = match (item.change, row) {
            (ObjectChange::Put { size }, None) => (OpKind::Create, size),
            (ObjectChange::Put { size }, Some(_)) => (OpKind::Overwrite, size),
            (ObjectChange::Delete, _) => (OpKind::Delete, 0),
        };
        let predecessor_bytes = row.map_or(0, |r| r.bytes);
        let reserved_bytes = next_bytes.saturating_sub(predecessor_bytes);
        let reserved_objects = u64::from(kind == OpKind::Create);
        let limits = self.limits();
        if let (ObjectChange::Put { size }, Some(max_bytes)) = (item.change, limits.max_bytes) {
            if size > max_bytes {
                return Err(QuotaError::ObjectTooLarge {
                    key: item.key.clone(),
                    size,
                    max_bytes,
                });
            }
        }
        Admission {
            limit: QuotaLimit::MaxBytes,
            max: limits.max_bytes,
            used: self.used_bytes,
            pending: self.pending_bytes.saturating_add(batch_bytes),
            requested: reserved_bytes,
        }
        .check(&item.key)?;
        Admission {
            limit: QuotaLimit::MaxObjects,
            max: limits.max_objects,
            used: self.used_objects,
            pending: self.pending_objects.saturating_add(batch_objects),
            requested: reserved_objects,
        }
        .check(&item.key)?;
        Ok(Reserved {
            op_id: item.op_id.clone(),
            key: item.key.clone(),
            kind,
            next_bytes,
            predecessor_bytes,
            predecessor_version: row.map(|r| r.version),
            reserved_bytes,
            reserved_objects,
            deadline_ms,
        })
    }

    /// Only a Pending operation may start publishing: once aborted, never.
    fn decide_publish(&self, op_id: &str, route_version: u64, deadline_ms: i64) -> Decision {
        let op = self.op(op_id)?;
        match op.state {
            OpState::Pending => Ok(vec![QuotaEvent::Publishing(Publishing {
                op_id: op_id.to_string(),
                route_version,
                deadline_ms,
            })]),
            OpState::Aborted => Err(transition(op, "publish")),
            OpState::Publishing | OpState::Finalized => same_route(op, route_version),
        }
    }

    /// Finalizes the published version, charging (or refunding) the delta against the row
    /// the operation was reserved against: the key lock keeps that row, checked again here.
    fn decide_finalize(&self, op_id: &str, route_version: u64) -> Decision {
        let op = self.op(op_id)?;
        match op.state {
            OpState::Pending | OpState::Aborted => Err(transition(op, "finalize")),
            OpState::Finalized => same_route(op, route_version),
            OpState::Publishing => {
                same_route(op, route_version)?;
                let row_version = self.objects.get(&op.key).map(|r| r.version);
                if row_version != op.predecessor_version {
                    return Err(conflict(
                        op_id,
                        format!(
                            "reserved against accounting version {:?} of {:?}, now {row_version:?}",
                            op.predecessor_version, op.key
                        ),
                    ));
                }
                let (bytes_delta, objects_delta) = op.committed_delta();
                Ok(vec![QuotaEvent::Finalized(Finalized {
                    op_id: op_id.to_string(),
                    key: op.key.clone(),
                    route_version,
                    bytes_delta,
                    objects_delta,
                })])
            }
        }
    }
}

fn aborted(op: &QuotaOperation, reason: AbortReason) -> QuotaEvent {
    QuotaEvent::Aborted(Aborted {
        op_id: op.op_id.clone(),
        key: op.key.clone(),
        reason,
        released_bytes: op.reserved_bytes,
        released_objects: op.reserved_objects,
    })
}

/// A retried reservation must name the same key and change.
fn same_reservation(op: &QuotaOperation, item: &ReserveItem) -> Result<(), QuotaError> {
    let same_change = match item.change {
        ObjectChange::Put { size } => op.kind != OpKind::Delete && op.next_bytes == size,
        ObjectChange::Delete => op.kind == OpKind::Delete,
    };
    if op.key == item.key && same_change {
        return Ok(());
    }
    Err(conflict(
        &op.op_id,
        format!(
            "recorded as {:?} of {:?} ({} bytes), retried as {:?} of {:?}",
            op.kind, op.key, op.next_bytes, item.change, item.key
        ),
    ))
}

/// Publishing and Finalized answer a repeat of their own route version with no events.
fn same_route(op: &QuotaOperation, route_version: u64) -> Decision {
    match op.route_version == Some(route_version) {
        true => Ok(vec![]),
        false => Err(conflict(
            &op.op_id,
            format!(
                "published route version {:?}, not {route_version}",
                op.route_version
            ),
        )),
    }
}
