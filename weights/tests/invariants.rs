//! The weight revisions' safety invariants (docs/weights.md) as property tests over random command
//! sequences against one `WeightRevision`, with a simulated store underneath (which units have
//! memory and cold replicas, which objects exist) and "restarts" that rebuild the state by decoding
//! and folding the persisted events, then continue.

mod common;

use crescent_actors::{Aggregate, Ctx, DomainEvent};
use crescent_weights::planner::{migration_moves, next_round, plan_target, MoveDirection};
use crescent_weights::revision::{
    Availability, OperationKind, OperationStatus, WeightRevisionCommand as C,
    WeightRevisionEvent as E,
};
use crescent_weights::{
    MigrationLimits, MigrationMode, PreferredResidency, Residency, ResidencyTarget,
    RevisionIdentity, WeightRevision, WeightStoragePolicy,
};
use proptest::prelude::*;

const T0: i64 = 1_700_000_000_000;

#[derive(Debug, Clone)]
enum Action {
    Begin(u8),
    Commit(Option<u8>),
    UpdatePolicy { policy: u8, stale: bool },
    Acquire(u64),
    Renew(u8, u64),
    Release(u8),
    Expire,
    Advance(i64),
    Migrate { target: u8, stale: bool },
    AutoDemote { stale: bool },
    Step,
    StaleStep(u8),
    Fail { terminal: bool },
    LoseMembers,
    StartRepair,
    Remove { stale: bool },
    Retire { idle: bool },
    Restart,
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        1 => (0u8..4).prop_map(Action::Begin),
        2 => prop_oneof![2 => Just(None), 1 => (0u8..4).prop_map(Some)].prop_map(Action::Commit),
        1 => (0u8..4, any::<bool>()).prop_map(|(policy, stale)| Action::UpdatePolicy { policy, stale }),
        3 => (1u64..3_000).prop_map(Action::Acquire),
        1 => (any::<u8>(), 1u64..3_000).prop_map(|(l, t)| Action::Renew(l, t)),
        2 => any::<u8>().prop_map(Action::Release),
        1 => Just(Action::Expire),
        3 => (1i64..2_000).prop_map(Action::Advance),
        2 => (0u8..3, any::<bool>()).prop_map(|(target, stale)| Action::Migrate { target, stale }),
        1 => any::<bool>().prop_map(|stale| Action::AutoDemote { stale }),
        8 => Just(Action::Step),
        1 => any::<u8>().prop_map(Action::StaleStep),
        1 => any::<bool>().prop_map(|terminal| Action::Fail { terminal }),
        1 => Just(Action::LoseMembers),
        1 => Just(Action::StartRepair),
        2 => any::<bool>().prop_map(|stale| Action::Remove { stale }),
        1 => any::<bool>().prop_map(|idle| Action::Retire { idle }),
        2 => Just(Action::Restart),
    ]
}

fn policy(i: u8) -> WeightStoragePolicy {
    let (preferred, mode) = match i % 4 {
        0 => (PreferredResidency::Hot, MigrationMode::Auto),
        1 => (PreferredResidency::Mixed, MigrationMode::Auto),
        2 => (PreferredResidency::Cold, MigrationMode::Manual),
        _ => (PreferredResidency::Mixed, MigrationMode::Pinned),
    };
    WeightStoragePolicy {
        preferred_residency: preferred,
        mixed_hot_ratio: 0.4,
        migration_mode: mode,
    }
}

fn limits() -> MigrationLimits {
    MigrationLimits {
        cooldown_ms: 500,
        max_members_per_round: 3,
        max_bytes_per_round: 700,
    }
}

/// The store under the aggregate: per unit, memory/cold replicas and existence.
struct Store {
    hot: Vec<bool>,
    cold: Vec<bool>,
    present: Vec<bool>,
    manifest: bool,
    /// Units of the copied demotion round awaiting release.
    pending: Vec<usize>,
}

struct Harness {
    live: WeightRevision,
    journal: Vec<(String, u16, Vec<u8>)>,
    now: i64,
    ids: u128,
    fx: common::Fixture,
    store: Store,
    first_summary: Option<crescent_weights::revision::PayloadSummary>,
}

fn ident() -> RevisionIdentity {
    RevisionIdentity::new("llm", "model", "main", 3)
}

impl Harness {
    fn new() -> Self {
        let fx = common::fixture(&ident(), &[(2, 100), (1, 300), (3, 50), (1, 400), (2, 120)]);
        let n = fx.units.len();
        Harness {
            live: WeightRevision::default(),
            journal: Vec::new(),
            now: T0,
            ids: 0,
            fx,
            store: Store {
                hot: vec![false; n],
                cold: vec![false; n],
                present: vec![false; n],
                manifest: false,
                pending: Vec::new(),
            },
            first_summary: None,
        }
    }

    fn gen(&self) -> u64 {
        self.live.record().map_or(0, |r| r.metadata_generation)
    }

    fn phys_hot_bytes(&self) -> u64 {
        self.fx
            .units
            .iter()
            .zip(&self.store.hot)
            .filter(|(_, h)| **h)
            .map(|(u, _)| u.bytes)
            .sum()
    }

    fn expected(&self, stale: bool) -> u64 {
        if stale {
            self.gen().saturating_sub(1)
        } else {
            self.gen()
        }
    }

    /// Decides, checks the per-command invariants, applies and journals. Returns whether the
    /// command was accepted.
    fn run(
        &mut self,
        cmd: C,
        stale_mutation: bool,
        valid_commit: bool,
    ) -> Result<Vec<E>, TestCaseError> {
        self.ids += 1;
        let ctx = Ctx {
            now_ms: self.now,
            fresh_id: uuid::Uuid::from_u128(self.ids),
            term: 1,
        };
        let before = self.live.clone();
        let Ok(events) = before.decide(&cmd, &ctx) else {
            return Ok(Vec::new());
        };
        let active_leases = before.active_lease_count(self.now);
        for e in &events {
            match e {
                // 2: READY only from a commit whose whole group validated.
                E::ImportCommitted(_) => prop_assert!(valid_commit, "READY from an invalid group"),
                // 5: an active lease blocks deletion and the release of existing replicas.
                E::OperationStarted(s) if s.kind == OperationKind::Deleting => {
                    prop_assert_eq!(active_leases, 0, "deletion under a lease")
                }
                E::RoundReleased(r) => {
                    prop_assert_eq!(active_leases, 0, "release under a lease");
                    // 6: only a round whose cold replicas were validated.
                    let op = before.operation(&r.operation_id).unwrap();
                    prop_assert_eq!(op.pending_round.as_ref().map(|p| p.round), Some(r.round));
                }
                // 7: the group goes as a whole: the manifest after every payload, the
                // tombstone after the manifest.
                E::ManifestDeleted(m) => {
                    let p = &before.operation(&m.operation_id).unwrap().progress;
                    prop_assert!(p.members_total.is_none_or(|t| p.members_done == t));
                }
                E::RevisionDeleted(d) => {
                    prop_assert!(before.operation(&d.operation_id).unwrap().manifest_deleted)
                }
                E::RevisionRetired(_)
                    if matches!(
                        cmd,
                        C::Retire {
                            require_idle: true,
                            ..
                        }
                    ) =>
                {
                    prop_assert_eq!(active_leases, 0);
                    prop_assert!(before.active_operation().is_none());
                }
                _ => {}
            }
        }
        // 4: a stale generation never changes anything.
        if stale_mutation {
            prop_assert!(events.is_empty(), "stale command produced {events:?}");
        }
        for e in &events {
            self.live.apply(e);
            self.journal
                .push((e.kind().to_string(), e.version(), e.encode()));
        }
        self.check_state(&before)?;
        Ok(events)
    }

    fn check_state(&mut self, before: &WeightRevision) -> Result<(), TestCaseError> {
        let Some(rec) = self.live.record() else {
            return Ok(());
        };
        // 1 and 3: one manifest identity; the summary never changes once published.
        prop_assert_eq!(&rec.manifest_key, &ident().manifest_key());
        prop_assert_eq!(&rec.group_id, &ident().group_id());
        if let Some(first) = &self.first_summary {
            prop_assert_eq!(rec.summary.as_ref(), Some(first));
        } else {
            self.first_summary.clone_from(&rec.summary);
        }
        // The metadata generation never goes back.
        prop_assert!(
            rec.metadata_generation >= before.record().map_or(0, |r| r.metadata_generation)
        );
        // State combinations.
        match rec.availability {
            Availability::Importing => prop_assert_eq!(rec.residency, Residency::Unknown),
            Availability::Ready | Availability::Degraded => {
                // ABSENT only for a DEGRADED revision that lost every payload.
                let absent_ok = rec.availability == Availability::Degraded
                    && rec
                        .summary
                        .as_ref()
                        .is_some_and(|s| rec.lost_members >= s.payload_count);
                prop_assert!(
                    matches!(
                        rec.residency,
                        Residency::Hot | Residency::Cold | Residency::Mixed
                    ) || (absent_ok && rec.residency == Residency::Absent)
                );
                prop_assert!(self.live.manifest_memory_pinned());
            }
            Availability::Deleting => {}
            Availability::Deleted => {
                // 8: a terminal state has no active lease or operation.
                prop_assert_eq!(rec.residency, Residency::Absent);
                prop_assert!(self.live.leases().is_empty());
                prop_assert!(rec.active_operation_id.is_none());
            }
        }
        // At most one running operation, and it is the active one.
        let running: Vec<_> = self
            .live
            .operations()
            .values()
            .filter(|o| o.is_running())
            .collect();
        prop_assert!(running.len() <= 1);
        prop_assert_eq!(
            running.first().map(|o| &o.operation_id),
            rec.active_operation_id.as_ref()
        );
        // 10: progress of an operation never goes back; ids are stable.
        for (id, old) in before.operations() {
            if let Some(new) = self.live.operation(id) {
                prop_assert_eq!(new.kind, old.kind);
                prop_assert!(new.progress.rounds_completed >= old.progress.rounds_completed);
                prop_assert!(new.progress.members_done >= old.progress.members_done);
                prop_assert!(new.progress.bytes_done >= old.progress.bytes_done);
                if !old.is_running() {
                    prop_assert_eq!(new.status, old.status);
                }
            }
        }
        // 6 (physical): no unit ever lost its last replica while the revision is readable.
        if matches!(rec.availability, Availability::Ready) {
            for i in 0..self.fx.units.len() {
                prop_assert!(
                    self.store.hot[i] || self.store.cold[i],
                    "unit {i} unreadable"
                );
            }
        }
        Ok(())
    }

    /// 9 and 10: metadata holds no payload keys or unit ids, and the persisted events rebuild
    /// exactly the live state.
    fn restart(&mut self) -> Result<(), TestCaseError> {
        let mut rebuilt = WeightRevision::default();
        for (kind, version, payload) in &self.journal {
            let text = String::from_utf8_lossy(payload);
            prop_assert!(
                !text.contains("payload/") && !text.contains("unit-"),
                "{kind} stores tensor data"
            );
            rebuilt.apply(&E::decode(kind, *version, payload).unwrap());
        }
        prop_assert_eq!(&rebuilt, &self.live);
        let snapshot = rmp_serde::to_vec_named(&rebuilt).unwrap();
        prop_assert!(!String::from_utf8_lossy(&snapshot).contains("payload/"));
        self.live = rebuilt;
        Ok(())
    }

    fn lease_pick(&self, pick: u8) -> String {
        let ids: Vec<&String> = self.live.leases().keys().collect();
        if ids.is_empty() {
            "lease-none".into()
        } else {
            ids[pick as usize % ids.len()].clone()
        }
    }

    /// The server's next physical step of the active operation, then its record.
    fn step(&mut self) -> Result<(), TestCaseError> {
        let Some(op) = self.live.active_operation().cloned() else {
            return Ok(());
        };
        match op.kind {
            OperationKind::Migrating => {
                let target = op.target.unwrap();
                let plan = plan_target(&self.fx.units, target).unwrap();
                if let Some(p) = &op.pending_round {
                    let mut hot = self.store.hot.clone();
                    for &i in &self.store.pending {
                        hot[i] = false;
                    }
                    let hot_bytes: u64 = self
                        .fx
                        .units
                        .iter()
                        .zip(&hot)
                        .filter(|(_, h)| **h)
                        .map(|(u, _)| u.bytes)
                        .sum();
                    let cmd = C::RecordRoundReleased {
                        operation_id: op.operation_id.clone(),
                        round: p.round,
                        hot_bytes,
                    };
                    // The release is authorized before memory is dropped.
                    if !self.run(cmd, false, false)?.is_empty() {
                        for &i in &self.store.pending.clone() {
                            prop_assert!(self.store.cold[i], "memory released before a cold copy");
                            self.store.hot[i] = false;
                        }
                        self.store.pending.clear();
                    }
                    return Ok(());
                }
                let moves = migration_moves(&self.fx.units, &self.store.hot, &plan).unwrap();
                if op.progress.members_total.is_none() {
                    let cmd = C::PlanMigration {
                        operation_id: op.operation_id.clone(),
                        members_total: moves.iter().map(|m| m.members).sum(),
                        bytes_total: moves.iter().map(|m| m.bytes).sum(),
                    };
                    self.run(cmd, false, false)?;
                    return Ok(());
                }
                if moves.is_empty() {
                    let cmd = C::CompleteMigration {
                        operation_id: op.operation_id.clone(),
                        hot_bytes: self.phys_hot_bytes(),
                    };
                    self.run(cmd, false, false)?;
                    return Ok(());
                }
                let round = next_round(&moves, 0, &limits());
                let slice = &moves[round];
                let direction = slice[0].direction;
                // New replicas are created and validated first (allowed under a lease).
                for m in slice {
                    match direction {
                        MoveDirection::Promote => self.store.hot[m.unit] = true,
                        MoveDirection::Demote => self.store.cold[m.unit] = true,
                    }
                }
                let cmd = C::RecordRoundCopied {
                    operation_id: op.operation_id.clone(),
                    round: op.progress.rounds_completed + 1,
                    direction,
                    units: slice.len() as u64,
                    members: slice.iter().map(|m| m.members).sum(),
                    bytes: slice.iter().map(|m| m.bytes).sum(),
                    hot_bytes: self.phys_hot_bytes(),
                    limits: limits(),
                };
                let units: Vec<usize> = slice.iter().map(|m| m.unit).collect();
                if !self.run(cmd, false, false)?.is_empty() && direction == MoveDirection::Demote {
                    self.store.pending = units;
                }
            }
            OperationKind::Repairing => {
                for i in 0..self.fx.units.len() {
                    if !self.store.hot[i] && !self.store.cold[i] {
                        self.store.hot[i] = true;
                    }
                }
                let cmd = C::CompleteRepair {
                    operation_id: op.operation_id.clone(),
                    hot_bytes: self.phys_hot_bytes(),
                };
                self.run(cmd, false, false)?;
            }
            OperationKind::Deleting => {
                if let Some(u) = self.store.present.iter().position(|p| *p) {
                    let unit = &self.fx.units[u];
                    let (members, bytes) = (unit.member_keys.len() as u64, unit.bytes);
                    self.store.present[u] = false;
                    self.store.hot[u] = false;
                    self.store.cold[u] = false;
                    let cmd = C::RecordDeletionBatch {
                        operation_id: op.operation_id.clone(),
                        batch: op.progress.rounds_completed + 1,
                        members,
                        bytes,
                    };
                    self.run(cmd, false, false)?;
                } else if !op.manifest_deleted {
                    self.store.manifest = false;
                    self.run(
                        C::RecordManifestDeleted {
                            operation_id: op.operation_id.clone(),
                        },
                        false,
                        false,
                    )?;
                } else {
                    let remaining = u64::from(self.store.manifest)
                        + self.store.present.iter().filter(|p| **p).count() as u64;
                    self.run(
                        C::CompleteDeletion {
                            operation_id: op.operation_id.clone(),
                            remaining_members: remaining,
                        },
                        false,
                        false,
                    )?;
                }
            }
        }
        Ok(())
    }

    fn act(&mut self, a: Action) -> Result<(), TestCaseError> {
        let g = self.gen();
        match a {
            Action::Begin(p) => {
                let accepted = self.run(
                    C::BeginImport {
                        identity: ident(),
                        policy: policy(p),
                    },
                    false,
                    false,
                )?;
                if !accepted.is_empty() {
                    // The writer uploads every payload and the manifest into memory.
                    self.store.hot.iter_mut().for_each(|h| *h = true);
                    self.store.present.iter_mut().for_each(|p| *p = true);
                    self.store.manifest = true;
                }
            }
            Action::Commit(corruption) => {
                let mut members = self.fx.members.clone();
                let mut summary = self.fx.summary.clone();
                match corruption {
                    Some(0) => members[1].complete = false,
                    Some(1) => summary.logical_bytes += 1,
                    Some(2) => {
                        members.pop();
                    }
                    Some(_) => members[2].group_id = "wgrp-foreign".into(),
                    None => {}
                }
                let cmd = C::CommitImport {
                    expected_metadata_generation: g,
                    summary,
                    members,
                    affinity_units: self.fx.units.clone(),
                };
                self.run(cmd, false, corruption.is_none())?;
            }
            Action::UpdatePolicy { policy: p, stale } => {
                let same = self.live.record().is_some_and(|r| r.policy == policy(p));
                self.run(
                    C::UpdatePolicy {
                        policy: policy(p),
                        expected_metadata_generation: self.expected(stale),
                    },
                    stale && !same && g > 0,
                    false,
                )?;
            }
            Action::Acquire(ttl) => {
                self.run(
                    C::AcquireLease {
                        holder: "reader".into(),
                        ttl_ms: ttl,
                        expected_metadata_generation: None,
                        limits: limits(),
                    },
                    false,
                    false,
                )?;
            }
            Action::Renew(pick, ttl) => {
                let lease_id = self.lease_pick(pick);
                self.run(
                    C::RenewLease {
                        lease_id,
                        ttl_ms: ttl,
                    },
                    false,
                    false,
                )?;
            }
            Action::Release(pick) => {
                let lease_id = self.lease_pick(pick);
                self.run(C::ReleaseLease { lease_id }, false, false)?;
            }
            Action::Expire => {
                self.run(C::ExpireLeases, false, false)?;
            }
            Action::Advance(ms) => self.now += ms,
            Action::Migrate { target, stale } => {
                let target = match target {
                    0 => ResidencyTarget::Hot,
                    1 => ResidencyTarget::Cold,
                    _ => ResidencyTarget::Mixed { hot_ratio: 0.6 },
                };
                // A stale retry of the very request that started the active operation is an
                // idempotent no-op, which the stale check also covers (no events).
                self.run(
                    C::Migrate {
                        target,
                        expected_metadata_generation: self.expected(stale),
                    },
                    stale && g > 0,
                    false,
                )?;
            }
            Action::AutoDemote { stale } => {
                self.run(
                    C::AutoDemote {
                        expected_metadata_generation: self.expected(stale),
                        limits: limits(),
                    },
                    stale && g > 0,
                    false,
                )?;
            }
            Action::Step => self.step()?,
            Action::StaleStep(n) => {
                // A driver from before a failover replaying an old step or skipping one: never
                // the genuine next step (round/batch `done + 1`), so it must change nothing.
                if let Some(op) = self.live.active_operation().cloned() {
                    let done = op.progress.rounds_completed;
                    let k = u64::from(n % 4);
                    let round = if n % 2 == 0 && done > 0 {
                        done - k.min(done - 1)
                    } else {
                        done + 2 + k
                    };
                    let id = op.operation_id;
                    let cmd = match (op.kind, n % 3) {
                        (OperationKind::Migrating, 0) => C::RecordRoundReleased {
                            operation_id: id,
                            round,
                            hot_bytes: 0,
                        },
                        (OperationKind::Migrating, _) => C::RecordRoundCopied {
                            operation_id: id,
                            round,
                            direction: MoveDirection::Promote,
                            units: 1,
                            members: 1,
                            bytes: 1,
                            hot_bytes: 0,
                            limits: limits(),
                        },
                        (OperationKind::Deleting, _) => C::RecordDeletionBatch {
                            operation_id: id,
                            batch: round,
                            members: 1,
                            bytes: 1,
                        },
                        (OperationKind::Repairing, _) => C::CompleteMigration {
                            operation_id: id,
                            hot_bytes: 0,
                        },
                    };
                    let events = self.run(cmd, false, false)?;
                    prop_assert!(
                        events.is_empty(),
                        "a stale or skipped step changed state: {events:?}"
                    );
                }
            }
            Action::Fail { terminal } => {
                if let Some(op) = self.live.active_operation().cloned() {
                    self.run(
                        C::RecordOperationFailure {
                            operation_id: op.operation_id,
                            error: "injected".into(),
                            terminal,
                        },
                        false,
                        false,
                    )?;
                    if terminal && op.kind == OperationKind::Migrating {
                        self.store.pending.clear();
                    }
                }
            }
            Action::LoseMembers => {
                self.run(
                    C::ReportMembersLost {
                        lost_members: 1,
                        hot_bytes: None,
                    },
                    false,
                    false,
                )?;
            }
            Action::StartRepair => {
                self.run(
                    C::StartRepair {
                        expected_metadata_generation: g,
                    },
                    false,
                    false,
                )?;
            }
            Action::Remove { stale } => {
                let deleting = self.live.record().is_some_and(|r| {
                    matches!(
                        r.availability,
                        Availability::Deleting | Availability::Deleted
                    )
                });
                self.run(
                    C::Remove {
                        expected_metadata_generation: self.expected(stale),
                    },
                    stale && g > 0 && !deleting,
                    false,
                )?;
            }
            Action::Retire { idle } => {
                self.run(
                    C::Retire {
                        request_id: "req".into(),
                        successor_generation: 4,
                        expected_metadata_generation: g,
                        require_idle: idle,
                    },
                    false,
                    false,
                )?;
            }
            Action::Restart => self.restart()?,
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn revision_safety_invariants_hold_across_random_commands_and_restarts(
        actions in prop::collection::vec(action(), 1..120)
    ) {
        let mut h = Harness::new();
        for a in actions {
            h.act(a)?;
        }
        h.restart()?;
        // Every finished operation is still queryable with its final status.
        for op in h.live.operations().values() {
            prop_assert!(op.is_running() || matches!(op.status, OperationStatus::Succeeded | OperationStatus::Failed));
        }
    }

    #[test]
    fn a_well_driven_revision_always_converges_and_deletes(
        p in 0u8..4,
        target in 0u8..3,
        readers in prop::collection::vec(1u64..2_000, 0..4),
        restarts in prop::collection::vec(any::<bool>(), 64),
    ) {
        let mut h = Harness::new();
        h.act(Action::Begin(p))?;
        h.act(Action::Commit(None))?;
        prop_assert_eq!(h.live.record().unwrap().availability, Availability::Ready);
        for ttl in readers { h.act(Action::Acquire(ttl))?; }
        // Drive every operation to its end, restarting the "server" now and then, letting
        // leases expire when a step is refused as BUSY.
        let mut budget = 0;
        let mut drive = |h: &mut Harness| -> Result<(), TestCaseError> {
            while h.live.active_operation().is_some() {
                if restarts[budget % restarts.len()] { h.restart()?; }
                let gen_before = h.gen();
                let ops_before = h.live.operations().clone();
                h.step()?;
                if h.gen() == gen_before && h.live.operations() == &ops_before { h.now += 1_000; }
                budget += 1;
                prop_assert!(budget < 500, "no progress");
            }
            Ok(())
        };
        drive(&mut h)?;
        let target = match target { 0 => ResidencyTarget::Hot, 1 => ResidencyTarget::Cold, _ => ResidencyTarget::Mixed { hot_ratio: 0.6 } };
        h.now += 10_000;
        h.act(Action::Expire)?;
        let pinned = h.live.record().unwrap().policy.migration_mode == MigrationMode::Pinned;
        h.act(Action::Migrate { target: match target { ResidencyTarget::Hot => 0, ResidencyTarget::Cold => 1, _ => 2 }, stale: false })?;
        prop_assert_eq!(h.live.active_operation().is_some(), !pinned);
        drive(&mut h)?;
        if !pinned {
            let plan = plan_target(&h.fx.units, target).unwrap();
            prop_assert_eq!(h.live.record().unwrap().hot_bytes, plan.hot_bytes);
            prop_assert_eq!(h.live.record().unwrap().residency, Residency::of_hot_bytes(plan.hot_bytes, plan.total_bytes));
        }
        h.act(Action::Remove { stale: false })?;
        drive(&mut h)?;
        let rec = h.live.record().unwrap();
        prop_assert_eq!((rec.availability, rec.residency), (Availability::Deleted, Residency::Absent));
        prop_assert!(!h.store.manifest && h.store.present.iter().all(|p| !p));
        h.restart()?;
    }
}
