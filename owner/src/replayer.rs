//! Replaying an owner's table to crescentd after a new leader term: snapshot the table under
//! its short lock, send bounded batches outside it, retry transient failures with backoff,
//! then signal completion. Per-entry outcomes are isolated: a rejected entry fails only
//! itself; a stale one is dropped from the table (crescentd holds something newer).
//! Completion covers only this owner's own table: notices this process still owes other owners
//! never hold it up. Memory registration is untouched: the owner keeps serving its segment.

use futures::StreamExt;
use std::time::Duration;

use crescent_wire::rebuild::{
    GateStatus, RebuildCompleteReply, RebuildCompleteRequest, RebuildReplayReply,
    RebuildReplayRequest, ReplayCounts, ReplayOutcome, MAX_REPLAY_BATCH, REBUILD_WIRE_VERSION,
};
use crescent_wire::{ApiError, ErrorCode};
use futures::future::BoxFuture;
use tracing::Instrument;

use crescent_client::ownership::{OwnedReplica, OwnershipTable};
use crescent_client::{ClientError, CrescentClient, RebuildMetrics};

/// Where replays go: crescentd's rebuild endpoints (a fake in tests).
pub trait RebuildSink: Send + Sync {
    fn replay<'a>(
        &'a self,
        req: &'a RebuildReplayRequest,
    ) -> BoxFuture<'a, Result<RebuildReplayReply, ClientError>>;

    fn complete<'a>(
        &'a self,
        req: &'a RebuildCompleteRequest,
    ) -> BoxFuture<'a, Result<RebuildCompleteReply, ClientError>>;
}

impl RebuildSink for CrescentClient {
    fn replay<'a>(
        &'a self,
        req: &'a RebuildReplayRequest,
    ) -> BoxFuture<'a, Result<RebuildReplayReply, ClientError>> {
        Box::pin(self.rebuild_replay(req))
    }

    fn complete<'a>(
        &'a self,
        req: &'a RebuildCompleteRequest,
    ) -> BoxFuture<'a, Result<RebuildCompleteReply, ClientError>> {
        Box::pin(self.rebuild_complete(req))
    }
}

/// Batch size and retry pacing of a replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayConfig {
    pub batch_entries: usize,
    /// Batches sent before the first reply is back. Replay is bound by round trips, not by
    /// either side's CPU (measured with `cargo bench -p crescent-tests --bench rebuild`), so
    /// a few batches in flight per owner shorten the gate's closed time.
    pub batches_in_flight: usize,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    /// Attempts per request (batch or completion) before the replay gives up; the owner
    /// starts over on its next heartbeat.
    pub max_attempts: u32,
}

impl Default for ReplayConfig {
    fn default() -> Self {
        Self {
            batch_entries: 1024,
            batches_in_flight: 4,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(10),
            max_attempts: 12,
        }
    }
}

/// What a finished replay did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayReport {
    pub term: u64,
    pub batches: u64,
    pub counts: ReplayCounts,
    /// Stale entries dropped from the table.
    pub dropped_stale: u64,
    pub gate: GateStatus,
}

fn superseded(term: u64) -> ClientError {
    ClientError::Api(ApiError::new(
        ErrorCode::StaleGeneration,
        format!("replay for term {term} superseded by a newer term"),
    ))
}

/// Calls `op` until it succeeds, fails permanently, the term moves on, or attempts run out.
async fn with_retries<T, F>(
    config: &ReplayConfig,
    term: u64,
    still_current: &(dyn Fn(u64) -> bool + Send + Sync),
    metrics: &RebuildMetrics,
    mut op: F,
) -> Result<T, ClientError>
where
    F: FnMut() -> BoxFuture<'static, Result<T, ClientError>>,
{
    let mut backoff = config.initial_backoff;
    let mut attempt = 1;
    loop {
        if !still_current(term) {
            return Err(superseded(term));
        }
        match op().await {
            Ok(v) => return Ok(v),
            Err(e) if e.retryable() && attempt < config.max_attempts => {
                metrics.replay_batch("retried");
                tracing::info!(term, attempt, error = %e, "replay request failed; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(config.max_backoff);
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Replays `table` for `term` through `sink` and signals completion. `still_current(term)`
/// says whether `term` is still the leader's (a newer term aborts this replay: the owner
/// starts one for the new term).
pub async fn replay_table<S: RebuildSink + Clone + 'static>(
    sink: &S,
    table: &OwnershipTable,
    owner_id: &str,
    term: u64,
    still_current: &(dyn Fn(u64) -> bool + Send + Sync),
    config: &ReplayConfig,
    metrics: &RebuildMetrics,
) -> Result<ReplayReport, ClientError> {
    let span = tracing::info_span!("owner.replay", owner_id, term);
    replay_inner(sink, table, owner_id, term, still_current, config, metrics)
        .instrument(span)
        .await
}

/// One replay batch, retried; resolves to the batch and its reply.
fn send_batch<'a, S: RebuildSink + Clone + 'static>(
    sink: &S,
    chunk: &'a [OwnedReplica],
    owner_id: &str,
    term: u64,
    still_current: &'a (dyn Fn(u64) -> bool + Send + Sync),
    config: &'a ReplayConfig,
    metrics: &'a RebuildMetrics,
) -> BoxFuture<'a, (&'a [OwnedReplica], Result<RebuildReplayReply, ClientError>)> {
    let req = std::sync::Arc::new(RebuildReplayRequest {
        version: REBUILD_WIRE_VERSION,
        owner_id: owner_id.to_string(),
        term,
        entries: chunk.iter().map(|r| r.to_entry()).collect(),
    });
    let sink = sink.clone();
    Box::pin(async move {
        let reply = with_retries(config, term, still_current, metrics, move || {
            let sink = sink.clone();
            let req = req.clone();
            Box::pin(async move { sink.replay(&req).await })
        })
        .await;
        (chunk, reply)
    })
}

/// Counts a replayed batch's outcomes into `report` and the metrics; a stale entry leaves
/// the table unless it changed meanwhile. The batch's gate status becomes the report's.
fn count_batch(
    table: &OwnershipTable,
    chunk: &[OwnedReplica],
    reply: RebuildReplayReply,
    report: &mut ReplayReport,
    metrics: &RebuildMetrics,
) {
    report.batches += 1;
    for (replica, o) in chunk.iter().zip(&reply.outcomes) {
        report.counts.add(o.outcome, 1);
        metrics.replay_entry(o.outcome);
        match o.outcome {
            ReplayOutcome::Stale => {
                if table.forget_if_unchanged(replica) {
                    report.dropped_stale += 1;
                }
            }
            ReplayOutcome::Rejected => tracing::debug!(key = %replica.id.key,
                segment = %replica.segment_id, reason = ?o.reason, "replay entry rejected"),
            ReplayOutcome::Replayed | ReplayOutcome::Duplicate => {}
        }
    }
    report.gate = reply.gate;
}

async fn replay_inner<S: RebuildSink + Clone + 'static>(
    sink: &S,
    table: &OwnershipTable,
    owner_id: &str,
    term: u64,
    still_current: &(dyn Fn(u64) -> bool + Send + Sync),
    config: &ReplayConfig,
    metrics: &RebuildMetrics,
) -> Result<ReplayReport, ClientError> {
    let snapshot = table.snapshot();
    let batch_entries = config.batch_entries.clamp(1, MAX_REPLAY_BATCH);
    let mut report = ReplayReport {
        term,
        batches: 0,
        counts: ReplayCounts::default(),
        dropped_stale: 0,
        gate: GateStatus {
            version: REBUILD_WIRE_VERSION,
            state: crescent_wire::rebuild::GateState::Rebuilding,
            term,
            owners_expected: 0,
            owners_completed: 0,
            owners_lost: 0,
            waiting_for: Vec::new(),
            entries: ReplayCounts::default(),
            started_at_ms: 0,
            opened_at_ms: None,
        },
    };
    // Batches go out `batches_in_flight` at a time; replies are taken in order. Entries are
    // independent (the master merges each by its own fences), so the order in which the
    // master sees batches does not matter; the in-order walk keeps the report simple.
    // By index rather than over `chunks()`: a stream mapping borrowed chunks trips rustc's
    // higher-ranked lifetime check once the owner spawns the replay (rust-lang/rust#64552).
    let snapshot = &snapshot;
    let requests = (0..snapshot.len().div_ceil(batch_entries)).map(move |i| {
        let chunk = &snapshot[i * batch_entries..((i + 1) * batch_entries).min(snapshot.len())];
        send_batch(sink, chunk, owner_id, term, still_current, config, metrics)
    });
    let mut replies =
        futures::stream::iter(requests).buffered(config.batches_in_flight.clamp(1, 64));
    while let Some((chunk, reply)) = replies.next().await {
        let reply = match reply {
            Ok(r) => r,
            Err(e) => {
                metrics.replay_batch("failed");
                return Err(e);
            }
        };
        if reply.outcomes.len() != chunk.len() {
            metrics.replay_batch("failed");
            return Err(ClientError::Protocol(format!(
                "{} outcomes for a batch of {}",
                reply.outcomes.len(),
                chunk.len()
            )));
        }
        metrics.replay_batch("ok");
        count_batch(table, chunk, reply, &mut report, metrics);
    }
    if report.counts.rejected > 0 {
        tracing::warn!(
            rejected = report.counts.rejected,
            "replay entries were not eligible"
        );
    }
    let done = RebuildCompleteRequest {
        version: REBUILD_WIRE_VERSION,
        owner_id: owner_id.to_string(),
        term,
        counts: report.counts,
    };
    let sink2 = sink.clone();
    let done = std::sync::Arc::new(done);
    let reply = with_retries(config, term, still_current, metrics, move || {
        let sink = sink2.clone();
        let done = done.clone();
        Box::pin(async move { sink.complete(&done).await })
    })
    .await?;
    report.gate = reply.gate;
    tracing::info!(batches = report.batches, replayed = report.counts.replayed,
        duplicate = report.counts.duplicate, stale = report.counts.stale,
        rejected = report.counts.rejected, gate = %report.gate.state, "ownership table replayed");
    Ok(report)
}

#[cfg(test)]
#[path = "replayer_tests.rs"]
mod tests;
