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
    /// `standalone` (the HA issue adds `active` and `standby`).
    pub role: &'static str,
    pub term: u64,
    pub commit_seq: u64,
    /// `SERVING` (the HA issue adds `REBUILDING` and `DEGRADED`).
    pub gate: &'static str,
    pub version: &'static str,
}

/// 200 while serving; 503 once the journal has failed.
pub async fn healthz(state: State) -> HttpResponse {
    let failed = state.journal.durable().fault().is_some();
    let body = Health {
        status: if failed { "failed" } else { "serving" },
        role: "standalone",
        term: state.journal.term(),
        commit_seq: state.journal.durable().get(),
        gate: "SERVING",
        version: env!("CARGO_PKG_VERSION"),
    };
    if failed {
        HttpResponse::ServiceUnavailable().json(body)
    } else {
        HttpResponse::Ok().json(body)
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
    };
    HttpResponse::Ok().json(body)
}

#[derive(Debug, Serialize)]
pub struct SnapshotWritten {
    pub path: String,
    pub seq: u64,
    pub term: u64,
    pub bytes: u64,
}

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
