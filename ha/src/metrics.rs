//! Prometheus metrics of the elector. Labels are fixed sets (role, step-down reason, marker
//! state and outcome, coordination backend, operation and outcome); never node names, cluster
//! names or terms.

use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};

use crate::role::Role;

#[derive(Clone, Debug)]
pub struct HaMetrics {
    role: IntGaugeVec,
    term: IntGauge,
    elections_won: IntCounter,
    step_downs: IntCounterVec,
    keepalive_failures: IntCounter,
    marker_writes: IntCounterVec,
    coordination: IntCounterVec,
}

impl HaMetrics {
    /// Creates the metric families and registers them on `registry`.
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        let m = Self::unregistered();
        registry.register(Box::new(m.role.clone()))?;
        registry.register(Box::new(m.term.clone()))?;
        registry.register(Box::new(m.elections_won.clone()))?;
        registry.register(Box::new(m.step_downs.clone()))?;
        registry.register(Box::new(m.keepalive_failures.clone()))?;
        registry.register(Box::new(m.marker_writes.clone()))?;
        registry.register(Box::new(m.coordination.clone()))?;
        Ok(m)
    }

    /// Metric families counted but exported nowhere (tests, tools).
    pub fn unregistered() -> Self {
        let m = HaMetrics {
            role: IntGaugeVec::new(
                Opts::new(
                    "crescent_ha_role",
                    "1 for the elector's current role, 0 for the others",
                ),
                &["role"],
            )
            .expect("valid metric"),
            term: IntGauge::new(
                "crescent_ha_term",
                "Term this node leads under, or the last leader term it saw (0: none)",
            )
            .expect("valid metric"),
            elections_won: IntCounter::new(
                "crescent_ha_elections_won_total",
                "Campaigns this node won",
            )
            .expect("valid metric"),
            step_downs: IntCounterVec::new(
                Opts::new(
                    "crescent_ha_step_downs_total",
                    "Terms this node gave up, by reason",
                ),
                &["reason"],
            )
            .expect("valid metric"),
            keepalive_failures: IntCounter::new(
                "crescent_ha_keepalive_failures_total",
                "Lease renewals that failed or were not answered",
            )
            .expect("valid metric"),
            marker_writes: IntCounterVec::new(
                Opts::new(
                    "crescent_ha_marker_writes_total",
                    "Replication-marker writes, by state written and outcome",
                ),
                &["state", "outcome"],
            )
            .expect("valid metric"),
            coordination: IntCounterVec::new(
                Opts::new(
                    "crescent_ha_coordination_requests_total",
                    "Requests to the coordination backend, by backend, operation and outcome",
                ),
                &["backend", "op", "outcome"],
            )
            .expect("valid metric"),
        };
        m.set_role(&Role::Candidate { blocked: None });
        m
    }

    pub(crate) fn set_role(&self, role: &Role) {
        for name in Role::ALL {
            self.role
                .with_label_values(&[name])
                .set(i64::from(name == role.as_str()));
        }
        match role {
            Role::Leader { term } => self.term.set(*term as i64),
            Role::Follower { leader } => self.term.set(leader.term as i64),
            _ => {}
        }
    }

    pub(crate) fn won(&self) {
        self.elections_won.inc();
    }

    pub(crate) fn stepped_down(&self, reason: crate::StepDownReason) {
        self.step_downs.with_label_values(&[reason.as_str()]).inc();
    }

    pub(crate) fn keepalive_failed(&self) {
        self.keepalive_failures.inc();
    }

    /// `state`: `claim`, `in_sync`, `out_of_sync`; `outcome`: `ok`, `fenced`, `error`.
    pub(crate) fn marker_write(&self, state: &'static str, outcome: &'static str) {
        self.marker_writes
            .with_label_values(&[state, outcome])
            .inc();
    }

    /// One request to the coordination backend. `backend`: `etcd`, `redis`; `op`: `campaign`,
    /// `renew`, `write_marker`; outcome: `ok`, `timeout`, `error`.
    pub(crate) fn coordination<T>(
        &self,
        backend: &'static str,
        op: &'static str,
        result: &Result<T, crate::HaError>,
    ) {
        let outcome = match result {
            Ok(_) => "ok",
            Err(crate::HaError::Timeout { .. }) => "timeout",
            Err(crate::HaError::Fenced { .. }) => "fenced",
            Err(_) => "error",
        };
        self.coordination
            .with_label_values(&[backend, op, outcome])
            .inc();
    }

    /// Requests counted by [`HaMetrics::coordination`] (tests).
    pub fn coordination_requests(&self, backend: &str, op: &str, outcome: &str) -> u64 {
        self.coordination
            .with_label_values(&[backend, op, outcome])
            .get()
    }

    pub fn elections_won(&self) -> u64 {
        self.elections_won.get()
    }

    pub fn step_downs(&self, reason: crate::StepDownReason) -> u64 {
        self.step_downs.with_label_values(&[reason.as_str()]).get()
    }

    pub fn keepalive_failures(&self) -> u64 {
        self.keepalive_failures.get()
    }

    pub fn term(&self) -> i64 {
        self.term.get()
    }
}
