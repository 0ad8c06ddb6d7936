//! The tenants' usage in the journal: recorded write-behind from the object directory's exact
//! counters, and reconciled once per run with the directory the owners' replays rebuilt
//! (docs/tenants.md, "Journaled usage and reconciliation").
//!
//! Puts never wait for this: admission and usage stay the directory's. Housekeeping calls
//! [`UsageJournal::pass`] once the rebuild gate is open (never before: a partial directory
//! must not be recorded as the usage). The first pass of a run reconciles every tenant whose
//! usage the journal recorded; a difference is logged, counted and kept in the tenant's
//! root (`tenant show`), never silently taken as the new usage. Then each pass records the
//! tenants whose usage changed.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use crescent_actors::quota_root::{QuotaCommand, QuotaEvent};
use crescent_store::ObjectDirectory;
use prometheus::{IntCounterVec, Opts, Registry};

use crate::quotas::TenantQuotas;

pub struct UsageJournal {
    quotas: Arc<TenantQuotas>,
    directory: Arc<ObjectDirectory>,
    /// Tenants still to reconcile in this run (`None`: not started; empty: done).
    unreconciled: Mutex<Option<BTreeSet<String>>>,
    /// What was last recorded per tenant, so an unchanged one costs no command.
    recorded: Mutex<HashMap<String, (u64, u64)>>,
    reconciliations: IntCounterVec,
}

impl UsageJournal {
    /// Reconciles, once the gate is open, the tenants `quotas` recovered with a usage record.
    pub fn new(
        quotas: Arc<TenantQuotas>,
        directory: Arc<ObjectDirectory>,
        metrics: &Registry,
    ) -> prometheus::Result<Self> {
        let reconciliations = IntCounterVec::new(
            Opts::new(
                "crescent_quota_reconciliations_total",
                "Tenants whose journaled usage was compared with the rebuilt directory, by \
                 outcome (converged, differed)",
            ),
            &["outcome"],
        )?;
        metrics.register(Box::new(reconciliations.clone()))?;
        Ok(Self {
            quotas,
            directory,
            unreconciled: Mutex::new(None),
            recorded: Mutex::new(HashMap::new()),
            reconciliations,
        })
    }

    /// One housekeeping pass with the gate open: reconcile what is left to, then record.
    pub async fn pass(&self, now_ms: i64) {
        if !self.reconcile(now_ms).await {
            return;
        }
        self.record(now_ms).await;
    }

    /// Reconciles every tenant not reconciled yet in this run; true once all are.
    async fn reconcile(&self, now_ms: i64) -> bool {
        let todo: Vec<String> = {
            let mut left = self.unreconciled.lock().unwrap_or_else(|p| p.into_inner());
            // Only the tenants with a record: any other has no journaled usage to compare.
            let left = left.get_or_insert_with(|| self.quotas.recorded_tenants());
            left.iter().cloned().collect()
        };
        for tenant in todo {
            let figures = self.directory.tenants().figures(&tenant);
            let cmd = QuotaCommand::ReconcileUsage {
                rebuilt_bytes: figures.used_bytes,
                rebuilt_objects: figures.used_objects,
                at_ms: now_ms,
            };
            match self.quotas.execute(&tenant, cmd).await {
                Ok(events) => {
                    self.report(&tenant, &events);
                    let rebuilt = (figures.used_bytes, figures.used_objects);
                    self.remember(&tenant, rebuilt);
                    self.done(&tenant);
                }
                Err(e) => {
                    tracing::warn!(%tenant, error = %e, "tenant usage not reconciled yet");
                }
            }
        }
        let left = self.unreconciled.lock().unwrap_or_else(|p| p.into_inner());
        left.as_ref().is_some_and(BTreeSet::is_empty)
    }

    fn report(&self, tenant: &str, events: &[QuotaEvent]) {
        for e in events {
            let QuotaEvent::UsageReconciled(r) = e else {
                continue;
            };
            let (recorded, rebuilt) = (
                (r.recorded_bytes, r.recorded_objects),
                (r.rebuilt_bytes, r.rebuilt_objects),
            );
            if recorded == rebuilt {
                self.reconciliations.with_label_values(&["converged"]).inc();
                tracing::info!(%tenant, bytes = rebuilt.0, objects = rebuilt.1,
                    "tenant usage reconciled: the rebuilt usage is the recorded one");
            } else {
                self.reconciliations.with_label_values(&["differed"]).inc();
                tracing::warn!(%tenant, recorded_bytes = recorded.0,
                    recorded_objects = recorded.1, rebuilt_bytes = rebuilt.0,
                    rebuilt_objects = rebuilt.1,
                    "tenant usage reconciled with a difference: less is objects that did not \
                     come back, more is objects written after the last record");
            }
        }
    }

    fn done(&self, tenant: &str) {
        let mut left = self.unreconciled.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(left) = left.as_mut() {
            left.remove(tenant);
        }
    }

    fn remember(&self, tenant: &str, usage: (u64, u64)) {
        let mut recorded = self.recorded.lock().unwrap_or_else(|p| p.into_inner());
        recorded.insert(tenant.to_string(), usage);
    }

    /// Records every tenant whose usage changed since its last record.
    async fn record(&self, now_ms: i64) {
        for figures in self.directory.tenants().all() {
            let usage = (figures.used_bytes, figures.used_objects);
            let last = {
                let recorded = self.recorded.lock().unwrap_or_else(|p| p.into_inner());
                recorded.get(&figures.tenant).copied()
            };
            if last == Some(usage) {
                continue;
            }
            let cmd = QuotaCommand::RecordUsage {
                used_bytes: usage.0,
                used_objects: usage.1,
                at_ms: now_ms,
            };
            match self.quotas.execute(&figures.tenant, cmd).await {
                Ok(_) => self.remember(&figures.tenant, usage),
                Err(e) => {
                    tracing::debug!(tenant = %figures.tenant, error = %e, "usage not recorded");
                }
            }
        }
    }
}
