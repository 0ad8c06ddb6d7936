//! Owner notices, delivered before a put is ended: a writer that wrote a replica into another
//! owner's segment has that owner record it in its ownership table, and waits for the answer,
//! before it sends put_end. So an acknowledged put is in the table of every owner holding one
//! of its replicas whatever the writer does next (a CLI process exits at once, a library
//! writer is killed), and the owners replay it after a crescentd restart or failover
//! (docs/rebuild.md, "Owners record before the ack").
//!
//! One notice per owner per put or batch (chunks of `MAX_REPLAY_BATCH` entries), sent
//! concurrently; a retryable failure (connection lost, timeout) is tried again a few times
//! with a short backoff, then the put fails with `DURABILITY_FAILED` and is revoked.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crescent_wire::rebuild::{
    NoticeOutcome, OwnerNotice, OwnerNoticeReply, ReplayEntry, MAX_REPLAY_BATCH,
};
use futures::future::{join_all, BoxFuture};

use crate::metrics::RebuildMetrics;

/// Why a notice could not be delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendFailure {
    /// The owner may answer later (unreachable, timed out).
    Retryable(String),
    /// The owner cannot take notices (no handler, refused the message).
    Refused(String),
}

impl SendFailure {
    fn reason(&self) -> &'static str {
        match self {
            SendFailure::Retryable(_) => "unreachable",
            SendFailure::Refused(_) => "refused",
        }
    }

    fn detail(&self) -> &str {
        match self {
            SendFailure::Retryable(why) | SendFailure::Refused(why) => why,
        }
    }
}

/// Delivers one notice to an owner's endpoint.
pub trait NoticeSender: Send + Sync + 'static {
    fn send<'a>(
        &'a self,
        endpoint: &'a str,
        notice: &'a OwnerNotice,
    ) -> BoxFuture<'a, Result<OwnerNoticeReply, SendFailure>>;
}

/// The owner a notice goes to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NoticeTarget {
    /// The owner's transfer endpoint (`HOST:PORT`).
    pub endpoint: Arc<str>,
    pub owner_id: Arc<str>,
}

/// How hard a notice is tried before its put fails.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotifyConfig {
    /// Sends per notice (at least 1).
    pub attempts: u32,
    /// Wait after the first failure, doubled after each further one.
    pub initial_backoff: Duration,
}

impl Default for NotifyConfig {
    fn default() -> Self {
        Self {
            attempts: 3,
            initial_backoff: Duration::from_millis(50),
        }
    }
}

/// Why an entry was not recorded by its owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotRecorded {
    pub owner_id: Arc<str>,
    pub endpoint: Arc<str>,
    pub detail: String,
}

/// Entries to record, each tagged with the caller's index (the put it belongs to).
pub type TaggedEntries = HashMap<NoticeTarget, Vec<(usize, ReplayEntry)>>;

pub struct Notifier {
    config: NotifyConfig,
    sender: Arc<dyn NoticeSender>,
    metrics: RebuildMetrics,
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifier")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Notifier {
    pub fn new(
        config: NotifyConfig,
        sender: Arc<dyn NoticeSender>,
        metrics: RebuildMetrics,
    ) -> Self {
        Self {
            config,
            sender,
            metrics,
        }
    }

    /// Has every owner record its entries, all owners at once, and returns the failures by
    /// tag: an entry is recorded when its owner answered `Recorded` or `Stale` (it holds a
    /// newer put of the key or address: crescentd settles which wins); `Rejected` (not a
    /// segment it serves) or an undelivered notice fails the entry's tag.
    pub async fn record(&self, entries: TaggedEntries) -> HashMap<usize, NotRecorded> {
        let mut chunks = Vec::new();
        for (target, tagged) in entries {
            for chunk in tagged.chunks(MAX_REPLAY_BATCH) {
                chunks.push((target.clone(), chunk.to_vec()));
            }
        }
        let sends = chunks.iter().map(|(t, c)| self.deliver(t, c));
        let answers = join_all(sends).await;
        let mut failed = HashMap::new();
        for ((target, chunk), answer) in chunks.iter().zip(answers) {
            let not_recorded = |detail: String| NotRecorded {
                owner_id: target.owner_id.clone(),
                endpoint: target.endpoint.clone(),
                detail,
            };
            match answer {
                Ok(outcomes) => {
                    for ((tag, _), outcome) in chunk.iter().zip(outcomes) {
                        self.metrics.notice_settled(outcome);
                        if outcome == NoticeOutcome::Rejected {
                            failed.entry(*tag).or_insert_with(|| {
                                not_recorded("the owner does not serve that segment".into())
                            });
                        }
                    }
                }
                Err(e) => {
                    self.metrics.notices_failed(e.reason(), chunk.len() as u64);
                    for (tag, _) in chunk {
                        failed
                            .entry(*tag)
                            .or_insert_with(|| not_recorded(e.detail().to_string()));
                    }
                }
            }
        }
        failed
    }

    /// One chunk to one owner, retried on retryable failures; the outcomes in entry order.
    async fn deliver(
        &self,
        target: &NoticeTarget,
        chunk: &[(usize, ReplayEntry)],
    ) -> Result<Vec<NoticeOutcome>, SendFailure> {
        let notice = OwnerNotice {
            version: crescent_wire::rebuild::REBUILD_WIRE_VERSION,
            owner_id: target.owner_id.to_string(),
            entries: chunk.iter().map(|(_, e)| e.clone()).collect(),
        };
        let mut backoff = self.config.initial_backoff;
        let mut attempt = 1;
        loop {
            let sent = self.sender.send(&target.endpoint, &notice).await;
            let failure = match sent {
                Ok(reply) if reply.outcomes.len() == chunk.len() => return Ok(reply.outcomes),
                Ok(reply) => SendFailure::Refused(format!(
                    "{} outcomes for {} entries",
                    reply.outcomes.len(),
                    chunk.len()
                )),
                Err(e) => e,
            };
            if matches!(failure, SendFailure::Refused(_)) || attempt >= self.config.attempts {
                tracing::warn!(
                    endpoint = %target.endpoint,
                    owner = %target.owner_id,
                    attempt,
                    error = failure.detail(),
                    "owner notice not delivered"
                );
                return Err(failure);
            }
            tracing::debug!(endpoint = %target.endpoint, attempt, error = failure.detail(),
                "owner notice failed; retrying");
            tokio::time::sleep(backoff).await;
            backoff = backoff.saturating_mul(2);
            attempt += 1;
        }
    }
}

#[cfg(test)]
#[path = "notifier_tests.rs"]
mod tests;
