//! `/healthz`, `/metrics` and `/stats`.

use std::sync::Arc;

use actix_web::{web, HttpResponse};
use serde::Serialize;

use crate::node::NodeState;

type State = web::Data<Arc<NodeState>>;

#[derive(Debug, Serialize)]
pub struct Health {
    /// `serving` while the node answers requests.
    pub status: &'static str,
    /// `standalone`, `active` (HA), or `deposed` (an active that lost its term and is exiting);
    /// a standby answers from its own handler with `standby`.
    pub role: &'static str,
    pub term: u64,
    pub commit_seq: u64,
    /// The rebuild gate: `SERVING`, `REBUILDING` (object operations wait for the storage
    /// owners' replays) or `DEGRADED` (opened at the timeout without every owner).
    pub gate: &'static str,
    /// Rebuild progress: owners expected/completed, entries by outcome.
    pub rebuild: crescent_wire::rebuild::GateStatus,
    pub version: &'static str,
    /// The RPC fast path's address (`GET /v1/rpc` has the details), absent when it is off, and
    /// with `[auth]` on (this route is public; `GET /v1/rpc` needs a token).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rpc: Option<String>,
    /// Whether HTTP, RPC and replication speak TLS only (`[tls]`, docs/security.md "TLS").
    pub tls: bool,
    /// Replication details of an HA active.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ha: Option<serde_json::Value>,
    /// Journal findings that need an operator (quarantined tails); absent when there are none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub journal: Option<crate::journal_health::JournalHealth>,
    /// The descriptor reserve kept for the journal and snapshotter (`net.fd_reserve`):
    /// `available` below `target` means the process ran out of descriptors.
    pub descriptors: Descriptors,
}

/// `descriptors` of `/healthz`.
#[derive(Debug, Clone, Serialize)]
pub struct Descriptors {
    pub reserve_target: usize,
    pub reserve_available: usize,
    /// Opens that found the process out of descriptors since start.
    pub exhaustions: u64,
}

impl Descriptors {
    fn now() -> Self {
        let s = crescent_journal::fd_reserve::stats();
        Descriptors {
            reserve_target: s.target,
            reserve_available: s.available,
            exhaustions: s.exhaustions,
        }
    }
}

/// `GET /v1/ha/replication`: where a standby connects (404 when this node is not an active).
pub async fn ha_replication(state: State) -> Result<HttpResponse, super::error::HttpError> {
    match state.ha.get() {
        Some(ha) if !ha.stepped_down() => Ok(HttpResponse::Ok().json(serde_json::json!({
            "address": ha.replication_address,
            "term": ha.term,
            "version": crescent_journal::replication::PROTOCOL_VERSION,
            "tls": state.tls.is_some(),
            "event_versions": ha.event_versions_json(),
        }))),
        _ => Err(super::error::HttpError(crescent_wire::ApiError::new(
            crescent_wire::ErrorCode::NotLeader,
            "this node is not the active of an HA pair",
        ))),
    }
}

/// 200 while serving; 503 once the journal has failed.
/// This node's role as `/healthz` and `/readyz` name it.
fn role(state: &NodeState) -> &'static str {
    match state.ha.get() {
        Some(ha) if ha.stepped_down() => "deposed",
        Some(_) => "active",
        None => "standalone",
    }
}

pub async fn healthz(state: State) -> HttpResponse {
    let failed = state.journal.durable().fault().is_some();
    let gate = state.rebuild.status();
    let role = role(&state);
    let (term, ha) = match state.ha.get() {
        Some(ha) => (ha.term, Some(ha.status())),
        None => (state.runtime.term(), None),
    };
    let body = Health {
        status: if failed { "failed" } else { "serving" },
        role,
        term,
        commit_seq: state.runtime.commit().get(),
        gate: gate.state.as_str(),
        rebuild: gate,
        version: env!("CARGO_PKG_VERSION"),
        rpc: state
            .rpc_address()
            .filter(|_| !state.auth.enabled())
            .map(|a| a.to_string()),
        tls: state.tls.is_some(),
        ha,
        journal: crate::journal_health::journal_health(&state.journal_dir, state.journal.metrics()),
        descriptors: Descriptors::now(),
    };
    if failed {
        HttpResponse::ServiceUnavailable().json(body)
    } else {
        HttpResponse::Ok().json(body)
    }
}

/// `GET /readyz`: 200 only when this node serves writes, the active (or a standalone node)
/// with its rebuild gate SERVING and its journal healthy; 503 otherwise (docs/api.md,
/// "Readiness"). `/healthz` stays liveness.
pub async fn readyz(state: State) -> HttpResponse {
    let gate = state.rebuild.status().state;
    let role = role(&state);
    let reason = if state.journal.durable().fault().is_some() {
        Some("the journal failed".to_string())
    } else if role == "deposed" {
        Some("this node lost its term".to_string())
    } else if gate != crescent_wire::rebuild::GateState::Serving {
        Some(format!("the rebuild gate is {}", gate.as_str()))
    } else {
        None
    };
    let body = crescent_wire::health::Readiness {
        ready: reason.is_none(),
        role: role.into(),
        gate: Some(gate.as_str().into()),
        reason,
    };
    match body.ready {
        true => HttpResponse::Ok().json(body),
        false => HttpResponse::ServiceUnavailable().json(body),
    }
}

/// `GET /v1/rpc`: where the RPC fast path listens; 404 NOT_FOUND when it is off (clients then
/// stay on HTTP).
pub async fn rpc_info(
    state: State,
) -> Result<super::wire::Reply<crescent_wire::rpc::RpcInfo>, super::error::HttpError> {
    match state.rpc_address() {
        Some(addr) => Ok(super::wire::Reply(crescent_wire::rpc::RpcInfo {
            address: addr.to_string(),
            version: crescent_wire::rpc::RPC_VERSION,
            features: crate::rpc::features(&state.store_settings),
            tls: state.tls.is_some(),
            local: state.rpc_local_path().map(|p| p.display().to_string()),
        })),
        None => Err(super::error::HttpError(crescent_wire::ApiError::new(
            crescent_wire::ErrorCode::NotFound,
            "the RPC fast path is off (store.rpc_listen = \"off\")",
        ))),
    }
}

pub async fn metrics(state: State) -> HttpResponse {
    state.refresh_gauges();
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4; charset=utf-8")
        .body(state.metrics.render())
}

#[derive(Debug, Serialize)]
pub struct Stats {
    pub journal: JournalStats,
    pub snapshots: serde_json::Value,
    pub store: StoreStats,
}

/// The object directory's figures.
#[derive(Debug, Serialize)]
pub struct StoreStats {
    pub objects: u64,
    pub bytes_used: u64,
    pub bytes_capacity: u64,
    pub segments: u64,
    pub scopes: u64,
    pub puts_in_progress: u64,
    /// Owners whose heartbeats are being tracked.
    pub owners: usize,
    pub per_segment: Vec<SegmentStats>,
    /// The embedded segment, when this crescentd serves one.
    pub embedded: Option<EmbeddedStats>,
}

#[derive(Debug, Serialize)]
pub struct SegmentStats {
    pub segment_id: String,
    pub owner_id: String,
    pub capacity: u64,
    pub used: u64,
    pub free_ranges: usize,
    pub largest_free: u64,
}

#[derive(Debug, Serialize)]
pub struct EmbeddedStats {
    pub owner_id: String,
    pub segment_id: String,
    pub endpoint: String,
    pub size: u64,
    pub incarnation: u64,
}

fn store_stats(state: &NodeState) -> StoreStats {
    let d = state.directory.stats();
    let embedded = state
        .embedded
        .lock()
        .expect("embedded mutex")
        .as_ref()
        .map(|e| EmbeddedStats {
            owner_id: e.owner_id.clone(),
            segment_id: e.segment_id.clone(),
            endpoint: e.endpoint.clone(),
            size: e.size,
            incarnation: e.incarnation,
        });
    StoreStats {
        objects: d.objects,
        bytes_used: d.bytes_used,
        bytes_capacity: d.bytes_capacity,
        segments: d.segments,
        scopes: d.scopes,
        puts_in_progress: d.puts_in_progress,
        owners: state.liveness.len(),
        per_segment: state
            .directory
            .segment_usage()
            .into_iter()
            .map(|u| SegmentStats {
                segment_id: u.segment_id,
                owner_id: u.owner_id,
                capacity: u.capacity,
                used: u.used,
                free_ranges: u.free_ranges,
                largest_free: u.largest_free,
            })
            .collect(),
        embedded,
    }
}

#[derive(Debug, Serialize)]
pub struct JournalStats {
    pub backend: String,
    pub first_seq: u64,
    pub last_seq: u64,
    pub durable_seq: u64,
    pub term: u64,
    pub head_digest: String,
}

pub async fn stats(state: State) -> HttpResponse {
    let j = &state.journal;
    let (_, _, digest) = j.head();
    let body = Stats {
        journal: JournalStats {
            backend: state.journal_backend.clone(),
            first_seq: j.first_seq(),
            last_seq: j.last_seq(),
            durable_seq: j.durable().get(),
            term: j.term(),
            head_digest: digest.iter().map(|b| format!("{b:02x}")).collect(),
        },
        snapshots: state.snapshot_status(),
        store: store_stats(&state),
    };
    HttpResponse::Ok().json(body)
}

pub use crescent_wire::admin::SnapshotWritten;

/// `POST /v1/admin/snapshot`: write a snapshot now (before maintenance, or to bound recovery).
pub async fn snapshot_now(
    state: State,
) -> Result<super::wire::Reply<SnapshotWritten>, super::error::HttpError> {
    let info = state.get_ref().snapshot_now().await.map_err(|e| {
        super::error::HttpError(crescent_wire::ApiError::new(
            crescent_wire::ErrorCode::Unavailable,
            e.to_string(),
        ))
    })?;
    Ok(super::wire::Reply(SnapshotWritten {
        path: info.path.display().to_string(),
        seq: info.position.seq,
        term: info.position.term,
        bytes: info.bytes,
    }))
}
