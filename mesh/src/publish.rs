//! How a cluster's leader puts itself in the membership record (docs/scale-out.md, "Joining a
//! mesh"): pure, one step per call, so the caller compare-and-sets each step and re-plans from
//! a fresh read when another update landed first.

use crate::membership::{ClusterEntry, ClusterState, Membership};

/// What the leader of a cluster publishes about itself.
#[derive(Debug, Clone, PartialEq)]
pub struct SelfEntry {
    pub name: String,
    /// Where its leader serves (`ha.advertise`, with the scheme under TLS).
    pub leader: String,
    pub weight: f64,
}

/// The next record on the way to `me` serving with its current leader and weight, or `None`
/// when the record already says so (or `me` is draining with its leader and weight current:
/// a drain is the operator's, never undone by a restart).
///
/// - no record: a new mesh whose only cluster `me` serves at once (generation 1);
/// - `me` absent: listed as `joining` (owns nothing yet);
/// - `me` joining: `serving`, the next generation (the hand-over that keys moved to it need
///   is described in docs/scale-out.md, "Join and drain");
/// - `me` leaving (drained, not yet removed): removed, then it joins again;
/// - `me` serving or draining: its leader address and weight brought up to date.
pub fn next_publish(
    current: Option<&Membership>,
    mesh: &str,
    me: &SelfEntry,
) -> Option<Membership> {
    let entry = |state| ClusterEntry {
        name: me.name.clone(),
        leader: Some(me.leader.clone()),
        weight: me.weight,
        state,
    };
    let Some(current) = current else {
        return Some(Membership::new(mesh, vec![entry(ClusterState::Serving)]));
    };
    let mut next = current.clone();
    next.generation = current.generation + 1;
    let at = current.clusters.iter().position(|c| c.name == me.name);
    match at.map(|i| (i, current.clusters[i].state)) {
        None => next.clusters.push(entry(ClusterState::Joining)),
        Some((i, ClusterState::Joining)) => next.clusters[i] = entry(ClusterState::Serving),
        Some((i, ClusterState::Leaving)) => {
            next.clusters.remove(i);
        }
        Some((i, state)) => {
            let held = &current.clusters[i];
            if held.leader.as_deref() == Some(me.leader.as_str()) && held.weight == me.weight {
                return None;
            }
            next.clusters[i] = entry(state);
        }
    }
    Some(next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply_update;

    fn me(leader: &str, weight: f64) -> SelfEntry {
        SelfEntry {
            name: "b".into(),
            leader: leader.into(),
            weight,
        }
    }

    fn other(state: ClusterState) -> ClusterEntry {
        ClusterEntry {
            name: "a".into(),
            leader: Some("10.0.0.1:7480".into()),
            weight: 1.0,
            state,
        }
    }

    /// Applies steps until none is left, checking each against the update rule.
    fn settle(mut m: Option<Membership>, who: &SelfEntry) -> (Membership, usize) {
        let mut steps = 0;
        while let Some(next) = next_publish(m.as_ref(), "m", who) {
            m = Some(apply_update(m.as_ref(), next).expect("a legal step"));
            steps += 1;
            assert!(steps < 5, "does not settle");
        }
        (m.unwrap(), steps)
    }

    #[test]
    fn a_first_cluster_serves_at_once() {
        let (m, steps) = settle(None, &me("h:1", 2.0));
        assert_eq!((m.generation, steps), (1, 1));
        assert_eq!(m.clusters[0].state, ClusterState::Serving);
        assert_eq!(m.clusters[0].weight, 2.0);
    }

    #[test]
    fn a_new_cluster_joins_then_serves() {
        let start = Membership::new("m", vec![other(ClusterState::Serving)]);
        let first = next_publish(Some(&start), "m", &me("h:1", 1.0)).unwrap();
        assert_eq!(first.cluster("b").unwrap().state, ClusterState::Joining);
        let (m, steps) = settle(Some(start), &me("h:1", 1.0));
        assert_eq!((m.generation, steps), (3, 2));
        assert_eq!(m.cluster("b").unwrap().state, ClusterState::Serving);
    }

    #[test]
    fn a_new_leader_or_weight_is_published_and_a_drain_kept() {
        let (m, _) = settle(None, &me("h:1", 1.0));
        assert!(next_publish(Some(&m), "m", &me("h:1", 1.0)).is_none());
        let (moved, steps) = settle(Some(m.clone()), &me("h:2", 3.0));
        assert_eq!(steps, 1);
        let b = moved.cluster("b").unwrap();
        assert_eq!((b.leader.as_deref(), b.weight), (Some("h:2"), 3.0));
        let mut draining = moved.clone();
        draining.clusters.insert(0, other(ClusterState::Serving));
        draining.clusters[1].state = ClusterState::Draining;
        let (kept, _) = settle(Some(draining), &me("h:3", 3.0));
        assert_eq!(kept.cluster("b").unwrap().state, ClusterState::Draining);
        assert_eq!(kept.cluster("b").unwrap().leader.as_deref(), Some("h:3"));
    }

    #[test]
    fn a_drained_cluster_is_removed_then_joins_again() {
        let mut m = Membership::new("m", vec![other(ClusterState::Serving)]);
        m.clusters.push(ClusterEntry {
            state: ClusterState::Leaving,
            ..other(ClusterState::Leaving)
        });
        m.clusters[1].name = "b".into();
        let (m, steps) = settle(Some(m), &me("h:1", 1.0));
        assert_eq!(steps, 3);
        assert_eq!(m.cluster("b").unwrap().state, ClusterState::Serving);
    }
}
