//! The active's reader of one standby connection's acks (docs/ha.md, "Which acks count").
//!
//! Every ack goes through [`CommitTracker::on_ack`], which checks it against what this
//! connection was sent. Anything else the standby sends, or an ack beyond what it was sent, is
//! a protocol error: logged with its stable code, counted in
//! `crescent_replication_protocol_errors_total{code}`, recorded in the source status, and the
//! connection is dropped at once (the ack counts for nothing).

use std::io::BufReader;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use prometheus::{IntCounterVec, Opts, Registry};

use super::commit::CommitTracker;
use super::protocol::{read_message, Message, ProtocolError};
use super::round_timing::{self, Stage};
use super::source::SourceStatus;

/// The replication source's metrics (labels are bounded: error codes and fixed reasons).
#[derive(Debug, Clone)]
pub struct SourceMetrics {
    pub protocol_errors: IntCounterVec,
    /// The node's `crescent_net_connections_closed_total{listener, reason}`, shared with its
    /// other listeners: this one counts as `replication`, with reason `over_limit` or
    /// `handshake` (no valid Hello in time, or a wrong protocol version).
    pub connections_closed: Option<IntCounterVec>,
    /// The node's `crescent_accept_failures_total{listener}` (`replication` here).
    pub accept_failures: Option<IntCounterVec>,
    /// `crescent_ha_reseeds_served_total{outcome}`: snapshots sent to reseeding standbys
    /// (`ok`, `refused`, `error`).
    pub reseeds_served: IntCounterVec,
}

/// The `listener` label of this listener in the node's shared connection metrics.
const LISTENER: &str = "replication";

impl SourceMetrics {
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        let protocol_errors = IntCounterVec::new(
            Opts::new(
                "crescent_replication_protocol_errors_total",
                "Standby connections dropped for a protocol violation, by error code",
            ),
            &["code"],
        )?;
        registry.register(Box::new(protocol_errors.clone()))?;
        let reseeds_served = IntCounterVec::new(
            Opts::new(
                "crescent_ha_reseeds_served_total",
                "Snapshot requests of reseeding standbys, by outcome (ok, refused, error)",
            ),
            &["outcome"],
        )?;
        registry.register(Box::new(reseeds_served.clone()))?;
        Ok(Self {
            protocol_errors,
            connections_closed: None,
            accept_failures: None,
            reseeds_served,
        })
    }

    /// Counts one reseed request served (`outcome`: ok, refused, error).
    pub fn count_reseed_served(&self, outcome: &'static str) {
        self.reseeds_served.with_label_values(&[outcome]).inc();
    }

    /// Counts this listener's closed connections and failed accepts in the node's counters
    /// (labels `listener, reason` and `listener`).
    pub fn with_listener_counters(
        mut self,
        connections_closed: IntCounterVec,
        accept_failures: IntCounterVec,
    ) -> Self {
        self.connections_closed = Some(connections_closed);
        self.accept_failures = Some(accept_failures);
        self
    }

    pub(super) fn count_closed(&self, reason: &'static str) {
        if let Some(c) = &self.connections_closed {
            c.with_label_values(&[LISTENER, reason]).inc();
        }
    }

    pub(super) fn count_accept_failure(&self) {
        if let Some(c) = &self.accept_failures {
            c.with_label_values(&[LISTENER]).inc();
        }
    }
}

/// What an ack reader works with.
pub(super) struct AckReader {
    pub tracker: CommitTracker,
    pub status: Arc<Mutex<SourceStatus>>,
    pub metrics: Option<SourceMetrics>,
    /// The session the acks belong to ([`CommitTracker::connect`]).
    pub session: u64,
    pub node: String,
}

impl AckReader {
    /// Reads acks until the connection ends, `stop` is set, or the standby breaks the
    /// protocol; sets `stop` on the way out.
    pub fn run(self, mut reader: BufReader<TcpStream>, stop: &AtomicBool) {
        while !stop.load(Ordering::Acquire) {
            let result = match read_message(&mut reader) {
                Ok(Message::Ack { durable_seq }) => match self.ack(durable_seq) {
                    Ok(true) => Ok(()),
                    // A newer connection replaced this one: nothing it says counts any more.
                    Ok(false) => break,
                    Err(e) => Err(e),
                },
                Ok(other) => Err(ProtocolError::Unexpected(other.kind())),
                Err(e) => {
                    tracing::info!(error = %e, "standby ack stream ended");
                    break;
                }
            };
            if let Err(e) = result {
                self.violation(&e);
                // Drop the connection now: the session's writes fail and it ends.
                let _ = reader.get_ref().shutdown(std::net::Shutdown::Both);
                break;
            }
        }
        stop.store(true, Ordering::Release);
    }

    /// Counts one ack; `Ok(false)`: this connection was replaced.
    fn ack(&self, durable_seq: u64) -> Result<bool, ProtocolError> {
        round_timing::mark(Stage::AckReceived, durable_seq);
        if !self.tracker.on_ack(self.session, durable_seq)? {
            return Ok(false);
        }
        let mut st = self.status.lock().expect("status mutex");
        st.acked_seq = st.acked_seq.max(durable_seq);
        st.window.acked(durable_seq);
        Ok(true)
    }

    fn violation(&self, e: &ProtocolError) {
        let code = e.code();
        tracing::warn!(standby = %self.node, code, error = %e, "standby broke the replication protocol; dropping it");
        if let Some(m) = &self.metrics {
            m.protocol_errors.with_label_values(&[code]).inc();
        }
        self.status
            .lock()
            .expect("status mutex")
            .last_protocol_error = Some((code.to_string(), e.to_string()));
    }
}
