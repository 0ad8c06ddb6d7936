//! Quota across a mesh (docs/tenants.md, "Quota across a mesh"): a tenant's limit holds for
//! its usage over every cluster of the mesh.
//!
//! The tenant's **home** (rendezvous over the tenant among the serving clusters) admits its
//! own puts against the limit less what it granted the others; every other cluster admits
//! against its **cap**, the allowance the home recorded for it, with no request to the home
//! per put. Each pass (and at once when a put found its cap short) every cluster sends every
//! other serving or draining cluster one exchange naming what it holds of the tenants homed
//! there and the room it wants ([`holder`]); the home records it and answers ([`home`]). A put
//! past its cap is refused UNAVAILABLE (not run), and the client's retry finds the room the
//! exchange brought, or QUOTA_EXCEEDED once the home has none left.

mod holder;
mod home;
mod metrics;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crescent_mesh::RouteKey;
use crescent_store::ObjectDirectory;
use crescent_wire::mesh_quota::Amount;
use crescent_wire::{ApiError, ErrorCode};
use tokio::task::JoinHandle;
use tracing::Instrument;

use super::MeshRole;
use crate::config::auth::AuthSettings;
use crate::quotas::TenantQuotas;
use crate::rebuild::Rebuild;
pub use metrics::QuotaMetrics;

/// Time between exchange passes.
const PASS: Duration = Duration::from_millis(250);
/// Bound of one exchange.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(2);

/// What a put refused for want of allowance should do.
#[derive(Debug)]
pub enum Short {
    /// The cap was lifted: run the put again now.
    Retry,
    /// Answer with this error.
    Refuse(ApiError),
}

/// The parts of a node the exchange uses.
pub struct QuotaParts {
    pub directory: Arc<ObjectDirectory>,
    pub quotas: Arc<TenantQuotas>,
    pub rebuild: Arc<Rebuild>,
    pub auth: AuthSettings,
    pub tls_client: Option<Arc<crescent_tls::ClientConfig>>,
    pub registry: prometheus::Registry,
}

pub struct MeshQuota {
    cluster: String,
    role: Arc<MeshRole>,
    directory: Arc<ObjectDirectory>,
    quotas: Arc<TenantQuotas>,
    rebuild: Arc<Rebuild>,
    auth: AuthSettings,
    http: reqwest::Client,
    /// This run (its start in ms) and its exchange counter: a home ignores older exchanges.
    epoch: AtomicU64,
    seq: AtomicU64,
    home: home::HomeState,
    holder: holder::HolderState,
    /// Wakes the pass loop early (a put found its cap short).
    wake: Arc<tokio::sync::Notify>,
    metrics: QuotaMetrics,
    task: OnceLock<JoinHandle<()>>,
}

impl MeshQuota {
    /// Caps every tenant with limits until its home answered, and starts the passes.
    pub fn start(role: Arc<MeshRole>, parts: QuotaParts) -> Result<Arc<MeshQuota>, String> {
        let mut http = reqwest::Client::builder().timeout(EXCHANGE_TIMEOUT);
        if let Some(tls) = parts.tls_client {
            http = http.use_preconfigured_tls((*tls).clone());
        }
        let http = http
            .build()
            .map_err(|e| format!("quota exchange client: {e}"))?;
        parts.directory.tenants().join_mesh();
        let epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_millis() as u64);
        let quota = Arc::new(MeshQuota {
            cluster: role.cluster().to_string(),
            role,
            directory: parts.directory,
            quotas: parts.quotas,
            rebuild: parts.rebuild,
            auth: parts.auth,
            http,
            epoch: AtomicU64::new(epoch),
            seq: AtomicU64::new(0),
            home: home::HomeState::default(),
            holder: holder::HolderState::default(),
            wake: Arc::new(tokio::sync::Notify::new()),
            metrics: QuotaMetrics::register(&parts.registry)?,
            task: OnceLock::new(),
        });
        let weak = Arc::downgrade(&quota);
        let span = tracing::info_span!("mesh.quota", cluster = %quota.cluster);
        let task = tokio::spawn(
            async move {
                loop {
                    let Some(quota) = weak.upgrade() else { return };
                    if quota.rebuild.is_open() {
                        quota.pass().await;
                    }
                    let wake = quota.wake.clone();
                    drop(quota);
                    let _ = tokio::time::timeout(PASS, wake.notified()).await;
                }
            }
            .instrument(span),
        );
        let _ = quota.task.set(task);
        Ok(quota)
    }

    /// A put of `tenant` wanting `want` was refused ALLOWANCE_SHORT by the directory.
    pub fn on_short(&self, tenant: &str, want: Amount) -> Short {
        let (routes, membership) = self.role.view();
        let home = match routes.route(RouteKey::quota_home(tenant)) {
            Ok(home) => home.to_string(),
            Err(e) => return Short::Refuse(ApiError::new(ErrorCode::Unavailable, e.to_string())),
        };
        let ledger = self.directory.tenants();
        if home == self.cluster {
            let f = ledger.figures(tenant);
            let unlimited = f.max_bytes.is_none() && f.max_objects.is_none();
            if unlimited || (self.rebuild.is_open() && self.home_ready(tenant, &membership)) {
                ledger.raise_cap(tenant, None);
                return Short::Retry;
            }
            self.metrics
                .shorts
                .with_label_values(&["home_waiting"])
                .inc();
            return Short::Refuse(not_run(format!(
                "tenant {tenant}: this cluster is its quota home and waits for the mesh's other \
                 clusters to report what they hold"
            )));
        }
        self.holder.demand(tenant, want);
        self.wake.notify_one();
        if self.holder.exhausted(tenant) {
            self.metrics.shorts.with_label_values(&["exceeded"]).inc();
            return Short::Refuse(ApiError::new(
                ErrorCode::QuotaExceeded,
                format!(
                    "QUOTA_EXCEEDED: tenant {tenant}: its quota is used up across the mesh \
                     (its home {home} has no room left to grant)"
                ),
            ));
        }
        self.metrics.shorts.with_label_values(&["refill"]).inc();
        Short::Refuse(not_run(format!(
            "tenant {tenant}: asking its quota home {home} for room; send the put again"
        )))
    }

    fn next_seq(&self) -> (u64, u64) {
        let seq = self.seq.fetch_add(1, Ordering::AcqRel) + 1;
        (self.epoch.load(Ordering::Acquire), seq)
    }
}

/// The wire's amount as the ledger's (bytes, objects).
fn pair(a: Amount) -> crescent_store::tenant_allowance::Amount {
    (a.bytes, a.objects)
}

/// The ledger's (bytes, objects) as the wire's amount.
fn amount((bytes, objects): crescent_store::tenant_allowance::Amount) -> Amount {
    Amount { bytes, objects }
}

fn not_run(message: String) -> ApiError {
    ApiError::new(ErrorCode::Unavailable, message).refused_before_running(None)
}

impl Drop for MeshQuota {
    fn drop(&mut self) {
        if let Some(t) = self.task.get() {
            t.abort();
        }
    }
}
