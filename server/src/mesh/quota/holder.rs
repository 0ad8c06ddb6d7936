//! The sending side of the quota exchange: each pass, this cluster tells every other serving
//! or draining cluster what it holds of the tenants homed there, asks for room where its cap
//! runs low or a put found it short, gives back room it does not use, and takes the answers
//! (docs/tenants.md, "Quota across a mesh").
//!
//! A cap is lowered before the exchange that reports it and raised only to what the home
//! answered it recorded, so the home's record is never below what this cluster may admit.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crescent_mesh::{Membership, RouteKey, RouteTable};
use crescent_wire::mesh_quota::{
    Amount, Answer, ExchangeReply, ExchangeRequest, Holding, EXCHANGE_ROUTE, EXCHANGE_WIRE_VERSION,
    MAX_EXCHANGE_TENANTS,
};
use crescent_wire::{ApiError, ErrorCode};

use super::home::holders;
use super::{amount, pair, MeshQuota};

/// An exchange that asks for nothing is sent at most this often to each home (it reports
/// room given back, is heard for the home's readiness, and learns the tenants it limits);
/// one that asks for room, or follows a new generation, goes at once.
const HEARTBEAT: Duration = Duration::from_secs(1);
/// How long a home's "no room left" answers puts at once with QUOTA_EXCEEDED.
const EXHAUSTED_FOR: Duration = Duration::from_secs(1);
/// A cluster asks for a share of the limit this many times smaller than its fair share, so
/// room stays where puts go without stranding much of it elsewhere.
const SHARE_DIVISOR: u64 = 4;

#[derive(Default)]
pub(super) struct HolderState {
    /// Room refused puts asked for since the last exchange, per tenant.
    demand: Mutex<HashMap<String, Amount>>,
    /// Tenants whose home had no room for a refused put, and when it said so.
    exhausted: Mutex<HashMap<String, Instant>>,
    /// Per tenant: the limits its home last named, and whether it asked for room back.
    known: Mutex<HashMap<String, (Amount, bool)>>,
    /// The route table of the previous pass (a tenant whose home moved is capped again).
    last_routes: Mutex<Option<Arc<RouteTable>>>,
    /// Per home: when this cluster last exchanged with it, at which generation.
    last_sent: Mutex<HashMap<String, (Instant, u64)>>,
    /// When the tenants homed here were last tended, at which generation.
    last_tended: Mutex<Option<(Instant, u64)>>,
}

impl HolderState {
    pub(super) fn demand(&self, tenant: &str, want: Amount) {
        let mut d = self.demand.lock().expect("demand lock");
        let e = d.entry(tenant.to_string()).or_default();
        e.bytes = e.bytes.saturating_add(want.bytes);
        e.objects = e.objects.saturating_add(want.objects);
    }

    pub(super) fn exhausted(&self, tenant: &str) -> bool {
        let e = self.exhausted.lock().expect("exhausted lock");
        e.get(tenant).is_some_and(|at| at.elapsed() < EXHAUSTED_FOR)
    }

    /// Whether the home's last answer for `tenant` had no room for what a put asked (until an
    /// answer with room): no room is asked for it again but by a put.
    fn was_short(&self, tenant: &str) -> bool {
        let e = self.exhausted.lock().expect("exhausted lock");
        e.contains_key(tenant)
    }

    fn take_demand(&self) -> HashMap<String, Amount> {
        std::mem::take(&mut *self.demand.lock().expect("demand lock"))
    }

    /// Whether an exchange with `home` that asks for nothing is due at `generation`; if so,
    /// it counts as sent now.
    fn heartbeat_due(&self, home: &str, generation: u64) -> bool {
        let mut sent = self.last_sent.lock().expect("sent lock");
        let due = sent
            .get(home)
            .is_none_or(|(at, g)| *g != generation || at.elapsed() >= HEARTBEAT);
        if due {
            sent.insert(home.to_string(), (Instant::now(), generation));
        }
        due
    }

    /// Whether the tenants homed here are due to be tended at `generation`; if so, they
    /// count as tended now.
    fn tend_due(&self, generation: u64) -> bool {
        let mut last = self.last_tended.lock().expect("tended lock");
        let due = last.is_none_or(|(at, g)| g != generation || at.elapsed() >= HEARTBEAT);
        if due {
            *last = Some((Instant::now(), generation));
        }
        due
    }
}

/// The room this cluster keeps of a limit shared by `clusters`: a fraction of its share.
fn keep_of(limits: Amount, clusters: u64) -> Amount {
    let share = |limit: u64| (limit / clusters.max(1) / SHARE_DIVISOR).max(1);
    Amount {
        bytes: share(limits.bytes),
        objects: share(limits.objects),
    }
}

impl MeshQuota {
    /// One pass: caps tenants whose home moved, tends the tenants homed here, and exchanges
    /// with every other cluster.
    pub(super) async fn pass(&self) {
        let (routes, membership) = self.role.view();
        let member = membership
            .clusters
            .iter()
            .any(|c| c.name == self.cluster && c.state.holds_objects());
        if !member {
            return; // joining or leaving: no authority of any object, nothing to report
        }
        self.follow_homes(&routes).await;
        if self.holder.tend_due(routes.generation()) {
            self.tend_homed_here(&routes, &membership).await;
        }
        let mut by_home: BTreeMap<&str, Vec<String>> = holders(&membership, &self.cluster)
            .map(|c| (c, Vec::new()))
            .collect();
        let ledger = self.directory.tenants();
        for tenant in ledger.names() {
            if ledger.cap(&tenant).is_none() {
                continue; // no cap: no limits here, or its home said it has none
            }
            if let Ok(home) = routes.route(RouteKey::quota_home(&tenant)) {
                if let Some(list) = by_home.get_mut(home) {
                    list.push(tenant);
                }
            }
        }
        let demand = self.holder.take_demand();
        let clusters = membership.clusters.len() as u64;
        let exchanges = by_home.into_iter().filter_map(|(home, tenants)| {
            let holdings: Vec<Holding> = tenants
                .iter()
                .map(|t| self.plan(t, demand.get(t).copied(), clusters))
                .collect();
            let asks = holdings.iter().any(|h| h.want != Amount::default());
            let due = self.holder.heartbeat_due(home, membership.generation);
            (asks || due).then(|| self.exchange_with(&membership, home, holdings, &demand))
        });
        futures::future::join_all(exchanges).await;
    }

    /// Tenants whose home is not the one of the previous pass are capped at what they hold
    /// until their new home answers; records this cluster kept as their old home are dropped.
    async fn follow_homes(&self, routes: &Arc<RouteTable>) {
        let last = self
            .holder
            .last_routes
            .lock()
            .expect("routes lock")
            .replace(routes.clone());
        let Some(last) = last.filter(|l| l.generation() != routes.generation()) else {
            return;
        };
        let ledger = self.directory.tenants();
        for tenant in ledger.names() {
            let key = RouteKey::quota_home(&tenant);
            let (before, now) = (last.route(key).ok(), routes.route(key).ok());
            if before == now {
                continue;
            }
            ledger.lower_cap(&tenant, (0, 0));
            if before == Some(self.cluster.as_str()) {
                self.release_all(&tenant).await;
            }
        }
    }

    /// For tenants homed here: lift the cap once every other cluster reported (or at once
    /// without a limit), and drop the records of clusters that left.
    async fn tend_homed_here(&self, routes: &RouteTable, membership: &Membership) {
        let ledger = self.directory.tenants();
        let members: Vec<&str> = holders(membership, &self.cluster).collect();
        for tenant in ledger.names() {
            if routes.route(RouteKey::quota_home(&tenant)).ok() != Some(self.cluster.as_str()) {
                continue;
            }
            let f = ledger.figures(&tenant);
            let unlimited = f.max_bytes.is_none() && f.max_objects.is_none();
            let Ok(records) = self.quotas.allowances(&tenant).await else {
                continue;
            };
            for cluster in records.keys() {
                if unlimited || !members.contains(&cluster.as_str()) {
                    if let Err(e) = self.release(&tenant, cluster).await {
                        tracing::warn!(%tenant, %cluster, error = %e, "cannot release an allowance");
                    }
                }
            }
            if ledger.cap(&tenant).is_some() && (unlimited || self.home_ready(&tenant, membership))
            {
                ledger.raise_cap(&tenant, None);
            }
        }
    }

    async fn release_all(&self, tenant: &str) {
        let Ok(records) = self.quotas.allowances(tenant).await else {
            return;
        };
        for cluster in records.keys() {
            if let Err(e) = self.release(tenant, cluster).await {
                tracing::warn!(%tenant, %cluster, error = %e, "cannot release an allowance");
            }
        }
    }

    /// What to report of `tenant` and the room to ask for: enough to keep a fraction of this
    /// cluster's share (plus what refused puts asked), and room beyond twice that given back
    /// first (all of it when the home is short and no put here asked).
    fn plan(&self, tenant: &str, demand: Option<Amount>, clusters: u64) -> Holding {
        let ledger = self.directory.tenants();
        let known = self
            .holder
            .known
            .lock()
            .expect("known lock")
            .get(tenant)
            .copied();
        let demand = demand.unwrap_or_default();
        let keep = match known {
            Some((_, true)) if demand == Amount::default() => Amount::default(),
            Some((limits, _)) => keep_of(limits, clusters),
            None => Amount::default(),
        };
        let held = ledger.holdings(tenant);
        if let Some(cap) = ledger.cap(tenant) {
            let excess = |cap: u64, held: u64, keep: u64| cap.saturating_sub(held) > keep * 2;
            if demand == Amount::default()
                && (excess(cap.0, held.0, keep.bytes) || excess(cap.1, held.1, keep.objects))
            {
                ledger.lower_cap(tenant, pair(keep));
            }
        }
        let cap = ledger.cap(tenant);
        let held = amount(ledger.holdings(tenant));
        let room = cap.map_or(Amount::default(), |(b, o)| Amount {
            bytes: b.saturating_sub(held.bytes),
            objects: o.saturating_sub(held.objects),
        });
        // After the home had no room, only a put asks again (not every pass).
        let refill = !self.holder.was_short(tenant);
        let want_of = |room: u64, keep: u64, demand: u64| match (refill && room < keep.div_ceil(2))
            || demand > 0
        {
            true => keep.saturating_sub(room).saturating_add(demand),
            false => 0,
        };
        Holding {
            tenant: tenant.to_string(),
            cap: cap.map(amount),
            held,
            want: Amount {
                bytes: want_of(room.bytes, keep.bytes, demand.bytes),
                objects: want_of(room.objects, keep.objects, demand.objects),
            },
        }
    }

    async fn exchange_with(
        &self,
        membership: &Membership,
        home: &str,
        holdings: Vec<Holding>,
        demand: &HashMap<String, Amount>,
    ) {
        let Some(leader) = membership
            .clusters
            .iter()
            .find(|c| c.name == home)
            .and_then(|c| c.leader.clone())
        else {
            return;
        };
        // An empty exchange still counts: the home hears from this cluster and names the
        // tenants it limits.
        let chunks: Vec<Vec<Holding>> = match holdings.is_empty() {
            true => vec![Vec::new()],
            false => holdings
                .chunks(MAX_EXCHANGE_TENANTS)
                .map(<[Holding]>::to_vec)
                .collect(),
        };
        for chunk in chunks {
            match self.send(&leader, membership, chunk.clone()).await {
                Ok(reply) => {
                    self.metrics.sent.with_label_values(&["answered"]).inc();
                    self.take(reply, &chunk, demand);
                }
                Err(e) => self.failed(home, &e),
            }
        }
    }

    fn failed(&self, home: &str, e: &ApiError) {
        let outcome = match e.code {
            ErrorCode::StaleGeneration => "stale_generation",
            ErrorCode::Unavailable => "unreachable",
            _ => "refused",
        };
        self.metrics.sent.with_label_values(&[outcome]).inc();
        tracing::debug!(%home, code = ?e.code, error = %e.message, "quota exchange not answered");
        if e.code == ErrorCode::Conflict {
            // An older run's exchanges were answered later than ours: start a newer epoch.
            self.epoch
                .fetch_add(1_000_000, std::sync::atomic::Ordering::AcqRel);
        }
    }

    async fn send(
        &self,
        leader: &str,
        membership: &Membership,
        tenants: Vec<Holding>,
    ) -> Result<ExchangeReply, ApiError> {
        let (epoch, seq) = self.next_seq();
        let req = ExchangeRequest {
            version: EXCHANGE_WIRE_VERSION,
            mesh: membership.mesh.clone(),
            from: self.cluster.clone(),
            generation: membership.generation,
            epoch,
            seq,
            tenants,
        };
        let base = match leader.contains("://") {
            true => leader.trim_end_matches('/').to_string(),
            false => format!("http://{leader}"),
        };
        let mut call = self.http.post(format!("{base}{EXCHANGE_ROUTE}")).json(&req);
        if let Some(token) = crate::auth::peer_token(&self.auth) {
            call = call.bearer_auth(token);
        }
        let unreachable = |e: reqwest::Error| ApiError::new(ErrorCode::Unavailable, e.to_string());
        let resp = call.send().await.map_err(unreachable)?;
        if resp.status().is_success() {
            return resp.json::<ExchangeReply>().await.map_err(unreachable);
        }
        let status = resp.status();
        Err(resp.json::<ApiError>().await.unwrap_or_else(|_| {
            ApiError::new(
                ErrorCode::Unavailable,
                format!("quota exchange: HTTP {status}"),
            )
        }))
    }

    /// Takes a home's answers: caps raised to what it recorded, lifted where it has no limit,
    /// closed where this cluster admitted without a cap and the tenant now has a limit.
    fn take(&self, reply: ExchangeReply, sent: &[Holding], demand: &HashMap<String, Amount>) {
        let ledger = self.directory.tenants();
        for (answer, holding) in reply.answers.into_iter().zip(sent) {
            match answer {
                Answer::Unlimited { tenant } => {
                    ledger.raise_cap(&tenant, None);
                    self.holder
                        .known
                        .lock()
                        .expect("known lock")
                        .remove(&tenant);
                    self.holder
                        .exhausted
                        .lock()
                        .expect("exhausted lock")
                        .remove(&tenant);
                }
                Answer::Allowance {
                    tenant,
                    allowance,
                    limits,
                    pressure,
                    ..
                } => {
                    let known = (limits, pressure);
                    self.holder
                        .known
                        .lock()
                        .expect("known lock")
                        .insert(tenant.clone(), known);
                    if holding.cap.is_none() {
                        ledger.lower_cap(&tenant, (0, 0));
                        self.wake.notify_one();
                        continue;
                    }
                    ledger.raise_cap(&tenant, Some(pair(allowance)));
                    let asked = demand.get(&tenant).copied().unwrap_or_default();
                    let short = |a: u64, held: u64, asked: u64| asked > 0 && a < held + asked;
                    let mut exhausted = self.holder.exhausted.lock().expect("exhausted lock");
                    if short(allowance.bytes, holding.held.bytes, asked.bytes)
                        || short(allowance.objects, holding.held.objects, asked.objects)
                    {
                        exhausted.insert(tenant, Instant::now());
                    } else {
                        exhausted.remove(&tenant);
                    }
                }
                Answer::NotHome { .. } => {}
            }
        }
        // Only tenants admitted without a cap: a capped one is reported already (perhaps in
        // another chunk of this pass).
        for tenant in reply.also_limited {
            if ledger.cap(&tenant).is_none() {
                ledger.lower_cap(&tenant, (0, 0));
                self.wake.notify_one();
            }
        }
    }
}
