//! Cold tier routes (`crescent_wire::cold::routes`): device list, offload now, evict the hot
//! replicas, stat. The cold driver is synchronous and waits for the device actor, so each
//! route runs on the blocking pool.

use std::sync::Arc;

use actix_web::web;
use crescent_wire::cold::{routes, ColdDevicesReply, ColdObjectRequest, ObjectStat};
use crescent_wire::cold_owner::{
    routes as owner_routes, OwnerDevicePollReply, OwnerDevicePollRequest, RegisterOwnerDeviceReply,
    RegisterOwnerDeviceRequest,
};
use crescent_wire::{ApiError, ErrorCode};

use super::error::{from_blocking, HttpError};
use super::objects::State;
use super::wire::{Reply, Wire};
use crate::cold::ColdTier;

fn rel(route: &'static str) -> &'static str {
    route
        .strip_prefix("/v1")
        .expect("every wire route is under /v1")
}

/// Registers the cold routes inside the `/v1` scope.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route(rel(routes::COLD_DEVICES), web::get().to(devices))
        .route(rel(routes::OFFLOAD), web::post().to(offload))
        .route(rel(routes::EVICT_HOT), web::post().to(evict_hot))
        .route(rel(routes::STAT), web::post().to(stat))
        .route(
            rel(owner_routes::REGISTER),
            web::post().to(register_owner_device),
        )
        .route(rel(owner_routes::POLL), web::post().to(poll_owner_device));
}

fn tier(state: &State) -> Result<Arc<ColdTier>, HttpError> {
    state.cold.get().cloned().ok_or_else(|| {
        HttpError(ApiError::new(
            ErrorCode::Unavailable,
            "this node has no cold tier ([cold] enabled = false)",
        ))
    })
}

async fn blocking<T: Send + 'static>(
    state: State,
    f: impl FnOnce(&crate::cold::ColdContext, &ColdTier) -> Result<T, crescent_cold::ColdError>
        + Send
        + 'static,
) -> Result<T, HttpError> {
    let cold = tier(&state)?;
    let node = state.cold_context.clone();
    Ok(web::block(move || f(&node, &cold))
        .await
        .map_err(from_blocking)??)
}

pub async fn devices(state: State) -> Result<Reply<ColdDevicesReply>, HttpError> {
    let (devices, promotions_pending) = blocking(state, |_, cold| {
        Ok((cold.devices(), cold.promotions.depth() as u64))
    })
    .await?;
    Ok(Reply(ColdDevicesReply {
        devices,
        promotions_pending,
    }))
}

pub async fn offload(
    state: State,
    Wire(req): Wire<ColdObjectRequest>,
) -> Result<Reply<ObjectStat>, HttpError> {
    Ok(Reply(
        blocking(state, move |node, cold| cold.offload_now(node, &req.id)).await?,
    ))
}

pub async fn evict_hot(
    state: State,
    Wire(req): Wire<ColdObjectRequest>,
) -> Result<Reply<ObjectStat>, HttpError> {
    Ok(Reply(
        blocking(state, move |node, cold| cold.evict_hot(node, &req.id)).await?,
    ))
}

pub async fn stat(
    state: State,
    Wire(req): Wire<ColdObjectRequest>,
) -> Result<Reply<ObjectStat>, HttpError> {
    Ok(Reply(
        blocking(state, move |node, cold| cold.stat(node, &req.id)).await?,
    ))
}

/// A storage owner registers its cold device (`crescent owner --cold-device`).
pub async fn register_owner_device(
    state: State,
    Wire(req): Wire<RegisterOwnerDeviceRequest>,
) -> Result<Reply<RegisterOwnerDeviceReply>, HttpError> {
    let cold = tier(&state)?;
    let node = state.cold_context.clone();
    Ok(Reply(
        web::block(move || cold.register_owner_device(&node, &req))
            .await
            .map_err(from_blocking)??,
    ))
}

/// A storage owner's long poll for its device's IO work (answers at once when work is
/// queued, else after a short wait).
pub async fn poll_owner_device(
    state: State,
    Wire(req): Wire<OwnerDevicePollRequest>,
) -> Result<Reply<OwnerDevicePollReply>, HttpError> {
    Ok(Reply(
        blocking(state, move |_, cold| cold.poll_owner_device(req)).await?,
    ))
}
