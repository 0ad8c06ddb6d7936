//! Given/when/then tests of lost payloads correcting the residency: a HOT revision whose
//! memory replicas did not survive a restart (and had no cold copy) becomes DEGRADED with the
//! residency of what remains, and refuses reads with NOT_READY.

use crescent_actors::DomainEvent;

use super::tests::*;
use super::*;

fn lost(lost_members: u64, hot_bytes: Option<u64>) -> WeightRevisionCommand {
    WeightRevisionCommand::ReportMembersLost {
        lost_members,
        hot_bytes,
    }
}

fn members_lost(lost_members: u64, hot_bytes: Option<u64>, generation: u64) -> WeightRevisionEvent {
    WeightRevisionEvent::MembersLost(MembersLost {
        lost_members,
        metadata_generation: generation,
        at_ms: NOW,
        hot_bytes,
    })
}

fn with_events(
    mut base: Vec<WeightRevisionEvent>,
    more: Vec<WeightRevisionEvent>,
) -> Vec<WeightRevisionEvent> {
    base.extend(more);
    base
}

/// Decides `cmd` on `state` and applies the events (the command must succeed).
fn run(mut state: WeightRevision, cmd: WeightRevisionCommand) -> WeightRevision {
    let events = state
        .decide(&cmd, &crescent_actors::Ctx::at(NOW))
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    for e in &events {
        state.apply(e);
    }
    state
}

#[test]
fn every_payload_lost_is_degraded_and_absent_and_refuses_leases() {
    // Given a READY + HOT revision of 5 payloads (600 bytes), when all 5 are reported lost
    // with no memory bytes left,
    let s = given::<WeightRevision>(ready_hot())
        .when(lost(5, Some(0)))
        .then(vec![members_lost(5, Some(0), 3)]);
    // then it is DEGRADED + ABSENT at the next metadata generation,
    let view = s.view(NOW).unwrap();
    assert_eq!(
        (view.availability, view.residency, view.metadata_generation),
        (Availability::Degraded, Residency::Absent, 3)
    );
    assert_eq!(view.observed_hot_ratio, 0.0);
    assert!(!s.is_exist());
    // and a read's lease is refused with NOT_READY (never a partial read).
    let degraded = with_events(ready_hot(), vec![members_lost(5, Some(0), 3)]);
    given::<WeightRevision>(degraded.clone())
        .when(acquire(5_000))
        .then_code("NOT_READY");
    // The same report again (a second restart) changes nothing.
    given::<WeightRevision>(degraded)
        .when(lost(5, Some(0)))
        .then(vec![]);
}

#[test]
fn some_payloads_lost_keep_the_residency_of_what_remains() {
    // Two payloads (200 bytes) lost, the other three still hold 400 memory bytes: MIXED.
    let s = given::<WeightRevision>(ready_hot())
        .when(lost(2, Some(400)))
        .then(vec![members_lost(2, Some(400), 3)]);
    let rec = s.record().unwrap();
    assert_eq!(
        (rec.availability, rec.residency, rec.hot_bytes),
        (Availability::Degraded, Residency::Mixed, 400)
    );
    // Lost payloads whose survivors are cold-only: COLD, not ABSENT.
    let s = given::<WeightRevision>(ready_hot())
        .when(lost(2, Some(0)))
        .then(vec![members_lost(2, Some(0), 3)]);
    assert_eq!(s.record().unwrap().residency, Residency::Cold);
    // A later report with other survivors corrects it again.
    given::<WeightRevision>(with_events(
        ready_hot(),
        vec![members_lost(2, Some(400), 3)],
    ))
    .when(lost(5, Some(0)))
    .then(vec![members_lost(5, Some(0), 4)]);
}

#[test]
fn a_report_without_observation_leaves_the_residency() {
    let s = given::<WeightRevision>(ready_hot())
        .when(lost(5, None))
        .then(vec![members_lost(5, None, 3)]);
    assert_eq!(s.record().unwrap().residency, Residency::Hot);
}

#[test]
fn impossible_reports_are_refused() {
    given::<WeightRevision>(ready_hot())
        .when(lost(2, Some(601)))
        .then_code("INVALID_ARGUMENT");
    given::<WeightRevision>(ready_hot())
        .when(lost(6, Some(0)))
        .then_code("INVALID_ARGUMENT");
    given::<WeightRevision>(vec![begun(hot_policy())])
        .when(lost(1, Some(0)))
        .then_code("NOT_READY");
}

#[test]
fn a_repair_of_an_absent_revision_restores_ready_and_its_residency() {
    let degraded =
        given::<WeightRevision>(with_events(ready_hot(), vec![members_lost(5, Some(0), 3)]))
            .into_state();
    let s = run(
        degraded,
        WeightRevisionCommand::StartRepair {
            expected_metadata_generation: 3,
        },
    );
    let op = s.active_operation().unwrap().operation_id.clone();
    let s = run(
        s,
        WeightRevisionCommand::CompleteRepair {
            operation_id: op,
            hot_bytes: 600,
        },
    );
    let rec = s.record().unwrap();
    assert_eq!(
        (rec.availability, rec.residency, rec.hot_bytes),
        (Availability::Ready, Residency::Hot, 600)
    );
}

#[test]
fn members_lost_written_before_the_residency_correction_still_decode() {
    // v1 as first written: [lost_members, metadata_generation, at_ms].
    let old = rmp_serde::to_vec(&(2u64, 3u64, NOW)).unwrap();
    let decoded = WeightRevisionEvent::decode("members_lost", 1, &old).unwrap();
    assert_eq!(decoded, members_lost(2, None, 3));
    let new = members_lost(5, Some(0), 3);
    let round = WeightRevisionEvent::decode(new.kind(), new.version(), &new.encode()).unwrap();
    assert_eq!(round, new);
}
