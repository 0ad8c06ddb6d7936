//! Weight metrics follow revisions through their states (gauges by diff, counters by event).

mod common;

use crescent_actors::{Aggregate, Ctx};
use crescent_weights::revision::WeightRevisionCommand as C;
use crescent_weights::{
    MigrationLimits, RevisionIdentity, WeightMetrics, WeightRevision, WeightStoragePolicy,
};
use prometheus::Registry;

fn value(registry: &Registry, name: &str, labels: &[(&str, &str)]) -> f64 {
    for family in registry.gather() {
        if family.name() != name {
            continue;
        }
        for metric in family.get_metric() {
            let matches = labels.iter().all(|(k, v)| {
                metric
                    .get_label()
                    .iter()
                    .any(|l| l.name() == *k && l.value() == *v)
            });
            if matches {
                return match family.get_field_type() {
                    prometheus::proto::MetricType::GAUGE => metric.get_gauge().get_value(),
                    prometheus::proto::MetricType::COUNTER => metric.get_counter().get_value(),
                    other => panic!("{name} is a {other:?}"),
                };
            }
        }
    }
    0.0
}

#[test]
fn gauges_and_counters_follow_a_revision() {
    let registry = Registry::new();
    let metrics = WeightMetrics::register(&registry).unwrap();
    let id = RevisionIdentity::new("n", "r", "v", 1);
    let fx = common::fixture(&id, &[(1, 10), (2, 20)]);
    let mut state = WeightRevision::default();
    let mut run = |cmd: C, now: i64| {
        let events = state.decide(&cmd, &Ctx::at(now)).unwrap();
        let before = state.clone();
        for e in &events {
            state.apply(e);
        }
        metrics.observe_revision(&before, &state, &events);
    };
    run(
        C::BeginImport {
            identity: id.clone(),
            policy: WeightStoragePolicy::default(),
        },
        0,
    );
    assert_eq!(
        value(
            &registry,
            "crescent_weight_revisions",
            &[("availability", "IMPORTING"), ("residency", "UNKNOWN")]
        ),
        1.0
    );
    run(
        C::CommitImport {
            expected_metadata_generation: 1,
            summary: fx.summary.clone(),
            members: fx.members.clone(),
            affinity_units: fx.units.clone(),
        },
        0,
    );
    assert_eq!(
        value(
            &registry,
            "crescent_weight_revisions",
            &[("availability", "IMPORTING")]
        ),
        0.0
    );
    assert_eq!(
        value(
            &registry,
            "crescent_weight_revisions",
            &[("availability", "READY"), ("residency", "HOT")]
        ),
        1.0
    );
    assert_eq!(
        value(
            &registry,
            "crescent_weight_operations_active",
            &[("kind", "migrating")]
        ),
        1.0
    );
    assert_eq!(
        value(
            &registry,
            "crescent_weight_operations_total",
            &[
                ("kind", "migrating"),
                ("trigger", "initial"),
                ("outcome", "started")
            ]
        ),
        1.0
    );
    run(
        C::AcquireLease {
            holder: "w".into(),
            ttl_ms: 100,
            expected_metadata_generation: None,
            limits: MigrationLimits::default(),
        },
        0,
    );
    assert_eq!(value(&registry, "crescent_weight_leases_active", &[]), 1.0);
    run(C::ExpireLeases, 100);
    assert_eq!(value(&registry, "crescent_weight_leases_active", &[]), 0.0);
    assert_eq!(
        value(&registry, "crescent_weight_leases_expired_total", &[]),
        1.0
    );
}
