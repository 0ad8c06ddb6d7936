//! Scheduler metrics (docs/tenants.md, "Soft isolation"). The `tenant` label is bounded: a
//! tenant listed in `[[tenants]]` gets its own series, every other is counted as `other`.

use std::collections::HashSet;

use prometheus::{Histogram, HistogramOpts, IntCounterVec, IntGaugeVec, Opts, Registry};

use crate::tenant_metrics::OTHER;

pub struct SchedMetrics {
    /// The configured tenant names (each its own label value).
    named: HashSet<String>,
    queued: IntGaugeVec,
    waits: IntCounterVec,
    turns: IntCounterVec,
    wait_seconds: Histogram,
    thread_yields: IntCounterVec,
}

impl SchedMetrics {
    pub fn register(registry: &Registry, named: HashSet<String>) -> prometheus::Result<Self> {
        let queued = IntGaugeVec::new(
            Opts::new(
                "crescent_sched_queued_requests",
                "Store requests waiting for a turn, by tenant",
            ),
            &["tenant"],
        )?;
        let waits = IntCounterVec::new(
            Opts::new(
                "crescent_sched_waits_total",
                "Store requests that found every slot busy and waited for a turn, by tenant",
            ),
            &["tenant"],
        )?;
        let turns = IntCounterVec::new(
            Opts::new(
                "crescent_sched_turns_total",
                "Scheduling turns given to waiting requests, by tenant",
            ),
            &["tenant"],
        )?;
        let wait_seconds = Histogram::with_opts(HistogramOpts::new(
            "crescent_sched_wait_seconds",
            "How long a store request waited for its turn",
        ))?;
        let thread_yields = IntCounterVec::new(
            Opts::new(
                "crescent_sched_thread_yields_total",
                "Store requests that yielded their RPC thread to wait for their tenant's \
                 turn on it, by tenant",
            ),
            &["tenant"],
        )?;
        registry.register(Box::new(thread_yields.clone()))?;
        registry.register(Box::new(queued.clone()))?;
        registry.register(Box::new(waits.clone()))?;
        registry.register(Box::new(turns.clone()))?;
        registry.register(Box::new(wait_seconds.clone()))?;
        Ok(Self {
            named,
            queued,
            waits,
            turns,
            wait_seconds,
            thread_yields,
        })
    }

    pub(super) fn thread_yielded(&self, tenant: &str) {
        self.thread_yields
            .with_label_values(&[self.label(tenant)])
            .inc();
    }

    /// The label of `tenant`: its name when configured, else `other`.
    pub fn label<'a>(&self, tenant: &'a str) -> &'a str {
        if self.named.contains(tenant) {
            tenant
        } else {
            OTHER
        }
    }

    pub(super) fn queued(&self, tenant: &str) {
        let label = self.label(tenant);
        self.waits.with_label_values(&[label]).inc();
        self.queued.with_label_values(&[label]).inc();
    }

    pub(super) fn dequeued(&self, tenant: &str, new_turn: bool) {
        let label = self.label(tenant);
        self.queued.with_label_values(&[label]).dec();
        if new_turn {
            self.turns.with_label_values(&[label]).inc();
        }
    }

    pub(super) fn waited(&self, seconds: f64) {
        self.wait_seconds.observe(seconds);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unconfigured_tenants_share_the_other_label() {
        let m = SchedMetrics::register(&Registry::new(), HashSet::from(["a".to_string()])).unwrap();
        assert_eq!(m.label("a"), "a");
        assert_eq!(m.label("some-key-like-name"), OTHER);
        m.queued("x");
        m.queued("y");
        m.dequeued("x", true);
        assert_eq!(m.queued.with_label_values(&[OTHER]).get(), 1);
        assert_eq!(m.waits.with_label_values(&[OTHER]).get(), 2);
        assert_eq!(m.turns.with_label_values(&[OTHER]).get(), 1);
    }
}
