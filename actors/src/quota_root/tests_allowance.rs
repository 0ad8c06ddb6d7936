//! Given/when/then tests of the allowances a tenant's home records for the other clusters of
//! a mesh (docs/tenants.md, "Quota across a mesh").

use super::tests::with_a;
use super::*;
use crate::testing::{given, Given};

fn record(cluster: &str, bytes: u64, objects: u64) -> QuotaCommand {
    QuotaCommand::RecordAllowance {
        cluster: cluster.into(),
        allowance: Allowance { bytes, objects },
    }
}

fn release(cluster: &str) -> QuotaCommand {
    QuotaCommand::ReleaseAllowance {
        cluster: cluster.into(),
    }
}

pub(super) fn recorded(cluster: &str, bytes: u64, objects: u64) -> QuotaEvent {
    QuotaEvent::AllowanceRecorded(AllowanceRecorded {
        cluster: cluster.into(),
        bytes,
        objects,
    })
}

pub(super) fn released(cluster: &str) -> QuotaEvent {
    QuotaEvent::AllowanceReleased(AllowanceReleased {
        cluster: cluster.into(),
    })
}

#[test]
fn an_allowance_is_recorded_only_when_it_changed() {
    let state = given::<QuotaRoot>(with_a())
        .when(record("east-2", 4000, 3))
        .then(vec![recorded("east-2", 4000, 3)]);
    assert_eq!(
        state.allowance("east-2"),
        Some(Allowance {
            bytes: 4000,
            objects: 3
        })
    );
    let state = Given::state(state)
        .when(record("east-2", 4000, 3))
        .then(vec![]);
    let state = Given::state(state)
        .when(record("east-2", 1000, 3))
        .then(vec![recorded("east-2", 1000, 3)]);
    assert_eq!(state.allowance("east-2").map(|a| a.bytes), Some(1000));
}

#[test]
fn allowances_of_several_clusters_add_up() {
    let mut events = with_a();
    events.extend([recorded("east-2", 4000, 3), recorded("east-3", 500, 1)]);
    let state = given::<QuotaRoot>(events)
        .when(record("east-3", 700, 2))
        .then(vec![recorded("east-3", 700, 2)]);
    assert_eq!(
        state.allowances_total(),
        Allowance {
            bytes: 4700,
            objects: 5
        }
    );
    let names: Vec<&String> = state.allowances().map(|(c, _)| c).collect();
    assert_eq!(names, ["east-2", "east-3"]);
}

#[test]
fn a_release_forgets_the_allowance_once() {
    let mut events = with_a();
    events.push(recorded("east-2", 4000, 3));
    let state = given::<QuotaRoot>(events)
        .when(release("east-2"))
        .then(vec![released("east-2")]);
    assert_eq!(state.allowance("east-2"), None);
    assert_eq!(state.allowances_total(), Allowance::default());
    Given::state(state).when(release("east-2")).then(vec![]);
}

#[test]
fn a_zero_allowance_is_a_record_too() {
    // A cluster that holds nothing is still heard from: the home knows it counted it.
    let state = given::<QuotaRoot>(vec![])
        .when(record("east-2", 0, 0))
        .then(vec![recorded("east-2", 0, 0)]);
    assert_eq!(state.allowance("east-2"), Some(Allowance::default()));
}

#[test]
fn bad_cluster_names_and_sizes_are_refused() {
    for name in ["", "a\nb"] {
        given::<QuotaRoot>(vec![])
            .when(record(name, 1, 1))
            .then_invalid("cluster");
    }
    given::<QuotaRoot>(vec![])
        .when(release(&"c".repeat(MAX_CLUSTER_NAME_BYTES + 1)))
        .then_invalid("cluster");
    given::<QuotaRoot>(vec![])
        .when(record("east-2", MAX_BYTES + 1, 0))
        .then_invalid("bytes");
}

#[test]
fn allowances_survive_a_snapshot() {
    let mut events = with_a();
    events.push(recorded("east-2", 4000, 3));
    let state = given::<QuotaRoot>(events)
        .when(record("east-3", 10, 1))
        .then(vec![recorded("east-3", 10, 1)]);
    let bytes = rmp_serde::to_vec_named(&state).unwrap();
    let back: QuotaRoot = rmp_serde::from_slice(&bytes).unwrap();
    assert_eq!(back, state);
}

trait ThenInvalid {
    fn then_invalid(self, field: &'static str);
}

impl ThenInvalid for crate::testing::When<QuotaRoot> {
    fn then_invalid(self, field: &'static str) {
        match self.refusal() {
            QuotaError::InvalidArgument { field: f, .. } => assert_eq!(f, field),
            other => panic!("expected an invalid {field}, got {other}"),
        }
    }
}
