//! The standby phase: follow the active's journal, replay it in the background, answer
//! clients with NOT_LEADER, and wait to be elected.
//!
//! Replay runs through the snapshotter (the same shadow replay that writes snapshots on an
//! active): it applies every replicated record to a `World` and snapshots it, so a promotion
//! restores from a recent snapshot plus a short tail.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use crescent_ha::{Elector, Role};
use crescent_journal::replication::{Follower, FollowerConfig, FollowerStatus, PeerToken};
use crescent_snapshot::{restore, SnapshotDir, SnapshotMetrics, Snapshotter};
use crescent_wire::{ApiError, ErrorCode};

use crate::config::Config;
use crate::error::ServerError;
use crate::journal_open::OpenedJournal;

/// What the standby's HTTP handlers read.
pub struct StandbyView {
    pub node: String,
    pub role: tokio::sync::watch::Receiver<Role>,
    pub follower: Mutex<Option<Arc<Follower>>>,
    pub metrics: crate::metrics::ServerMetrics,
    /// `DATA_DIR/journal` and the journal's metrics (its quarantine is reported in `/healthz`).
    pub journal_dir: std::path::PathBuf,
    pub journal_metrics: crescent_journal::JournalMetrics,
    /// With `[auth]`: the keys `/v1/status` and the NOT_LEADER answer check a token against
    /// (signature and expiry; the revocation list is the active's, and a revoked token learns
    /// nothing here but where the active is). `None`: open mode.
    pub keys: Option<crescent_auth::KeySet>,
    /// Where a reseed stands (docs/ha.md, "Reseeding").
    pub reseed: Arc<super::reseed_fetch::ReseedProgress>,
}

impl StandbyView {
    fn follower_status(&self) -> FollowerStatus {
        self.follower
            .lock()
            .expect("follower mutex")
            .as_ref()
            .map(|f| f.status())
            .unwrap_or_default()
    }

    fn leader(&self) -> Option<crescent_ha::LeaderInfo> {
        match &*self.role.borrow() {
            Role::Follower { leader } => Some(leader.clone()),
            _ => None,
        }
    }

    /// `crescent status --json` / `/healthz` for a standby.
    pub fn status(&self) -> serde_json::Value {
        let f = self.follower_status();
        let role = self.role.borrow().clone();
        serde_json::json!({
            "status": "standby",
            "role": "standby",
            "node": self.node,
            "election": role.as_str(),
            "leader": self.leader().map(|l| serde_json::json!({"node": l.node, "address": l.address, "term": l.term})),
            "term": f.term,
            "commit_seq": f.durable_seq.min(f.leader_commit_seq),
            "durable_seq": f.durable_seq,
            "gate": "STANDBY",
            "replication": {
                "connected": f.connected,
                "leader_commit_seq": f.leader_commit_seq,
                "leader_durable_seq": f.leader_durable_seq,
                "lag_records": f.leader_durable_seq.saturating_sub(f.durable_seq),
                "received_bytes": f.received_bytes,
                "refused": f.refused.as_ref().map(|(c, m)| serde_json::json!({"code": c, "message": m})),
                "rewind_to": f.rewind_to.as_ref().map(|r| r.seq),
                "reseed": self.reseed.status(),
            },
            "version": env!("CARGO_PKG_VERSION"),
            "journal": crate::journal_health::journal_health(&self.journal_dir, &self.journal_metrics),
        })
    }
}

async fn healthz(view: web::Data<Arc<StandbyView>>) -> HttpResponse {
    HttpResponse::Ok().json(view.status())
}

/// `/readyz`: a standby never serves writes (docs/api.md, "Readiness").
async fn readyz() -> HttpResponse {
    HttpResponse::ServiceUnavailable().json(crescent_wire::health::Readiness {
        ready: false,
        role: "standby".into(),
        gate: None,
        reason: Some("a standby serves no writes; clients follow the active".into()),
    })
}

/// `/v1/status`: `/healthz`'s answer, to a caller with a valid token when auth is on (every
/// route but `/healthz` and `/metrics` needs one, docs/security.md).
async fn status(view: web::Data<Arc<StandbyView>>, req: HttpRequest) -> HttpResponse {
    match refuse_unauthenticated(&view, &req) {
        Some(refusal) => refusal,
        None => HttpResponse::Ok().json(view.status()),
    }
}

/// 401 UNAUTHENTICATED when auth is on and `req` carries no valid token.
fn refuse_unauthenticated(view: &StandbyView, req: &HttpRequest) -> Option<HttpResponse> {
    let keys = view.keys.as_ref()?;
    let token = req
        .headers()
        .get(actix_web::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|h| h.strip_prefix(crescent_wire::auth::AUTHORIZATION_SCHEME));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let refused = match token.map(str::trim).filter(|t| !t.is_empty()) {
        None => "no credential: send Authorization: Bearer TOKEN".to_string(),
        Some(t) => match crescent_auth::verify(keys, t, now) {
            Ok(_) => return None,
            Err(e) => e.to_string(),
        },
    };
    let err = ApiError::new(ErrorCode::Unauthenticated, refused);
    Some(
        HttpResponse::build(
            actix_web::http::StatusCode::from_u16(ErrorCode::Unauthenticated.http_status())
                .expect("valid status"),
        )
        .json(err),
    )
}

async fn metrics(view: web::Data<Arc<StandbyView>>) -> HttpResponse {
    // Refreshes the quarantine gauge (docs/journal-format.md, "Quarantine").
    crate::journal_health::journal_health(&view.journal_dir, &view.journal_metrics);
    view.metrics.process.refresh();
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4; charset=utf-8")
        .body(view.metrics.render())
}

/// Everything else: NOT_LEADER, naming the leader when one is known.
async fn not_leader(view: web::Data<Arc<StandbyView>>, req: HttpRequest) -> HttpResponse {
    if let Some(refusal) = refuse_unauthenticated(&view, &req) {
        return refusal;
    }
    let message = match view.leader() {
        Some(l) => format!(
            "this node is a standby; the active is {} at {}",
            l.node, l.address
        ),
        None => "this node is a standby and no active is known yet".to_string(),
    };
    let err = ApiError::new(ErrorCode::NotLeader, message);
    let mut resp = HttpResponse::build(
        actix_web::http::StatusCode::from_u16(ErrorCode::NotLeader.http_status())
            .expect("valid status"),
    );
    if let Some(l) = view.leader() {
        resp.insert_header(("x-crescent-leader", l.address));
    }
    resp.json(err)
}

/// Resolves the active's replication address from its HTTP address (`GET /v1/ha/replication`).
/// With `[auth]` on, the standby proves itself with a short-lived `peer` token signed by the key
/// both nodes share.
/// With `[tls]` the active is reached over HTTPS, verified with `tls.ca_file`; the answer says
/// whether its replication listener speaks TLS too.
async fn replication_address(
    http: &str,
    token: Option<String>,
    tls: Option<&crate::config::tls::LoadedTls>,
) -> Option<ReplicationPeer> {
    #[derive(serde::Deserialize)]
    struct Info {
        address: String,
        #[serde(default)]
        tls: bool,
    }
    let base = match (http.contains("://"), tls.is_some()) {
        (true, _) => http.trim_end_matches('/').to_string(),
        (false, true) => format!("https://{http}"),
        (false, false) => format!("http://{http}"),
    };
    let mut client = reqwest::Client::builder().timeout(std::time::Duration::from_secs(2));
    if let Some(config) = tls.and_then(|t| t.client.clone()) {
        client = client.use_preconfigured_tls((*config).clone());
    }
    let client = client.build().ok()?;
    let url = format!("{base}/v1/ha/replication");
    let mut req = client.get(&url);
    if let Some(token) = token {
        req = req.bearer_auth(token);
    }
    let info: Info = match req.send().await {
        Ok(resp) => resp.json().await.ok()?,
        Err(e) => {
            tracing::debug!(%url, error = %e, "cannot ask the active for its replication address");
            return None;
        }
    };
    let addr = info.address.parse().ok()?;
    let host = reqwest::Url::parse(&base).ok()?.host_str()?.to_string();
    Some(ReplicationPeer {
        addr,
        tls: info.tls,
        host,
    })
}

/// Where the active's replication listener is, and how to reach it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ReplicationPeer {
    pub addr: SocketAddr,
    /// The listener speaks TLS: connect through the local TLS relay (`super::tls_relay`).
    pub tls: bool,
    /// The host name the active's certificate must carry (its advertised host).
    pub host: String,
}

/// How the standby phase ended.
pub enum Outcome {
    /// Elected under this term: promote.
    Elected(u64),
    /// The active refused this journal as diverged and named a rewind point; a request for
    /// it is recorded in the data dir: exit and restart.
    MustRewind,
    /// The active's snapshot was received into the reseed dir: restart to install it.
    MustReseed,
}

/// Runs the standby phase until this node is elected (or must rewind). The journal and data
/// dir are handed back untouched for promotion.
pub async fn run(
    config: &Config,
    opened: &OpenedJournal,
    elector: &Elector,
    node: &str,
    listener: &std::net::TcpListener,
    reseed_metrics: super::reseed_fetch::ReseedMetrics,
) -> Result<Outcome, ServerError> {
    // Before the follower starts: every record above this seq comes from the active.
    let repair = super::quarantine_repair::QuarantineRepair::new(
        &opened.dir.journal_dir(),
        opened.journal.last_seq(),
    );
    let snapshotter = start_replay(config, opened)?;
    let following = follow(config, opened, elector, node)?;
    let server = serve_standby(config, &following, listener)?;
    let http = server.handle();
    let http_task = actix_rt::spawn(server);
    tracing::info!(listen = %config.listen, node, "crescentd standby: following the active");
    let term = wait_for_election(config, opened, elector, &following, repair, reseed_metrics).await;

    // Leave the standby phase: nothing more is appended from the old active once the follower
    // has stopped, and the snapshotter is caught up (its state is dropped; promotion restores).
    let follower = following
        .view
        .follower
        .lock()
        .expect("follower mutex")
        .take();
    if let Some(f) = follower {
        let stopped = tokio::task::spawn_blocking(move || {
            if let Ok(f) = Arc::try_unwrap(f) {
                f.stop();
            }
        });
        let _ = stopped.await;
    }
    http.stop(true).await;
    let _ = http_task.await;
    if let Err(e) = snapshotter.stop() {
        tracing::warn!(error = %e, "standby snapshotter stopped with an error");
    }
    term
}

/// The shadow replay: restores from the newest snapshot and applies every replicated record.
fn start_replay(config: &Config, opened: &OpenedJournal) -> Result<Snapshotter, ServerError> {
    let journal = opened.journal.clone();
    let snapshots = SnapshotDir::new(opened.dir.snapshot_dir());
    let restored = restore(&snapshots, &journal, crescent_domain::standard_world())?;
    Ok(Snapshotter::start(
        restored.state,
        journal,
        snapshots,
        config.snapshotter(),
        SnapshotMetrics::new(),
    )?)
}

/// The follower of the active's journal and what the standby phase needs around it.
struct Following {
    view: Arc<StandbyView>,
    /// The active's replication listener, re-resolved while the standby waits.
    leader_repl: Arc<Mutex<Option<ReplicationPeer>>>,
    /// Where the follower dials (the relay with `[tls]`).
    active_addr: Arc<dyn Fn() -> Option<SocketAddr> + Send + Sync>,
    follower_config: FollowerConfig,
    tls: Option<crate::config::tls::LoadedTls>,
    /// Kept for the whole phase: the follower dials through it.
    _relay: Option<super::tls_relay::DialRelay>,
}

/// Starts the follower (through the local TLS relay with `[tls]`) and the standby's view.
fn follow(
    config: &Config,
    opened: &OpenedJournal,
    elector: &Elector,
    node: &str,
) -> Result<Following, ServerError> {
    let journal = opened.journal.clone();
    let leader_repl: Arc<Mutex<Option<ReplicationPeer>>> = Arc::default();
    let tls = config
        .tls
        .load()
        .map_err(|e| ServerError::Recovery(e.to_string()))?;
    // With [tls] the follower reaches a TLS listener through the local relay (tls_relay.rs).
    let relay = match tls.as_ref().and_then(|t| t.client.clone()) {
        Some(client) => Some(
            super::tls_relay::DialRelay::start(
                leader_repl.clone(),
                crescent_tls::TlsConnector::from(client),
                opened.metrics.clone(),
            )
            .map_err(|e| ServerError::Recovery(format!("replication TLS relay: {e}")))?,
        ),
        None => None,
    };
    let relay_addr = relay.as_ref().map(|r| r.local_addr());
    let view = Arc::new(StandbyView {
        node: node.to_string(),
        role: elector.subscribe(),
        follower: Mutex::new(None),
        metrics: opened.metrics.clone(),
        journal_dir: opened.dir.journal_dir(),
        journal_metrics: journal.metrics().clone(),
        keys: standby_keys(&config.auth)?,
        reseed: Arc::default(),
    });
    let follower_config = FollowerConfig {
        node: node.to_string(),
        capabilities: crescent_domain::standard_world().event_schemas(),
        // With [auth], the Hello carries a peer token minted for each connection
        // (docs/security.md, "Replication peers").
        token: config.auth.enabled().then(|| {
            let settings = config.auth.clone();
            PeerToken::new(move || crate::auth::peer_token(&settings))
        }),
        ..FollowerConfig::default()
    };
    let active_addr: Arc<dyn Fn() -> Option<SocketAddr> + Send + Sync> = {
        let leader_repl = leader_repl.clone();
        Arc::new(move || dial_address(&leader_repl, relay_addr))
    };
    let follower = Follower::start(
        journal,
        active_addr.clone(),
        Arc::new(|_| {}),
        follower_config.clone(),
    )
    .map_err(|e| ServerError::Recovery(format!("cannot start the follower: {e}")))?;
    *view.follower.lock().expect("follower mutex") = Some(Arc::new(follower));
    Ok(Following {
        view,
        leader_repl,
        active_addr,
        follower_config,
        tls,
        _relay: relay,
    })
}

/// The standby's HTTP server on `listener`: health, metrics, status, NOT_LEADER for the rest.
fn serve_standby(
    config: &Config,
    following: &Following,
    listener: &std::net::TcpListener,
) -> Result<actix_web::dev::Server, ServerError> {
    let data = web::Data::new(following.view.clone());
    let max_body = config.http.max_body_bytes;
    let body_limits = crate::http_bounds::BodyLimits {
        max_bytes: max_body,
        timeout: config.net.http_body_timeout(),
    };
    let server = HttpServer::new(move || {
        App::new()
            .app_data(data.clone())
            .app_data(web::PayloadConfig::new(max_body))
            .app_data(body_limits)
            .route("/healthz", web::get().to(healthz))
            .route("/readyz", web::get().to(readyz))
            .route("/metrics", web::get().to(metrics))
            .route("/v1/status", web::get().to(status))
            .default_service(web::to(not_leader))
    })
    .disable_signals();
    // The same `[net]` bounds as the active's listener, on one worker (docs/configuration.md).
    let server = crate::http_bounds::bounded_http_server!(server, &config.net, 1);
    let tls = following.tls.as_ref();
    Ok(crate::http_bounds::listen_http!(server, listener, tls, &config.net)?.run())
}

/// Follows the active until this node is elected, its journal diverged (rewind) or must be
/// reseeded, the elector stops, or a signal arrives.
async fn wait_for_election(
    config: &Config,
    opened: &OpenedJournal,
    elector: &Elector,
    following: &Following,
    mut repair: super::quarantine_repair::QuarantineRepair,
    reseed_metrics: super::reseed_fetch::ReseedMetrics,
) -> Result<Outcome, ServerError> {
    let journal = &opened.journal;
    let mut role = elector.subscribe();
    let mut next_reseed = std::time::Instant::now();
    loop {
        repair.poll(journal);
        let current = role.borrow_and_update().clone();
        let diverged = following.view.follower_status();
        if let (Some((code, message)), Some(point)) = (&diverged.refused, &diverged.rewind_to) {
            if code == crescent_journal::replication::refusal::DIVERGED {
                super::rewind::request(opened.dir.root(), point, message)?;
                return Ok(Outcome::MustRewind);
            }
        }
        let needs_reseed = diverged
            .refused
            .as_ref()
            .is_some_and(|(code, _)| code == crescent_journal::replication::refusal::NEEDS_RESEED);
        if needs_reseed && std::time::Instant::now() >= next_reseed {
            if let Some(addr) = (following.active_addr)() {
                match reseed(opened, following, addr, &reseed_metrics).await? {
                    true => return Ok(Outcome::MustReseed),
                    // Logged and counted by the fetch; tried again after a pause.
                    false => next_reseed = std::time::Instant::now() + RESEED_RETRY,
                }
                continue;
            }
        }
        match current {
            Role::Leader { term } => return Ok(Outcome::Elected(term)),
            Role::Follower { leader } => {
                let token = crate::auth::peer_token(&config.auth);
                let tls = following.tls.as_ref();
                let addr = replication_address(&leader.address, token, tls).await;
                *following.leader_repl.lock().expect("leader mutex") = addr;
            }
            _ => *following.leader_repl.lock().expect("leader mutex") = None,
        }
        tokio::select! {
            changed = role.changed() => {
                if changed.is_err() {
                    return Err(ServerError::Recovery("the elector stopped".into()));
                }
            }
            // re-resolve the active's replication address now and then (it may restart)
            _ = tokio::time::sleep(std::time::Duration::from_secs(2)) => {}
            _ = tokio::signal::ctrl_c() => {
                return Err(ServerError::Recovery("interrupted".into()));
            }
        }
    }
}

/// Fetches the active's snapshot from `addr` into the reseed dir: `Ok(true)` once received.
async fn reseed(
    opened: &OpenedJournal,
    following: &Following,
    addr: SocketAddr,
    reseed_metrics: &super::reseed_fetch::ReseedMetrics,
) -> Result<bool, ServerError> {
    let fetch = {
        let config = following.follower_config.clone();
        let dir = opened.dir.root().to_path_buf();
        let progress = following.view.reseed.clone();
        let metrics = reseed_metrics.clone();
        tokio::task::spawn_blocking(move || {
            super::reseed_fetch::fetch(addr, &config, &dir, &progress, &metrics)
        })
    };
    tokio::select! {
        done = fetch => Ok(matches!(done, Ok(Ok(_)))),
        _ = tokio::signal::ctrl_c() => Err(ServerError::Recovery("interrupted".into())),
    }
}

/// Pause between failed reseed attempts.
const RESEED_RETRY: std::time::Duration = std::time::Duration::from_secs(2);

/// Where the follower (and a reseed) dials the active: its replication listener, or the local
/// TLS relay in front of it (tls_relay.rs).
fn dial_address(
    leader_repl: &Mutex<Option<ReplicationPeer>>,
    relay_addr: Option<SocketAddr>,
) -> Option<SocketAddr> {
    let peer = leader_repl.lock().expect("leader mutex").clone()?;
    match (peer.tls, relay_addr) {
        (false, _) => Some(peer.addr),
        (true, Some(relay)) => Some(relay),
        (true, None) => {
            tracing::warn!(active = %peer.addr, "the active's replication listener \
                speaks TLS: set [tls] with ca_file on this node");
            None
        }
    }
}

/// The verification keys of `[auth]` (the same files the active loads), if it is on.
fn standby_keys(
    settings: &crate::config::auth::AuthSettings,
) -> Result<Option<crescent_auth::KeySet>, ServerError> {
    let Some(path) = &settings.secret_file else {
        return Ok(None);
    };
    crescent_auth::KeySet::from_files(path, &settings.previous_secret_files)
        .map(Some)
        .map_err(|e| ServerError::Recovery(format!("auth: {e}")))
}
