//! The MIXED planner, migration rounds, AUTO order, identity encoding, policy resolution and
//! configuration validation.

use crescent_weights::planner::{
    migration_moves, next_round, order_auto_candidates, plan_mixed, plan_target,
    select_auto_candidates, AutoCandidate, MoveDirection, EXHAUSTIVE_UNITS,
};
use crescent_weights::{
    affinity_digest, payload_keys_sha256, resolve_policy, AffinityUnit, MigrationLimits,
    MigrationMode, PolicyOverride, PreferredResidency, ResidencyTarget, RevisionIdentity,
    WeightConfig, WeightError, WeightStoragePolicy,
};
use proptest::prelude::*;

fn units(bytes: &[u64]) -> Vec<AffinityUnit> {
    bytes
        .iter()
        .enumerate()
        .map(|(i, b)| AffinityUnit {
            unit_id: format!("unit-{i}"),
            member_keys: vec![format!("payload/{i}")],
            bytes: *b,
        })
        .collect()
}

fn distance(hot: u64, total: u64, ratio: f64) -> f64 {
    (hot as f64 - ratio * total as f64).abs()
}

#[test]
fn mixed_defaults_to_half_and_never_splits_a_unit() {
    let u = units(&[400, 300, 200, 100]);
    let plan = plan_mixed(&u, 0.5).unwrap();
    assert_eq!(plan.hot_bytes, 500);
    assert_eq!(plan.observed_hot_ratio, 0.5);
    // 400 + 100 and 300 + 200 tie; the set with the lower unit index wins.
    assert_eq!(plan.hot, vec![true, false, false, true]);
    let plan = plan_mixed(&u, 0.3).unwrap();
    assert_eq!(plan.hot_bytes, 300);
    // One unit only: the target cannot be met, the observed ratio says so.
    let plan = plan_mixed(&units(&[1_000]), 0.5).unwrap();
    assert!(plan.observed_hot_ratio == 0.0 || plan.observed_hot_ratio == 1.0);
    assert_eq!(
        plan_mixed(&u, 1.0),
        Err(WeightError::InvalidArgument {
            field: "mixed_hot_ratio",
            reason: "1 is not strictly between 0 and 1".into()
        })
    );
    assert!(plan_mixed(&u, f64::NAN).is_err());
    assert_eq!(
        plan_target(&u, ResidencyTarget::Hot).unwrap().hot_bytes,
        1_000
    );
    assert_eq!(plan_target(&u, ResidencyTarget::Cold).unwrap().hot_bytes, 0);
}

#[test]
fn large_summaries_are_planned_greedily_and_refined() {
    let bytes: Vec<u64> = (0..200).map(|i| 1_000 + (i * 7919) % 5_000).collect();
    let u = units(&bytes);
    let total: u64 = bytes.iter().sum();
    let plan = plan_mixed(&u, 0.37).unwrap();
    // Below the target some unit is cold, and adding it does not help, so it is at least twice
    // the distance (symmetrically above): a local optimum is within half the largest unit.
    let largest = *bytes.iter().max().unwrap() as f64;
    assert!(
        distance(plan.hot_bytes, total, 0.37) <= largest / 2.0 + 0.5,
        "{plan:?}"
    );
    assert_eq!(plan, plan_mixed(&u, 0.37).unwrap(), "deterministic");
}

fn brute_force_best(bytes: &[u64], ratio: f64) -> f64 {
    let total: u64 = bytes.iter().sum();
    let target2 = (2.0 * ratio * total as f64).round() as i128;
    (0u32..(1 << bytes.len()))
        .map(|mask| {
            let hot: u64 = (0..bytes.len())
                .filter(|i| mask & (1 << i) != 0)
                .map(|i| bytes[i])
                .sum();
            (2 * hot as i128 - target2).abs() as f64
        })
        .fold(f64::INFINITY, f64::min)
}

proptest! {
    #[test]
    fn small_plans_are_optimal_and_whole(bytes in prop::collection::vec(1u64..10_000, 1..=10), ratio in 0.01f64..0.99) {
        let u = units(&bytes);
        let plan = plan_mixed(&u, ratio).unwrap();
        prop_assert_eq!(plan.hot.len(), u.len());
        let hot: u64 = u.iter().zip(&plan.hot).filter(|(_, h)| **h).map(|(u, _)| u.bytes).sum();
        prop_assert_eq!(hot, plan.hot_bytes);
        let total: u64 = bytes.iter().sum();
        let target2 = (2.0 * ratio * total as f64).round() as i128;
        prop_assert_eq!((2 * plan.hot_bytes as i128 - target2).abs() as f64, brute_force_best(&bytes, ratio));
        prop_assert_eq!(plan.clone(), plan_mixed(&u, ratio).unwrap());
    }

    #[test]
    fn large_plans_are_local_optima_within_half_the_largest_unit(
        bytes in prop::collection::vec(1u64..1_000_000, (EXHAUSTIVE_UNITS + 1)..60),
        ratio in 0.01f64..0.99,
    ) {
        let u = units(&bytes);
        let plan = plan_mixed(&u, ratio).unwrap();
        let total: u64 = bytes.iter().sum();
        // No single addition or removal improves the result (a local optimum), hence within
        // half the largest unit of the target.
        let d = distance(plan.hot_bytes, total, ratio);
        let largest = *bytes.iter().max().unwrap() as f64;
        prop_assert!(d <= largest / 2.0 + 0.5);
        for (unit, hot) in u.iter().zip(&plan.hot) {
            let flipped = if *hot { plan.hot_bytes - unit.bytes } else { plan.hot_bytes + unit.bytes };
            prop_assert!(distance(flipped, total, ratio) >= d - 1.0);
        }
        prop_assert!((0.0..=1.0).contains(&plan.observed_hot_ratio));
    }

    #[test]
    fn rounds_cover_every_move_within_limits_and_always_progress(
        sizes in prop::collection::vec((1u64..20, 1u64..5_000), 1..40),
        max_members in 1u64..30,
        max_bytes in 1u64..20_000,
    ) {
        let u: Vec<AffinityUnit> = sizes.iter().enumerate().map(|(i, (m, b))| AffinityUnit {
            unit_id: format!("unit-{i}"),
            member_keys: (0..*m).map(|k| format!("payload/{i}/{k}")).collect(),
            bytes: *b,
        }).collect();
        let actual: Vec<bool> = (0..u.len()).map(|i| i % 3 != 0).collect();
        let plan = plan_mixed(&u, 0.5).unwrap();
        let moves = migration_moves(&u, &actual, &plan).unwrap();
        let limits = MigrationLimits { cooldown_ms: 0, max_members_per_round: max_members, max_bytes_per_round: max_bytes };
        let mut cursor = 0;
        let mut seen_demote = false;
        while cursor < moves.len() {
            let round = next_round(&moves, cursor, &limits);
            prop_assert!(round.start == cursor && round.end > cursor, "progress");
            let slice = &moves[round.clone()];
            prop_assert!(slice.iter().all(|m| m.direction == slice[0].direction));
            let members: u64 = slice.iter().map(|m| m.members).sum();
            let bytes: u64 = slice.iter().map(|m| m.bytes).sum();
            prop_assert!(slice.len() == 1 || (members <= max_members && bytes <= max_bytes));
            // Promotions come before demotions.
            if slice[0].direction == MoveDirection::Demote { seen_demote = true; } else { prop_assert!(!seen_demote); }
            cursor = round.end;
        }
        // Applying every move reaches the plan.
        let mut hot = actual.clone();
        for m in &moves { hot[m.unit] = m.direction == MoveDirection::Promote; }
        prop_assert_eq!(hot, plan.hot);
    }
}

#[test]
fn auto_candidates_sort_by_last_access_then_releasable_bytes_then_identity() {
    let c = |rev: &str, last: i64, bytes: u64| AutoCandidate {
        identity: RevisionIdentity::new("n", "r", rev, 1),
        last_access_ms: last,
        releasable_hot_bytes: bytes,
    };
    let mut list = vec![
        c("b", 5, 10),
        c("a", 5, 10),
        c("z", 5, 99),
        c("y", 1, 1),
        c("x", 9, 1_000),
    ];
    order_auto_candidates(&mut list);
    let order: Vec<&str> = list.iter().map(|c| c.identity.revision.as_str()).collect();
    assert_eq!(order, ["y", "z", "a", "b", "x"]);
    let picked = select_auto_candidates(list.clone(), 100, 10);
    let order: Vec<&str> = picked
        .iter()
        .map(|c| c.identity.revision.as_str())
        .collect();
    assert_eq!(order, ["y", "z"], "stops once enough bytes are releasable");
    assert_eq!(
        select_auto_candidates(list, u64::MAX, 2).len(),
        2,
        "bounded per round"
    );
}

#[test]
fn the_manifest_key_encodes_each_component() {
    let id = RevisionIdentity::new("ns/a b", "Llama-3.1~8B", "rév:1", 7).with_tenant("t%1");
    assert_eq!(
        id.manifest_key(),
        "weights/t%251/ns%2Fa%20b/Llama-3.1~8B/r%C3%A9v%3A1/7/manifest"
    );
    assert_eq!(
        RevisionIdentity::new("a", "b", "c", 1).manifest_key(),
        "weights/default/a/b/c/1/manifest"
    );
    // A '/' inside a component cannot alias another identity.
    let x = RevisionIdentity::new("a/b", "c", "d", 1);
    let y = RevisionIdentity::new("a", "b/c", "d", 1);
    assert_ne!(x.manifest_key(), y.manifest_key());
    assert_ne!(x.group_id(), y.group_id());
    assert_eq!(
        x.group_id(),
        RevisionIdentity::new("a/b", "c", "d", 1).group_id()
    );
    assert_eq!(
        x.lineage(),
        RevisionIdentity::new("a/b", "c", "d", 9).lineage()
    );
    assert_eq!(x.lineage().at_generation(1), x);
}

#[test]
fn payload_and_affinity_digests_are_canonical() {
    assert_eq!(
        payload_keys_sha256(&["b", "a"]),
        payload_keys_sha256(&["a", "b"])
    );
    assert_ne!(
        payload_keys_sha256(&["ab", "c"]),
        payload_keys_sha256(&["a", "bc"])
    );
    let u = units(&[1, 2]);
    let mut v = u.clone();
    v.swap(0, 1);
    assert_ne!(
        affinity_digest(&u),
        affinity_digest(&v),
        "unit order is the manifest's"
    );
    assert_eq!(affinity_digest(&u).len(), 64);
}

#[test]
fn policy_resolution_put_over_client_over_cluster() {
    let cluster = WeightConfig::default().cluster_default_policy();
    assert_eq!(cluster, WeightStoragePolicy::default());
    assert_eq!(
        (
            cluster.preferred_residency,
            cluster.mixed_hot_ratio,
            cluster.migration_mode
        ),
        (PreferredResidency::Mixed, 0.5, MigrationMode::Auto)
    );
    let client = PolicyOverride {
        preferred_residency: Some(PreferredResidency::Cold),
        mixed_hot_ratio: Some(0.25),
        migration_mode: None,
    };
    let put = PolicyOverride {
        preferred_residency: Some(PreferredResidency::Hot),
        ..PolicyOverride::default()
    };
    let p = resolve_policy(Some(&put), Some(&client), &cluster).unwrap();
    assert_eq!(
        (p.preferred_residency, p.mixed_hot_ratio, p.migration_mode),
        (PreferredResidency::Hot, 0.25, MigrationMode::Auto)
    );
    assert_eq!(resolve_policy(None, None, &cluster).unwrap(), cluster);
    let bad = PolicyOverride {
        mixed_hot_ratio: Some(0.0),
        ..PolicyOverride::default()
    };
    assert_eq!(
        resolve_policy(Some(&bad), None, &cluster)
            .unwrap_err()
            .code()
            .as_str(),
        "INVALID_ARGUMENT"
    );
}

#[test]
fn configuration_is_validated_and_fails_closed() {
    let config: WeightConfig = toml::from_str("").unwrap();
    assert_eq!(config, WeightConfig::default());
    config.validate().unwrap();
    let limits = config.migration_limits();
    assert_eq!(
        (
            limits.cooldown_ms,
            limits.max_members_per_round,
            limits.max_bytes_per_round
        ),
        (30_000, 64, 1 << 30)
    );
    let parsed: WeightConfig = toml::from_str(
        "default_weight_preferred_residency = \"cold\"\ndefault_weight_mixed_hot_ratio = 0.2\ndefault_weight_migration_mode = \"pinned\"\n",
    )
    .unwrap();
    assert_eq!(
        parsed.cluster_default_policy().preferred_residency,
        PreferredResidency::Cold
    );
    assert!(
        toml::from_str::<WeightConfig>("default_weight_preferred_residency = \"warm\"").is_err()
    );
    assert!(
        toml::from_str::<WeightConfig>("default_weight_migration_mode = \"sometimes\"").is_err()
    );
    assert!(toml::from_str::<WeightConfig>("no_such_key = 1").is_err());
    for (toml_text, key) in [
        (
            "default_weight_mixed_hot_ratio = 1.5",
            "default_weight_mixed_hot_ratio",
        ),
        (
            "default_weight_mixed_hot_ratio = 0.0",
            "default_weight_mixed_hot_ratio",
        ),
        (
            "weight_migration_max_members_per_round = 0",
            "weight_migration_max_members_per_round",
        ),
        (
            "weight_migration_max_bytes_per_round = 0",
            "weight_migration_max_bytes_per_round",
        ),
    ] {
        let config: WeightConfig = toml::from_str(toml_text).unwrap();
        match config.validate() {
            Err(WeightError::Config { key: k, .. }) => assert_eq!(k, key),
            other => panic!("{toml_text}: {other:?}"),
        }
    }
}

#[test]
fn capability_gates_close_mutations_on_an_unconfirmed_ha_cluster() {
    let mut config = WeightConfig::default();
    assert_eq!(config.require_weight_mutations(false), Ok(()));
    assert_eq!(config.require_lineage_mutations(false), Ok(()));
    assert_eq!(
        config.require_weight_mutations(true),
        Err(WeightError::CapabilityDisabled {
            flag: "weight_management_oplog_capability_confirmed"
        })
    );
    config.weight_management_oplog_capability_confirmed = true;
    assert_eq!(config.require_weight_mutations(true), Ok(()));
    assert_eq!(
        config.require_lineage_mutations(true),
        Err(WeightError::CapabilityDisabled {
            flag: "weight_lineage_oplog_capability_confirmed"
        })
    );
    config.weight_lineage_oplog_capability_confirmed = true;
    assert_eq!(config.require_lineage_mutations(true), Ok(()));
}
