//! Prometheus metrics of the object directory. Labels are bounded: operation names, outcome
//! names (one per error variant) and fixed reasons; never keys, tenants or ids.

use prometheus::{IntCounterVec, IntGauge, Opts, Registry};

use crescent_wire::rebuild::{GateStatus, ReplayOutcome};

use crate::error::StoreError;

/// Operations whose success counters are resolved once (the label lookup costs more than
/// the directory operation itself on the hot path).
const HOT_OPS: [&str; 7] = [
    "put_start",
    "put_end",
    "get",
    "exist",
    "get_size",
    "remove",
    "release",
];

#[derive(Clone, Debug)]
pub struct StoreMetrics {
    ops: IntCounterVec,
    ops_ok: Vec<prometheus::IntCounter>,
    lease_granted: prometheus::IntCounter,
    lease_renewed: prometheus::IntCounter,
    put_started: prometheus::IntCounter,
    put_completed: prometheus::IntCounter,
    pub(crate) objects: IntGauge,
    pub(crate) bytes_used: IntGauge,
    pub(crate) bytes_capacity: IntGauge,
    pub(crate) segments: IntGauge,
    allocations: IntCounterVec,
    evictions: IntCounterVec,
    evicted_bytes: IntCounterVec,
    eviction_skips: IntCounterVec,
    leases: IntCounterVec,
    puts: IntCounterVec,
    dropped: IntCounterVec,
    rebuild_entries: IntCounterVec,
    rebuild_entry_counters: Vec<prometheus::IntCounter>,
    pub(crate) rebuild_address_evictions: prometheus::IntCounter,
    gate_state: IntGauge,
    gate_owners_expected: IntGauge,
    gate_owners_completed: IntGauge,
    /// Release delivery to owners (`releases.rs`).
    pub(crate) releases: crate::releases::ReleaseMetrics,
}

impl StoreMetrics {
    /// Creates the metric families and registers them on `registry`.
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        let m = Self::unregistered();
        registry.register(Box::new(m.ops.clone()))?;
        registry.register(Box::new(m.objects.clone()))?;
        registry.register(Box::new(m.bytes_used.clone()))?;
        registry.register(Box::new(m.bytes_capacity.clone()))?;
        registry.register(Box::new(m.segments.clone()))?;
        registry.register(Box::new(m.allocations.clone()))?;
        registry.register(Box::new(m.evictions.clone()))?;
        registry.register(Box::new(m.evicted_bytes.clone()))?;
        registry.register(Box::new(m.eviction_skips.clone()))?;
        registry.register(Box::new(m.leases.clone()))?;
        registry.register(Box::new(m.puts.clone()))?;
        registry.register(Box::new(m.dropped.clone()))?;
        registry.register(Box::new(m.rebuild_entries.clone()))?;
        registry.register(Box::new(m.rebuild_address_evictions.clone()))?;
        registry.register(Box::new(m.gate_state.clone()))?;
        registry.register(Box::new(m.gate_owners_expected.clone()))?;
        registry.register(Box::new(m.gate_owners_completed.clone()))?;
        m.releases.register(registry)?;
        Ok(m)
    }

    /// Metrics that are counted but exported nowhere (tests, benches).
    pub fn unregistered() -> Self {
        let counter = |name: &str, help: &str, labels: &[&str]| {
            IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric")
        };
        let gauge = |name: &str, help: &str| IntGauge::new(name, help).expect("valid metric");
        let ops = counter(
            "crescent_store_ops_total",
            "Directory operations by operation and outcome (ok or error kind).",
            &["op", "outcome"],
        );
        let leases = counter(
            "crescent_store_leases_total",
            "Read leases by outcome (granted, renewed, capped, released, expired).",
            &["outcome"],
        );
        let puts = counter(
            "crescent_store_puts_total",
            "Puts by outcome (started, already_exists, completed, revoked, preempted, released).",
            &["outcome"],
        );
        let rebuild_entries = counter(
            "crescent_rebuild_entries_total",
            "Owner replay entries by outcome (replayed, duplicate, stale, rejected).",
            &["outcome"],
        );
        Self {
            releases: crate::releases::ReleaseMetrics::unregistered(),
            rebuild_entry_counters: ReplayOutcome::ALL
                .iter()
                .map(|o| rebuild_entries.with_label_values(&[o.label()]))
                .collect(),
            rebuild_entries,
            rebuild_address_evictions: prometheus::IntCounter::new(
                "crescent_rebuild_address_evictions_total",
                "Replayed replicas dropped because a newer replayed put reused their address.",
            )
            .expect("valid metric"),
            gate_state: gauge(
                "crescent_rebuild_gate_state",
                "Rebuild gate: 0 SERVING, 1 REBUILDING, 2 DEGRADED.",
            ),
            gate_owners_expected: gauge(
                "crescent_rebuild_owners_expected",
                "Owners the current rebuild waits for.",
            ),
            gate_owners_completed: gauge(
                "crescent_rebuild_owners_completed",
                "Expected owners that completed their replay.",
            ),
            ops_ok: HOT_OPS
                .iter()
                .map(|op| ops.with_label_values(&[op, "ok"]))
                .collect(),
            lease_granted: leases.with_label_values(&["granted"]),
            lease_renewed: leases.with_label_values(&["renewed"]),
            put_started: puts.with_label_values(&["started"]),
            put_completed: puts.with_label_values(&["completed"]),
            ops,
            objects: gauge("crescent_store_objects", "Objects in the directory."),
            bytes_used: gauge(
                "crescent_store_used_bytes",
                "Bytes allocated on mounted segments (slots, aligned).",
            ),
            bytes_capacity: gauge(
                "crescent_store_capacity_bytes",
                "Total capacity of mounted segments.",
            ),
            segments: gauge("crescent_store_segments", "Mounted segments."),
            allocations: counter(
                "crescent_store_allocations_total",
                "Replica allocations by outcome (ok, no_space).",
                &["outcome"],
            ),
            evictions: counter(
                "crescent_store_evictions_total",
                "Objects evicted, by reason (watermark, allocation).",
                &["reason"],
            ),
            evicted_bytes: counter(
                "crescent_store_evicted_bytes_total",
                "Value bytes evicted, by reason.",
                &["reason"],
            ),
            eviction_skips: counter(
                "crescent_store_eviction_skips_total",
                "Objects eviction passed over, by why (leased, hard_pinned, incomplete, group_guarded).",
                &["reason"],
            ),
            leases,
            puts,
            dropped: counter(
                "crescent_store_dropped_objects_total",
                "Objects dropped because their last replica's segment went away (unmount, owner_expired).",
                &["reason"],
            ),
        }
    }

    pub(crate) fn op<T>(&self, op: &'static str, r: &Result<T, StoreError>) {
        let outcome = match r {
            Ok(_) => {
                if let Some(i) = HOT_OPS.iter().position(|o| *o == op) {
                    self.ops_ok[i].inc();
                    return;
                }
                "ok"
            }
            Err(e) => e.outcome_label(),
        };
        self.ops.with_label_values(&[op, outcome]).inc();
    }

    pub(crate) fn allocation(&self, ok: bool, n: u64) {
        // Every put reports both outcomes, one of them usually 0: skip the label lookup then.
        if n == 0 {
            return;
        }
        let outcome = if ok { "ok" } else { "no_space" };
        self.allocations.with_label_values(&[outcome]).inc_by(n);
    }

    pub(crate) fn evicted(&self, reason: &'static str, objects: u64, bytes: u64) {
        self.evictions.with_label_values(&[reason]).inc_by(objects);
        self.evicted_bytes
            .with_label_values(&[reason])
            .inc_by(bytes);
    }

    pub(crate) fn skipped(&self, reason: &'static str, n: u64) {
        if n > 0 {
            self.eviction_skips.with_label_values(&[reason]).inc_by(n);
        }
    }

    pub(crate) fn lease(&self, outcome: &'static str, n: u64) {
        match outcome {
            "granted" => return self.lease_granted.inc_by(n),
            "renewed" => return self.lease_renewed.inc_by(n),
            _ => {}
        }
        if n > 0 {
            self.leases.with_label_values(&[outcome]).inc_by(n);
        }
    }

    pub(crate) fn put(&self, outcome: &'static str, n: u64) {
        // "started" and "completed" are per-put: keep them off the label lookup.
        if let Some(c) = match outcome {
            "started" => Some(&self.put_started),
            "completed" => Some(&self.put_completed),
            _ => None,
        } {
            return c.inc_by(n);
        }
        if n > 0 {
            self.puts.with_label_values(&[outcome]).inc_by(n);
        }
    }

    pub(crate) fn dropped(&self, reason: &'static str, n: u64) {
        if n > 0 {
            self.dropped.with_label_values(&[reason]).inc_by(n);
        }
    }

    pub(crate) fn rebuild_entry(&self, outcome: ReplayOutcome) {
        let i = ReplayOutcome::ALL
            .iter()
            .position(|o| *o == outcome)
            .expect("every outcome is listed");
        self.rebuild_entry_counters[i].inc();
    }

    /// Publishes the gate's state and progress (call after every gate change).
    pub fn observe_gate(&self, status: &GateStatus) {
        self.gate_state.set(status.state.gauge_value());
        self.gate_owners_expected.set(status.owners_expected as i64);
        self.gate_owners_completed
            .set(status.owners_completed as i64);
    }

    /// The gate state gauge's value.
    pub fn gate_state_value(&self) -> i64 {
        self.gate_state.get()
    }

    /// Current value of a labelled counter, for tests and `/stats`.
    pub fn count(&self, family: &str, labels: &[&str]) -> u64 {
        let v = match family {
            "ops" => &self.ops,
            "allocations" => &self.allocations,
            "evictions" => &self.evictions,
            "eviction_skips" => &self.eviction_skips,
            "leases" => &self.leases,
            "puts" => &self.puts,
            "dropped" => &self.dropped,
            "rebuild_entries" => &self.rebuild_entries,
            _ => return 0,
        };
        v.get_metric_with_label_values(labels)
            .map(|c| c.get())
            .unwrap_or(0)
    }
}
