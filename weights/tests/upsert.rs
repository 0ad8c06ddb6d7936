//! `weight_upsert` end to end over the pure aggregates: a `LineageClaim` and the base and
//! target `WeightRevision`s, driven the way the server drives them (docs/weights.md), with
//! random readers, competing requests, injected failures and restarts. Checks invariants 11
//! and 12 and the one-successor rule.

mod common;

use crescent_actors::{Aggregate, Ctx, DomainEvent};
use crescent_weights::lineage::{Claim, ClaimPhase, UpsertStep};
use crescent_weights::revision::{Availability, OperationKind};
use crescent_weights::{
    LineageClaim, LineageClaimCommand as L, MigrationLimits, ResidencyTarget, RevisionIdentity,
    UpsertMode, WeightError, WeightRevision, WeightRevisionCommand as C, WeightStoragePolicy,
};
use proptest::prelude::*;

const T0: i64 = 1_700_000_000_000;

/// An aggregate with its persisted events, rebuilt from them on restart.
struct Journaled<A: Aggregate> {
    live: A,
    journal: Vec<(String, u16, Vec<u8>)>,
}

impl<A: Aggregate> Journaled<A> {
    fn new() -> Self {
        Self {
            live: A::default(),
            journal: Vec::new(),
        }
    }

    fn run(&mut self, cmd: A::Command, ctx: &Ctx) -> Result<Vec<A::Event>, A::Error> {
        let events = self.live.decide(&cmd, ctx)?;
        for e in &events {
            self.live.apply(e);
            self.journal
                .push((e.kind().to_string(), e.version(), e.encode()));
        }
        Ok(events)
    }

    fn restart(&mut self) {
        let mut rebuilt = A::default();
        for (kind, version, payload) in &self.journal {
            rebuilt.apply(&A::Event::decode(kind, *version, payload).unwrap());
        }
        assert_eq!(rebuilt, self.live, "replay differs from the live state");
        self.live = rebuilt;
    }
}

fn id(generation: u64) -> RevisionIdentity {
    RevisionIdentity::new("rl", "policy-net", "main", generation)
}

fn limits() -> MigrationLimits {
    MigrationLimits::default()
}

struct World {
    lineage: Journaled<LineageClaim>,
    base: Journaled<WeightRevision>,
    target: Journaled<WeightRevision>,
    now: i64,
    ids: u128,
    /// The base's manifest still exists in the store.
    base_present: bool,
    /// Invariant violations seen while driving (checked after every action).
    violations: Vec<String>,
}

impl World {
    fn ctx(&mut self) -> Ctx {
        self.ids += 1;
        Ctx {
            now_ms: self.now,
            fresh_id: uuid::Uuid::from_u128(self.ids),
            term: 1,
        }
    }

    /// A READY base at generation 1 (metadata generation 2).
    fn new() -> Self {
        let mut w = World {
            lineage: Journaled::new(),
            base: Journaled::new(),
            target: Journaled::new(),
            now: T0,
            ids: 0,
            base_present: true,
            violations: Vec::new(),
        };
        let ctx = w.ctx();
        let policy = WeightStoragePolicy {
            preferred_residency: crescent_weights::PreferredResidency::Hot,
            ..WeightStoragePolicy::default()
        };
        w.base
            .run(
                C::BeginImport {
                    identity: id(1),
                    policy,
                },
                &ctx,
            )
            .unwrap();
        let fx = common::fixture(&id(1), &[(2, 10), (1, 30)]);
        w.base
            .run(
                C::CommitImport {
                    expected_metadata_generation: 1,
                    summary: fx.summary,
                    members: fx.members,
                    affinity_units: fx.units,
                },
                &ctx,
            )
            .unwrap();
        w
    }

    fn claim(&self) -> Option<Claim> {
        self.lineage.live.active_claim().cloned()
    }

    fn base_gen(&self) -> u64 {
        self.base.live.record().unwrap().metadata_generation
    }

    fn advance(&mut self, claim: &Claim, phase: ClaimPhase) {
        let ctx = self.ctx();
        self.lineage
            .run(
                L::AdvanceClaim {
                    request_id: claim.request_id.clone(),
                    phase,
                },
                &ctx,
            )
            .unwrap();
    }

    /// Imports the target under the claim: admitted by the lineage first.
    fn import_target(&mut self, claim: &Claim, fail: bool) -> Result<(), WeightError> {
        self.lineage.live.admit_import(2, Some(&claim.request_id))?;
        let ctx = self.ctx();
        let policy = claim.policy.unwrap_or_default();
        let begun = self.target.run(
            C::BeginImport {
                identity: id(2),
                policy,
            },
            &ctx,
        )?;
        // 12: DELETE_FIRST never imports the target before the base is deleted.
        let base_deleted = self.base.live.record().unwrap().availability == Availability::Deleted;
        if claim.mode == UpsertMode::DeleteFirst && !begun.is_empty() && !base_deleted {
            self.violations
                .push("DELETE_FIRST imported the target before deleting the base".into());
        }
        if fail {
            return Err(WeightError::Busy {
                reason: "injected upload failure".into(),
            });
        }
        let fx = common::fixture(&id(2), &[(1, 10), (1, 20)]);
        let g = self.target.live.record().unwrap().metadata_generation;
        self.target.run(
            C::CommitImport {
                expected_metadata_generation: g,
                summary: fx.summary,
                members: fx.members,
                affinity_units: fx.units,
            },
            &ctx,
        )?;
        Ok(())
    }

    /// Runs the base's deletion workflow as far as it goes.
    fn delete_base(&mut self) -> Result<(), WeightError> {
        let ctx = self.ctx();
        let g = self.base_gen();
        self.base.run(
            C::Remove {
                expected_metadata_generation: g,
            },
            &ctx,
        )?;
        while let Some(op) = self.base.live.active_operation().cloned() {
            let ctx = self.ctx();
            if op.progress.members_done < op.progress.members_total.unwrap() {
                self.base.run(
                    C::RecordDeletionBatch {
                        operation_id: op.operation_id,
                        batch: op.progress.rounds_completed + 1,
                        members: 3,
                        bytes: 50,
                    },
                    &ctx,
                )?;
            } else if !op.manifest_deleted {
                self.base_present = false;
                self.base.run(
                    C::RecordManifestDeleted {
                        operation_id: op.operation_id,
                    },
                    &ctx,
                )?;
            } else {
                self.base.run(
                    C::CompleteDeletion {
                        operation_id: op.operation_id,
                        remaining_members: 0,
                    },
                    &ctx,
                )?;
            }
        }
        Ok(())
    }

    /// The server's next step for the active claim; failures leave the phase as it is (or
    /// fail the claim where the mode allows).
    fn drive(&mut self, fail_import: bool, give_up_when_busy: bool) {
        let Some(claim) = self.claim() else { return };
        match claim.next_step() {
            UpsertStep::ImportTarget => match self.import_target(&claim, fail_import) {
                Ok(()) => self.advance(&claim, ClaimPhase::TargetReady),
                Err(_)
                    if claim.mode == UpsertMode::PutFirst && claim.phase == ClaimPhase::Claimed =>
                {
                    let ctx = self.ctx();
                    self.lineage
                        .run(
                            L::FailClaim {
                                request_id: claim.request_id.clone(),
                                reason: "target import failed".into(),
                            },
                            &ctx,
                        )
                        .unwrap();
                }
                Err(_) => {}
            },
            UpsertStep::RetireBase { require_idle } => {
                let ctx = self.ctx();
                let cmd = C::Retire {
                    request_id: claim.request_id.clone(),
                    successor_generation: 2,
                    expected_metadata_generation: self.base_gen(),
                    require_idle,
                };
                let target_ready = self
                    .target
                    .live
                    .record()
                    .is_some_and(|t| t.availability == Availability::Ready);
                let active_leases = self.base.live.active_lease_count(self.now);
                let idle = active_leases == 0 && self.base.live.active_operation().is_none();
                match self.base.run(cmd, &ctx) {
                    Ok(events) => {
                        // 12: PUT_FIRST retires the base only after the target is READY;
                        // DELETE_FIRST only when no lease or operation is active.
                        if !events.is_empty() && claim.mode == UpsertMode::PutFirst && !target_ready
                        {
                            self.violations.push(
                                "PUT_FIRST retired the base before the target was READY".into(),
                            );
                        }
                        if !events.is_empty() && claim.mode == UpsertMode::DeleteFirst && !idle {
                            self.violations
                                .push("DELETE_FIRST fenced a base in use".into());
                        }
                        self.advance(&claim, ClaimPhase::BaseRetired)
                    }
                    Err(WeightError::Busy { .. }) if give_up_when_busy => {
                        let ctx = self.ctx();
                        self.lineage
                            .run(
                                L::FailClaim {
                                    request_id: claim.request_id.clone(),
                                    reason: "base busy".into(),
                                },
                                &ctx,
                            )
                            .unwrap();
                    }
                    Err(_) => {}
                }
            }
            UpsertStep::DrainBaseLeases => {
                if self.base.live.active_lease_count(self.now) == 0 {
                    self.advance(&claim, ClaimPhase::BaseDrained);
                }
            }
            UpsertStep::DeleteBase => {
                if self.delete_base().is_ok() {
                    self.advance(&claim, ClaimPhase::BaseDeleted);
                }
            }
            UpsertStep::CommitWatermark => self.advance(&claim, ClaimPhase::Committed),
            UpsertStep::Done => {}
        }
    }

    fn check(&self, watermark_before: Option<u64>) -> Result<(), TestCaseError> {
        prop_assert!(self.violations.is_empty(), "{:?}", self.violations);
        let base = self.base.live.record().unwrap();
        let target_ready = self
            .target
            .live
            .record()
            .is_some_and(|t| t.availability == Availability::Ready);
        // 12: the base is touched (retired, deleting, deleted) only by a claim, and under
        // PUT_FIRST only once the target is READY.
        let toucher = base
            .retired
            .as_ref()
            .and_then(|r| self.lineage.live.claim(&r.request_id));
        let base_touched = base.retired.is_some()
            || matches!(
                base.availability,
                Availability::Deleting | Availability::Deleted
            );
        prop_assert_eq!(base_touched, toucher.is_some());
        if let Some(claim) = toucher {
            if claim.mode == UpsertMode::PutFirst {
                prop_assert!(target_ready, "base retired before the target was READY");
            }
        }
        // 11: the watermark only rises, only to a committed target, and names no head.
        let w = self.lineage.live.watermark();
        prop_assert!(w >= watermark_before);
        if let Some(w) = w {
            prop_assert_eq!(w, 2);
            prop_assert!(target_ready, "committed without a READY successor");
        }
        // One successor at most.
        prop_assert!(self
            .target
            .live
            .record()
            .is_none_or(|t| t.identity == id(2)));
        Ok(())
    }
}

#[derive(Debug, Clone)]
enum Action {
    Begin {
        rid: bool,
        delete_first: bool,
    },
    Drive {
        fail_import: bool,
        give_up: bool,
    },
    Reader(u64),
    /// A writer importing the target whatever the claim's phase (admission must stop it).
    EarlyImport,
    ReleaseAll,
    Tick(i64),
    BaseMigration {
        terminal: bool,
    },
    Restart,
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        2 => (any::<bool>(), any::<bool>()).prop_map(|(rid, delete_first)| Action::Begin { rid, delete_first }),
        6 => (prop::bool::weighted(0.2), prop::bool::weighted(0.2)).prop_map(|(fail_import, give_up)| Action::Drive { fail_import, give_up }),
        2 => (1u64..3_000).prop_map(Action::Reader),
        2 => Just(Action::EarlyImport),
        1 => Just(Action::ReleaseAll),
        2 => (1i64..2_000).prop_map(Action::Tick),
        1 => any::<bool>().prop_map(|terminal| Action::BaseMigration { terminal }),
        2 => Just(Action::Restart),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn upsert_phases_keep_invariants_11_and_12(actions in prop::collection::vec(action(), 1..80)) {
        let mut w = World::new();
        for a in actions {
            let before = w.lineage.live.watermark();
            match a {
                Action::Begin { rid, delete_first } => {
                    let mode = if delete_first { UpsertMode::DeleteFirst } else { UpsertMode::PutFirst };
                    let ctx = w.ctx();
                    let cmd = L::BeginClaim {
                        request_id: Some(if rid { "r-a" } else { "r-b" }.into()),
                        base: id(1), target: id(2), mode,
                        expected_base_metadata_generation: 2, policy: None,
                    };
                    let active_before = w.claim();
                    if let Ok(events) = w.lineage.run(cmd, &ctx) {
                        // A competitor never replaces the active claim.
                        if let Some(a) = active_before {
                            prop_assert!(events.is_empty());
                            prop_assert_eq!(w.claim().unwrap().request_id, a.request_id);
                        }
                    }
                }
                Action::Drive { fail_import, give_up } => w.drive(fail_import, give_up),
                Action::Reader(ttl) => {
                    let ctx = w.ctx();
                    let _ = w.base.run(C::AcquireLease { holder: "reader".into(), ttl_ms: ttl, expected_metadata_generation: None, limits: limits() }, &ctx);
                }
                Action::EarlyImport => {
                    if let Some(claim) = w.claim() {
                        let _ = w.import_target(&claim, false);
                    }
                }
                Action::ReleaseAll => {
                    for lease_id in w.base.live.leases().keys().cloned().collect::<Vec<_>>() {
                        let ctx = w.ctx();
                        w.base.run(C::ReleaseLease { lease_id }, &ctx).unwrap();
                    }
                }
                Action::Tick(ms) => {
                    w.now += ms;
                    let ctx = w.ctx();
                    w.base.run(C::ExpireLeases, &ctx).unwrap();
                }
                Action::BaseMigration { terminal } => {
                    let ctx = w.ctx();
                    let g = w.base_gen();
                    if w.base.run(C::Migrate { target: ResidencyTarget::Cold, expected_metadata_generation: g }, &ctx).is_ok() {
                        // No cold tier here: the attempt fails; a terminal failure frees the base,
                        // otherwise the operation stays and keeps the base busy.
                        let op = w.base.live.active_operation().unwrap().operation_id.clone();
                        let ctx = w.ctx();
                        w.base.run(C::RecordOperationFailure { operation_id: op, error: "no cold tier".into(), terminal }, &ctx).unwrap();
                        prop_assert_eq!(w.base.live.active_operation().is_some(), !terminal);
                        prop_assert!(w.base.live.active_operation().is_none_or(|o| o.kind == OperationKind::Migrating));
                    }
                }
                Action::Restart => {
                    w.lineage.restart();
                    w.base.restart();
                    w.target.restart();
                }
            }
            w.check(before)?;
        }
    }
}

#[test]
fn put_first_and_delete_first_complete_when_driven_to_the_end() {
    for mode in [UpsertMode::PutFirst, UpsertMode::DeleteFirst] {
        let mut w = World::new();
        let ctx = w.ctx();
        w.lineage
            .run(
                L::BeginClaim {
                    request_id: None,
                    base: id(1),
                    target: id(2),
                    mode,
                    expected_base_metadata_generation: 2,
                    policy: None,
                },
                &ctx,
            )
            .unwrap();
        for step in 0..20 {
            if step % 3 == 2 {
                w.lineage.restart();
                w.base.restart();
                w.target.restart();
            }
            w.drive(false, false);
        }
        assert_eq!(w.lineage.live.watermark(), Some(2), "{mode:?}");
        assert!(w.lineage.live.active_claim().is_none());
        assert_eq!(
            w.base.live.record().unwrap().availability,
            Availability::Deleted
        );
        assert_eq!(
            w.target.live.record().unwrap().availability,
            Availability::Ready
        );
        assert!(!w.base_present);
    }
}

#[test]
fn delete_first_with_a_leased_base_is_busy_before_any_side_effect() {
    let mut w = World::new();
    let ctx = w.ctx();
    w.base
        .run(
            C::AcquireLease {
                holder: "reader".into(),
                ttl_ms: 10_000,
                expected_metadata_generation: None,
                limits: limits(),
            },
            &ctx,
        )
        .unwrap();
    w.lineage
        .run(
            L::BeginClaim {
                request_id: Some("r-a".into()),
                base: id(1),
                target: id(2),
                mode: UpsertMode::DeleteFirst,
                expected_base_metadata_generation: 2,
                policy: None,
            },
            &ctx,
        )
        .unwrap();
    w.drive(false, false);
    let base = w.base.live.record().unwrap();
    assert_eq!(
        (base.availability, base.retired.is_none()),
        (Availability::Ready, true)
    );
    assert_eq!(
        w.lineage.live.active_claim().unwrap().phase,
        ClaimPhase::Claimed
    );
    assert!(w.target.live.record().is_none());
    // Giving up is allowed here: nothing was destroyed.
    w.drive(false, true);
    assert_eq!(
        w.lineage.live.claim("r-a").unwrap().phase,
        ClaimPhase::Failed
    );
    assert_eq!(
        w.base.live.record().unwrap().availability,
        Availability::Ready
    );
}

#[test]
fn put_first_keeps_the_base_on_target_failure_and_drains_leases_before_deleting() {
    let mut w = World::new();
    let ctx = w.ctx();
    w.base
        .run(
            C::AcquireLease {
                holder: "reader".into(),
                ttl_ms: 10_000,
                expected_metadata_generation: None,
                limits: limits(),
            },
            &ctx,
        )
        .unwrap();
    w.lineage
        .run(
            L::BeginClaim {
                request_id: Some("r-a".into()),
                base: id(1),
                target: id(2),
                mode: UpsertMode::PutFirst,
                expected_base_metadata_generation: 2,
                policy: None,
            },
            &ctx,
        )
        .unwrap();
    w.drive(true, false);
    assert_eq!(
        w.lineage.live.claim("r-a").unwrap().phase,
        ClaimPhase::Failed
    );
    assert!(w.base.live.is_exist(), "the base stays readable");
    // The same request again starts a second attempt that reuses the target's group.
    let ctx = w.ctx();
    w.lineage
        .run(
            L::BeginClaim {
                request_id: Some("r-a".into()),
                base: id(1),
                target: id(2),
                mode: UpsertMode::PutFirst,
                expected_base_metadata_generation: 2,
                policy: None,
            },
            &ctx,
        )
        .unwrap();
    w.drive(false, false); // target READY
    w.drive(false, false); // base retired
    assert_eq!(
        w.lineage.live.active_claim().unwrap().phase,
        ClaimPhase::BaseRetired
    );
    w.drive(false, false); // a lease is still active: no drain
    assert_eq!(
        w.lineage.live.active_claim().unwrap().phase,
        ClaimPhase::BaseRetired
    );
    assert!(w.base.live.record().unwrap().availability == Availability::Ready);
    w.now += 10_000;
    w.drive(false, false);
    w.drive(false, false);
    w.drive(false, false);
    assert_eq!(w.lineage.live.watermark(), Some(2));
    assert_eq!(
        w.base.live.record().unwrap().availability,
        Availability::Deleted
    );
}
