//! The active's side of a reseed (docs/ha.md, "Reseeding"): a proven standby asked for a
//! snapshot; the active offers its newest one whose position its own journal still vouches
//! for, then streams the file in bounded chunks and closes.
//!
//! The offer's digest is the active's journal digest at the snapshot's seq, not only the one
//! the file's header carries: the two must agree, so a snapshot that does not belong to this
//! history is never offered. The file is opened before anything is sent and read from that
//! descriptor, so retention removing it meanwhile does not cut the transfer. The running
//! session is never touched.

use std::io::Read;
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::handshake::send_refusal;
use super::protocol::{refusal, write_message, Message, ProtocolError};
use super::source::Shared;
use crate::error::JournalError;
use crate::record::Digest;

/// A snapshot file the active can offer: where it is and the position its header names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OfferedSnapshot {
    pub path: PathBuf,
    pub seq: u64,
    pub term: u64,
    pub digest: Digest,
}

/// The node's newest snapshot with a seq of at least the argument (the journal's first seq
/// less one), read from its header; `Ok(None)`: there is none.
type SnapshotFn = dyn Fn(u64) -> Result<Option<OfferedSnapshot>, String> + Send + Sync;

/// Where the active finds the snapshot a reseed gets ([`super::SourceConfig::snapshots`]).
#[derive(Clone)]
pub struct SnapshotSource(pub Arc<SnapshotFn>);

impl SnapshotSource {
    pub fn new(
        f: impl Fn(u64) -> Result<Option<OfferedSnapshot>, String> + Send + Sync + 'static,
    ) -> Self {
        Self(Arc::new(f))
    }
}

impl std::fmt::Debug for SnapshotSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SnapshotSource(..)")
    }
}

/// Serves one reseed request; counted as `ok`, `refused` or `error`.
pub(super) fn serve_snapshot(shared: &Shared, mut stream: TcpStream, node: &str, term: u64) {
    let span = tracing::info_span!("reseed_serve", standby = %node, term);
    let _g = span.enter();
    let outcome = match offer(shared, &mut stream, term) {
        Ok(Some((seq, bytes))) => {
            tracing::info!(seq, bytes, "snapshot sent to a reseeding standby");
            "ok"
        }
        Ok(None) => "refused",
        Err(e) => {
            tracing::warn!(error = %e, "reseed transfer ended");
            "error"
        }
    };
    if let Some(m) = &shared.config.metrics {
        m.count_reseed_served(outcome);
    }
}

/// Offers and sends the snapshot; `Ok(None)`: refused (no snapshot to vouch for).
fn offer(
    shared: &Shared,
    stream: &mut TcpStream,
    term: u64,
) -> Result<Option<(u64, u64)>, ProtocolError> {
    stream.set_write_timeout(Some(shared.config.io_timeout))?;
    let first = shared.journal.first_seq();
    let found = match &shared.config.snapshots {
        Some(source) => (source.0)(first.saturating_sub(1)),
        None => Ok(None),
    };
    let refuse = |stream: &mut TcpStream, message: String| {
        tracing::warn!(%message, "refusing a reseed");
        let _ = send_refusal(shared, stream, refusal::NO_SNAPSHOT, message, None);
        Ok(None)
    };
    let snap = match found {
        Ok(Some(s)) => s,
        Ok(None) => return refuse(stream, "this active has no snapshot yet".into()),
        Err(e) => return refuse(stream, format!("cannot read this active's snapshot: {e}")),
    };
    match journal_digest(shared, snap.seq) {
        Ok(Some(d)) if d == snap.digest => {}
        Ok(Some(_)) => {
            let msg = format!(
                "snapshot {} does not match this journal",
                snap.path.display()
            );
            return refuse(stream, msg);
        }
        Ok(None) => {
            let msg = format!("seq {} is no longer in this journal", snap.seq);
            return refuse(stream, msg);
        }
        Err(e) => return refuse(stream, e.to_string()),
    }
    let mut file = std::fs::File::open(&snap.path)?;
    let bytes = file.metadata()?.len();
    write_message(
        stream,
        &Message::SnapshotOffer {
            term,
            seq: snap.seq,
            snap_term: snap.term,
            digest: snap.digest.to_vec(),
            bytes,
        },
    )?;
    send_chunks(shared, stream, &mut file, bytes, term)?;
    let _ = stream.shutdown(std::net::Shutdown::Write);
    Ok(Some((snap.seq, bytes)))
}

/// Streams `bytes` bytes of `file`, one bounded buffer at a time, while `term` is current.
fn send_chunks(
    shared: &Shared,
    stream: &mut TcpStream,
    file: &mut std::fs::File,
    bytes: u64,
    term: u64,
) -> Result<(), ProtocolError> {
    let chunk = shared
        .config
        .reseed_chunk_bytes
        .clamp(1, super::protocol::MAX_SNAPSHOT_CHUNK);
    let mut buf = vec![0u8; chunk];
    let mut sent = 0u64;
    while sent < bytes {
        if shared.stop.load(Ordering::Acquire) || (shared.term)() != Some(term) {
            return Err(ProtocolError::Unexpected("term ended during a reseed"));
        }
        let want = (bytes - sent).min(chunk as u64) as usize;
        file.read_exact(&mut buf[..want])?;
        write_message(
            stream,
            &Message::SnapshotChunk {
                data: buf[..want].to_vec(),
            },
        )?;
        sent += want as u64;
        if sent < bytes {
            crescent_crash::point(crescent_crash::points::RESEED_SERVE_AFTER_CHUNK);
        }
    }
    Ok(())
}

/// The digest this journal holds at `seq` (`None`: not held any more).
fn journal_digest(shared: &Shared, seq: u64) -> Result<Option<Digest>, JournalError> {
    let journal = &shared.journal;
    if seq == 0 {
        return Ok(Some(crate::record::GENESIS_DIGEST));
    }
    if let Some((_, _, digest)) = journal.base().filter(|(base, _, _)| *base == seq) {
        return Ok(Some(digest));
    }
    if seq < journal.first_seq() || seq > journal.durable().get() {
        return Ok(None);
    }
    let mut out = None;
    journal.visit_range(seq, seq, |r| {
        out = Some(*r.digest);
        Ok::<_, JournalError>(())
    })?;
    Ok(out)
}
