//! Running a request against the current leader across a failover (docs/ha.md, "Clients").
//!
//! Every request names its [`Retry`] class. On a failure that suggests another leader (NOT_LEADER,
//! no connection, a broken connection, FENCED, UNAVAILABLE) the leader locator re-resolves
//! and the request is sent again, with exponential backoff, until the failover deadline:
//!
//! - [`Retry::Idempotent`] requests (reads, heartbeats, replay batches, put_start, mounts) are
//!   sent again after any such failure;
//! - [`Retry::NotIdempotent`] ones (remove, put_end, unmount, weight mutations) only when
//!   crescentd certainly did not run them (NOT_LEADER, no connection made, an UNAVAILABLE the
//!   server marks `not_run`: the rebuild gate's REBUILDING); after a failure that may have
//!   followed their execution they fail with [`ClientError::Interrupted`]
//!   (`FAILOVER_INTERRUPTED`) instead of running twice.
//!
//! With a single static server and no etcd, a connection that cannot be made before the
//! client was ever answered fails at once (a wrong address, or nothing running: waiting cannot
//! help); the wait is for sources that can change, and for a server that answered before and
//! is restarting.
//!
//! A refusal that proves nothing ran is retried up to the failover deadline for every class;
//! at the deadline the server's own error is returned (UNAVAILABLE with its `state`, say
//! REBUILDING), never FAILOVER_INTERRUPTED: nothing was interrupted.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crescent_wire::rpc::RpcOp;
use crescent_wire::ErrorCode;
use reqwest::Url;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::time::Instant;
use tracing::Instrument;

use crate::client::CrescentClient;
use crate::error::ClientError;
use crate::failover_metrics::{LeaderSource, RetryReason};
use crate::http::Routes;
use crate::leader::Current;
use crate::server_conn::ServerConn;

/// Whether a request may be sent twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    Idempotent,
    NotIdempotent,
}

/// How long and how fast requests are retried across a failover.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailoverConfig {
    /// Overall deadline of one request, retries included (well above a failover: the lease
    /// TTL plus promotion and the rebuild gate).
    pub timeout: Duration,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
}

impl Default for FailoverConfig {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(15),
            initial_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(1),
        }
    }
}

/// After switching to another server a request is sent again at once this many times; later
/// attempts back off (a dead node and a standby still naming it must not make it spin).
const IMMEDIATE_SWITCHES: u32 = 2;

/// What a failure says about the request and the leader.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Failure {
    /// Not a failover matter: returned as is.
    Final,
    /// crescentd certainly did not run the request.
    NotRun {
        reason: RetryReason,
        hint: Option<String>,
    },
    /// The request may have run before the failure.
    MaybeRun { reason: RetryReason },
}

/// Classifies a failed request.
pub(crate) fn classify(e: &ClientError) -> Failure {
    match e {
        ClientError::Api(api) => match api.code {
            ErrorCode::NotLeader => Failure::NotRun {
                reason: RetryReason::NotLeader,
                hint: api.leader.clone(),
            },
            // Refused before running: the server says so (`not_run`), or, from a server that
            // predates the flag, the gate's REBUILDING message does.
            ErrorCode::Unavailable if api.not_run || crescent_wire::rebuild::is_rebuilding(api) => {
                Failure::NotRun {
                    reason: RetryReason::NotRun,
                    hint: None,
                }
            }
            ErrorCode::Unavailable => Failure::MaybeRun {
                reason: RetryReason::Unavailable,
            },
            // A deposed active: its pending replies fail with FENCED too, after their append.
            ErrorCode::Fenced => Failure::MaybeRun {
                reason: RetryReason::Fenced,
            },
            _ => Failure::Final,
        },
        // No connection was made: nothing was sent.
        ClientError::Connect { source, .. } if source.is_connect() => Failure::NotRun {
            reason: RetryReason::Connect,
            hint: None,
        },
        // Sent, then lost (reset, timeout): the server may have run it. An RPC request that
        // never left falls back to HTTP inside `ServerConn::call`, so an RPC error is this.
        ClientError::Connect { .. } | ClientError::Rpc { .. } => Failure::MaybeRun {
            reason: RetryReason::Connect,
        },
        _ => Failure::Final,
    }
}

/// The retry class of an object operation.
pub(crate) fn retry_for(op: RpcOp) -> Retry {
    match op {
        RpcOp::Get
        | RpcOp::Exist
        | RpcOp::Size
        | RpcOp::BatchGet
        | RpcOp::BatchExist
        | RpcOp::Heartbeat
        // A put_start allocates nothing for a key that holds the content (already_exists);
        // one repeated on the same leader after a lost answer is refused BUSY, not doubled.
        | RpcOp::PutStart
        | RpcOp::BatchPutStart
        | RpcOp::BatchGetCompact
        | RpcOp::BatchPutStartCompact => Retry::Idempotent,
        RpcOp::PutEnd
        | RpcOp::PutRevoke
        | RpcOp::BatchPutEnd
        | RpcOp::BatchPutEndCompact
        | RpcOp::BatchPutRevoke
        | RpcOp::Remove
        | RpcOp::BatchRemove
        // A release ends one reader's share of a lease: sent twice it could end another's.
        | RpcOp::Release
        | RpcOp::BatchRelease => Retry::NotIdempotent,
    }
}

impl CrescentClient {
    /// Runs `f` against the current leader, following leader changes as described in the
    /// module docs. Returns the answer and the leader (with its epoch) that gave it.
    pub(crate) async fn with_leader<T, F, Fut>(
        &self,
        op: &'static str,
        retry: Retry,
        f: F,
    ) -> Result<(T, Current), ClientError>
    where
        F: Fn(Arc<ServerConn>) -> Fut,
        Fut: Future<Output = Result<T, ClientError>>,
    {
        self.leader_attempts(op, retry, f)
            .instrument(tracing::debug_span!("client.leader_request", op))
            .await
    }

    /// Why the failed attempt `e` of `op` on `current` may be sent again, and the leader hint
    /// it carried; `Err` when it may not: a final error, a refused connection with no other
    /// leader possible, or a non-idempotent request that may have run (`Interrupted`).
    fn retryable(
        &self,
        e: ClientError,
        op: &'static str,
        retry: Retry,
        current: &Current,
    ) -> Result<(ClientError, RetryReason, Option<String>), ClientError> {
        let locator = &self.locator;
        match classify(&e) {
            Failure::Final => Err(e),
            // One static server that never answered and nothing listening: no other leader
            // can appear, so the refusal is the answer (a NOT_LEADER hint or a REBUILDING
            // gate still waits; so does a server that answered before: a restart).
            Failure::NotRun {
                reason: RetryReason::Connect,
                ..
            } if !locator.can_move() => Err(e),
            Failure::MaybeRun { .. } if retry == Retry::NotIdempotent => {
                locator.after_failure(current, None);
                locator.metrics().interrupted(op);
                tracing::warn!(op, server = current.conn.server(), error = %e,
                    "not idempotent; not retried after a failure that may follow its execution");
                Err(ClientError::Interrupted {
                    op,
                    detail: format!("{e} (at {})", current.conn.server()),
                })
            }
            Failure::MaybeRun { reason } => Ok((e, reason, None)),
            Failure::NotRun { reason, hint } => Ok((e, reason, hint)),
        }
    }

    async fn leader_attempts<T, F, Fut>(
        &self,
        op: &'static str,
        retry: Retry,
        f: F,
    ) -> Result<(T, Current), ClientError>
    where
        F: Fn(Arc<ServerConn>) -> Fut,
        Fut: Future<Output = Result<T, ClientError>>,
    {
        let locator = &self.locator;
        let config = &self.failover;
        let deadline = Instant::now() + config.timeout;
        let mut epochs = locator.subscribe();
        let mut backoff = config.initial_backoff;
        let mut immediate = 0;
        loop {
            epochs.borrow_and_update();
            let Some(current) = locator.current() else {
                locator.metrics().retried(RetryReason::NoLeader);
                if !wait_for_change(&mut epochs, deadline, deadline).await {
                    locator.metrics().exhausted(op);
                    return Err(ClientError::NoLeader {
                        waited: config.timeout,
                        detail: locator.describe(),
                    });
                }
                continue;
            };
            let attempt = f(current.conn.clone());
            let outcome = match retry {
                // A leader change while an idempotent request waits (say on a frozen old
                // leader) abandons it for the new leader instead of waiting out its timeout.
                Retry::Idempotent => {
                    let mut moved = locator.subscribe();
                    let epoch = current.epoch;
                    tokio::select! {
                        r = attempt => Some(r),
                        _ = moved.wait_for(|e| *e != epoch) => None,
                    }
                }
                Retry::NotIdempotent => Some(attempt.await),
            };
            let e = match outcome {
                Some(Ok(v)) => {
                    locator.mark_reached();
                    return Ok((v, current));
                }
                Some(Err(e)) => e,
                None => {
                    locator.metrics().retried(RetryReason::LeaderChanged);
                    tracing::debug!(
                        op,
                        from = current.conn.server(),
                        "leader changed; sending again"
                    );
                    continue;
                }
            };
            let (e, reason, hint) = self.retryable(e, op, retry, &current)?;
            let switched = locator.after_failure(&current, hint.as_deref());
            let now = Instant::now();
            if now >= deadline {
                locator.metrics().exhausted(op);
                tracing::warn!(op, error = %e, timeout = ?config.timeout,
                    "giving up at the failover deadline");
                return Err(e);
            }
            locator.metrics().retried(reason);
            tracing::debug!(op, server = current.conn.server(), error = %e, reason = reason.label(),
                switched = switched.map(LeaderSource::label), "retrying on the leader");
            if switched.is_some() && immediate < IMMEDIATE_SWITCHES {
                immediate += 1;
                continue;
            }
            // Our own switch is not news; wait for the backoff or someone else's switch.
            epochs.borrow_and_update();
            wait_for_change(&mut epochs, now + backoff, deadline).await;
            backoff = (backoff * 2).min(config.max_backoff);
        }
    }

    /// Runs one object operation on the leader (RPC fast path or HTTP), retried per
    /// [`retry_for`].
    pub(crate) async fn call<B, T>(&self, op: RpcOp, body: &B) -> Result<T, ClientError>
    where
        B: Serialize,
        T: DeserializeOwned,
    {
        self.call_at(op, body).await.map(|(v, _)| v)
    }

    /// [`CrescentClient::call`], also returning the leader that answered (for a put_end that
    /// must reach the same one).
    pub(crate) async fn call_at<B, T>(
        &self,
        op: RpcOp,
        body: &B,
    ) -> Result<(T, Current), ClientError>
    where
        B: Serialize,
        T: DeserializeOwned,
    {
        self.with_leader(op.as_str(), retry_for(op), |conn| async move {
            conn.call(op, body).await
        })
        .await
    }

    /// [`CrescentClient::call_at`] for an op of an optional RPC feature: `Ok(None)` when the
    /// leader does not serve `feature` (no RPC fast path, or a server that predates it), and
    /// the caller then uses the classic op.
    pub(crate) async fn call_feature_at<B, T>(
        &self,
        feature: &'static str,
        op: RpcOp,
        body: &B,
    ) -> Result<Option<(T, Current)>, ClientError>
    where
        B: Serialize,
        T: DeserializeOwned,
    {
        let (answer, at) = self
            .with_leader(op.as_str(), retry_for(op), |conn| async move {
                conn.call_feature(feature, op, body).await
            })
            .await?;
        Ok(answer.map(|a| (a, at)))
    }

    /// Sends the second half of a two-phase operation to the leader that answered the first
    /// (`at`), once. If that leader is no longer current, or the request fails in a
    /// failover-like way, the operation fails with FAILOVER_INTERRUPTED: the new leader does
    /// not know what the old one started.
    pub(crate) async fn call_pinned<B, T>(
        &self,
        at: &Current,
        op: RpcOp,
        body: &B,
    ) -> Result<T, ClientError>
    where
        B: Serialize,
        T: DeserializeOwned,
    {
        self.run_pinned(at, op, at.conn.call(op, body)).await
    }

    /// [`CrescentClient::call_pinned`] for an op of an optional RPC feature: `Ok(None)` (and
    /// nothing sent) when the leader `at` does not serve `feature`; the caller then sends the
    /// classic op.
    pub(crate) async fn call_feature_pinned<B, T>(
        &self,
        at: &Current,
        feature: &'static str,
        op: RpcOp,
        body: &B,
    ) -> Result<Option<T>, ClientError>
    where
        B: Serialize,
        T: DeserializeOwned,
    {
        self.run_pinned(at, op, at.conn.call_feature(feature, op, body))
            .await
    }

    /// Runs `send` (a request to `at`, not yet polled so nothing is sent before the leader
    /// check) once, turning a failover-like failure into FAILOVER_INTERRUPTED.
    async fn run_pinned<T>(
        &self,
        at: &Current,
        op: RpcOp,
        send: impl std::future::Future<Output = Result<T, ClientError>>,
    ) -> Result<T, ClientError> {
        let name = op.as_str();
        if !self.locator.is_current(at.epoch) {
            self.locator.metrics().interrupted(name);
            return Err(ClientError::Interrupted {
                op: name,
                detail: format!(
                    "started on {}, which is no longer the leader; nothing was sent",
                    at.conn.server()
                ),
            });
        }
        let e = match send.await {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        match classify(&e) {
            Failure::Final => Err(e),
            Failure::NotRun { hint, .. } => {
                self.locator.after_failure(at, hint.as_deref());
                self.locator.metrics().interrupted(name);
                Err(ClientError::Interrupted {
                    op: name,
                    detail: format!(
                        "{} at {}, which started it; it did not take effect",
                        e.code_str(),
                        at.conn.server()
                    ),
                })
            }
            Failure::MaybeRun { .. } => {
                self.locator.after_failure(at, None);
                self.locator.metrics().interrupted(name);
                Err(ClientError::Interrupted {
                    op: name,
                    detail: format!("{e} (at {})", at.conn.server()),
                })
            }
        }
    }

    /// POSTs `body` to one of the leader's parsed routes with retry class `retry`.
    pub(crate) async fn post_to<B, T>(
        &self,
        op: &'static str,
        retry: Retry,
        route: fn(&Routes) -> &Url,
        body: &B,
    ) -> Result<T, ClientError>
    where
        B: Serialize,
        T: DeserializeOwned,
    {
        self.with_leader(op, retry, |conn| async move {
            conn.http.post(route(&conn.http.routes), body).await
        })
        .await
        .map(|(v, _)| v)
    }

    /// GETs one of the leader's parsed routes; reads are idempotent.
    pub(crate) async fn get_from<T: DeserializeOwned>(
        &self,
        op: &'static str,
        route: fn(&Routes) -> &Url,
    ) -> Result<T, ClientError> {
        self.with_leader(op, Retry::Idempotent, |conn| async move {
            conn.http.get(route(&conn.http.routes)).await
        })
        .await
        .map(|(v, _)| v)
    }

    /// POSTs `body` to the leader's `route` (an absolute path) with retry class `retry`.
    pub(crate) async fn post_route<B, T>(
        &self,
        op: &'static str,
        retry: Retry,
        route: &str,
        body: &B,
    ) -> Result<T, ClientError>
    where
        B: Serialize,
        T: DeserializeOwned,
    {
        self.post_route_at(op, retry, route, body)
            .await
            .map(|(v, _)| v)
    }

    /// [`CrescentClient::post_route`], also returning the leader that answered: the first half
    /// of a two-phase operation whose second half must reach that same leader
    /// ([`CrescentClient::call_pinned`]), not whichever is current by then.
    pub(crate) async fn post_route_at<B, T>(
        &self,
        op: &'static str,
        retry: Retry,
        route: &str,
        body: &B,
    ) -> Result<(T, Current), ClientError>
    where
        B: Serialize,
        T: DeserializeOwned,
    {
        self.with_leader(op, retry, |conn| async move {
            let url = conn.http.url(route)?;
            conn.http.post(&url, body).await
        })
        .await
    }

    /// GETs the leader's `route` (an absolute path); reads are idempotent.
    pub(crate) async fn get_route<T: DeserializeOwned>(
        &self,
        op: &'static str,
        route: &str,
    ) -> Result<T, ClientError> {
        self.with_leader(op, Retry::Idempotent, |conn| async move {
            let url = conn.http.url(route)?;
            conn.http.get(&url).await
        })
        .await
        .map(|(v, _)| v)
    }
}

/// Waits until the leader epoch changes or `until`, whichever is first (never past
/// `deadline`). Returns whether the epoch changed.
async fn wait_for_change(
    epochs: &mut tokio::sync::watch::Receiver<u64>,
    until: Instant,
    deadline: Instant,
) -> bool {
    let until = until.min(deadline);
    matches!(
        tokio::time::timeout_at(until, epochs.changed()).await,
        Ok(Ok(()))
    )
}

#[cfg(test)]
#[path = "failover_tests.rs"]
mod tests;
