//! Properties of weighted rendezvous routing: determinism, candidates, minimal movement on a
//! join or leave, proportionality to weight, and the pinned route format.

use crescent_mesh::{
    ClusterEntry, ClusterState, Lineage, Membership, MeshError, RouteKey, RouteTable,
};
use proptest::prelude::*;

fn entry(name: &str, weight: f64, state: ClusterState) -> ClusterEntry {
    ClusterEntry {
        name: name.to_string(),
        leader: None,
        weight,
        state,
    }
}

fn serving(weights: &[f64]) -> Membership {
    let clusters = weights
        .iter()
        .enumerate()
        .map(|(i, w)| entry(&format!("cluster-{i}"), *w, ClusterState::Serving))
        .collect();
    Membership::new("sim", clusters)
}

fn object_key(i: u64) -> RouteKey {
    RouteKey::object("tenant", None, format!("key-{i}").as_bytes())
}

/// Allowed distance of an observed share from `p` over `n` keys: six standard deviations
/// (a false failure about once in 10^9 per check) plus a little for the hash.
fn tolerance(p: f64, n: usize) -> f64 {
    6.0 * (p * (1.0 - p) / n as f64).sqrt() + 0.002
}

fn state() -> impl Strategy<Value = ClusterState> {
    prop_oneof![
        Just(ClusterState::Joining),
        Just(ClusterState::Serving),
        Just(ClusterState::Draining),
        Just(ClusterState::Leaving),
    ]
}

fn membership() -> impl Strategy<Value = Membership> {
    prop::collection::vec((0.01f64..100.0, state()), 0..12).prop_map(|cs| {
        let clusters = cs
            .into_iter()
            .enumerate()
            .map(|(i, (w, s))| entry(&format!("c{i}"), w, s))
            .collect();
        Membership::new("m", clusters)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn routing_is_deterministic_and_only_serving_clusters_win(
        m in membership(),
        keys in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..64), 1..200),
    ) {
        let table = RouteTable::new(&m);
        let mut reversed = m.clone();
        reversed.clusters.reverse();
        let again = RouteTable::new(&reversed);
        let serving = m.clusters.iter().filter(|c| c.state == ClusterState::Serving).count();
        prop_assert_eq!(table.len(), serving);
        for key in &keys {
            let k = RouteKey::object("t", Some("d"), key);
            let got = table.route(k);
            prop_assert_eq!(&got, &again.route(k));
            prop_assert_eq!(&got, &table.route_exhaustive(k));
            match got {
                Ok(name) => prop_assert_eq!(
                    m.cluster(name).map(|c| c.state),
                    Some(ClusterState::Serving)
                ),
                Err(e) => {
                    prop_assert_eq!(serving, 0);
                    prop_assert_eq!(e, MeshError::NoServingCluster { generation: 1 });
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    /// A join moves only keys the newcomer now wins, about `w_new / (W + w_new)` of them.
    #[test]
    fn a_join_moves_only_the_newcomers_share(
        weights in prop::collection::vec(0.5f64..8.0, 2..16),
        new_weight in 0.5f64..8.0,
    ) {
        const KEYS: u64 = 20_000;
        let before = RouteTable::new(&serving(&weights));
        let mut grown = serving(&weights);
        grown.clusters.push(entry("newcomer", new_weight, ClusterState::Serving));
        let after = RouteTable::new(&grown);
        let mut moved = 0usize;
        for i in 0..KEYS {
            let (a, b) = (before.route(object_key(i))?, after.route(object_key(i))?);
            if a != b {
                prop_assert_eq!(b, "newcomer");
                moved += 1;
            }
        }
        let p = new_weight / (weights.iter().sum::<f64>() + new_weight);
        let share = moved as f64 / KEYS as f64;
        prop_assert!((share - p).abs() <= tolerance(p, KEYS as usize),
            "moved {share:.4}, ideal {p:.4}");
    }

    /// A cluster that stops serving gives up exactly its own keys; nobody else's move.
    #[test]
    fn a_leave_moves_only_the_leavers_keys(
        weights in prop::collection::vec(0.5f64..8.0, 2..16),
        leaver in any::<prop::sample::Index>(),
    ) {
        const KEYS: u64 = 20_000;
        let full = serving(&weights);
        let leaver = leaver.index(weights.len());
        let mut draining = full.clone();
        draining.clusters[leaver].state = ClusterState::Draining;
        let (before, after) = (RouteTable::new(&full), RouteTable::new(&draining));
        let leaver = full.clusters[leaver].name.as_str();
        let mut moved = 0usize;
        for i in 0..KEYS {
            let (a, b) = (before.route(object_key(i))?, after.route(object_key(i))?);
            prop_assert_ne!(b, leaver);
            if a != b {
                prop_assert_eq!(a, leaver);
                moved += 1;
            }
        }
        let p = full.cluster(leaver).unwrap().weight / weights.iter().sum::<f64>();
        let share = moved as f64 / KEYS as f64;
        prop_assert!((share - p).abs() <= tolerance(p, KEYS as usize),
            "moved {share:.4}, ideal {p:.4}");
    }

    /// Each serving cluster wins its weight's share of many keys.
    #[test]
    fn shares_follow_weights(weights in prop::collection::vec(0.25f64..16.0, 2..12)) {
        const KEYS: usize = 50_000;
        let table = RouteTable::new(&serving(&weights));
        let mut won = vec![0usize; weights.len()];
        for i in 0..KEYS as u64 {
            won[table.route_index(object_key(i))?] += 1;
        }
        let total: f64 = weights.iter().sum();
        for (i, n) in won.iter().enumerate() {
            // route_index counts in name order, not in the order of `weights`.
            let w = table.weight(i);
            let p = w / total;
            let share = *n as f64 / KEYS as f64;
            prop_assert!((share - p).abs() <= tolerance(p, KEYS),
                "{}: won {share:.4}, weight share {p:.4}", table.name(i));
        }
    }
}

#[test]
fn route_kinds_and_components_never_share_a_hash() {
    let keys = [
        RouteKey::object("t", None, b"k"),
        RouteKey::object("t", Some("d"), b"k"),
        RouteKey::object("t", None, b"dk"),
        RouteKey::object("td", None, b"k"),
        RouteKey::quota_home("t"),
        RouteKey::revision(&Lineage {
            tenant: "t",
            namespace: "n",
            resource_id: "r",
            revision: "k",
        }),
        RouteKey::revision(&Lineage {
            tenant: "t",
            namespace: "nr",
            resource_id: "",
            revision: "k",
        }),
    ];
    for (i, a) in keys.iter().enumerate() {
        for b in &keys[i + 1..] {
            assert_ne!(a, b);
        }
    }
}

/// The route format is fixed: these authorities must never change for route format 1 (a
/// change would move keys between clusters of a mesh whose members run different releases).
/// Computed once by this implementation; xxh3 itself is pinned by the published test vectors
/// in the unit tests.
#[test]
fn the_route_format_is_pinned() {
    let m = Membership::new(
        "pinned",
        vec![
            entry("alpha", 1.0, ClusterState::Serving),
            entry("beta", 2.0, ClusterState::Serving),
            entry("gamma", 3.0, ClusterState::Serving),
            entry("delta", 4.0, ClusterState::Draining),
        ],
    );
    let table = RouteTable::new(&m);
    let lineage = Lineage {
        tenant: "acme",
        namespace: "llama",
        resource_id: "70b",
        revision: "main",
    };
    let hashes = [
        RouteKey::object("default", None, b"greeting").hash(),
        RouteKey::object("acme", Some("prod"), b"layer-0/kv").hash(),
        RouteKey::quota_home("acme").hash(),
        RouteKey::revision(&lineage).hash(),
    ];
    let routes: Vec<&str> = (0..16)
        .map(|i| table.route(object_key(i)).unwrap())
        .collect();
    let expected_hashes: [u64; 4] = [
        0xfbba_7b4b_45b9_fec4,
        0x7540_caa4_f91f_79b7,
        0xafc9_c3ab_41e7_b326,
        0xa001_6690_c1d3_1770,
    ];
    let expected_routes = [
        "beta", "beta", "alpha", "beta", "gamma", "gamma", "beta", "gamma", "gamma", "gamma",
        "beta", "beta", "beta", "gamma", "gamma", "beta",
    ];
    assert_eq!(hashes, expected_hashes, "{hashes:#x?}");
    assert_eq!(routes, expected_routes);
}
