//! Run-time checks driven by housekeeping (server/src/housekeeping.rs), so that a revision's
//! state follows its replicas without waiting for a restart:
//!
//! * after a storage owner expired (its replicas are dropped), every published revision goes
//!   through the loss check recovery runs at startup ([`WeightService::reconcile_losses`]):
//!   payloads left with no replica and no cold copy make it DEGRADED (ABSENT when none is
//!   left), journaled through the revision aggregate;
//! * on every pass, each DEGRADED revision is checked again after re-adopting the objects an
//!   owner replayed back ([`WeightService::recover_members`]): once every payload is readable
//!   the same check repairs it (READY);
//! * above the store's high watermark, AUTO revisions are demoted one step colder
//!   (`AutoDemote`, reason `memory_pressure`), chosen by `crescent_weights::pressure`.
//!
//! Each check runs in the background, one at a time per kind: a pass never waits for it; an
//! owner expiring while the loss check runs makes it run once more.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crescent_weights::pressure::{plan_auto_demotions, MemoryUsage};
use crescent_weights::{AvailabilityReason, WeightRevisionCommand};
use tracing::Instrument;

use super::WeightService;

/// Driving keys of the checks (the set also holds revision stream ids, which contain `/`).
const LOSS_CHECK: &str = "health:losses";
const REPAIR_CHECK: &str = "health:repairs";
const PRESSURE_CHECK: &str = "health:pressure";

/// At most this many revisions are demoted per housekeeping pass (docs/weights.md, "Run-time
/// checks": each round is bounded).
const MAX_DEMOTIONS_PER_PASS: usize = 8;

impl WeightService {
    /// After storage owners expired: checks every published revision for lost payloads. An
    /// expiry during a running check makes it run once more (that owner's replicas may have
    /// been dropped after the check looked at a revision).
    pub fn check_after_owner_loss(self: &Arc<Self>) {
        self.loss_check_again.store(true, Ordering::SeqCst);
        if !self.start_driving(LOSS_CHECK) {
            return;
        }
        let me = self.clone();
        let span = tracing::info_span!("weights.check", check = "weights.loss_check");
        actix_rt::spawn(
            async move {
                loop {
                    while me.loss_check_again.swap(false, Ordering::SeqCst) {
                        me.check_all_losses().await;
                    }
                    me.stop_driving(LOSS_CHECK);
                    // An expiry between the last swap and the release found the check
                    // running: take it up again unless another task already did.
                    if !me.loss_check_again.load(Ordering::SeqCst) || !me.start_driving(LOSS_CHECK)
                    {
                        break;
                    }
                }
            }
            .instrument(span),
        );
    }

    async fn check_all_losses(self: &Arc<Self>) {
        let (identities, _) = self.list_identities(|_| true, false, None, usize::MAX);
        for identity in identities {
            if let Err(e) = self
                .reconcile_losses(&identity, AvailabilityReason::OwnerLost)
                .await
            {
                tracing::warn!(revision = %identity, error = %e, "loss check failed");
            }
        }
    }

    /// Checks each DEGRADED revision again: an owner that came back and replayed its table
    /// makes the payloads readable, and the loss check then repairs the revision.
    pub fn recheck_degraded(self: &Arc<Self>) {
        if self.degraded_revisions().is_empty() {
            return;
        }
        self.spawn_check(REPAIR_CHECK, "weights.repair_check", |me| async move {
            for identity in me.degraded_revisions() {
                if let Err(e) = me.recover_members(&identity).await {
                    tracing::warn!(revision = %identity, error = %e, "member recovery failed");
                }
                if let Err(e) = me
                    .reconcile_losses(&identity, AvailabilityReason::OwnerLost)
                    .await
                {
                    tracing::warn!(revision = %identity, error = %e, "repair check failed");
                }
            }
        });
    }

    /// Above the high watermark: demotes the AUTO revisions `plan_auto_demotions` picks and
    /// drives their migrations. Needs the cold tier (a demotion copies to it first).
    pub fn relieve_memory_pressure(self: &Arc<Self>, usage: MemoryUsage) {
        if usage.bytes_over_watermark().is_none() || self.cold_tier().is_none() {
            return;
        }
        self.spawn_check(
            PRESSURE_CHECK,
            "weights.memory_pressure",
            move |me| async move {
                let now = me.now_ms();
                let limits = me.config.migration_limits();
                let (identities, _) = me.list_identities(|_| true, false, None, usize::MAX);
                let mut candidates = Vec::new();
                for identity in identities {
                    if let Ok(state) = me.read_revision(&identity).await {
                        candidates.extend(state.auto_candidate(now, &limits));
                    }
                }
                for picked in plan_auto_demotions(usage, candidates, MAX_DEMOTIONS_PER_PASS) {
                    me.auto_demote(picked.identity).await;
                }
            },
        );
    }

    async fn auto_demote(self: &Arc<Self>, identity: crescent_weights::RevisionIdentity) {
        let Ok(state) = self.read_revision(&identity).await else {
            return;
        };
        let Some(expected) = state.record().map(|r| r.metadata_generation) else {
            return;
        };
        let cmd = WeightRevisionCommand::AutoDemote {
            expected_metadata_generation: expected,
            limits: self.config.migration_limits(),
        };
        match self.revision(&identity, cmd).await {
            Ok(after) => {
                let target = after.active_operation().and_then(|o| o.target);
                tracing::info!(revision = %identity, ?target,
                    "memory pressure: AUTO revision demoted one step colder");
                let me = self.clone();
                actix_rt::spawn(async move { me.drive_revision(&identity).await });
            }
            // A lease, an operation or a policy change since the candidates were read.
            Err(e) => tracing::debug!(revision = %identity, error = %e, "AUTO demotion refused"),
        }
    }

    /// Runs `check` in the background unless the check `key` is still running.
    fn spawn_check<F, Fut>(self: &Arc<Self>, key: &'static str, span: &'static str, check: F)
    where
        F: FnOnce(Arc<Self>) -> Fut + 'static,
        Fut: std::future::Future<Output = ()> + 'static,
    {
        if !self.start_driving(key) {
            return;
        }
        let me = self.clone();
        actix_rt::spawn(async move {
            check(me.clone())
                .instrument(tracing::info_span!("weights.check", check = span))
                .await;
            me.stop_driving(key);
        });
    }
}
