//! The control-plane admin calls: health, stats, owners, segments, heartbeats.

use crescent_wire::segments::{
    CommandReply, MountSegmentRequest, RegisterOwnerRequest, SegmentList, UnmountSegmentRequest,
};
use crescent_wire::store::{HeartbeatReply, HeartbeatRequest};

use crate::client::CrescentClient;
use crate::error::ClientError;

impl CrescentClient {
    /// `GET /healthz`: the server's health document.
    pub async fn health(&self) -> Result<serde_json::Value, ClientError> {
        self.http.get(&self.http.routes.healthz).await
    }

    /// `GET /stats`: journal, snapshot and store statistics.
    pub async fn stats(&self) -> Result<serde_json::Value, ClientError> {
        self.http.get(&self.http.routes.stats).await
    }

    /// Registers (or re-registers) a storage owner.
    pub async fn register_owner(
        &self,
        req: &RegisterOwnerRequest,
    ) -> Result<CommandReply, ClientError> {
        self.http.post(&self.http.routes.register_owner, req).await
    }

    /// Mounts a segment (idempotent for identical parameters).
    pub async fn mount_segment(
        &self,
        req: &MountSegmentRequest,
    ) -> Result<CommandReply, ClientError> {
        self.http.post(&self.http.routes.mount, req).await
    }

    /// Unmounts a segment.
    pub async fn unmount_segment(&self, segment_id: &str) -> Result<CommandReply, ClientError> {
        let req = UnmountSegmentRequest {
            segment_id: segment_id.to_string(),
        };
        self.http.post(&self.http.routes.unmount, &req).await
    }

    /// Lists owners and mounted segments.
    pub async fn list_segments(&self) -> Result<SegmentList, ClientError> {
        self.http.get(&self.http.routes.segments).await
    }

    /// One owner heartbeat; the answer says how often to send them.
    pub async fn heartbeat(
        &self,
        owner_id: &str,
        incarnation: u64,
    ) -> Result<HeartbeatReply, ClientError> {
        let req = HeartbeatRequest {
            owner_id: owner_id.to_string(),
            incarnation,
        };
        self.call(crescent_wire::rpc::RpcOp::Heartbeat, &req).await
    }
}
