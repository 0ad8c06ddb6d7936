//! Given/when/then tests of the lineage claim: both modes phase by phase, idempotent retries,
//! competitors, the watermark and the import admission.

use super::*;
use crate::revision::MAX_ERROR_BYTES;
use crescent_actors::{DecodeError, DomainEvent};

use crescent_actors::testing::NOW;

fn given(events: Vec<LineageClaimEvent>) -> LineageClaim {
    crescent_actors::testing::state_after(&events)
}

fn decide(
    state: &LineageClaim,
    cmd: LineageClaimCommand,
) -> Result<Vec<LineageClaimEvent>, WeightError> {
    state.decide(&cmd, &Ctx::at(NOW))
}

fn then(
    state: &LineageClaim,
    cmd: LineageClaimCommand,
    expected: Vec<LineageClaimEvent>,
) -> LineageClaim {
    let events = decide(state, cmd).unwrap_or_else(|e| panic!("expected {expected:?}, got {e}"));
    assert_eq!(events, expected);
    let mut next = state.clone();
    for e in &events {
        next.apply(e);
    }
    next
}

fn gen(g: u64) -> RevisionIdentity {
    RevisionIdentity::new("llm", "llama", "main", g)
}

fn begin(rid: Option<&str>, base: u64, target: u64, mode: UpsertMode) -> LineageClaimCommand {
    LineageClaimCommand::BeginClaim {
        request_id: rid.map(Into::into),
        base: gen(base),
        target: gen(target),
        mode,
        expected_base_metadata_generation: 4,
        policy: None,
    }
}

fn claim_started(
    rid: &str,
    base: u64,
    target: u64,
    mode: UpsertMode,
    attempt: u64,
) -> LineageClaimEvent {
    LineageClaimEvent::ClaimStarted(ClaimStarted {
        request_id: rid.into(),
        base: gen(base),
        target: gen(target),
        mode,
        expected_base_metadata_generation: 4,
        policy: None,
        attempt,
        at_ms: NOW,
    })
}

fn advance(rid: &str, phase: ClaimPhase) -> LineageClaimCommand {
    LineageClaimCommand::AdvanceClaim {
        request_id: rid.into(),
        phase,
    }
}

fn advanced(rid: &str, phase: ClaimPhase) -> LineageClaimEvent {
    LineageClaimEvent::ClaimAdvanced(ClaimAdvanced {
        request_id: rid.into(),
        phase,
        at_ms: NOW,
    })
}

/// One event of each kind, in schema order.
fn one_of_each_kind() -> [LineageClaimEvent; 3] {
    [
        claim_started("r1", 1, 2, UpsertMode::DeleteFirst, 3),
        advanced("r1", ClaimPhase::BaseDeleted),
        LineageClaimEvent::ClaimFailed(ClaimFailed {
            request_id: "r1".into(),
            reason: "x".into(),
            at_ms: 5,
        }),
    ]
}

fn busy_by(rid: &str, target: u64, phase: ClaimPhase) -> WeightError {
    WeightError::busy(format!(
        "the lineage's replacement claim {rid:?} (generation {target}) is in phase {phase:?}"
    ))
}

#[test]
fn put_first_runs_its_phases_in_order_and_commits_the_watermark() {
    use ClaimPhase as P;
    let mut s = then(
        &LineageClaim::default(),
        begin(Some("r1"), 1, 2, UpsertMode::PutFirst),
        vec![claim_started("r1", 1, 2, UpsertMode::PutFirst, 1)],
    );
    assert_eq!(
        s.active_claim().unwrap().next_step(),
        UpsertStep::ImportTarget
    );
    assert_eq!(s.admit_import(2, Some("r1")), Ok(()));
    let steps = [
        (
            P::TargetReady,
            UpsertStep::RetireBase {
                require_idle: false,
            },
        ),
        (P::BaseRetired, UpsertStep::DrainBaseLeases),
        (P::BaseDrained, UpsertStep::DeleteBase),
        (P::BaseDeleted, UpsertStep::CommitWatermark),
    ];
    for (phase, next) in steps {
        s = then(&s, advance("r1", phase), vec![advanced("r1", phase)]);
        assert_eq!(s.active_claim().unwrap().next_step(), next);
        assert_eq!(s.watermark(), None, "the watermark moves only at the end");
    }
    s = then(
        &s,
        advance("r1", P::Committed),
        vec![advanced("r1", P::Committed)],
    );
    assert_eq!(s.watermark(), Some(2));
    assert!(s.active_claim().is_none());
    assert_eq!(s.claim("r1").unwrap().phase, P::Committed);
    // A resumed driver repeating the last step, or the whole request, gets the result.
    then(&s, advance("r1", P::Committed), vec![]);
    then(&s, begin(Some("r1"), 1, 2, UpsertMode::PutFirst), vec![]);
}

#[test]
fn put_first_phases_cannot_be_skipped_or_reordered() {
    let s = given(vec![claim_started("r1", 1, 2, UpsertMode::PutFirst, 1)]);
    // The base is never retired before the target is READY.
    assert_eq!(
        decide(&s, advance("r1", ClaimPhase::BaseRetired)),
        Err(WeightError::Conflict {
            what: "claim",
            id: "r1".into(),
            reason: "PUT_FIRST goes from Claimed to Some(TargetReady), not to BaseRetired".into()
        })
    );
    assert_eq!(
        decide(&s, advance("r1", ClaimPhase::Committed))
            .unwrap_err()
            .code(),
        crescent_actors::ErrorCode::Conflict
    );
    // Repeating the current phase (resume after restart) is a no-op.
    let s = given(vec![
        claim_started("r1", 1, 2, UpsertMode::PutFirst, 1),
        advanced("r1", ClaimPhase::TargetReady),
    ]);
    then(&s, advance("r1", ClaimPhase::TargetReady), vec![]);
    assert_eq!(
        decide(&s, advance("r1", ClaimPhase::Failed)),
        Err(WeightError::invalid(
            "phase",
            "use FailClaim to fail a claim"
        ))
    );
}

#[test]
fn delete_first_runs_its_phases_in_order_and_imports_only_after_base_deletion() {
    use ClaimPhase as P;
    let mut s = then(
        &LineageClaim::default(),
        begin(Some("r1"), 1, 2, UpsertMode::DeleteFirst),
        vec![claim_started("r1", 1, 2, UpsertMode::DeleteFirst, 1)],
    );
    assert_eq!(
        s.active_claim().unwrap().next_step(),
        UpsertStep::RetireBase { require_idle: true }
    );
    let not_yet = |phase: ClaimPhase| WeightError::Conflict {
        what: "claim",
        id: "r1".into(),
        reason: format!(
            "DELETE_FIRST imports the target only in phase BaseDeleted, the claim is {phase:?}"
        ),
    };
    assert_eq!(s.admit_import(2, Some("r1")), Err(not_yet(P::Claimed)));
    assert_eq!(
        decide(&s, advance("r1", P::TargetReady)).unwrap_err(),
        WeightError::Conflict {
            what: "claim",
            id: "r1".into(),
            reason: "DELETE_FIRST goes from Claimed to Some(BaseRetired), not to TargetReady"
                .into()
        }
    );
    s = then(
        &s,
        advance("r1", P::BaseRetired),
        vec![advanced("r1", P::BaseRetired)],
    );
    assert_eq!(
        s.active_claim().unwrap().next_step(),
        UpsertStep::DeleteBase
    );
    assert_eq!(s.admit_import(2, Some("r1")), Err(not_yet(P::BaseRetired)));
    s = then(
        &s,
        advance("r1", P::BaseDeleted),
        vec![advanced("r1", P::BaseDeleted)],
    );
    assert_eq!(
        s.active_claim().unwrap().next_step(),
        UpsertStep::ImportTarget
    );
    assert_eq!(s.admit_import(2, Some("r1")), Ok(()));
    s = then(
        &s,
        advance("r1", P::TargetReady),
        vec![advanced("r1", P::TargetReady)],
    );
    assert_eq!(
        s.active_claim().unwrap().next_step(),
        UpsertStep::CommitWatermark
    );
    s = then(
        &s,
        advance("r1", P::Committed),
        vec![advanced("r1", P::Committed)],
    );
    assert_eq!(s.watermark(), Some(2));
}

#[test]
fn failure_is_allowed_only_before_destructive_steps() {
    let fail = |rid: &str| LineageClaimCommand::FailClaim {
        request_id: rid.into(),
        reason: "target upload failed".into(),
    };
    for mode in [UpsertMode::PutFirst, UpsertMode::DeleteFirst] {
        let s = given(vec![claim_started("r1", 1, 2, mode, 1)]);
        let s = then(
            &s,
            fail("r1"),
            vec![LineageClaimEvent::ClaimFailed(ClaimFailed {
                request_id: "r1".into(),
                reason: "target upload failed".into(),
                at_ms: NOW,
            })],
        );
        assert!(s.active_claim().is_none());
        assert_eq!(s.claim("r1").unwrap().phase, ClaimPhase::Failed);
        assert_eq!(
            s.watermark(),
            None,
            "a failed claim leaves the lineage as it was"
        );
    }
    let put_first = given(vec![
        claim_started("r1", 1, 2, UpsertMode::PutFirst, 1),
        advanced("r1", ClaimPhase::TargetReady),
    ]);
    assert_eq!(
        decide(&put_first, fail("r1")),
        Err(WeightError::Conflict {
            what: "claim",
            id: "r1".into(),
            reason: "PUT_FIRST in phase TargetReady cannot fail any more; resume it".into()
        })
    );
    let delete_first = given(vec![
        claim_started("r1", 1, 2, UpsertMode::DeleteFirst, 1),
        advanced("r1", ClaimPhase::BaseRetired),
    ]);
    assert_eq!(
        decide(&delete_first, fail("r1")).unwrap_err().code(),
        crescent_actors::ErrorCode::Conflict
    );
    assert_eq!(
        decide(&LineageClaim::default(), fail("r1")),
        Err(WeightError::NotFound {
            what: "active claim",
            id: "r1".into()
        })
    );
    let long = given(vec![claim_started("r1", 1, 2, UpsertMode::PutFirst, 1)]);
    let events = decide(
        &long,
        LineageClaimCommand::FailClaim {
            request_id: "r1".into(),
            reason: "é".repeat(MAX_ERROR_BYTES),
        },
    )
    .unwrap();
    let LineageClaimEvent::ClaimFailed(e) = &events[0] else {
        unreachable!()
    };
    assert_eq!(e.reason.len(), MAX_ERROR_BYTES);
}

#[test]
fn a_failed_request_retried_with_the_same_arguments_starts_a_new_attempt() {
    let s = given(vec![
        claim_started("r1", 1, 2, UpsertMode::PutFirst, 1),
        LineageClaimEvent::ClaimFailed(ClaimFailed {
            request_id: "r1".into(),
            reason: "x".into(),
            at_ms: NOW,
        }),
    ]);
    then(
        &s,
        begin(Some("r1"), 1, 2, UpsertMode::PutFirst),
        vec![claim_started("r1", 1, 2, UpsertMode::PutFirst, 2)],
    );
    assert_eq!(
        decide(&s, begin(Some("r1"), 1, 3, UpsertMode::PutFirst))
            .unwrap_err()
            .code(),
        crescent_actors::ErrorCode::Conflict
    );
}

#[test]
fn one_non_terminal_claim_per_lineage() {
    let s = given(vec![claim_started("r1", 1, 2, UpsertMode::PutFirst, 1)]);
    // The same request resumes; the same id with other arguments conflicts; others are busy.
    then(&s, begin(Some("r1"), 1, 2, UpsertMode::PutFirst), vec![]);
    assert_eq!(
        decide(&s, begin(Some("r1"), 1, 2, UpsertMode::DeleteFirst)),
        Err(WeightError::Conflict {
            what: "claim",
            id: "r1".into(),
            reason: "request id explicitly reused with different arguments".into()
        })
    );
    assert_eq!(
        decide(&s, begin(Some("r2"), 1, 3, UpsertMode::PutFirst)),
        Err(busy_by("r1", 2, ClaimPhase::Claimed))
    );
    assert_eq!(
        decide(&s, begin(None, 1, 2, UpsertMode::PutFirst)),
        Err(busy_by("r1", 2, ClaimPhase::Claimed))
    );
    // Ordinary imports into the lineage wait too.
    assert_eq!(
        s.admit_import(3, None),
        Err(busy_by("r1", 2, ClaimPhase::Claimed))
    );
    assert_eq!(
        s.admit_import(2, Some("r2")),
        Err(busy_by("r1", 2, ClaimPhase::Claimed))
    );
    assert_eq!(
        decide(&s, advance("r2", ClaimPhase::TargetReady))
            .unwrap_err()
            .code(),
        crescent_actors::ErrorCode::Conflict
    );
}

#[test]
fn targets_must_be_above_base_and_watermark() {
    assert_eq!(
        decide(
            &LineageClaim::default(),
            begin(None, 2, 2, UpsertMode::PutFirst)
        ),
        Err(WeightError::invalid(
            "target",
            "generation 2 is not above the base generation 2"
        ))
    );
    let other = LineageClaimCommand::BeginClaim {
        request_id: None,
        base: gen(1),
        target: RevisionIdentity::new("llm", "llama", "other", 2),
        mode: UpsertMode::PutFirst,
        expected_base_metadata_generation: 1,
        policy: None,
    };
    assert_eq!(
        decide(&LineageClaim::default(), other).unwrap_err().code(),
        crescent_actors::ErrorCode::InvalidArgument
    );
    let committed = given(vec![
        claim_started("r1", 1, 5, UpsertMode::PutFirst, 1),
        advanced("r1", ClaimPhase::TargetReady),
        advanced("r1", ClaimPhase::BaseRetired),
        advanced("r1", ClaimPhase::BaseDrained),
        advanced("r1", ClaimPhase::BaseDeleted),
        advanced("r1", ClaimPhase::Committed),
    ]);
    assert_eq!(
        decide(&committed, begin(Some("r2"), 3, 4, UpsertMode::PutFirst)),
        Err(WeightError::StaleGeneration {
            what: "lineage watermark",
            expected: 4,
            current: 5
        })
    );
    assert_eq!(
        committed.admit_import(5, None).unwrap_err().code(),
        crescent_actors::ErrorCode::StaleGeneration
    );
    assert_eq!(committed.admit_import(6, None), Ok(()));
    then(
        &committed,
        begin(Some("r2"), 5, 6, UpsertMode::PutFirst),
        vec![claim_started("r2", 5, 6, UpsertMode::PutFirst, 1)],
    );
}

#[test]
fn the_watermark_is_an_ordering_fence_not_a_serving_head() {
    // The watermark only ever rises, and only by committed claims; it names no revision to
    // serve (the committed target may itself be removed later without moving it).
    let s = given(vec![
        claim_started("r1", 1, 3, UpsertMode::PutFirst, 1),
        advanced("r1", ClaimPhase::TargetReady),
        advanced("r1", ClaimPhase::BaseRetired),
        advanced("r1", ClaimPhase::BaseDrained),
        advanced("r1", ClaimPhase::BaseDeleted),
        advanced("r1", ClaimPhase::Committed),
    ]);
    assert_eq!(s.watermark(), Some(3));
    let failed = then(
        &s,
        begin(Some("r2"), 3, 4, UpsertMode::PutFirst),
        vec![claim_started("r2", 3, 4, UpsertMode::PutFirst, 1)],
    );
    let failed = then(
        &failed,
        LineageClaimCommand::FailClaim {
            request_id: "r2".into(),
            reason: "x".into(),
        },
        vec![LineageClaimEvent::ClaimFailed(ClaimFailed {
            request_id: "r2".into(),
            reason: "x".into(),
            at_ms: NOW,
        })],
    );
    assert_eq!(failed.watermark(), Some(3));
}

#[test]
fn request_ids_are_derived_deterministically() {
    let derived = crate::derive_request_id(&gen(1), &gen(2), UpsertMode::PutFirst, 4);
    assert!(
        derived.starts_with("req-") && derived.len() == 68,
        "{derived}"
    );
    assert_eq!(
        derived,
        crate::derive_request_id(&gen(1), &gen(2), UpsertMode::PutFirst, 4)
    );
    assert_ne!(
        derived,
        crate::derive_request_id(&gen(1), &gen(2), UpsertMode::DeleteFirst, 4)
    );
    assert_ne!(
        derived,
        crate::derive_request_id(&gen(1), &gen(2), UpsertMode::PutFirst, 5)
    );
    assert_ne!(
        derived,
        crate::derive_request_id(&gen(1), &gen(3), UpsertMode::PutFirst, 4)
    );
    let s = then(
        &LineageClaim::default(),
        begin(None, 1, 2, UpsertMode::PutFirst),
        vec![claim_started(&derived, 1, 2, UpsertMode::PutFirst, 1)],
    );
    // Retrying after a lost response derives the same id: the existing claim.
    then(&s, begin(None, 1, 2, UpsertMode::PutFirst), vec![]);
    assert_eq!(
        decide(
            &LineageClaim::default(),
            begin(Some(""), 1, 2, UpsertMode::PutFirst)
        ),
        Err(WeightError::invalid("request_id", "must not be empty"))
    );
}

#[test]
fn finished_claims_are_bounded() {
    let mut events = Vec::new();
    for g in 1..=(MAX_FINISHED_CLAIMS as u64 + 2) {
        let rid = format!("r{g}");
        events.push(claim_started(&rid, g, g + 1, UpsertMode::PutFirst, 1));
        events.push(LineageClaimEvent::ClaimFailed(ClaimFailed {
            request_id: rid,
            reason: "x".into(),
            at_ms: NOW,
        }));
    }
    let s = given(events);
    assert!(s.claim("r1").is_none());
    assert!(s.claim(&format!("r{}", MAX_FINISHED_CLAIMS + 2)).is_some());
}

/// The journal form is pinned: journals of earlier builds must replay (docs/architecture.md,
/// "Aggregates"), and the schema is what the HA handshake compares (docs/ha.md, "Event versions
/// in a mixed pair").
#[test]
fn the_schema_and_the_journal_form_of_every_kind_are_pinned() {
    assert_eq!(
        LineageClaimEvent::schema(),
        &[
            ("claim_started", 1),
            ("claim_advanced", 1),
            ("claim_failed", 1),
        ]
    );
    crescent_actors::testing::assert_journal_form(
        &one_of_each_kind(),
        &[
            ("claim_started", 1, "98a2723195a764656661756c74a36c6c6da56c6c616d61a46d61696e0195a764656661756c74a36c6c6da56c6c616d61a46d61696e02ac44454c4554455f464952535404c003cf0000018bcfe56800"),
            ("claim_advanced", 1, "93a27231ac424153455f44454c45544544cf0000018bcfe56800"),
            ("claim_failed", 1, "93a27231a17805"),
        ],
    );
}

#[test]
fn events_round_trip_and_bad_payloads_are_refused() {
    for e in one_of_each_kind() {
        assert!(LineageClaimEvent::schema().contains(&(e.kind(), e.version())));
        assert_eq!(
            LineageClaimEvent::decode(e.kind(), e.version(), &e.encode()),
            Ok(e)
        );
    }
    let payload = advanced("r1", ClaimPhase::Claimed).encode();
    assert_eq!(
        LineageClaimEvent::decode("claim_exploded", 1, &payload),
        Err(DecodeError::UnknownKind {
            aggregate: "lineage_claim",
            kind: "claim_exploded".into()
        })
    );
    assert!(matches!(
        LineageClaimEvent::decode("claim_advanced", 2, &payload),
        Err(DecodeError::UnsupportedVersion { .. })
    ));
    assert!(matches!(
        LineageClaimEvent::decode("claim_started", 1, &payload),
        Err(DecodeError::Malformed { .. })
    ));
}
