//! What the storage-owner role (the crescent-owner package) asks of a client: its calls to
//! crescentd (owner cold devices, the rebuild replay) and the hooks an owner in the same
//! process plugs into: its own segment, which this client's puts place on and gets read first
//! (docs/rebuild.md), and the server watch that wakes its heartbeat.

use std::future::Future;
use std::sync::Arc;

use crescent_wire::cold_owner::{
    routes, OwnerDevicePollReply, OwnerDevicePollRequest, RegisterOwnerDeviceReply,
    RegisterOwnerDeviceRequest,
};
use crescent_wire::rebuild::{
    GateStatus, RebuildCompleteReply, RebuildCompleteRequest, RebuildReplayReply,
    RebuildReplayRequest,
};
use tokio::sync::Notify;

use crate::client::CrescentClient;
use crate::dataplane::LocalSegment;
use crate::error::ClientError;
use crate::failover::Retry;
use crate::rebuild::server_watch::{run_server_watch, WatchConfig};

impl CrescentClient {
    /// Registers a storage owner's cold device with crescentd.
    pub async fn register_owner_device(
        &self,
        req: &RegisterOwnerDeviceRequest,
    ) -> Result<RegisterOwnerDeviceReply, ClientError> {
        self.post_route(
            "register_owner_device",
            Retry::Idempotent,
            routes::REGISTER,
            req,
        )
        .await
    }

    /// One long poll for an owner device's IO work (carrying the previous work's results).
    pub async fn poll_owner_device(
        &self,
        req: &OwnerDevicePollRequest,
    ) -> Result<OwnerDevicePollReply, ClientError> {
        self.post_route("poll_owner_device", Retry::NotIdempotent, routes::POLL, req)
            .await
    }

    /// `POST /v1/rebuild/replay`: one batch of an owner's replay. Replays merge idempotently
    /// (docs/rebuild.md), so it is retried on the current leader.
    pub async fn rebuild_replay(
        &self,
        req: &RebuildReplayRequest,
    ) -> Result<RebuildReplayReply, ClientError> {
        self.post_to(
            "rebuild_replay",
            Retry::Idempotent,
            |r| &r.rebuild_replay,
            req,
        )
        .await
    }

    /// `POST /v1/rebuild/complete`: the owner has replayed its whole table for a term.
    pub async fn rebuild_complete(
        &self,
        req: &RebuildCompleteRequest,
    ) -> Result<RebuildCompleteReply, ClientError> {
        self.post_to(
            "rebuild_complete",
            Retry::Idempotent,
            |r| &r.rebuild_complete,
            req,
        )
        .await
    }

    /// `GET /v1/rebuild/status`: the rebuild gate and its progress.
    pub async fn rebuild_status(&self) -> Result<GateStatus, ClientError> {
        self.get_from("rebuild_status", |r| &r.rebuild_status).await
    }

    /// Makes `segment` this process's own (a storage owner started on this client): puts
    /// place there first, gets read it first, and committed replicas there are recorded in
    /// its ownership table.
    pub fn attach_own_segment(&self, segment: LocalSegment) {
        self.data.attach(segment);
    }

    /// The transfer engine this client loads beside TCP (its options, else the environment):
    /// what a storage owner on it serves a `transfer_engine` segment through.
    pub fn transfer_engine_config(&self) -> Option<&crescent_transport::ffi::FfiConfig> {
        self.data.engine_config()
    }

    /// Forgets the own segment `segment_id` (no-op if another one has been attached since).
    pub fn detach_own_segment(&self, segment_id: &str) {
        self.data.detach(segment_id);
    }

    /// Notifies `wake` at once when crescentd restarts or the leader changes, so an owner
    /// heartbeats right away (`rebuild::server_watch`). Runs until dropped.
    pub fn watch_server(
        &self,
        wake: Arc<Notify>,
        config: WatchConfig,
    ) -> impl Future<Output = ()> + Send + 'static {
        run_server_watch(
            self.locator.clone(),
            wake,
            self.data.metrics.rebuild.clone(),
            config,
        )
    }
}
