//! The standby's reseed transfer (docs/ha.md, "Reseeding"): asks the active for its snapshot
//! over the replication channel, writes the bytes aside into the reseed dir as they arrive
//! (one chunk in memory at a time), checks the file against the position the active announced
//! (format version, header CRC, file CRC32C: `crescent_snapshot::StreamCheck`), and completes
//! the reseed dir (reseed.rs). Progress is in `/v1/status` and the metrics below.

use std::fs::File;
use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crescent_journal::replication::{FollowerConfig, ProtocolError, SnapshotReceiver};
use crescent_snapshot::{Position, StreamCheck};
use prometheus::{IntCounterVec, IntGaugeVec, Opts, Registry};

use super::reseed::{Stage, Staged};
use crate::error::ServerError;

/// Reseed metrics (labels are fixed sets).
#[derive(Clone)]
pub struct ReseedMetrics {
    /// `crescent_ha_reseeds_total{outcome}`: `staged` (received, checked and written aside;
    /// the node restarts to install it), `installed` (swapped in at start), `refused` (the
    /// active had no snapshot to offer), `failed` (transfer cut, check failed, IO).
    pub reseeds: IntCounterVec,
    /// `crescent_ha_reseed_bytes{kind}`: `received` and `total` of the current transfer.
    pub bytes: IntGaugeVec,
}

impl ReseedMetrics {
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        let reseeds = IntCounterVec::new(
            Opts::new(
                "crescent_ha_reseeds_total",
                "Standby reseeds from the active's snapshot, by outcome",
            ),
            &["outcome"],
        )?;
        let bytes = IntGaugeVec::new(
            Opts::new(
                "crescent_ha_reseed_bytes",
                "Bytes of the current reseed transfer: received and total",
            ),
            &["kind"],
        )?;
        registry.register(Box::new(reseeds.clone()))?;
        registry.register(Box::new(bytes.clone()))?;
        Ok(Self { reseeds, bytes })
    }

    pub fn count(&self, outcome: &'static str) {
        self.reseeds.with_label_values(&[outcome]).inc();
    }
}

/// Where a reseed stands, for `/v1/status` (`replication.reseed`).
#[derive(Debug, Default)]
pub struct ReseedProgress {
    phase: Mutex<&'static str>,
    received: AtomicU64,
    total: AtomicU64,
    seq: AtomicU64,
    attempts: AtomicU64,
    last_error: Mutex<Option<String>>,
}

impl ReseedProgress {
    fn set_phase(&self, phase: &'static str) {
        *self.phase.lock().expect("phase mutex") = phase;
    }

    /// `null` until a reseed was first needed.
    pub fn status(&self) -> serde_json::Value {
        let phase = *self.phase.lock().expect("phase mutex");
        if phase.is_empty() {
            return serde_json::Value::Null;
        }
        serde_json::json!({
            "phase": phase,
            "bytes_received": self.received.load(Ordering::Relaxed),
            "bytes_total": self.total.load(Ordering::Relaxed),
            "seq": self.seq.load(Ordering::Relaxed),
            "attempts": self.attempts.load(Ordering::Relaxed),
            "last_error": self.last_error.lock().expect("error mutex").clone(),
        })
    }
}

/// One reseed attempt against the active's replication endpoint at `addr`: on success the
/// reseed dir is complete and durable, and the node must restart to install it.
pub fn fetch(
    addr: SocketAddr,
    follower: &FollowerConfig,
    data_dir: &Path,
    progress: &ReseedProgress,
    metrics: &ReseedMetrics,
) -> Result<Staged, ServerError> {
    let span = tracing::info_span!("reseed", active = %addr);
    let _g = span.enter();
    progress.attempts.fetch_add(1, Ordering::Relaxed);
    progress.received.store(0, Ordering::Relaxed);
    progress.total.store(0, Ordering::Relaxed);
    progress.set_phase("requesting");
    let result = transfer(addr, follower, data_dir, progress, metrics);
    let outcome = match &result {
        Ok(staged) => {
            progress.set_phase("staged");
            *progress.last_error.lock().expect("error mutex") = None;
            tracing::warn!(
                seq = staged.seq,
                bytes = staged.snapshot_bytes,
                "reseed received and written aside; restarting to install it"
            );
            "staged"
        }
        Err((refused, e)) => {
            progress.set_phase("failed");
            *progress.last_error.lock().expect("error mutex") = Some(e.to_string());
            tracing::warn!(error = %e, "reseed attempt failed; the standby tries again");
            if *refused {
                "refused"
            } else {
                "failed"
            }
        }
    };
    metrics.count(outcome);
    result.map_err(|(_, e)| e)
}

/// The transfer; the error says whether the active refused (`true`).
fn transfer(
    addr: SocketAddr,
    follower: &FollowerConfig,
    data_dir: &Path,
    progress: &ReseedProgress,
    metrics: &ReseedMetrics,
) -> Result<Staged, (bool, ServerError)> {
    let proto = |e: ProtocolError| {
        let refused = matches!(e, ProtocolError::Refused { .. });
        (refused, ServerError::Recovery(format!("reseed: {e}")))
    };
    let mut rx = SnapshotReceiver::request(addr, follower).map_err(proto)?;
    let offer = rx.offer().clone();
    tracing::info!(
        seq = offer.seq,
        term = offer.snap_term,
        bytes = offer.bytes,
        "the active offers its snapshot"
    );
    progress.total.store(offer.bytes, Ordering::Relaxed);
    progress.seq.store(offer.seq, Ordering::Relaxed);
    metrics
        .bytes
        .with_label_values(&["total"])
        .set(offer.bytes as i64);
    metrics.bytes.with_label_values(&["received"]).set(0);
    let failed = |e: ServerError| (false, e);
    let stage = Stage::create(data_dir).map_err(failed)?;
    let path = stage.snapshot_path(offer.seq);
    let io = |e: std::io::Error| {
        (
            false,
            ServerError::Recovery(format!("reseed: {}: {e}", path.display())),
        )
    };
    let mut file = File::create(&path).map_err(io)?;
    let expected = Position {
        seq: offer.seq,
        term: offer.snap_term,
        digest: offer.digest,
    };
    let mut check = StreamCheck::new(&path, expected);
    progress.set_phase("receiving");
    let snapshot_err = |e: crescent_snapshot::SnapshotError| {
        (false, ServerError::Recovery(format!("reseed: {e}")))
    };
    while let Some(chunk) = rx.next_chunk().map_err(proto)? {
        check.update(&chunk).map_err(snapshot_err)?;
        file.write_all(&chunk).map_err(io)?;
        progress.received.store(rx.received(), Ordering::Relaxed);
        metrics
            .bytes
            .with_label_values(&["received"])
            .set(rx.received() as i64);
        if rx.received() < offer.bytes {
            crescent_crash::point(crescent_crash::points::RESEED_AFTER_CHUNK);
        }
    }
    progress.set_phase("verifying");
    check.finish().map_err(snapshot_err)?;
    file.sync_all().map_err(io)?;
    drop(file);
    progress.set_phase("staging");
    stage.complete(&offer).map_err(failed)
}
