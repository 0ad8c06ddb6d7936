//! The election loop run by [`crate::Elector`]: campaign when the rule allows, then hold the
//! lease with a local deadline that always expires before the backend's. The loop is the same
//! for every [`Coordination`] backend.

mod schedule;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::{sleep, sleep_until, Instant};
use tracing::{debug, info, info_span, warn, Instrument};

use crate::config::ElectorConfig;
use crate::coordination::{terms_seen, Bid, Coordination, LeaderSlot, Renewal, Won};
use crate::eligibility::{campaign_eligibility, CampaignBlock};
use crate::error::HaError;
use crate::fence::LeaderFence;
use crate::metrics::HaMetrics;
use crate::role::{Role, StepDownReason};
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

/// Everything the election loop needs besides its backend.
pub(crate) struct TaskParts {
    pub(crate) config: ElectorConfig,
    /// The highest term this node has seen (its wins, leaders and markers it read): the floor
    /// of its next campaign's term.
    pub(crate) highest_term: Arc<AtomicU64>,
    pub(crate) role_tx: watch::Sender<Role>,
    pub(crate) fence: LeaderFence,
    pub(crate) metrics: HaMetrics,
    pub(crate) pause: PauseSwitch,
    pub(crate) shutdown: watch::Receiver<bool>,
}

pub(crate) struct ElectorTask<B> {
    config: ElectorConfig,
    backend: Arc<B>,
    highest_term: Arc<AtomicU64>,
    role_tx: watch::Sender<Role>,
    fence: LeaderFence,
    metrics: HaMetrics,
    pause: PauseSwitch,
    shutdown: watch::Receiver<bool>,
}

enum LeadEnd {
    SteppedDown,
    Shutdown,
}

/// Resolves when shutdown was requested or the handle is gone.
async fn shutdown_requested(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|stop| *stop).await;
}

impl<B: Coordination> ElectorTask<B> {
    pub(crate) fn new(parts: TaskParts, backend: Arc<B>) -> Self {
        let TaskParts {
            config,
            highest_term,
            role_tx,
            fence,
            metrics,
            pause,
            shutdown,
        } = parts;
        ElectorTask {
            config,
            backend,
            highest_term,
            role_tx,
            fence,
            metrics,
            pause,
            shutdown,
        }
    }

    pub(crate) async fn run(self) {
        let span = info_span!("elector", cluster = %self.config.cluster,
                              node = %self.config.node_name, backend = B::NAME);
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

    /// Publishes a delayed win as serving (nothing to do after an immediate one).
    async fn take_office(
        &self,
        term: u64,
        lease: &mut B::Lease,
        schedule: &RenewalSchedule,
        serve_after: Duration,
    ) -> Result<bool, HaError> {
        if serve_after.is_zero() {
            return Ok(true);
        }
        let attempt = self.backend.take_office(term, lease);
        tokio::time::timeout(schedule.attempt_timeout, attempt)
            .await
            .unwrap_or(Err(HaError::Timeout {
                op: "take office",
                after: schedule.attempt_timeout,
            }))
    }

    /// One round as a non-leader: read the records; follow, wait, or campaign. `Ok(None)`: no
    /// win this round (go again).
    async fn campaign_round(&self) -> Result<Option<Won<B::Lease>>, HaError> {
        let view = self.backend.read_state().await?;
        self.highest_term
            .fetch_max(terms_seen(&view), Ordering::AcqRel);
        match &view.leader {
            Ok(LeaderSlot::Free) => {}
            Ok(LeaderSlot::Serving(leader)) => {
                self.publish(Role::Follower {
                    leader: leader.clone(),
                });
                self.wait_for_change(&view.cursor).await;
                return Ok(None);
            }
            // A winner still taking office: not serving yet, but the slot is taken.
            Ok(LeaderSlot::TakingOffice) => {
                self.publish(Role::Candidate { blocked: None });
                self.wait_for_change(&view.cursor).await;
                return Ok(None);
            }
            Err(e) => {
                warn!(error = %e, "the leader record is unreadable");
                self.wait_for_change(&view.cursor).await;
                return Ok(None);
            }
        }

        let (marker_version, marker) = match &view.marker {
            None => (None, None),
            Some((version, Ok(marker))) => (Some(version), Some(marker)),
            Some((_, Err(e))) => {
                warn!(error = %e, "not campaigning: the replication marker is unreadable");
                self.publish(Role::Candidate {
                    blocked: Some(CampaignBlock::UnreadableMarker(e.to_string())),
                });
                self.wait_for_change(&view.cursor).await;
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
                self.wait_for_change(&view.cursor).await;
                Ok(None)
            }
            Ok(why) => {
                debug!(?why, "eligible; campaigning");
                self.publish(Role::Candidate { blocked: None });
                self.campaign(marker_version).await
            }
        }
    }

    /// Campaigns; a win whose deadline already passed while taking office is given up at once.
    async fn campaign(
        &self,
        marker_version: Option<&B::MarkerVersion>,
    ) -> Result<Option<Won<B::Lease>>, HaError> {
        let floor = self.config.term_floor.as_ref().map_or(0, |f| (f.0)());
        let bid = Bid {
            node: &self.config.node_name,
            advertise: &self.config.advertise,
            ttl: self.config.lease_ttl,
            term_floor: floor.max(self.highest_term.load(Ordering::Acquire)),
        };
        let result = self.backend.campaign(&bid, marker_version).await;
        self.metrics.coordination(B::NAME, "campaign", &result);
        let Some(won) = result? else {
            debug!("lost the race for the leader slot, or the marker changed");
            return Ok(None);
        };
        self.metrics.marker_write("claim", "ok");
        self.highest_term.fetch_max(won.term, Ordering::AcqRel);
        if Instant::now() >= self.deadline_after(won.sent_at, won.ttl) {
            warn!(
                term = won.term,
                "won, but the lease deadline passed while taking office"
            );
            self.backend.release(won.term, won.lease).await;
            return Ok(None);
        }
        Ok(Some(won))
    }

    /// The local deadline of a lease renewed by a request sent at `sent_at` for `ttl`.
    fn deadline_after(&self, sent_at: Instant, ttl: Duration) -> Instant {
        let ttl = ttl.min(self.config.lease_ttl);
        sent_at + ttl.saturating_sub(self.config.deadline_margin())
    }

    /// Waits until a record of the cluster changes, the recheck interval passes, or shutdown.
    async fn wait_for_change(&self, cursor: &B::Cursor) {
        let mut shutdown = self.shutdown.clone();
        tokio::select! {
            _ = shutdown_requested(&mut shutdown) => {}
            _ = self.backend.wait_for_change(cursor, self.config.recheck_interval) => {}
        }
    }

    /// Holds leadership until the deadline passes, the lease or record is lost, or shutdown.
    ///
    /// Renewals are scheduled from the *send time of the last acknowledged renewal* (the grant,
    /// at first), not from when the previous attempt ended or when office was taken: a
    /// campaign that took half the margin under load is followed by an immediate renewal, not
    /// one a full interval later. A failed or slow attempt is retried within a fraction of the
    /// interval, so several attempts fit between a renewal and the deadline.
    async fn lead(&self, won: Won<B::Lease>) -> LeadEnd {
        let Won {
            term,
            mut lease,
            sent_at: renewed_at,
            ttl,
            serve_after,
        } = won;
        let mut deadline = self.deadline_after(renewed_at, ttl);
        let span = info_span!("leadership", term, backend = B::NAME);
        // Office starts once `serve_at` has passed, holding the lease meanwhile (at once on
        // etcd; one TTL later on a Redis that may have lost an earlier leader's record).
        let mut serve_at = renewed_at + serve_after;
        let mut serving = false;

        let mut shutdown = self.shutdown.clone();
        let schedule = RenewalSchedule::new(&self.config);
        let mut next_attempt = schedule.after_success(renewed_at, Instant::now());
        let reason = async {
            loop {
                // `biased`: a passed deadline wins over everything, including a renewal that
                // happens to be due at the same time (after the process was frozen).
                tokio::select! {
                    biased;
                    _ = sleep_until(deadline) => return Some(StepDownReason::DeadlinePassed),
                    _ = shutdown_requested(&mut shutdown) => return None,
                    _ = sleep_until(serve_at), if !serving => {
                        match self.take_office(term, &mut lease, &schedule, serve_after).await {
                            Ok(true) if Instant::now() < deadline => {}
                            Ok(true) => continue,
                            Ok(false) => return Some(StepDownReason::KeyLost),
                            Err(e) => {
                                warn!(error = %e, "taking office failed; retrying");
                                serve_at = Instant::now() + schedule.retry_after;
                                continue;
                            }
                        }
                        serving = true;
                        self.fence.set(term, deadline.into_std());
                        self.metrics.won();
                        self.publish(Role::Leader { term });
                        continue;
                    }
                    _ = sleep_until(next_attempt) => {}
                }
                if self.pause.until().is_some() {
                    next_attempt = schedule.after_failure(Instant::now());
                    continue;
                }
                let attempt =
                    tokio::time::timeout(schedule.attempt_timeout, self.backend.renew(term, &mut lease));
                let renewal = tokio::select! {
                    biased;
                    _ = sleep_until(deadline) => return Some(StepDownReason::DeadlinePassed),
                    _ = shutdown_requested(&mut shutdown) => return None,
                    r = attempt => r.unwrap_or(Err(HaError::Timeout {
                        op: "lease renewal",
                        after: schedule.attempt_timeout,
                    })),
                };
                self.metrics.coordination(B::NAME, "renew", &renewal);
                let now = Instant::now();
                match renewal {
                    Ok(Renewal::Renewed { sent_at, ttl }) => {
                        let renewed = self.deadline_after(sent_at, ttl);
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
                        self.backend.renewal_failed(&mut lease);
                        next_attempt = schedule.after_failure(now);
                    }
                }
            }
        }
        .instrument(span.clone())
        .await;

        let reason = reason.unwrap_or(StepDownReason::Resigned);
        self.step_down(term, lease, reason, &span).await
    }

    /// Ends a term for `reason`: stops serving first, then tells the backend (the fence must
    /// not outlive the decision; a paused node leaves its lease to expire).
    async fn step_down(
        &self,
        term: u64,
        lease: B::Lease,
        reason: StepDownReason,
        span: &tracing::Span,
    ) -> LeadEnd {
        self.fence.clear();
        self.metrics.stepped_down(reason);
        self.publish(Role::SteppedDown { term, reason });
        info!(parent: span, term, reason = reason.as_str(), "stepped down");
        if self.pause.until().is_none() {
            self.backend.release(term, lease).await;
        }
        match reason {
            StepDownReason::Resigned => LeadEnd::Shutdown,
            _ => LeadEnd::SteppedDown,
        }
    }
}
