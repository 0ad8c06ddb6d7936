//! Property test over random reserve / publish / finalize / abort / expire / overwrite /
//! delete / batch / retry / prune sequences with restarts (the state rebuilt from its events
//! and through a snapshot) in the middle: usage never exceeds the limits, pending is exactly
//! what live operations hold, every refund matches what an independent model says is
//! committed (so no predecessor is refunded twice), operations only move forward, and a
//! retried command decides nothing new.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use proptest::sample::Index;

use super::*;

const MAX_BYTES_LIMIT: u64 = 1000;
const MAX_OBJECTS_LIMIT: u64 = 3;

#[derive(Debug, Clone)]
enum Step {
    Put {
        key: u8,
        size: u16,
    },
    Delete {
        key: u8,
    },
    /// (key, size); `None` is a delete.
    Batch {
        items: BTreeMap<u8, Option<u16>>,
    },
    Publish {
        op: Index,
        wrong: bool,
    },
    Finalize {
        op: Index,
        wrong: bool,
    },
    Abort {
        op: Index,
        failed: bool,
    },
    Expire {
        advance: u16,
    },
    Retry {
        cmd: Index,
    },
    Prune {
        keep: u8,
    },
    Restart,
}

fn step() -> impl Strategy<Value = Step> {
    let key = 0u8..5;
    prop_oneof![
        4 => (key.clone(), 0u16..450).prop_map(|(key, size)| Step::Put { key, size }),
        2 => key.clone().prop_map(|key| Step::Delete { key }),
        2 => prop::collection::btree_map(key, prop::option::weighted(0.8, 0u16..450), 1..4)
            .prop_map(|items| Step::Batch { items }),
        4 => (any::<Index>(), prop::bool::weighted(0.1)).prop_map(|(op, wrong)| Step::Publish { op, wrong }),
        4 => (any::<Index>(), prop::bool::weighted(0.1)).prop_map(|(op, wrong)| Step::Finalize { op, wrong }),
        2 => (any::<Index>(), any::<bool>()).prop_map(|(op, failed)| Step::Abort { op, failed }),
        2 => (0u16..150).prop_map(|advance| Step::Expire { advance }),
        2 => any::<Index>().prop_map(|cmd| Step::Retry { cmd }),
        1 => (0u8..6).prop_map(|keep| Step::Prune { keep }),
        1 => Just(Step::Restart),
    ]
}

/// The test's own bookkeeping, independent of the aggregate's.
#[derive(Default)]
struct Model {
    state: QuotaRoot,
    events: Vec<QuotaEvent>,
    now: i64,
    next_id: u64,
    /// Every op id reserved, and what it does (key, size; `None`: delete).
    ops: Vec<(String, String, Option<u64>)>,
    published: BTreeMap<String, u64>,
    pruned: BTreeSet<String>,
    /// What is committed per key, from the finalizes the test saw succeed.
    committed: BTreeMap<String, u64>,
    /// Commands that succeeded and name one operation (retried later).
    done: Vec<QuotaCommand>,
    last_state: BTreeMap<String, OpState>,
}

impl Model {
    fn fresh_op(&mut self, key: &str, size: Option<u64>) -> ReserveItem {
        self.next_id += 1;
        let op_id = format!("op-{}", self.next_id);
        self.ops.push((op_id.clone(), key.to_string(), size));
        let change = match size {
            Some(size) => ObjectChange::Put { size },
            None => ObjectChange::Delete,
        };
        ReserveItem {
            op_id,
            key: key.to_string(),
            change,
        }
    }

    fn pick(&self, op: &Index) -> Option<(String, String, Option<u64>)> {
        (!self.ops.is_empty()).then(|| self.ops[op.index(self.ops.len())].clone())
    }

    fn run(&mut self, cmd: QuotaCommand) -> Result<Vec<QuotaEvent>, QuotaError> {
        let result = self.state.decide(&cmd, &Ctx::at(self.now));
        match &result {
            Ok(events) => {
                for e in events {
                    self.state.apply(e);
                    self.events.push(e.clone());
                }
            }
            Err(e) => assert!(
                !matches!(
                    e,
                    QuotaError::InvalidArgument { .. } | QuotaError::PolicyMismatch { .. }
                ),
                "{cmd:?}: {e}"
            ),
        }
        result
    }

    fn step(&mut self, step: &Step) {
        let deadline_ms = self.now + 100;
        let key = |k: &u8| format!("k{k}");
        match step {
            Step::Put { key: k, size } => {
                let item = self.fresh_op(&key(k), Some(u64::from(*size)));
                self.reserve(QuotaCommand::Reserve { item, deadline_ms });
            }
            Step::Delete { key: k } => {
                let item = self.fresh_op(&key(k), None);
                self.reserve(QuotaCommand::Reserve { item, deadline_ms });
            }
            Step::Batch { items } => {
                let items = items
                    .iter()
                    .map(|(k, size)| self.fresh_op(&key(k), size.map(u64::from)))
                    .collect();
                self.reserve(QuotaCommand::ReserveBatch { items, deadline_ms });
            }
            Step::Publish { op, wrong } => self.publish(op, *wrong),
            Step::Finalize { op, wrong } => self.finalize(op, *wrong),
            Step::Abort { op, failed } => {
                let Some((op_id, ..)) = self.pick(op) else {
                    return;
                };
                let reason = match failed {
                    true => AbortReason::Failed,
                    false => AbortReason::Revoked,
                };
                let cmd = QuotaCommand::Abort { op_id, reason };
                if self.run(cmd.clone()).is_ok() {
                    self.done.push(cmd);
                }
            }
            Step::Expire { advance } => {
                self.now += i64::from(*advance);
                let now_ms = self.now;
                let _ = self.run(QuotaCommand::ExpireDue { now_ms, limit: 3 });
            }
            Step::Retry { cmd } => self.retry(cmd),
            Step::Prune { keep } => {
                if let Ok(events) = self.run(QuotaCommand::PruneTerminal {
                    keep: u32::from(*keep),
                }) {
                    for e in events {
                        if let QuotaEvent::TerminalPruned(p) = e {
                            self.pruned.extend(p.op_ids);
                        }
                    }
                }
            }
            Step::Restart => self.restart(),
        }
    }

    fn reserve(&mut self, cmd: QuotaCommand) {
        if self.run(cmd.clone()).is_ok() {
            self.done.push(cmd);
        }
    }

    fn publish(&mut self, op: &Index, wrong: bool) {
        let Some((op_id, ..)) = self.pick(op) else {
            return;
        };
        let route_version = match (self.published.get(&op_id), wrong) {
            (Some(v), false) => *v,
            _ => self.next_id * 10 + 1,
        };
        let cmd = QuotaCommand::Publish {
            op_id: op_id.clone(),
            route_version,
            deadline_ms: self.now + 1_000,
        };
        if let Ok(events) = self.run(cmd.clone()) {
            self.published.entry(op_id).or_insert(route_version);
            assert!(events.len() <= 1);
            self.done.push(cmd);
        }
    }

    fn finalize(&mut self, op: &Index, wrong: bool) {
        let Some((op_id, key, size)) = self.pick(op) else {
            return;
        };
        let published = self.published.get(&op_id).copied().unwrap_or(1);
        let route_version = published + u64::from(wrong);
        let cmd = QuotaCommand::Finalize {
            op_id,
            route_version,
        };
        if let Ok(events) = self.run(cmd.clone()) {
            if !events.is_empty() {
                match size {
                    Some(size) => self.committed.insert(key, size),
                    None => self.committed.remove(&key),
                };
            }
            self.done.push(cmd);
        }
    }

    /// A command that succeeded, sent again: nothing new is decided (unless its operation
    /// was pruned since, which forgets it by design).
    fn retry(&mut self, cmd: &Index) {
        if self.done.is_empty() {
            return;
        }
        let cmd = self.done[cmd.index(self.done.len())].clone();
        let names_pruned = match &cmd {
            QuotaCommand::Reserve { item, .. } => self.pruned.contains(&item.op_id),
            QuotaCommand::ReserveBatch { items, .. } => {
                items.iter().any(|i| self.pruned.contains(&i.op_id))
            }
            QuotaCommand::Publish { op_id, .. }
            | QuotaCommand::Finalize { op_id, .. }
            | QuotaCommand::Abort { op_id, .. } => self.pruned.contains(op_id),
            _ => true,
        };
        if !names_pruned {
            assert_eq!(self.run(cmd.clone()), Ok(vec![]), "retried {cmd:?}");
        }
    }

    /// The state rebuilt from every event so far, and through a snapshot, is the same.
    fn restart(&mut self) {
        let mut replayed = QuotaRoot::default();
        for e in &self.events {
            replayed.apply(e);
        }
        assert_eq!(replayed, self.state, "replay of the events");
        let bytes = rmp_serde::to_vec_named(&replayed).unwrap();
        self.state = rmp_serde::from_slice(&bytes).unwrap();
        assert_eq!(replayed, self.state, "snapshot round trip");
    }

    fn check(&mut self) {
        let s = &self.state;
        let live: Vec<&QuotaOperation> =
            s.operations().filter(|o| !o.state.is_terminal()).collect();
        let held: (u64, u64) = live.iter().fold((0, 0), |(b, o), op| {
            (b + op.reserved_bytes, o + op.reserved_objects)
        });
        assert_eq!(
            (s.pending_bytes(), s.pending_objects()),
            held,
            "pending = live holds"
        );
        let rows: u64 = s.objects().map(|(_, r)| r.bytes).sum();
        assert_eq!(
            (s.used_bytes(), s.used_objects()),
            (rows, s.objects().count() as u64)
        );
        let model: u64 = self.committed.values().sum();
        assert_eq!(
            (s.used_bytes(), s.used_objects()),
            (model, self.committed.len() as u64),
            "usage = what the test saw committed (no double refund)"
        );
        if let Some(max) = s.limits().max_bytes {
            assert!(
                s.used_bytes() + s.pending_bytes() <= max,
                "{} + {} > {max}",
                s.used_bytes(),
                s.pending_bytes()
            );
        }
        if let Some(max) = s.limits().max_objects {
            assert!(s.used_objects() + s.pending_objects() <= max);
        }
        let mut keys = BTreeSet::new();
        for op in &live {
            assert!(keys.insert(&op.key), "two live operations on {}", op.key);
            assert_eq!(s.lock_holder(&op.key), Some(op.op_id.as_str()));
        }
        for op in s.operations() {
            if let Some(before) = self.last_state.insert(op.op_id.clone(), op.state) {
                assert!(
                    forward(before, op.state),
                    "{}: {before:?} -> {:?}",
                    op.op_id,
                    op.state
                );
            }
        }
    }
}

/// The seed's state machine: Pending -> Publishing -> Finalized, Pending -> Aborted.
fn forward(from: OpState, to: OpState) -> bool {
    use OpState::*;
    from == to
        || matches!(
            (from, to),
            (Pending, Publishing) | (Pending, Aborted) | (Publishing, Finalized)
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_histories_keep_the_quota_invariants(
        limited in prop::bool::weighted(0.8),
        steps in prop::collection::vec(step(), 1..80),
    ) {
        let mut m = Model::default();
        if limited {
            let limits = QuotaLimits {
                max_bytes: Some(MAX_BYTES_LIMIT),
                max_objects: Some(MAX_OBJECTS_LIMIT),
            };
            m.run(QuotaCommand::SetPolicy { limits, mode: PolicyMode::Bootstrap }).unwrap();
        }
        for s in &steps {
            m.step(s);
            m.check();
        }
        m.restart();
        // Whatever is still pending expires; publishing stays charged until finalized.
        m.now = i64::MAX;
        while !m.run(QuotaCommand::ExpireDue { now_ms: i64::MAX, limit: MAX_PAGE }).unwrap().is_empty() {}
        m.check();
        let in_doubt: u64 = m.state.operations().filter(|o| o.state == OpState::Publishing).map(|o| o.reserved_bytes).sum();
        prop_assert_eq!(m.state.pending_bytes(), in_doubt);
    }
}
