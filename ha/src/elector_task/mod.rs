//! The election loop run by [`crate::Elector`]: campaign when the rule allows, then hold the
//! lease with a local deadline that always expires before etcd's.

mod campaign;
mod schedule;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{
    Client, LeaseKeepAliveStream, LeaseKeeper, Txn, TxnOp, TxnOpResponse, WatchOptions,
};
use tokio::sync::watch;
use tokio::time::{sleep, sleep_until, Instant};
use tracing::{debug, info, info_span, warn, Instrument};

use crate::config::{ClusterKeys, ElectorConfig};
use crate::eligibility::{campaign_eligibility, CampaignBlock};
use crate::error::HaError;
use crate::etcd::bounded;
use crate::fence::LeaderFence;
use crate::metrics::HaMetrics;
use crate::records::{LeaderRecord, ReplicationMarker};
use crate::role::{LeaderInfo, Role, StepDownReason};
use schedule::RenewalSchedule;

/// Fault injection: while set, the elector sends no keep-alive, does not revoke and does not
/// campaign, as if etcd were unreachable. It can only shorten a leadership, never extend it.
#[derive(Debug, Clone, Default)]
pub(crate) struct PauseSwitch(Arc<Mutex<Option<Instant>>>);

impl PauseSwitch {
    pub(crate) fn pause_for(&self, d: Duration) {
        *self.0.lock().expect("pause lock") = Some(Instant::now() + d);
    }

    fn until(&self) -> Option<Instant> {
        let until = *self.0.lock().expect("pause lock");
        until.filter(|u| *u > Instant::now())
    }
}

pub(crate) struct ElectorTask {
    pub(crate) config: ElectorConfig,
    pub(crate) keys: ClusterKeys,
    pub(crate) client: Client,
    pub(crate) role_tx: watch::Sender<Role>,
    pub(crate) fence: LeaderFence,
    pub(crate) metrics: HaMetrics,
    pub(crate) pause: PauseSwitch,
    pub(crate) shutdown: watch::Receiver<bool>,
}

/// A won campaign: the term and the lease that holds the leader key.
struct Won {
    term: u64,
    lease_id: i64,
    /// When the lease's last acknowledged renewal (here: its grant) was sent.
    renewed_at: Instant,
    deadline: Instant,
}

enum LeadEnd {
    SteppedDown,
    Shutdown,
}

enum Renewal {
    Renewed { sent_at: Instant, ttl: Duration },
    LeaseGone,
    KeyLost,
}

/// Leader and marker read at one etcd revision.
struct ClusterState {
    revision: i64,
    leader: Option<(etcd_client::KeyValue, Result<LeaderRecord, HaError>)>,
    marker: Option<(i64, Result<ReplicationMarker, HaError>)>,
}

/// Resolves when shutdown was requested or the handle is gone.
async fn shutdown_requested(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|stop| *stop).await;
}

impl ElectorTask {
    pub(crate) async fn run(self) {
        let span =
            info_span!("elector", cluster = %self.config.cluster, node = %self.config.node_name);
        async move {
            let mut shutdown = self.shutdown.clone();
            loop {
                if *shutdown.borrow() || shutdown.has_changed().is_err() {
                    break;
                }
                if let Some(until) = self.pause.until() {
                    tokio::select! {
                        _ = shutdown_requested(&mut shutdown) => break,
                        _ = sleep_until(until) => continue,
                    }
                }
                match self.campaign_round().await {
                    Ok(Some(won)) => match self.lead(won).await {
                        LeadEnd::Shutdown => break,
                        // Give a healthy peer the chance to take over before this node, which
                        // just failed to hold its lease, competes again.
                        LeadEnd::SteppedDown => tokio::select! {
                            _ = shutdown_requested(&mut shutdown) => break,
                            _ = sleep(self.config.lease_ttl) => {}
                        },
                    },
                    Ok(None) => {}
                    Err(e) => {
                        warn!(error = %e, "election round failed; retrying");
                        tokio::select! {
                            _ = shutdown_requested(&mut shutdown) => break,
                            _ = sleep(self.config.retry_interval) => {}
                        }
                    }
                }
            }
            debug!("elector stopped");
        }
        .instrument(span)
        .await;
        // Returning drops `self` and with it the role sender: subscribers see the channel close.
    }

    fn publish(&self, role: Role) {
        self.metrics.set_role(&role);
        self.role_tx.send_if_modified(|current| {
            if *current == role {
                false
            } else {
                *current = role;
                true
            }
        });
    }

    /// One round as a non-leader: read the keys; follow, wait, or campaign. `Ok(None)`: no
    /// win this round (go again).
    async fn campaign_round(&self) -> Result<Option<Won>, HaError> {
        let state = self.read_state().await?;
        if let Some((kv, record)) = &state.leader {
            match record {
                Ok(LeaderRecord {
                    node,
                    address,
                    term: Some(term),
                    ..
                }) if *term == kv.create_revision() as u64 => {
                    self.publish(Role::Follower {
                        leader: LeaderInfo {
                            node: node.clone(),
                            address: address.clone(),
                            term: *term,
                        },
                    });
                }
                // A winner still taking office: not serving yet, but the key is taken.
                Ok(_) => self.publish(Role::Candidate { blocked: None }),
                Err(e) => warn!(error = %e, "leader key holds an unreadable record"),
            }
            self.wait_for_change(state.revision).await;
            return Ok(None);
        }

        let (marker_rev, marker) = match &state.marker {
            None => (0, None),
            Some((rev, Ok(marker))) => (*rev, Some(marker)),
            Some((_, Err(e))) => {
                warn!(error = %e, "not campaigning: the replication marker is unreadable");
                self.publish(Role::Candidate {
                    blocked: Some(CampaignBlock::UnreadableMarker(e.to_string())),
                });
                self.wait_for_change(state.revision).await;
                return Ok(None);
            }
        };
        let hold = self.config.campaign_hold.as_ref().and_then(|h| (h.0)());
        let eligibility = match hold {
            Some(reason) => Err(CampaignBlock::LocalHold(reason)),
            None => campaign_eligibility(&self.config.node_name, marker),
        };
        match eligibility {
            Err(block) => {
                info!(reason = %block, "not campaigning");
                self.publish(Role::Candidate {
                    blocked: Some(block),
                });
                self.wait_for_change(state.revision).await;
                Ok(None)
            }
            Ok(why) => {
                debug!(?why, "eligible; campaigning");
                self.publish(Role::Candidate { blocked: None });
                self.campaign(marker_rev).await
            }
        }
    }

    async fn read_state(&self) -> Result<ClusterState, HaError> {
        let txn = Txn::new().and_then([
            TxnOp::get(self.keys.leader.as_str(), None),
            TxnOp::get(self.keys.replication.as_str(), None),
        ]);
        let mut kv = self.client.kv_client();
        let resp = bounded(
            "read cluster state",
            self.config.request_timeout,
            kv.txn(txn),
        )
        .await?;
        let revision = resp.header().map(|h| h.revision()).unwrap_or(0);
        let mut gets = resp.op_responses().into_iter().map(|r| match r {
            TxnOpResponse::Get(g) => g.kvs().first().cloned(),
            _ => None,
        });
        let leader = gets.next().flatten().map(|kv| {
            let record = LeaderRecord::decode(&self.keys.leader, kv.value());
            (kv, record)
        });
        let marker = gets.next().flatten().map(|kv| {
            (
                kv.mod_revision(),
                ReplicationMarker::decode(&self.keys.replication, kv.value()),
            )
        });
        Ok(ClusterState {
            revision,
            leader,
            marker,
        })
    }

    /// Waits until a key of the cluster changes after `revision`, the recheck interval passes,
    /// or shutdown; a failing watch just turns into a short sleep.
    async fn wait_for_change(&self, revision: i64) {
        let mut shutdown = self.shutdown.clone();
        let mut watch_client = self.client.watch_client();
        let prefix = self.keys.prefix.clone();
        let watch = async move {
            let options = WatchOptions::new()
                .with_prefix()
                .with_start_revision(revision + 1);
            let mut stream = watch_client.watch(prefix, Some(options)).await?;
            while let Some(resp) = stream.message().await? {
                if resp.canceled() || !resp.events().is_empty() {
                    break;
                }
            }
            Ok::<(), etcd_client::Error>(())
        };
        tokio::select! {
            _ = shutdown_requested(&mut shutdown) => {}
            _ = sleep(self.config.recheck_interval) => {}
            result = watch => {
                if let Err(e) = result {
                    debug!(error = %e, "cluster watch failed");
                    sleep(self.config.retry_interval).await;
                }
            }
        }
    }

    /// Holds leadership until the deadline passes, the lease or key is lost, or shutdown.
    ///
    /// Renewals are scheduled from the *send time of the last acknowledged renewal* (the grant,
    /// at first), not from when the previous attempt ended or when office was taken: a
    /// campaign that took half the margin under load is followed by an immediate renewal, not
    /// one a full interval later. A failed or slow attempt is retried within a fraction of the
    /// interval, so several attempts fit between a renewal and the deadline.
    async fn lead(&self, won: Won) -> LeadEnd {
        let Won {
            term,
            lease_id,
            renewed_at,
            mut deadline,
        } = won;
        let span = info_span!("leadership", term);
        self.fence.set(term, deadline.into_std());
        self.metrics.won();
        self.publish(Role::Leader { term });

        let mut shutdown = self.shutdown.clone();
        let schedule = RenewalSchedule::new(&self.config);
        let mut keepalive: Option<(LeaseKeeper, LeaseKeepAliveStream)> = None;
        let mut next_attempt = schedule.after_success(renewed_at, Instant::now());
        let reason = async {
            loop {
                // `biased`: a passed deadline wins over everything, including a renewal that
                // happens to be due at the same time (after the process was frozen).
                tokio::select! {
                    biased;
                    _ = sleep_until(deadline) => return Some(StepDownReason::DeadlinePassed),
                    _ = shutdown_requested(&mut shutdown) => return None,
                    _ = sleep_until(next_attempt) => {}
                }
                if self.pause.until().is_some() {
                    next_attempt = schedule.after_failure(Instant::now());
                    continue;
                }
                let attempt = tokio::time::timeout(
                    schedule.attempt_timeout,
                    self.renew(term, lease_id, &mut keepalive),
                );
                let renewal = tokio::select! {
                    biased;
                    _ = sleep_until(deadline) => return Some(StepDownReason::DeadlinePassed),
                    _ = shutdown_requested(&mut shutdown) => return None,
                    r = attempt => r.unwrap_or(Err(HaError::Timeout {
                        op: "lease renewal",
                        after: schedule.attempt_timeout,
                    })),
                };
                let now = Instant::now();
                match renewal {
                    Ok(Renewal::Renewed { sent_at, ttl }) => {
                        let ttl = ttl.min(self.config.lease_ttl);
                        let renewed = sent_at + ttl.saturating_sub(self.config.deadline_margin());
                        if renewed > deadline {
                            deadline = renewed;
                            self.fence.extend(term, deadline.into_std());
                        }
                        let late = now.saturating_duration_since(sent_at);
                        if late > schedule.interval {
                            debug!(round_trip = ?late, "slow lease renewal");
                        }
                        next_attempt = schedule.after_success(sent_at, now);
                    }
                    Ok(Renewal::LeaseGone) => return Some(StepDownReason::LeaseLost),
                    Ok(Renewal::KeyLost) => return Some(StepDownReason::KeyLost),
                    Err(e) => {
                        self.metrics.keepalive_failed();
                        warn!(error = %e, remaining = ?deadline.saturating_duration_since(now), "lease renewal failed; retrying");
                        // A stream that failed or hung is not trusted again: open a fresh one.
                        keepalive = None;
                        next_attempt = schedule.after_failure(now);
                    }
                }
            }
        }
        .instrument(span.clone())
        .await;

        let reason = reason.unwrap_or(StepDownReason::Resigned);
        // Stop serving first, then tell etcd: the fence must not outlive the decision.
        self.fence.clear();
        self.metrics.stepped_down(reason);
        self.publish(Role::SteppedDown { term, reason });
        info!(parent: &span, term, reason = reason.as_str(), "stepped down");
        drop(keepalive);
        if self.pause.until().is_none() {
            self.revoke(lease_id).await;
        }
        match reason {
            StepDownReason::Resigned => LeadEnd::Shutdown,
            _ => LeadEnd::SteppedDown,
        }
    }

    /// One renewal: a keep-alive round trip, then a check that the leader key is still ours.
    /// The deadline it yields counts from when the keep-alive was *sent*.
    async fn renew(
        &self,
        term: u64,
        lease_id: i64,
        keepalive: &mut Option<(LeaseKeeper, LeaseKeepAliveStream)>,
    ) -> Result<Renewal, HaError> {
        let sent_at = Instant::now();
        // The key check runs beside the keep-alive rather than after it: both are issued after
        // `sent_at`, which is all the deadline needs, and the renewal costs one round trip.
        let mut kv = self.client.kv_client();
        let key_check = kv.get(self.keys.leader.as_str(), None);
        let (ttl_secs, key) = tokio::join!(self.keep_alive(lease_id, keepalive), key_check);
        let ttl_secs = match ttl_secs? {
            Some(ttl) => ttl,
            None => return Ok(Renewal::LeaseGone),
        };
        let resp = key.map_err(HaError::etcd("get leader key"))?;
        match resp.kvs().first() {
            Some(kv) if kv.create_revision() as u64 == term && kv.lease() == lease_id => {
                Ok(Renewal::Renewed {
                    sent_at,
                    ttl: Duration::from_secs(ttl_secs as u64),
                })
            }
            _ => Ok(Renewal::KeyLost),
        }
    }

    /// One keep-alive round trip; `Ok(None)`: etcd no longer knows the lease.
    async fn keep_alive(
        &self,
        lease_id: i64,
        keepalive: &mut Option<(LeaseKeeper, LeaseKeepAliveStream)>,
    ) -> Result<Option<i64>, HaError> {
        match keepalive {
            None => {
                // Opening the stream sends the first keep-alive and waits for its answer.
                let mut lease_client = self.client.lease_client();
                match lease_client.keep_alive(lease_id).await {
                    Ok(pair) => {
                        *keepalive = Some(pair);
                        Ok(Some(self.config.ttl_secs()))
                    }
                    Err(etcd_client::Error::LeaseKeepAliveError(msg))
                        if msg.contains("not found") =>
                    {
                        Ok(None)
                    }
                    Err(e) => Err(HaError::Etcd {
                        op: "lease keep-alive",
                        source: e,
                    }),
                }
            }
            Some((keeper, stream)) => {
                keeper
                    .keep_alive()
                    .await
                    .map_err(HaError::etcd("lease keep-alive"))?;
                match stream
                    .message()
                    .await
                    .map_err(HaError::etcd("lease keep-alive"))?
                {
                    Some(resp) if resp.ttl() > 0 => Ok(Some(resp.ttl())),
                    Some(_) => Ok(None),
                    None => Err(HaError::Etcd {
                        op: "lease keep-alive",
                        source: etcd_client::Error::LeaseKeepAliveError(
                            "keep-alive stream closed".into(),
                        ),
                    }),
                }
            }
        }
    }

    /// Best-effort lease revoke (deletes the leader key at once so a peer can win without
    /// waiting for expiry). Failure is harmless: the lease then expires on its own.
    async fn revoke(&self, lease_id: i64) {
        let mut lease_client = self.client.lease_client();
        if let Err(e) = bounded(
            "lease revoke",
            self.config.request_timeout,
            lease_client.revoke(lease_id),
        )
        .await
        {
            debug!(error = %e, lease_id, "lease revoke failed; it will expire");
        }
    }
}
