//! `/v1/weights/upsert` and `/v1/weights/upsert/status`: weight_upsert (docs/weights.md,
//! "LineageClaim"): base checks, the lineage claim, and driving it to the target import or the
//! end.

use std::sync::Arc;

use crescent_weights::{
    resolve_policy, LineageClaimCommand, LineageId, RevisionIdentity, DEFAULT_TENANT,
};
use crescent_wire::weights as w;
use crescent_wire::{ApiError, ErrorCode};

use super::{domain, State};
use crate::api::error::HttpError;
use crate::api::wire::{Reply, Wire};
use crate::weights::convert;
use crate::weights::workflows::not_found;

fn upsert_reply(
    claim: &crescent_weights::lineage::Claim,
    watermark: Option<u64>,
) -> w::UpsertReply {
    w::UpsertReply {
        request_id: claim.request_id.clone(),
        base: convert::wire_id(&claim.base),
        target: convert::wire_id(&claim.target),
        mode: convert::wire_upsert_mode(claim.mode),
        phase: serde_json::to_value(claim.phase)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default(),
        next_step: match claim.next_step() {
            crescent_weights::lineage::UpsertStep::ImportTarget => "import_target".into(),
            crescent_weights::lineage::UpsertStep::Done => "done".into(),
            _ => "server".into(),
        },
        failure: claim.failure.clone(),
        watermark,
    }
}

/// weight_upsert: checks the base, claims the lineage and drives the claim until the target
/// import (the client's part) or the end. The client then writes the target with
/// `weight_put` under the returned request id and polls `upsert/status`.
pub async fn upsert(
    state: State,
    Wire(req): Wire<w::UpsertRequest>,
) -> Result<Reply<w::UpsertReply>, HttpError> {
    super::require_mutations(&state, true)?;
    let svc = state.weights.clone();
    let base = super::identity(&state, &req.base)?;
    let target = base.lineage().at_generation(req.target_generation);
    if let Some(reply) = resume_same_upsert(&svc, &req, &base, &target).await? {
        return Ok(Reply(reply));
    }
    let s = svc.read_revision(&base).await?;
    let rec = s.record().ok_or_else(|| not_found(&base))?;
    let expected = req
        .expected_base_metadata_generation
        .unwrap_or(rec.metadata_generation);
    if rec.availability != crescent_weights::Availability::Ready {
        return Err(HttpError(ApiError::new(
            ErrorCode::NotReady,
            format!("base {base} is {}", rec.availability.as_str()),
        )));
    }
    if rec.metadata_generation != expected {
        return Err(HttpError(ApiError::new(
            ErrorCode::StaleGeneration,
            format!(
                "base {base} is at metadata generation {}, not {expected}",
                rec.metadata_generation
            ),
        )));
    }
    let policy = match &req.policy {
        Some(p) => Some(
            resolve_policy(
                Some(&convert::policy_override(p)),
                None,
                &svc.config.cluster_default_policy(),
            )
            .map_err(domain)?,
        ),
        None => None,
    };
    if let Some(p) = &policy {
        svc.check_reachable(p.preferred_residency)?;
    }
    let lineage: LineageId = base.lineage();
    let mode = convert::upsert_mode(req.mode);
    let request_id = req
        .request_id
        .clone()
        .unwrap_or_else(|| crescent_weights::derive_request_id(&base, &target, mode, expected));
    let after = svc
        .lineage(
            &lineage,
            LineageClaimCommand::BeginClaim {
                request_id: Some(request_id.clone()),
                base,
                target,
                mode,
                expected_base_metadata_generation: expected,
                policy,
            },
        )
        .await?;
    svc.drive_claim(&lineage).await;
    let after = svc.read_lineage(&lineage).await.unwrap_or(after);
    let claim = after
        .claim(&request_id)
        .ok_or_else(|| HttpError(ApiError::internal("the claim is missing")))?;
    Ok(Reply(upsert_reply(claim, after.watermark())))
}

/// A repeated upsert that names neither a request id nor an expected generation (a CLI rerun
/// after a crash or a lost reply) is the same request as the lineage's claim with the same
/// base, target and mode: that claim is resumed and answered, whatever its phase (the base may
/// already be retired or deleted, and its metadata generation has moved on, so the derived
/// request id would differ).
async fn resume_same_upsert(
    svc: &Arc<crate::weights::WeightService>,
    req: &w::UpsertRequest,
    base: &RevisionIdentity,
    target: &RevisionIdentity,
) -> Result<Option<w::UpsertReply>, HttpError> {
    if req.request_id.is_some() || req.expected_base_metadata_generation.is_some() {
        return Ok(None);
    }
    let lineage = base.lineage();
    let mode = convert::upsert_mode(req.mode);
    let same = |c: &crescent_weights::lineage::Claim| {
        &c.base == base
            && &c.target == target
            && c.mode == mode
            && c.phase != crescent_weights::ClaimPhase::Failed
    };
    let state = svc.read_lineage(&lineage).await?;
    let Some(request_id) = state
        .claims()
        .find(|c| same(c))
        .map(|c| c.request_id.clone())
    else {
        return Ok(None);
    };
    svc.drive_claim(&lineage).await;
    let state = svc.read_lineage(&lineage).await?;
    Ok(state
        .claim(&request_id)
        .map(|c| upsert_reply(c, state.watermark())))
}

pub async fn upsert_status(
    state: State,
    Wire(req): Wire<w::UpsertStatusRequest>,
) -> Result<Reply<w::UpsertReply>, HttpError> {
    let lineage = LineageId {
        tenant_id: req.tenant.clone().unwrap_or_else(|| DEFAULT_TENANT.into()),
        namespace: req.namespace.clone(),
        resource_id: req.resource_id.clone(),
        revision: req.revision.clone(),
    };
    lineage.validate().map_err(domain)?;
    let s = state.weights.read_lineage(&lineage).await?;
    let claim = s.claim(&req.request_id).ok_or_else(|| {
        HttpError(ApiError::new(
            ErrorCode::NotFound,
            format!("upsert request {} not found in {lineage}", req.request_id),
        ))
    })?;
    Ok(Reply(upsert_reply(claim, s.watermark())))
}
