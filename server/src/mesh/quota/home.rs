//! The home side of the quota exchange: a tenant's home records what each other cluster of
//! the mesh holds, grants room from what the limits leave, and answers (docs/tenants.md,
//! "Quota across a mesh").
//!
//! Per tenant and sending cluster the home keeps one record, the allowance, journaled in the
//! tenant's quota root before the answer leaves, and its ledger counts the sum of the records
//! as used (`granted`). A sender's report replaces its record: raised at once (what it holds
//! is held, whatever the limits), lowered only once journaled. Room is granted only once every
//! other cluster has reported the tenant at this generation ("ready"): until then the home
//! cannot know what they hold.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crescent_actors::quota_root::{Allowance, QuotaCommand};
use crescent_mesh::{Membership, RouteKey, RouteTable};
use crescent_wire::mesh_quota::{
    Amount, Answer, ExchangeReply, ExchangeRequest, Holding, EXCHANGE_WIRE_VERSION,
    MAX_EXCHANGE_TENANTS,
};
use crescent_wire::{ApiError, ErrorCode};

use super::{amount, pair, MeshQuota};

/// How long a refused or partial grant marks a tenant under pressure (holders give back room
/// they do not use).
const PRESSURE_FOR: Duration = Duration::from_secs(2);

/// The newest (epoch, seq) answered for one sender, locked while one of its exchanges runs.
type SenderLock = Arc<tokio::sync::Mutex<(u64, u64)>>;

/// What the home remembers between exchanges (in memory: after a restart every other cluster
/// reports again within a pass, and until then nothing is granted).
#[derive(Default)]
pub(super) struct HomeState {
    /// Per tenant: the generation each other cluster last reported it at.
    heard: Mutex<HashMap<String, HashMap<String, u64>>>,
    /// Per sending cluster: the newest (epoch, seq) answered, behind a lock that lets one
    /// exchange of a sender run at a time.
    senders: Mutex<HashMap<String, SenderLock>>,
    /// Tenants the home had less room for than asked, and when.
    pressure: Mutex<HashMap<String, Instant>>,
}

/// The clusters that may hold a tenant's objects besides `me`: serving and draining ones.
pub(super) fn holders<'a>(
    membership: &'a Membership,
    me: &'a str,
) -> impl Iterator<Item = &'a str> {
    membership
        .clusters
        .iter()
        .filter(move |c| c.name != me && c.state.holds_objects())
        .map(|c| c.name.as_str())
}

impl MeshQuota {
    /// Whether every other cluster reported `tenant` at this generation.
    pub(super) fn home_ready(&self, tenant: &str, membership: &Membership) -> bool {
        let heard = self.home.heard.lock().expect("heard lock");
        let of_tenant = heard.get(tenant);
        holders(membership, &self.cluster)
            .all(|c| of_tenant.and_then(|h| h.get(c)) == Some(&membership.generation))
    }

    /// Answers one exchange (`POST /v1/mesh/quota/exchange`).
    pub async fn exchange(&self, req: ExchangeRequest) -> Result<ExchangeReply, ApiError> {
        let (routes, membership) = self.role.view();
        check_request(&req, self.role.mesh(), routes.generation())?;
        if !holders(&membership, &self.cluster).any(|c| c == req.from) {
            return Err(ApiError::new(
                ErrorCode::InvalidArgument,
                format!(
                    "{:?} is not another serving or draining cluster of the mesh at generation                      {}: it holds nothing to report",
                    req.from, membership.generation
                ),
            ));
        }
        let sender = self.sender_lock(&req.from);
        let mut newest = sender.lock().await;
        if (req.epoch, req.seq) < *newest {
            return Err(ApiError::new(
                ErrorCode::Conflict,
                format!(
                    "exchange ({}, {}) of {} is older than ({}, {}), already answered",
                    req.epoch, req.seq, req.from, newest.0, newest.1
                ),
            ));
        }
        *newest = (req.epoch, req.seq);
        let mut answers = Vec::with_capacity(req.tenants.len());
        for holding in &req.tenants {
            answers.push(self.answer(&req, holding, &routes, &membership).await?);
        }
        let named: std::collections::BTreeSet<&str> =
            req.tenants.iter().map(|h| h.tenant.as_str()).collect();
        let also_limited = self
            .limited_homed_here(&routes)
            .into_iter()
            .filter(|t| !named.contains(t.as_str()))
            .collect();
        self.metrics.received.inc();
        Ok(ExchangeReply {
            version: EXCHANGE_WIRE_VERSION,
            generation: routes.generation(),
            answers,
            also_limited,
        })
    }

    fn sender_lock(&self, from: &str) -> SenderLock {
        let mut senders = self.home.senders.lock().expect("senders lock");
        senders.entry(from.to_string()).or_default().clone()
    }

    /// The tenants with limits whose home this cluster is.
    pub(super) fn limited_homed_here(&self, routes: &RouteTable) -> Vec<String> {
        let ledger = self.directory.tenants();
        ledger
            .names()
            .into_iter()
            .filter(|t| {
                let f = ledger.figures(t);
                (f.max_bytes.is_some() || f.max_objects.is_some())
                    && routes.route(RouteKey::quota_home(t)).ok() == Some(self.cluster.as_str())
            })
            .collect()
    }

    async fn answer(
        &self,
        req: &ExchangeRequest,
        holding: &Holding,
        routes: &RouteTable,
        membership: &Membership,
    ) -> Result<Answer, ApiError> {
        let tenant = holding.tenant.clone();
        if routes.route(RouteKey::quota_home(&tenant)).ok() != Some(self.cluster.as_str()) {
            return Ok(Answer::NotHome { tenant });
        }
        let ledger = self.directory.tenants();
        let figures = ledger.figures(&tenant);
        if figures.max_bytes.is_none() && figures.max_objects.is_none() {
            self.release(&tenant, &req.from).await?;
            self.heard(&tenant, &req.from, req.generation);
            return Ok(Answer::Unlimited { tenant });
        }
        let limits = Amount {
            bytes: figures.max_bytes.unwrap_or(u64::MAX),
            objects: figures.max_objects.unwrap_or(u64::MAX),
        };
        // A sender may hold up to its cap, and holds at least what it holds: a cluster that
        // restarted capped itself before its rebuild brought its objects back. Without a cap
        // it holds what it holds (it caps itself at that on this answer and reports again).
        let held = holding.held;
        let base = holding.cap.map_or(held, |cap| Amount {
            bytes: cap.bytes.max(held.bytes),
            objects: cap.objects.max(held.objects),
        });
        let old = self
            .quotas
            .allowances(&tenant)
            .await
            .map_err(ApiError::from)?
            .get(&req.from)
            .copied()
            .unwrap_or_default();
        let raise = (
            base.bytes.saturating_sub(old.bytes),
            base.objects.saturating_sub(old.objects),
        );
        ledger.add_granted(&tenant, raise);
        self.heard(&tenant, &req.from, req.generation);
        let asks = holding.cap.is_some() && holding.want != Amount::default();
        let granted = match asks && self.home_ready(&tenant, membership) {
            true => ledger.grant(&tenant, pair(holding.want)),
            false => (0, 0),
        };
        let allowance = Amount {
            bytes: base.bytes.saturating_add(granted.0),
            objects: base.objects.saturating_add(granted.1),
        };
        let record = QuotaCommand::RecordAllowance {
            cluster: req.from.clone(),
            allowance: Allowance {
                bytes: allowance.bytes,
                objects: allowance.objects,
            },
        };
        if let Err(e) = self.quotas.execute(&tenant, record).await {
            // Not recorded: give back the room granted; what was raised stays charged (the
            // sender may hold it) until a later report lowers it.
            ledger.sub_granted(&tenant, granted);
            return Err(ApiError::from(e));
        }
        ledger.sub_granted(
            &tenant,
            (
                old.bytes.saturating_sub(base.bytes),
                old.objects.saturating_sub(base.objects),
            ),
        );
        if asks && (granted.0 < holding.want.bytes || granted.1 < holding.want.objects) {
            self.under_pressure(&tenant);
        }
        Ok(Answer::Allowance {
            tenant: tenant.clone(),
            allowance,
            granted: amount(granted),
            limits,
            pressure: self.pressured(&tenant),
        })
    }

    fn heard(&self, tenant: &str, from: &str, generation: u64) {
        let mut heard = self.home.heard.lock().expect("heard lock");
        heard
            .entry(tenant.to_string())
            .or_default()
            .insert(from.to_string(), generation);
    }

    fn under_pressure(&self, tenant: &str) {
        let mut p = self.home.pressure.lock().expect("pressure lock");
        p.insert(tenant.to_string(), Instant::now());
    }

    fn pressured(&self, tenant: &str) -> bool {
        let p = self.home.pressure.lock().expect("pressure lock");
        p.get(tenant).is_some_and(|at| at.elapsed() < PRESSURE_FOR)
    }

    /// Forgets `cluster`'s record of `tenant` (journaled first), and stops charging it.
    pub(super) async fn release(&self, tenant: &str, cluster: &str) -> Result<(), ApiError> {
        let Some(old) = self
            .quotas
            .allowances(tenant)
            .await
            .map_err(ApiError::from)?
            .get(cluster)
            .copied()
        else {
            return Ok(());
        };
        let cmd = QuotaCommand::ReleaseAllowance {
            cluster: cluster.to_string(),
        };
        self.quotas
            .execute(tenant, cmd)
            .await
            .map_err(ApiError::from)?;
        self.directory
            .tenants()
            .sub_granted(tenant, (old.bytes, old.objects));
        Ok(())
    }
}

fn check_request(req: &ExchangeRequest, mesh: &str, generation: u64) -> Result<(), ApiError> {
    let invalid = |m: String| Err(ApiError::new(ErrorCode::InvalidArgument, m));
    if req.version != EXCHANGE_WIRE_VERSION {
        return invalid(format!(
            "exchange version {}; this server speaks {EXCHANGE_WIRE_VERSION}",
            req.version
        ));
    }
    if req.mesh != mesh {
        return invalid(format!(
            "exchange for mesh {:?}; this is {mesh:?}",
            req.mesh
        ));
    }
    if req.tenants.len() > MAX_EXCHANGE_TENANTS {
        return invalid(format!(
            "{} tenants, at most {MAX_EXCHANGE_TENANTS}",
            req.tenants.len()
        ));
    }
    if req.generation != generation {
        return Err(ApiError::new(
            ErrorCode::StaleGeneration,
            format!(
                "exchange at mesh generation {}; this cluster routes by {generation}",
                req.generation
            ),
        ));
    }
    Ok(())
}
