//! Prometheus metrics of the actor runtime.
//!
//! Labels are bounded: the aggregate kind (a compile-time constant per aggregate type) and a
//! fixed outcome vocabulary. Instance ids never become labels.

use std::time::Duration;

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry};

/// How a command ended, as recorded in `crescent_actor_commands_total{outcome}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommandOutcome {
    /// Events were journaled and are committed.
    Committed,
    /// `decide` produced no events (idempotent repeat or nothing to do).
    NoOp,
    /// `decide` refused the command.
    Rejected,
    /// The journal refused the append because a newer term exists.
    Fenced,
    /// The journal refused or could not confirm the append for a non-fatal reason.
    JournalError,
    /// The journal failed; the process is stopping.
    Fatal,
}

impl CommandOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            CommandOutcome::Committed => "committed",
            CommandOutcome::NoOp => "noop",
            CommandOutcome::Rejected => "rejected",
            CommandOutcome::Fenced => "fenced",
            CommandOutcome::JournalError => "journal_error",
            CommandOutcome::Fatal => "fatal",
        }
    }
}

/// Latency buckets from 50 us (an in-memory decide) to 10 s (a stalled device).
const LATENCY_BUCKETS: &[f64] = &[
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 10.0,
];

/// The runtime's metric families. Cheap to clone (the families are shared).
#[derive(Clone, Debug)]
pub struct RuntimeMetrics {
    commands: IntCounterVec,
    command_seconds: HistogramVec,
    events_appended: IntCounterVec,
    reads: IntCounterVec,
    read_wait_seconds: HistogramVec,
    actors: IntGaugeVec,
    timer_fires: IntCounterVec,
}

impl RuntimeMetrics {
    /// Creates the families without registering them anywhere (tests, or a caller that does not
    /// export metrics).
    pub fn unregistered() -> Self {
        let commands = IntCounterVec::new(
            Opts::new(
                "crescent_actor_commands_total",
                "Commands handled by aggregate actors, by aggregate kind and outcome",
            ),
            &["aggregate", "outcome"],
        )
        .expect("static metric definition is valid");
        let command_seconds = HistogramVec::new(
            HistogramOpts::new(
                "crescent_actor_command_duration_seconds",
                "Time from a command's arrival at its actor to its reply (includes the commit wait)",
            )
            .buckets(LATENCY_BUCKETS.to_vec()),
            &["aggregate"],
        )
        .expect("static metric definition is valid");
        let events_appended = IntCounterVec::new(
            Opts::new(
                "crescent_actor_events_appended_total",
                "Events submitted to the journal by aggregate actors",
            ),
            &["aggregate"],
        )
        .expect("static metric definition is valid");
        let reads = IntCounterVec::new(
            Opts::new(
                "crescent_actor_reads_total",
                "Reads served by aggregate actors, by outcome (ok or error)",
            ),
            &["aggregate", "outcome"],
        )
        .expect("static metric definition is valid");
        let read_wait_seconds = HistogramVec::new(
            HistogramOpts::new(
                "crescent_actor_read_wait_seconds",
                "Time a read waited for the commit watermark to cover the state it observed",
            )
            .buckets(LATENCY_BUCKETS.to_vec()),
            &["aggregate"],
        )
        .expect("static metric definition is valid");
        let actors = IntGaugeVec::new(
            Opts::new(
                "crescent_actor_instances",
                "Running aggregate actors, by aggregate kind",
            ),
            &["aggregate"],
        )
        .expect("static metric definition is valid");
        let timer_fires = IntCounterVec::new(
            Opts::new(
                "crescent_actor_timer_fires_total",
                "Timer commands sent to aggregate actors, by aggregate kind",
            ),
            &["aggregate"],
        )
        .expect("static metric definition is valid");
        Self {
            commands,
            command_seconds,
            events_appended,
            reads,
            read_wait_seconds,
            actors,
            timer_fires,
        }
    }

    /// Creates the families and registers them with `registry` (the one `/metrics` serves).
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let m = Self::unregistered();
        registry.register(Box::new(m.commands.clone()))?;
        registry.register(Box::new(m.command_seconds.clone()))?;
        registry.register(Box::new(m.events_appended.clone()))?;
        registry.register(Box::new(m.reads.clone()))?;
        registry.register(Box::new(m.read_wait_seconds.clone()))?;
        registry.register(Box::new(m.actors.clone()))?;
        registry.register(Box::new(m.timer_fires.clone()))?;
        Ok(m)
    }

    pub(crate) fn command(&self, aggregate: &'static str, outcome: CommandOutcome, took: Duration) {
        self.commands
            .with_label_values(&[aggregate, outcome.as_str()])
            .inc();
        self.command_seconds
            .with_label_values(&[aggregate])
            .observe(took.as_secs_f64());
    }

    pub(crate) fn events_appended(&self, aggregate: &'static str, n: usize) {
        self.events_appended
            .with_label_values(&[aggregate])
            .inc_by(n as u64);
    }

    pub(crate) fn read(&self, aggregate: &'static str, ok: bool, waited: Duration) {
        self.reads
            .with_label_values(&[aggregate, if ok { "ok" } else { "error" }])
            .inc();
        self.read_wait_seconds
            .with_label_values(&[aggregate])
            .observe(waited.as_secs_f64());
    }

    pub(crate) fn actor_started(&self, aggregate: &'static str) {
        self.actors.with_label_values(&[aggregate]).inc();
    }

    pub(crate) fn actor_stopped(&self, aggregate: &'static str) {
        self.actors.with_label_values(&[aggregate]).dec();
    }

    pub(crate) fn timer_fired(&self, aggregate: &'static str) {
        self.timer_fires.with_label_values(&[aggregate]).inc();
    }

    /// Commands counted so far for `aggregate` with `outcome` (for tests and `/stats`).
    pub fn commands_total(&self, aggregate: &str, outcome: CommandOutcome) -> u64 {
        self.commands
            .with_label_values(&[aggregate, outcome.as_str()])
            .get()
    }

    /// Events appended so far for `aggregate`.
    pub fn events_appended_total(&self, aggregate: &str) -> u64 {
        self.events_appended.with_label_values(&[aggregate]).get()
    }
}

impl Default for RuntimeMetrics {
    fn default() -> Self {
        Self::unregistered()
    }
}
