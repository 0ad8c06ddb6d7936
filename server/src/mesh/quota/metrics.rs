//! Metrics of the quota exchange (bounded labels: outcomes from fixed lists, never a tenant
//! or a cluster).

use prometheus::{IntCounter, IntCounterVec, Opts, Registry};

/// Outcomes of one exchange this cluster sent.
pub const SENT_OUTCOMES: [&str; 4] = ["answered", "stale_generation", "refused", "unreachable"];
/// What a put refused for want of allowance got.
pub const SHORT_OUTCOMES: [&str; 3] = ["refill", "exceeded", "home_waiting"];

#[derive(Clone)]
pub struct QuotaMetrics {
    pub sent: IntCounterVec,
    pub received: IntCounter,
    pub shorts: IntCounterVec,
}

impl QuotaMetrics {
    pub fn register(registry: &Registry) -> Result<QuotaMetrics, String> {
        let sent = IntCounterVec::new(
            Opts::new(
                "crescent_mesh_quota_exchanges_sent_total",
                "Quota exchanges this cluster sent to tenants' homes, by outcome: answered, \
                 stale_generation (the two routed by different generations), refused, \
                 unreachable",
            ),
            &["outcome"],
        )
        .map_err(|e| e.to_string())?;
        let received = IntCounter::new(
            "crescent_mesh_quota_exchanges_received_total",
            "Quota exchanges this cluster answered as the home of their tenants",
        )
        .map_err(|e| e.to_string())?;
        let shorts = IntCounterVec::new(
            Opts::new(
                "crescent_mesh_quota_short_puts_total",
                "Puts refused for want of this cluster's allowance, by what they got: refill \
                 (UNAVAILABLE, sent again once the home granted room), exceeded \
                 (QUOTA_EXCEEDED: the home has none), home_waiting (this cluster is the home \
                 and waits for the others' reports)",
            ),
            &["outcome"],
        )
        .map_err(|e| e.to_string())?;
        for o in SENT_OUTCOMES {
            sent.with_label_values(&[o]);
        }
        for o in SHORT_OUTCOMES {
            shorts.with_label_values(&[o]);
        }
        // A re-registration (a second promotion in one process) keeps the first.
        let _ = registry.register(Box::new(sent.clone()));
        let _ = registry.register(Box::new(received.clone()));
        let _ = registry.register(Box::new(shorts.clone()));
        Ok(QuotaMetrics {
            sent,
            received,
            shorts,
        })
    }
}
