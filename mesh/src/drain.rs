//! Draining a cluster out of the mesh (docs/scale-out.md, "Draining a cluster"): the two
//! membership steps `crescent mesh drain` compare-and-sets, and where a key's object is while
//! it moves. Pure, like [`crate::apply_update`], which checks every step again.

use crate::error::MeshError;
use crate::membership::{ClusterState, Membership};
use crate::route::{RouteKey, RouteTable};

/// The record with `cluster` draining: the next generation, or `None` when it drains already
/// (a drain run again after a crash resumes there). Refused with `UNKNOWN_CLUSTER` when the
/// record does not list it, `ILLEGAL_TRANSITION` when it is joining or leaving, and
/// `LAST_SERVING_CLUSTER` when it is the only serving cluster.
pub fn drain_step(current: &Membership, cluster: &str) -> Result<Option<Membership>, MeshError> {
    match state_of(current, cluster)? {
        ClusterState::Draining => Ok(None),
        ClusterState::Serving => next_with(current, cluster, ClusterState::Draining).map(Some),
        from => Err(MeshError::IllegalTransition {
            cluster: cluster.to_string(),
            from: Some(from),
            to: Some(ClusterState::Draining),
        }),
    }
}

/// The record with the drained `cluster` leaving, or `None` when it is leaving already. Only
/// a draining cluster may go there (the caller has checked that it holds no object).
pub fn drained_step(current: &Membership, cluster: &str) -> Result<Option<Membership>, MeshError> {
    match state_of(current, cluster)? {
        ClusterState::Leaving => Ok(None),
        ClusterState::Draining => next_with(current, cluster, ClusterState::Leaving).map(Some),
        from => Err(MeshError::IllegalTransition {
            cluster: cluster.to_string(),
            from: Some(from),
            to: Some(ClusterState::Leaving),
        }),
    }
}

/// The record with a draining `cluster` serving again (a drain cancelled), or `None` when it
/// serves already. Objects the drain moved stay at their authorities: `cluster` finds them as
/// a join does, through the runner-up, until a rebalance brings them back.
pub fn cancel_drain_step(
    current: &Membership,
    cluster: &str,
) -> Result<Option<Membership>, MeshError> {
    match state_of(current, cluster)? {
        ClusterState::Serving => Ok(None),
        ClusterState::Draining => next_with(current, cluster, ClusterState::Serving).map(Some),
        from => Err(MeshError::IllegalTransition {
            cluster: cluster.to_string(),
            from: Some(from),
            to: Some(ClusterState::Serving),
        }),
    }
}

fn state_of(m: &Membership, cluster: &str) -> Result<ClusterState, MeshError> {
    m.cluster(cluster)
        .map(|c| c.state)
        .ok_or_else(|| MeshError::UnknownCluster {
            cluster: cluster.to_string(),
            generation: m.generation,
        })
}

/// `current` with `cluster` in `state`, one generation on, checked by [`crate::apply_update`].
fn next_with(
    current: &Membership,
    cluster: &str,
    state: ClusterState,
) -> Result<Membership, MeshError> {
    let mut next = current.clone();
    next.generation = current.generation + 1;
    for c in &mut next.clusters {
        if c.name == cluster {
            c.state = state;
        }
    }
    crate::apply_update(Some(current), next)
}

/// The cluster that held `key` before the newest membership change: the best of the serving
/// and draining clusters but `key`'s authority in `table` (the table of `membership`).
/// Rendezvous without the winner elects the runner-up, so after a join it is the authority
/// from before the join, and a draining cluster is the runner-up of every key it won while it
/// served (docs/scale-out.md, "Reads after a membership change"). `None` when there is no
/// such cluster.
pub fn previous_authority(
    membership: &Membership,
    table: &RouteTable,
    key: RouteKey,
) -> Option<String> {
    let authority = table.route(key).ok()?;
    let mut before = membership.clone();
    before
        .clusters
        .retain(|c| c.name != authority && c.state.holds_objects());
    for c in &mut before.clusters {
        c.state = ClusterState::Serving;
    }
    RouteTable::new(&before).route(key).ok().map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::membership::ClusterEntry;

    fn record(states: &[(&str, ClusterState)]) -> Membership {
        let clusters = states
            .iter()
            .map(|(name, state)| ClusterEntry {
                name: name.to_string(),
                leader: Some(format!("{name}:7480")),
                weight: 1.0,
                state: *state,
            })
            .collect();
        Membership {
            generation: 4,
            ..Membership::new("m", clusters)
        }
    }

    #[test]
    fn a_serving_cluster_drains_then_leaves_and_each_step_is_idempotent() {
        use ClusterState::*;
        let m = record(&[("a", Serving), ("b", Serving)]);
        let draining = drain_step(&m, "b").unwrap().expect("a step");
        assert_eq!(draining.generation, 5);
        assert_eq!(draining.cluster("b").unwrap().state, Draining);
        assert_eq!(draining.cluster("a").unwrap().state, Serving);
        assert_eq!(drain_step(&draining, "b").unwrap(), None);
        let leaving = drained_step(&draining, "b").unwrap().expect("a step");
        assert_eq!(
            (leaving.generation, leaving.cluster("b").unwrap().state),
            (6, Leaving)
        );
        assert_eq!(drained_step(&leaving, "b").unwrap(), None);
    }

    #[test]
    fn a_draining_cluster_serves_again_once_and_a_leaving_one_never() {
        use ClusterState::*;
        let m = record(&[("a", Serving), ("b", Draining), ("c", Leaving)]);
        let back = cancel_drain_step(&m, "b").unwrap().expect("a step");
        assert_eq!(
            (back.generation, back.cluster("b").unwrap().state),
            (5, Serving)
        );
        assert_eq!(cancel_drain_step(&back, "b").unwrap(), None);
        let code = |r: Result<Option<Membership>, MeshError>| r.unwrap_err().code();
        assert_eq!(code(cancel_drain_step(&m, "c")), "ILLEGAL_TRANSITION");
        assert_eq!(code(cancel_drain_step(&m, "x")), "UNKNOWN_CLUSTER");
    }

    #[test]
    fn refusals_carry_their_codes() {
        use ClusterState::*;
        let m = record(&[("a", Serving), ("b", Leaving), ("c", Joining)]);
        let code = |r: Result<Option<Membership>, MeshError>| r.unwrap_err().code();
        assert_eq!(code(drain_step(&m, "x")), "UNKNOWN_CLUSTER");
        assert_eq!(code(drain_step(&m, "b")), "ILLEGAL_TRANSITION");
        assert_eq!(code(drain_step(&m, "c")), "ILLEGAL_TRANSITION");
        assert_eq!(code(drain_step(&m, "a")), "LAST_SERVING_CLUSTER");
        assert_eq!(code(drained_step(&m, "a")), "ILLEGAL_TRANSITION");
    }

    #[test]
    fn a_draining_cluster_is_the_previous_authority_of_the_keys_it_won() {
        use ClusterState::*;
        let serving = record(&[("a", Serving), ("b", Serving), ("c", Serving)]);
        let draining = record(&[("a", Serving), ("b", Draining), ("c", Serving)]);
        let (before, after) = (RouteTable::new(&serving), RouteTable::new(&draining));
        let mut won = 0;
        for i in 0..3_000u64 {
            let key = RouteKey::object("t", None, format!("k{i}").as_bytes());
            let was = before.route(key).unwrap();
            let now = after.route(key).unwrap();
            assert_ne!(now, "b", "a draining cluster is no authority");
            if was == "b" {
                won += 1;
                assert_eq!(
                    previous_authority(&draining, &after, key).as_deref(),
                    Some("b")
                );
            } else {
                assert_eq!(was, now, "only the drained keys move");
            }
        }
        assert!(won > 500, "b won {won} of 3,000 keys");
    }
}
