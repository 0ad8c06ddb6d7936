//! Given/when/then tests of migration (explicit and AUTO), repair and deletion, with the exact
//! events.

use super::tests::*;
use super::*;
use crate::planner::MoveDirection;
use crate::policy::{MigrationMode, PreferredResidency, ResidencyTarget};

fn migrate(target: ResidencyTarget, expected: u64) -> WeightRevisionCommand {
    WeightRevisionCommand::Migrate {
        target,
        expected_metadata_generation: expected,
    }
}

fn migrating(
    seq: u64,
    target: ResidencyTarget,
    trigger: OperationTrigger,
    generation: u64,
) -> WeightRevisionEvent {
    started(
        seq,
        OperationKind::Migrating,
        Some(target),
        trigger,
        None,
        None,
        generation,
        NOW,
    )
}

/// READY + HOT (generation 2) with an explicit migration to COLD as op 1 (generation 3).
fn migrating_to_cold() -> Vec<WeightRevisionEvent> {
    let mut h = ready_hot();
    h.push(migrating(
        1,
        ResidencyTarget::Cold,
        OperationTrigger::Explicit,
        3,
    ));
    h
}

#[allow(clippy::too_many_arguments)]
fn copy(
    round: u64,
    direction: MoveDirection,
    units: u64,
    members: u64,
    bytes: u64,
    hot_bytes: u64,
) -> WeightRevisionCommand {
    WeightRevisionCommand::RecordRoundCopied {
        operation_id: op_id(1),
        round,
        direction,
        units,
        members,
        bytes,
        hot_bytes,
        limits: limits(),
    }
}

#[allow(clippy::too_many_arguments)]
fn copied(
    round: u64,
    direction: MoveDirection,
    units: u64,
    members: u64,
    bytes: u64,
    hot_bytes: u64,
    generation: u64,
) -> WeightRevisionEvent {
    WeightRevisionEvent::RoundCopied(RoundCopied {
        operation_id: op_id(1),
        round,
        direction,
        units,
        members,
        bytes,
        hot_bytes,
        metadata_generation: generation,
        at_ms: NOW,
    })
}

fn release(round: u64, hot_bytes: u64) -> WeightRevisionCommand {
    WeightRevisionCommand::RecordRoundReleased {
        operation_id: op_id(1),
        round,
        hot_bytes,
    }
}

fn released(round: u64, hot_bytes: u64, generation: u64) -> WeightRevisionEvent {
    WeightRevisionEvent::RoundReleased(RoundReleased {
        operation_id: op_id(1),
        round,
        hot_bytes,
        metadata_generation: generation,
        at_ms: NOW,
    })
}

fn finished(seq: u64, hot_bytes: u64, generation: u64) -> WeightRevisionEvent {
    WeightRevisionEvent::OperationFinished(OperationFinished {
        operation_id: op_id(seq),
        status: OperationStatus::Succeeded,
        error: None,
        hot_bytes: Some(hot_bytes),
        metadata_generation: generation,
        at_ms: NOW,
    })
}

fn with(
    mut h: Vec<WeightRevisionEvent>,
    more: Vec<WeightRevisionEvent>,
) -> Vec<WeightRevisionEvent> {
    h.extend(more);
    h
}

// ---- explicit migration ------------------------------------------------------------------

#[test]
fn migrate_creates_an_operation_record_and_a_retry_returns_it() {
    let state = given::<WeightRevision>(ready_hot())
        .when(migrate(ResidencyTarget::Cold, 2))
        .then(vec![migrating(
            1,
            ResidencyTarget::Cold,
            OperationTrigger::Explicit,
            3,
        )]);
    let op = state.operation(&op_id(1)).unwrap();
    assert_eq!(
        (op.kind, op.status, op.target),
        (
            OperationKind::Migrating,
            OperationStatus::Running,
            Some(ResidencyTarget::Cold)
        )
    );
    assert_eq!(
        state.record().unwrap().residency,
        Residency::Hot,
        "MIGRATING is not a residency"
    );
    assert!(state.is_exist());
    given::<WeightRevision>(migrating_to_cold())
        .when(migrate(ResidencyTarget::Cold, 2))
        .then(vec![]);
    given::<WeightRevision>(migrating_to_cold())
        .when(migrate(ResidencyTarget::Hot, 3))
        .then_error(WeightError::busy(format!(
            "MIGRATING operation {} is active",
            op_id(1)
        )));
    given::<WeightRevision>(ready_hot())
        .when(migrate(ResidencyTarget::Cold, 1))
        .then_code("STALE_GENERATION");
    given::<WeightRevision>(ready_hot())
        .when(migrate(ResidencyTarget::Mixed { hot_ratio: 0.0 }, 2))
        .then_error(WeightError::invalid(
            "mixed_hot_ratio",
            "0 is not strictly between 0 and 1",
        ));
    given::<WeightRevision>(vec![begun(hot_policy())])
        .when(migrate(ResidencyTarget::Cold, 1))
        .then_code("NOT_READY");
}

#[test]
fn migration_to_cold_copies_then_releases_round_by_round_then_completes() {
    // Round 1: unit t0 (2 members, 200 bytes) copied to cold, memory kept until released.
    let s = given::<WeightRevision>(migrating_to_cold())
        .when(WeightRevisionCommand::PlanMigration {
            operation_id: op_id(1),
            members_total: 5,
            bytes_total: 600,
        })
        .then(vec![WeightRevisionEvent::OperationPlanned(
            OperationPlanned {
                operation_id: op_id(1),
                members_total: 5,
                bytes_total: 600,
                at_ms: NOW,
            },
        )]);
    assert_eq!(
        s.operation(&op_id(1)).unwrap().progress.bytes_total,
        Some(600)
    );
    let planned = with(
        migrating_to_cold(),
        vec![WeightRevisionEvent::OperationPlanned(OperationPlanned {
            operation_id: op_id(1),
            members_total: 5,
            bytes_total: 600,
            at_ms: NOW,
        })],
    );
    given::<WeightRevision>(planned.clone())
        .when(WeightRevisionCommand::PlanMigration {
            operation_id: op_id(1),
            members_total: 3,
            bytes_total: 300,
        })
        .then(vec![]);
    let s = given::<WeightRevision>(planned.clone())
        .when(copy(1, MoveDirection::Demote, 1, 2, 200, 0))
        .then(vec![copied(1, MoveDirection::Demote, 1, 2, 200, 600, 3)]);
    assert_eq!(
        s.record().unwrap().hot_bytes,
        600,
        "cold copies release nothing"
    );
    let h1 = with(
        planned,
        vec![copied(1, MoveDirection::Demote, 1, 2, 200, 600, 3)],
    );
    let s = given::<WeightRevision>(h1.clone())
        .when(release(1, 400))
        .then(vec![released(1, 400, 4)]);
    let rec = s.record().unwrap();
    assert_eq!((rec.residency, rec.hot_bytes), (Residency::Mixed, 400));
    assert!((s.observed_hot_ratio() - 400.0 / 600.0).abs() < 1e-12);
    let p = &s.operation(&op_id(1)).unwrap().progress;
    assert_eq!(
        (p.rounds_completed, p.members_done, p.bytes_done),
        (1, 2, 200)
    );
    // Round 2: units t1 and t2 together (3 members, 400 bytes: within 4 members / 1000 bytes).
    let h2 = with(
        h1,
        vec![
            released(1, 400, 4),
            copied(2, MoveDirection::Demote, 2, 3, 400, 400, 4),
            released(2, 0, 5),
        ],
    );
    let s = given::<WeightRevision>(h2.clone())
        .when(WeightRevisionCommand::CompleteMigration {
            operation_id: op_id(1),
            hot_bytes: 0,
        })
        .then(vec![finished(1, 0, 6)]);
    let rec = s.record().unwrap();
    assert_eq!(
        (
            rec.availability,
            rec.residency,
            rec.active_operation_id.as_deref()
        ),
        (Availability::Ready, Residency::Cold, None)
    );
    assert_eq!(rec.last_migration_finished_ms, Some(NOW));
    let op = s.operation(&op_id(1)).unwrap();
    assert_eq!(
        (op.status, op.progress.members_done, op.progress.bytes_done),
        (OperationStatus::Succeeded, 5, 600)
    );
    assert!(
        s.manifest_memory_pinned(),
        "the manifest stays memory-readable in COLD"
    );
    assert!(s.is_exist());
    // The target is checked against the observed replicas.
    given::<WeightRevision>(h2)
        .when(WeightRevisionCommand::CompleteMigration {
            operation_id: op_id(1),
            hot_bytes: 200,
        })
        .then_error(WeightError::Conflict {
            what: "operation",
            id: op_id(1),
            reason: "observed residency MIXED (200 of 600 bytes HOT) is not the target Some(Cold)"
                .into(),
        });
}

#[test]
fn memory_is_released_only_after_validated_cold_replicas_and_never_under_a_lease() {
    // No copy recorded for the round: memory stays.
    given::<WeightRevision>(migrating_to_cold())
        .when(release(1, 400))
        .then_error(WeightError::Conflict {
            what: "operation",
            id: op_id(1),
            reason: "round 1 has no validated cold replicas: memory stays".into(),
        });
    // A lease blocks the release of existing replicas but not the creation of new ones.
    let leased = with(migrating_to_cold(), vec![granted(1, NOW + 5_000, NOW)]);
    given::<WeightRevision>(leased.clone())
        .when(copy(1, MoveDirection::Demote, 1, 2, 200, 0))
        .then(vec![copied(1, MoveDirection::Demote, 1, 2, 200, 600, 3)]);
    let copied_under_lease = with(
        leased,
        vec![copied(1, MoveDirection::Demote, 1, 2, 200, 600, 3)],
    );
    given::<WeightRevision>(copied_under_lease.clone())
        .when(release(1, 400))
        .then_error(WeightError::busy(
            "1 active lease(s) block the release of memory replicas",
        ));
    // Once the lease's TTL has passed, it is expired in the release's batch.
    given::<WeightRevision>(copied_under_lease)
        .when_at(NOW + 5_000, release(1, 400))
        .then(vec![
            WeightRevisionEvent::LeaseExpired(LeaseEnded {
                lease_id: lease_id(1),
                at_ms: NOW + 5_000,
            }),
            WeightRevisionEvent::RoundReleased(RoundReleased {
                operation_id: op_id(1),
                round: 1,
                hot_bytes: 400,
                metadata_generation: 4,
                at_ms: NOW + 5_000,
            }),
        ]);
}

#[test]
fn rounds_are_ordered_bounded_and_idempotent() {
    let h = with(
        migrating_to_cold(),
        vec![copied(1, MoveDirection::Demote, 1, 2, 200, 600, 3)],
    );
    // The same round again (a resumed driver) is a no-op; the next round waits for the release.
    given::<WeightRevision>(h.clone())
        .when(copy(1, MoveDirection::Demote, 1, 2, 200, 0))
        .then(vec![]);
    given::<WeightRevision>(h.clone())
        .when(copy(2, MoveDirection::Demote, 1, 2, 200, 0))
        .then_error(WeightError::Conflict {
            what: "operation",
            id: op_id(1),
            reason: "round 1 awaits the release of its memory replicas".into(),
        });
    given::<WeightRevision>(h.clone())
        .when(WeightRevisionCommand::CompleteMigration {
            operation_id: op_id(1),
            hot_bytes: 600,
        })
        .then_error(WeightError::Conflict {
            what: "operation",
            id: op_id(1),
            reason: "round 1 awaits the release of its memory replicas".into(),
        });
    let done = with(h, vec![released(1, 400, 4)]);
    given::<WeightRevision>(done.clone())
        .when(release(1, 400))
        .then(vec![]);
    given::<WeightRevision>(done.clone())
        .when(copy(1, MoveDirection::Demote, 1, 2, 200, 0))
        .then(vec![]);
    given::<WeightRevision>(done.clone())
        .when(copy(3, MoveDirection::Demote, 1, 2, 200, 0))
        .then_error(WeightError::Conflict {
            what: "operation",
            id: op_id(1),
            reason: "round 3 recorded, round 2 is next".into(),
        });
    // Several units must fit the limits; a single unit larger than them still progresses.
    given::<WeightRevision>(done.clone())
        .when(copy(2, MoveDirection::Demote, 2, 5, 300, 0))
        .then_code("INVALID_ARGUMENT");
    given::<WeightRevision>(done.clone())
        .when(copy(2, MoveDirection::Demote, 2, 3, 1_001, 0))
        .then_code("INVALID_ARGUMENT");
    given::<WeightRevision>(done)
        .when(copy(2, MoveDirection::Demote, 1, 9, 5_000, 0))
        .then(vec![copied(2, MoveDirection::Demote, 1, 9, 5_000, 400, 4)]);
}

#[test]
fn promotion_rounds_complete_on_copy() {
    let cold = with(
        ready_hot(),
        vec![
            migrating(1, ResidencyTarget::Cold, OperationTrigger::Explicit, 3),
            copied(1, MoveDirection::Demote, 3, 5, 600, 600, 3),
            released(1, 0, 4),
            finished(1, 0, 5),
            migrating(2, ResidencyTarget::Hot, OperationTrigger::Explicit, 6),
        ],
    );
    let promote = |round, units, members, bytes, hot| WeightRevisionCommand::RecordRoundCopied {
        operation_id: op_id(2),
        round,
        direction: MoveDirection::Promote,
        units,
        members,
        bytes,
        hot_bytes: hot,
        limits: limits(),
    };
    let s = given::<WeightRevision>(cold.clone())
        .when(promote(1, 2, 4, 400, 400))
        .then(vec![WeightRevisionEvent::RoundCopied(RoundCopied {
            operation_id: op_id(2),
            round: 1,
            direction: MoveDirection::Promote,
            units: 2,
            members: 4,
            bytes: 400,
            hot_bytes: 400,
            metadata_generation: 7,
            at_ms: NOW,
        })]);
    assert_eq!(s.record().unwrap().residency, Residency::Mixed);
    assert_eq!(s.operation(&op_id(2)).unwrap().progress.rounds_completed, 1);
    given::<WeightRevision>(cold)
        .when(promote(1, 1, 1, 200, 601))
        .then_error(WeightError::invalid(
            "hot_bytes",
            "601 exceeds the 600 logical payload bytes",
        ));
}

#[test]
fn every_migration_path_between_hot_cold_and_mixed() {
    // From each residency to each target, the completion lands on the target residency.
    let mixed = ResidencyTarget::Mixed { hot_ratio: 0.5 };
    let reach = |target: ResidencyTarget| match target {
        ResidencyTarget::Hot => 600,
        ResidencyTarget::Cold => 0,
        ResidencyTarget::Mixed { .. } => 200,
    };
    for from in [ResidencyTarget::Hot, ResidencyTarget::Cold, mixed] {
        for to in [ResidencyTarget::Hot, ResidencyTarget::Cold, mixed] {
            let mut h = ready_hot();
            let mut generation = 2;
            if from != ResidencyTarget::Hot {
                h.push(migrating(1, from, OperationTrigger::Explicit, 3));
                h.push(finished(1, reach(from), 4));
                generation = 4;
            }
            let seq = if from == ResidencyTarget::Hot { 1 } else { 2 };
            let s = given::<WeightRevision>(h)
                .when(migrate(to, generation))
                .then(vec![migrating(
                    seq,
                    to,
                    OperationTrigger::Explicit,
                    generation + 1,
                )]);
            let s = given::<WeightRevision>(vec![])
                .then_state(s)
                .when(WeightRevisionCommand::CompleteMigration {
                    operation_id: op_id(seq),
                    hot_bytes: reach(to),
                })
                .then(vec![finished(seq, reach(to), generation + 2)]);
            assert_eq!(
                s.record().unwrap().residency,
                to.residency(),
                "{from:?} -> {to:?}"
            );
        }
    }
}

#[test]
fn a_failed_attempt_keeps_the_revision_ready_and_the_progress() {
    let h = with(
        migrating_to_cold(),
        vec![
            copied(1, MoveDirection::Demote, 1, 2, 200, 600, 3),
            released(1, 400, 4),
        ],
    );
    let s = given::<WeightRevision>(h.clone())
        .when(WeightRevisionCommand::RecordOperationFailure {
            operation_id: op_id(1),
            error: "cold write failed".into(),
            terminal: false,
        })
        .then(vec![WeightRevisionEvent::OperationAttemptFailed(
            OperationAttemptFailed {
                operation_id: op_id(1),
                error: "cold write failed".into(),
                at_ms: NOW,
            },
        )]);
    let op = s.operation(&op_id(1)).unwrap();
    assert_eq!(
        (op.status, op.attempts, op.progress.rounds_completed),
        (OperationStatus::Running, 1, 1)
    );
    assert_eq!(s.record().unwrap().availability, Availability::Ready);
    let s = given::<WeightRevision>(h)
        .when(WeightRevisionCommand::RecordOperationFailure {
            operation_id: op_id(1),
            error: "x".repeat(5_000),
            terminal: true,
        })
        .then(vec![WeightRevisionEvent::OperationFinished(
            OperationFinished {
                operation_id: op_id(1),
                status: OperationStatus::Failed,
                error: Some("x".repeat(MAX_ERROR_BYTES)),
                hot_bytes: None,
                metadata_generation: 5,
                at_ms: NOW,
            },
        )]);
    let rec = s.record().unwrap();
    assert_eq!(
        (
            rec.availability,
            rec.residency,
            rec.active_operation_id.as_deref()
        ),
        (Availability::Ready, Residency::Mixed, None)
    );
    let op = s.operation(&op_id(1)).unwrap();
    assert_eq!(
        (op.status, op.progress.bytes_done),
        (OperationStatus::Failed, 200),
        "queryable after the end"
    );
    given::<WeightRevision>(vec![])
        .then_state(s)
        .when(WeightRevisionCommand::RecordOperationFailure {
            operation_id: op_id(1),
            error: "again".into(),
            terminal: false,
        })
        .then_error(WeightError::Conflict {
            what: "operation",
            id: op_id(1),
            reason: "has finished as Failed".into(),
        });
}

// ---- migration modes and AUTO -------------------------------------------------------------

fn with_mode(mode: MigrationMode, preferred: PreferredResidency) -> Vec<WeightRevisionEvent> {
    let policy = WeightStoragePolicy {
        preferred_residency: preferred,
        mixed_hot_ratio: 0.5,
        migration_mode: mode,
    };
    let f = standard();
    let mut h = vec![begun(policy), committed(&f.summary, 2)];
    if preferred != PreferredResidency::Hot {
        h.push(migrating(
            1,
            policy.preferred_target(),
            OperationTrigger::Initial,
            2,
        ));
    }
    h
}

#[test]
fn pinned_allows_initial_convergence_then_refuses_residency_changes() {
    let h = with_mode(MigrationMode::Pinned, PreferredResidency::Cold);
    let s = given::<WeightRevision>(h.clone())
        .when(WeightRevisionCommand::CompleteMigration {
            operation_id: op_id(1),
            hot_bytes: 0,
        })
        .then(vec![finished(1, 0, 3)]);
    assert!(s.record().unwrap().initially_converged);
    given::<WeightRevision>(with(h, vec![finished(1, 0, 3)]))
        .when(migrate(ResidencyTarget::Hot, 3))
        .then_error(WeightError::PolicyUnsatisfiable {
            reason: "migration mode PINNED fixes the residency after initial convergence".into(),
        });
}

#[test]
fn manual_accepts_explicit_migration_only() {
    let h = with_mode(MigrationMode::Manual, PreferredResidency::Hot);
    given::<WeightRevision>(h.clone())
        .when(WeightRevisionCommand::AutoDemote {
            expected_metadata_generation: 2,
            limits: limits(),
        })
        .then_error(WeightError::PolicyUnsatisfiable {
            reason: "automatic migration needs mode AUTO, not Manual".into(),
        });
    given::<WeightRevision>(h)
        .when(migrate(ResidencyTarget::Cold, 2))
        .then(vec![migrating(
            1,
            ResidencyTarget::Cold,
            OperationTrigger::Explicit,
            3,
        )]);
}

#[test]
fn auto_demotes_step_by_step_with_cooldown() {
    let demote = |g| WeightRevisionCommand::AutoDemote {
        expected_metadata_generation: g,
        limits: limits(),
    };
    let s = given::<WeightRevision>(ready_hot())
        .when(demote(2))
        .then(vec![migrating(
            1,
            ResidencyTarget::Mixed { hot_ratio: 0.5 },
            OperationTrigger::MemoryPressure,
            3,
        )]);
    assert_eq!(
        s.operation(&op_id(1)).unwrap().trigger,
        OperationTrigger::MemoryPressure
    );
    let mixed = with(
        ready_hot(),
        vec![
            migrating(
                1,
                ResidencyTarget::Mixed { hot_ratio: 0.5 },
                OperationTrigger::MemoryPressure,
                3,
            ),
            finished(1, 200, 4),
        ],
    );
    given::<WeightRevision>(mixed.clone())
        .when(demote(4))
        .then_error(WeightError::busy("migration cooldown has not elapsed"));
    let s = given::<WeightRevision>(mixed.clone())
        .when_at(NOW + 1_000, demote(4))
        .then(vec![started(
            2,
            OperationKind::Migrating,
            Some(ResidencyTarget::Cold),
            OperationTrigger::MemoryPressure,
            None,
            None,
            5,
            NOW + 1_000,
        )]);
    assert_eq!(
        s.active_operation().unwrap().target,
        Some(ResidencyTarget::Cold)
    );
    let cold = with(
        mixed.clone(),
        vec![
            started(
                2,
                OperationKind::Migrating,
                Some(ResidencyTarget::Cold),
                OperationTrigger::MemoryPressure,
                None,
                None,
                5,
                NOW,
            ),
            finished(2, 0, 6),
        ],
    );
    given::<WeightRevision>(cold)
        .when_at(NOW + 10_000, demote(6))
        .then_error(WeightError::PolicyUnsatisfiable {
            reason: "nothing to demote from COLD".into(),
        });
    // Not a candidate while leased or migrating, nor before the initial convergence.
    given::<WeightRevision>(with(ready_hot(), vec![granted(1, NOW + 5_000, NOW)]))
        .when(demote(2))
        .then_error(WeightError::busy(
            "1 active lease(s) block automatic demotion",
        ));
    given::<WeightRevision>(with_mode(MigrationMode::Auto, PreferredResidency::Mixed))
        .when(demote(2))
        .then_error(WeightError::busy("initial convergence has not finished"));
    given::<WeightRevision>(mixed)
        .when_at(NOW + 1_000, demote(3))
        .then_code("STALE_GENERATION");
}

#[test]
fn access_to_a_colder_auto_revision_persists_a_promotion_before_the_lease() {
    let cold = with(
        ready_hot(),
        vec![
            migrating(
                1,
                ResidencyTarget::Cold,
                OperationTrigger::MemoryPressure,
                3,
            ),
            finished(1, 0, 4),
        ],
    );
    let s = given::<WeightRevision>(cold.clone())
        .when_at(NOW + 1_000, acquire(5_000))
        .then(vec![
            started(
                2,
                OperationKind::Migrating,
                Some(ResidencyTarget::Hot),
                OperationTrigger::Access,
                None,
                None,
                5,
                NOW + 1_000,
            ),
            granted(1, NOW + 6_000, NOW + 1_000),
        ]);
    assert_eq!(s.record().unwrap().last_access_ms, NOW + 1_000);
    // Within the cooldown only the lease is granted; an operation in flight is not doubled.
    given::<WeightRevision>(cold)
        .when_at(NOW + 999, acquire(5_000))
        .then(vec![granted(1, NOW + 5_999, NOW + 999)]);
    given::<WeightRevision>(migrating_to_cold())
        .when(acquire(5_000))
        .then(vec![granted(1, NOW + 5_000, NOW)]);
}

#[test]
fn auto_candidates_are_only_idle_ready_auto_revisions() {
    let s = given::<WeightRevision>(ready_hot()).into_state();
    let c = s.auto_candidate(NOW, &limits()).unwrap();
    assert_eq!((c.last_access_ms, c.releasable_hot_bytes), (NOW, 600));
    let leased =
        given::<WeightRevision>(with(ready_hot(), vec![granted(1, NOW + 5, NOW)])).into_state();
    assert!(leased.auto_candidate(NOW, &limits()).is_none());
    assert!(
        leased.auto_candidate(NOW + 5, &limits()).is_some(),
        "an expired lease protects nothing"
    );
    assert!(given::<WeightRevision>(migrating_to_cold())
        .into_state()
        .auto_candidate(NOW, &limits())
        .is_none());
    let manual = given::<WeightRevision>(with_mode(MigrationMode::Manual, PreferredResidency::Hot))
        .into_state();
    assert!(manual.auto_candidate(NOW, &limits()).is_none());
}

// ---- degradation and repair ---------------------------------------------------------------

#[test]
fn lost_members_degrade_and_repair_restores_ready() {
    let lost = WeightRevisionEvent::MembersLost(MembersLost {
        lost_members: 2,
        metadata_generation: 3,
        at_ms: NOW,
        hot_bytes: None,
    });
    let s = given::<WeightRevision>(ready_hot())
        .when(WeightRevisionCommand::ReportMembersLost {
            lost_members: 2,
            hot_bytes: None,
        })
        .then(vec![lost.clone()]);
    assert_eq!(s.record().unwrap().availability, Availability::Degraded);
    assert!(!s.is_exist());
    let degraded = with(ready_hot(), vec![lost]);
    given::<WeightRevision>(degraded.clone())
        .when(WeightRevisionCommand::ReportMembersLost {
            lost_members: 2,
            hot_bytes: None,
        })
        .then(vec![]);
    given::<WeightRevision>(ready_hot())
        .when(WeightRevisionCommand::ReportMembersLost {
            lost_members: 6,
            hot_bytes: None,
        })
        .then_error(WeightError::invalid(
            "lost_members",
            "6 exceeds the 5 payloads",
        ));
    let s = given::<WeightRevision>(degraded.clone())
        .when(WeightRevisionCommand::StartRepair {
            expected_metadata_generation: 3,
        })
        .then(vec![started(
            1,
            OperationKind::Repairing,
            None,
            OperationTrigger::Repair,
            Some(2),
            None,
            4,
            NOW,
        )]);
    assert_eq!(s.active_operation().unwrap().kind, OperationKind::Repairing);
    let repairing = with(
        degraded.clone(),
        vec![started(
            1,
            OperationKind::Repairing,
            None,
            OperationTrigger::Repair,
            Some(2),
            None,
            4,
            NOW,
        )],
    );
    let s = given::<WeightRevision>(repairing)
        .when(WeightRevisionCommand::CompleteRepair {
            operation_id: op_id(1),
            hot_bytes: 600,
        })
        .then(vec![finished(1, 600, 5)]);
    let rec = s.record().unwrap();
    assert_eq!(
        (rec.availability, rec.lost_members, rec.residency),
        (Availability::Ready, 0, Residency::Hot)
    );
    let retired = with(
        degraded.clone(),
        vec![WeightRevisionEvent::RevisionRetired(RevisionRetired {
            request_id: "req-1".into(),
            successor_generation: 2,
            metadata_generation: 4,
            at_ms: NOW,
        })],
    );
    given::<WeightRevision>(retired)
        .when(WeightRevisionCommand::StartRepair {
            expected_metadata_generation: 4,
        })
        .then_error(WeightError::Conflict {
            what: "revision",
            id: ident().to_string(),
            reason: "retired by upsert \"req-1\" for generation 2".into(),
        });
    given::<WeightRevision>(ready_hot())
        .when(WeightRevisionCommand::StartRepair {
            expected_metadata_generation: 2,
        })
        .then_code("CONFLICT");
}

// ---- deletion -----------------------------------------------------------------------------

fn remove(expected: u64) -> WeightRevisionCommand {
    WeightRevisionCommand::Remove {
        expected_metadata_generation: expected,
    }
}

fn deleting() -> Vec<WeightRevisionEvent> {
    with(
        ready_hot(),
        vec![started(
            1,
            OperationKind::Deleting,
            None,
            OperationTrigger::Removal,
            Some(5),
            Some(600),
            3,
            NOW,
        )],
    )
}

fn batch(n: u64, members: u64, bytes: u64) -> WeightRevisionCommand {
    WeightRevisionCommand::RecordDeletionBatch {
        operation_id: op_id(1),
        batch: n,
        members,
        bytes,
    }
}

fn batch_deleted(n: u64, members: u64, bytes: u64) -> WeightRevisionEvent {
    WeightRevisionEvent::DeletionBatchDeleted(DeletionBatchDeleted {
        operation_id: op_id(1),
        batch: n,
        members,
        bytes,
        at_ms: NOW,
    })
}

#[test]
fn remove_starts_deleting_and_rejects_new_leases() {
    let s = given::<WeightRevision>(ready_hot())
        .when(remove(2))
        .then(vec![started(
            1,
            OperationKind::Deleting,
            None,
            OperationTrigger::Removal,
            Some(5),
            Some(600),
            3,
            NOW,
        )]);
    assert_eq!(s.record().unwrap().availability, Availability::Deleting);
    assert!(!s.is_exist());
    given::<WeightRevision>(deleting())
        .when(acquire(1_000))
        .then_code("NOT_READY");
    // A duplicate remove returns the running deletion.
    given::<WeightRevision>(deleting())
        .when(remove(2))
        .then(vec![]);
    given::<WeightRevision>(ready_hot())
        .when(remove(1))
        .then_code("STALE_GENERATION");
}

#[test]
fn remove_is_busy_under_a_lease_or_an_operation() {
    given::<WeightRevision>(with(ready_hot(), vec![granted(1, NOW + 5_000, NOW)]))
        .when(remove(2))
        .then_error(WeightError::busy("1 active lease(s) block deletion"));
    given::<WeightRevision>(migrating_to_cold())
        .when(remove(3))
        .then_error(WeightError::busy(format!(
            "MIGRATING operation {} is active",
            op_id(1)
        )));
    given::<WeightRevision>(with(ready_hot(), vec![granted(1, NOW + 5_000, NOW)]))
        .when_at(NOW + 5_000, remove(2))
        .then(vec![
            WeightRevisionEvent::LeaseExpired(LeaseEnded {
                lease_id: lease_id(1),
                at_ms: NOW + 5_000,
            }),
            started(
                1,
                OperationKind::Deleting,
                None,
                OperationTrigger::Removal,
                Some(5),
                Some(600),
                3,
                NOW + 5_000,
            ),
        ]);
}

#[test]
fn deletion_runs_payload_batches_then_the_manifest_then_verifies_empty() {
    let s = given::<WeightRevision>(deleting())
        .when(batch(1, 2, 200))
        .then(vec![batch_deleted(1, 2, 200)]);
    assert_eq!(s.operation(&op_id(1)).unwrap().progress.members_done, 2);
    let one = with(deleting(), vec![batch_deleted(1, 2, 200)]);
    given::<WeightRevision>(one.clone())
        .when(batch(1, 2, 200))
        .then(vec![]);
    given::<WeightRevision>(one.clone())
        .when(batch(3, 1, 100))
        .then_error(WeightError::Conflict {
            what: "operation",
            id: op_id(1),
            reason: "batch 3 recorded, batch 2 is next".into(),
        });
    given::<WeightRevision>(one.clone())
        .when(batch(2, 4, 400))
        .then_code("INVALID_ARGUMENT");
    given::<WeightRevision>(one.clone())
        .when(WeightRevisionCommand::RecordManifestDeleted {
            operation_id: op_id(1),
        })
        .then_error(WeightError::Conflict {
            what: "operation",
            id: op_id(1),
            reason: "3 of 5 payloads remain: the manifest is deleted last".into(),
        });
    let all = with(one, vec![batch_deleted(2, 3, 400)]);
    given::<WeightRevision>(all.clone())
        .when(WeightRevisionCommand::CompleteDeletion {
            operation_id: op_id(1),
            remaining_members: 0,
        })
        .then_error(WeightError::Conflict {
            what: "operation",
            id: op_id(1),
            reason: "the manifest is not deleted yet".into(),
        });
    let s = given::<WeightRevision>(all.clone())
        .when(WeightRevisionCommand::RecordManifestDeleted {
            operation_id: op_id(1),
        })
        .then(vec![WeightRevisionEvent::ManifestDeleted(
            ManifestDeleted {
                operation_id: op_id(1),
                at_ms: NOW,
            },
        )]);
    assert!(!s.manifest_memory_pinned());
    let gone = with(
        all,
        vec![WeightRevisionEvent::ManifestDeleted(ManifestDeleted {
            operation_id: op_id(1),
            at_ms: NOW,
        })],
    );
    given::<WeightRevision>(gone.clone())
        .when(batch(3, 1, 0))
        .then_error(WeightError::Conflict {
            what: "operation",
            id: op_id(1),
            reason: "the manifest is already deleted: payload batches come first".into(),
        });
    given::<WeightRevision>(gone.clone())
        .when(WeightRevisionCommand::CompleteDeletion {
            operation_id: op_id(1),
            remaining_members: 1,
        })
        .then_error(WeightError::Conflict {
            what: "operation",
            id: op_id(1),
            reason: "the group still holds 1 member(s)".into(),
        });
    let tomb = WeightRevisionEvent::RevisionDeleted(RevisionDeleted {
        operation_id: op_id(1),
        metadata_generation: 4,
        at_ms: NOW,
    });
    let s = given::<WeightRevision>(gone)
        .when(WeightRevisionCommand::CompleteDeletion {
            operation_id: op_id(1),
            remaining_members: 0,
        })
        .then(vec![tomb.clone()]);
    let rec = s.record().unwrap();
    assert_eq!(
        (
            rec.availability,
            rec.residency,
            rec.active_operation_id.as_deref()
        ),
        (Availability::Deleted, Residency::Absent, None)
    );
    assert!(s.leases().is_empty());
    assert_eq!(
        s.operation(&op_id(1)).unwrap().status,
        OperationStatus::Succeeded
    );
    // The tombstone stays queryable; duplicates return it; nothing else is allowed.
    given::<WeightRevision>(vec![])
        .then_state(s.clone())
        .when(remove(2))
        .then(vec![]);
    given::<WeightRevision>(vec![])
        .then_state(s.clone())
        .when(WeightRevisionCommand::CompleteDeletion {
            operation_id: op_id(1),
            remaining_members: 0,
        })
        .then(vec![]);
    given::<WeightRevision>(vec![])
        .then_state(s.clone())
        .when(acquire(1_000))
        .then_code("NOT_FOUND");
    given::<WeightRevision>(vec![])
        .then_state(s.clone())
        .when(migrate(ResidencyTarget::Hot, 4))
        .then_code("NOT_FOUND");
    assert_eq!(
        s.size(),
        Err(WeightError::NotFound {
            what: "revision",
            id: ident().to_string()
        })
    );
}

#[test]
fn a_deletion_never_fails_terminally_and_resumes_from_its_progress() {
    let one = with(deleting(), vec![batch_deleted(1, 2, 200)]);
    given::<WeightRevision>(one.clone())
        .when(WeightRevisionCommand::RecordOperationFailure {
            operation_id: op_id(1),
            error: "store down".into(),
            terminal: true,
        })
        .then_error(WeightError::invalid(
            "terminal",
            "a deletion never fails terminally: it resumes from its progress",
        ));
    let s = given::<WeightRevision>(one)
        .when(WeightRevisionCommand::RecordOperationFailure {
            operation_id: op_id(1),
            error: "store down".into(),
            terminal: false,
        })
        .then(vec![WeightRevisionEvent::OperationAttemptFailed(
            OperationAttemptFailed {
                operation_id: op_id(1),
                error: "store down".into(),
                at_ms: NOW,
            },
        )]);
    let op = s.operation(&op_id(1)).unwrap();
    assert_eq!(
        (
            op.status,
            op.progress.rounds_completed,
            op.progress.members_done
        ),
        (OperationStatus::Running, 1, 2)
    );
    assert_eq!(s.record().unwrap().availability, Availability::Deleting);
}

#[test]
fn an_abandoned_import_can_be_removed() {
    let s = given::<WeightRevision>(vec![begun(hot_policy())])
        .when(remove(1))
        .then(vec![started(
            1,
            OperationKind::Deleting,
            None,
            OperationTrigger::Removal,
            None,
            None,
            2,
            NOW,
        )]);
    let s = given::<WeightRevision>(vec![])
        .then_state(s)
        .when(WeightRevisionCommand::RecordManifestDeleted {
            operation_id: op_id(1),
        })
        .then(vec![WeightRevisionEvent::ManifestDeleted(
            ManifestDeleted {
                operation_id: op_id(1),
                at_ms: NOW,
            },
        )]);
    let s = given::<WeightRevision>(vec![])
        .then_state(s)
        .when(WeightRevisionCommand::CompleteDeletion {
            operation_id: op_id(1),
            remaining_members: 0,
        })
        .then(vec![WeightRevisionEvent::RevisionDeleted(
            RevisionDeleted {
                operation_id: op_id(1),
                metadata_generation: 3,
                at_ms: NOW,
            },
        )]);
    assert_eq!(s.record().unwrap().availability, Availability::Deleted);
}

#[test]
fn is_exist_for_every_availability_and_while_migrating() {
    let exists = |h: Vec<WeightRevisionEvent>| given::<WeightRevision>(h).into_state().is_exist();
    assert!(!exists(vec![]));
    assert!(!exists(vec![begun(hot_policy())]));
    assert!(exists(ready_hot()));
    assert!(exists(migrating_to_cold()));
    assert!(!exists(with(
        ready_hot(),
        vec![WeightRevisionEvent::MembersLost(MembersLost {
            lost_members: 1,
            metadata_generation: 3,
            at_ms: NOW,
            hot_bytes: None,
        })]
    )));
    assert!(!exists(deleting()));
    assert!(!exists(with(
        deleting(),
        vec![
            batch_deleted(1, 5, 600),
            WeightRevisionEvent::ManifestDeleted(ManifestDeleted {
                operation_id: op_id(1),
                at_ms: NOW
            }),
            WeightRevisionEvent::RevisionDeleted(RevisionDeleted {
                operation_id: op_id(1),
                metadata_generation: 4,
                at_ms: NOW
            }),
        ]
    )));
}

#[test]
fn finished_operations_are_bounded() {
    let mut h = ready_hot();
    let mut generation = 2;
    for seq in 1..=(MAX_FINISHED_OPERATIONS as u64 + 3) {
        h.push(migrating(
            seq,
            ResidencyTarget::Hot,
            OperationTrigger::Explicit,
            generation + 1,
        ));
        h.push(finished(seq, 600, generation + 2));
        generation += 2;
    }
    let s = given::<WeightRevision>(h).into_state();
    assert_eq!(s.operations().len(), MAX_FINISHED_OPERATIONS);
    assert!(s.operation(&op_id(1)).is_none());
    assert!(s
        .operation(&op_id(MAX_FINISHED_OPERATIONS as u64 + 3))
        .is_some());
}
