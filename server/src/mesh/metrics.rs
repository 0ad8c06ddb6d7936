//! The mesh metrics of one crescentd (bounded labels: the outcome of a publish is one of
//! three).

use crescent_mesh::{ClusterState, Membership};
use prometheus::{IntCounter, IntCounterVec, IntGauge, Opts, Registry};

/// Outcomes of one compare-and-set of this cluster's entry.
pub const PUBLISH_OUTCOMES: [&str; 3] = ["written", "stale", "error"];

#[derive(Clone)]
pub struct MeshMetrics {
    /// Object requests (and batch items) refused WRONG_CLUSTER.
    pub redirects: IntCounter,
    generation: IntGauge,
    serving: IntGauge,
    pub publishes: IntCounterVec,
}

impl MeshMetrics {
    pub fn register(registry: &Registry) -> MeshMetrics {
        let redirects = IntCounter::new(
            "crescent_mesh_redirects_total",
            "Object requests and batch items refused WRONG_CLUSTER: another cluster of the \
             mesh is their authority",
        )
        .expect("valid metric");
        let generation = IntGauge::new(
            "crescent_mesh_generation",
            "The mesh membership generation this cluster routes by",
        )
        .expect("valid metric");
        let serving = IntGauge::new(
            "crescent_mesh_serving_clusters",
            "Serving clusters in the membership this cluster routes by",
        )
        .expect("valid metric");
        let publishes = IntCounterVec::new(
            Opts::new(
                "crescent_mesh_publish_total",
                "Compare-and-sets of this cluster's membership entry by outcome: written, \
                 stale (another update landed first: re-read), error",
            ),
            &["outcome"],
        )
        .expect("valid metric");
        for outcome in PUBLISH_OUTCOMES {
            publishes.with_label_values(&[outcome]);
        }
        // A re-registration (a second promotion in one process never happens) keeps the first.
        let _ = registry.register(Box::new(redirects.clone()));
        let _ = registry.register(Box::new(generation.clone()));
        let _ = registry.register(Box::new(serving.clone()));
        let _ = registry.register(Box::new(publishes.clone()));
        MeshMetrics {
            redirects,
            generation,
            serving,
            publishes,
        }
    }

    /// The membership now routed by.
    pub fn observe(&self, m: &Membership) {
        self.generation
            .set(i64::try_from(m.generation).unwrap_or(i64::MAX));
        let serving = m
            .clusters
            .iter()
            .filter(|c| c.state == ClusterState::Serving)
            .count();
        self.serving.set(serving as i64);
    }
}
