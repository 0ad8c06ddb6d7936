//! QuotaRoot: the quota of one tenant root (docs/tenants.md, "QuotaRoot").
//!
//! One instance per tenant, id = the tenant name. It holds the tenant's hard policy
//! (`max_bytes`, `max_objects`), committed usage, pending reservations, the committed
//! accounting row of every object it charged, and the accounting operations that move bytes
//! between them: `Pending -> Publishing -> Finalized`, or `Pending -> Aborted`
//! (docs/tenants.md, "Operation states").
//!
//! Invariants (kept by `decide`, checked by the property tests):
//! - with a policy, `used + pending <= max` for bytes and objects after every admission, and
//!   nothing but a reservation ever grows `used + pending`;
//! - `pending_bytes` / `pending_objects` are the sums over non-terminal operations of what
//!   they reserved; `used_bytes` / `used_objects` the sum / count of the committed rows;
//! - at most one non-terminal operation per key, and its committed row cannot change under
//!   it, so an overwrite or delete is charged or refunded against the row it was reserved
//!   against, exactly once;
//! - Publishing is never aborted and Aborted never published or finalized.

mod allowance;
mod command;
mod decide;
mod error;
mod event;
#[cfg(test)]
mod prop_tests;
mod state;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_allowance;
#[cfg(test)]
mod tests_batch;
#[cfg(test)]
mod tests_codec;
#[cfg(test)]
mod tests_ops;
#[cfg(test)]
mod tests_usage;
mod usage;

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::aggregate::{Aggregate, Ctx};

pub use allowance::{Allowance, MAX_CLUSTER_NAME_BYTES};
pub use command::{
    ObjectChange, PolicyMode, QuotaCommand, ReserveItem, MAX_BATCH_OPS, MAX_BYTES, MAX_KEY_BYTES,
    MAX_OP_ID_BYTES, MAX_PAGE,
};
pub use error::{QuotaError, QuotaLimit};
pub use event::{
    Aborted, AllowanceRecorded, AllowanceReleased, Finalized, PolicySet, Publishing, QuotaEvent,
    Reserved, TerminalPruned, UsageReconciled, UsageRecorded, QUOTA_ABORTED,
    QUOTA_ALLOWANCE_RECORDED, QUOTA_ALLOWANCE_RELEASED, QUOTA_FINALIZED, QUOTA_POLICY_SET,
    QUOTA_PUBLISHING, QUOTA_RESERVED, QUOTA_TERMINAL_PRUNED, QUOTA_USAGE_RECONCILED,
    QUOTA_USAGE_RECORDED,
};
pub use state::{
    AbortReason, ObjectAccount, OpKind, OpState, QuotaLimits, QuotaOperation, QuotaPolicy,
    POLICY_SCHEMA,
};
pub use usage::{Reconciliation, RecordedUsage};

/// Stream kind in the journal and section name in snapshots.
pub const STREAM_KIND: &str = "quota_root";

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuotaRoot {
    /// `None`: no policy stored, no limit applies (usage is still accounted).
    policy: Option<QuotaPolicy>,
    used_bytes: u64,
    used_objects: u64,
    pending_bytes: u64,
    pending_objects: u64,
    operations: BTreeMap<String, QuotaOperation>,
    /// Committed accounting, by object key.
    objects: BTreeMap<String, ObjectAccount>,
    /// Object key -> its one non-terminal operation.
    locks: BTreeMap<String, String>,
    /// Pending operations by (deadline, op id): the due index `ExpireDue` pages through.
    pending_due: BTreeSet<(i64, String)>,
    /// Publishing operations by (deadline, op id): what reconciliation pages through.
    publishing_due: BTreeSet<(i64, String)>,
    /// Terminal operations in the order they ended: `PruneTerminal` forgets the oldest.
    terminal: BTreeMap<u64, String>,
    next_terminal: u64,
    /// The directory's usage as last recorded (snapshot addition: absent before, `None`).
    #[serde(default)]
    recorded: Option<RecordedUsage>,
    /// The last reconciliation after a rebuild (snapshot addition, like `recorded`).
    #[serde(default)]
    reconciliation: Option<Reconciliation>,
    /// At the tenant's home cluster of a mesh: what each other cluster may hold (snapshot
    /// addition: absent before, empty).
    #[serde(default)]
    allowances: BTreeMap<String, Allowance>,
}

impl QuotaRoot {
    pub fn policy(&self) -> Option<&QuotaPolicy> {
        self.policy.as_ref()
    }

    /// The limits in force (unlimited without a policy).
    pub fn limits(&self) -> QuotaLimits {
        self.policy.as_ref().map(|p| p.limits).unwrap_or_default()
    }

    pub fn used_bytes(&self) -> u64 {
        self.used_bytes
    }

    pub fn used_objects(&self) -> u64 {
        self.used_objects
    }

    pub fn pending_bytes(&self) -> u64 {
        self.pending_bytes
    }

    pub fn pending_objects(&self) -> u64 {
        self.pending_objects
    }

    /// Operations in `Pending`.
    pub fn pending_operations(&self) -> usize {
        self.pending_due.len()
    }

    /// Operations in `Publishing` (in doubt until finalized).
    pub fn in_doubt_operations(&self) -> usize {
        self.publishing_due.len()
    }

    pub fn operation(&self, op_id: &str) -> Option<&QuotaOperation> {
        self.operations.get(op_id)
    }

    /// Every remembered operation (terminal ones until pruned), in op id order.
    pub fn operations(&self) -> impl Iterator<Item = &QuotaOperation> {
        self.operations.values()
    }

    /// The committed accounting row of `key`.
    pub fn object(&self, key: &str) -> Option<&ObjectAccount> {
        self.objects.get(key)
    }

    /// Every committed row, in key order.
    pub fn objects(&self) -> impl Iterator<Item = (&String, &ObjectAccount)> {
        self.objects.iter()
    }

    /// The non-terminal operation holding `key`, if any.
    pub fn lock_holder(&self, key: &str) -> Option<&str> {
        self.locks.get(key).map(String::as_str)
    }

    pub fn terminal_operations(&self) -> usize {
        self.terminal.len()
    }

    /// Up to `limit` Pending operations due at `now_ms`, earliest deadline first.
    pub fn due_pending(&self, now_ms: i64, limit: usize) -> Vec<&QuotaOperation> {
        self.due(&self.pending_due, now_ms, limit)
    }

    /// Up to `limit` Publishing operations due at `now_ms`, earliest deadline first.
    pub fn due_publishing(&self, now_ms: i64, limit: usize) -> Vec<&QuotaOperation> {
        self.due(&self.publishing_due, now_ms, limit)
    }

    fn due<'a>(
        &'a self,
        index: &'a BTreeSet<(i64, String)>,
        now_ms: i64,
        limit: usize,
    ) -> Vec<&'a QuotaOperation> {
        index
            .iter()
            .take_while(|(deadline, _)| *deadline <= now_ms)
            .take(limit)
            .filter_map(|(_, id)| self.operations.get(id))
            .collect()
    }
}

impl Aggregate for QuotaRoot {
    const KIND: &'static str = STREAM_KIND;
    const SNAPSHOT_SCHEMA: u32 = 1;

    type Command = QuotaCommand;
    type Event = QuotaEvent;
    type Error = QuotaError;

    fn decide(&self, cmd: &QuotaCommand, _ctx: &Ctx) -> Result<Vec<QuotaEvent>, QuotaError> {
        cmd.validate()?;
        self.decide_command(cmd)
    }

    fn apply(&mut self, event: &QuotaEvent) {
        self.apply_owned(event.clone());
    }

    fn apply_owned(&mut self, event: QuotaEvent) {
        match event {
            QuotaEvent::PolicySet(e) => {
                self.policy = Some(QuotaPolicy {
                    limits: QuotaLimits {
                        max_bytes: e.max_bytes,
                        max_objects: e.max_objects,
                    },
                    schema_version: e.schema_version,
                    policy_version: e.policy_version,
                    fingerprint: e.fingerprint,
                })
            }
            QuotaEvent::Reserved(e) => self.apply_reserved(e),
            QuotaEvent::Publishing(e) => {
                let Some(op) = self.operations.get_mut(&e.op_id) else {
                    return;
                };
                self.pending_due.remove(&(op.deadline_ms, e.op_id.clone()));
                self.publishing_due.insert((e.deadline_ms, e.op_id));
                op.state = OpState::Publishing;
                op.route_version = Some(e.route_version);
                op.deadline_ms = e.deadline_ms;
            }
            QuotaEvent::Finalized(e) => self.apply_finalized(e),
            QuotaEvent::Aborted(e) => {
                self.pending_bytes = self.pending_bytes.saturating_sub(e.released_bytes);
                self.pending_objects = self.pending_objects.saturating_sub(e.released_objects);
                if let Some(op) = self.operations.get_mut(&e.op_id) {
                    op.state = OpState::Aborted;
                    op.abort_reason = Some(e.reason);
                    self.pending_due.remove(&(op.deadline_ms, e.op_id.clone()));
                }
                self.end(&e.key, e.op_id);
            }
            QuotaEvent::TerminalPruned(e) => {
                for id in &e.op_ids {
                    self.operations.remove(id);
                }
                let gone: BTreeSet<&String> = e.op_ids.iter().collect();
                while self
                    .terminal
                    .first_key_value()
                    .is_some_and(|(_, id)| gone.contains(id))
                {
                    self.terminal.pop_first();
                }
            }
            QuotaEvent::UsageRecorded(e) => self.apply_usage_recorded(e),
            QuotaEvent::UsageReconciled(e) => self.apply_usage_reconciled(e),
            QuotaEvent::AllowanceRecorded(e) => self.apply_allowance_recorded(e),
            QuotaEvent::AllowanceReleased(e) => self.apply_allowance_released(e),
        }
    }
}

impl QuotaRoot {
    fn apply_reserved(&mut self, e: Reserved) {
        self.pending_bytes = self.pending_bytes.saturating_add(e.reserved_bytes);
        self.pending_objects = self.pending_objects.saturating_add(e.reserved_objects);
        self.locks.insert(e.key.clone(), e.op_id.clone());
        self.pending_due.insert((e.deadline_ms, e.op_id.clone()));
        self.operations.insert(
            e.op_id.clone(),
            QuotaOperation {
                op_id: e.op_id,
                key: e.key,
                kind: e.kind,
                state: OpState::Pending,
                next_bytes: e.next_bytes,
                predecessor_bytes: e.predecessor_bytes,
                predecessor_version: e.predecessor_version,
                reserved_bytes: e.reserved_bytes,
                reserved_objects: e.reserved_objects,
                deadline_ms: e.deadline_ms,
                route_version: None,
                abort_reason: None,
            },
        );
    }

    fn apply_finalized(&mut self, e: Finalized) {
        self.used_bytes = add_signed(self.used_bytes, e.bytes_delta);
        self.used_objects = add_signed(self.used_objects, e.objects_delta);
        if let Some(op) = self.operations.get_mut(&e.op_id) {
            op.state = OpState::Finalized;
            self.pending_bytes = self.pending_bytes.saturating_sub(op.reserved_bytes);
            self.pending_objects = self.pending_objects.saturating_sub(op.reserved_objects);
            self.publishing_due
                .remove(&(op.deadline_ms, e.op_id.clone()));
            match op.kind {
                OpKind::Delete => {
                    self.objects.remove(&e.key);
                }
                OpKind::Create | OpKind::Overwrite => {
                    self.objects.insert(
                        e.key.clone(),
                        ObjectAccount {
                            bytes: op.next_bytes,
                            version: e.route_version,
                            op_id: e.op_id.clone(),
                        },
                    );
                }
            }
        }
        self.end(&e.key, e.op_id);
    }

    /// An operation reached a terminal state: its key is free and it joins the retention
    /// order.
    fn end(&mut self, key: &str, op_id: String) {
        if self.locks.get(key) == Some(&op_id) {
            self.locks.remove(key);
        }
        self.terminal.insert(self.next_terminal, op_id);
        self.next_terminal += 1;
    }
}

fn add_signed(value: u64, delta: i64) -> u64 {
    match delta >= 0 {
        true => value.saturating_add(delta as u64),
        false => value.saturating_sub(delta.unsigned_abs()),
    }
}
