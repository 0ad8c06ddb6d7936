//! The control-plane admin calls: health, stats, snapshots, owners, segments, heartbeats.

use crescent_wire::segments::{
    CommandReply, MountSegmentRequest, RegisterOwnerReply, RegisterOwnerRequest, SegmentList,
    UnmountSegmentRequest,
};
use crescent_wire::store::{HeartbeatReply, HeartbeatRequest};

use crate::client::CrescentClient;
use crate::error::ClientError;
use crate::failover::Retry;

impl CrescentClient {
    /// `GET /healthz`: the server's health document.
    pub async fn health(&self) -> Result<serde_json::Value, ClientError> {
        self.get_from("health", |r| &r.healthz).await
    }

    /// `POST /v1/admin/snapshot` (admin): writes a snapshot now, or returns the newest one
    /// when nothing changed since it (so it is safe to retry).
    pub async fn snapshot_now(&self) -> Result<crescent_wire::admin::SnapshotWritten, ClientError> {
        self.post_route(
            "snapshot",
            Retry::Idempotent,
            crescent_wire::admin::routes::SNAPSHOT,
            &serde_json::json!({}),
        )
        .await
    }

    /// `GET /stats`: journal, snapshot and store statistics.
    pub async fn stats(&self) -> Result<serde_json::Value, ClientError> {
        self.get_from("stats", |r| &r.stats).await
    }

    /// `POST /v1/objects/scan` (admin): one page of every object the server holds, across
    /// every tenant and domain, after `cursor` (docs/api.md, "Scanning every object").
    pub async fn scan_objects(
        &self,
        cursor: Option<crescent_wire::scan::ScanCursor>,
        limit: Option<u32>,
    ) -> Result<crescent_wire::scan::ScanReply, ClientError> {
        self.post_route(
            "scan",
            Retry::Idempotent,
            crescent_wire::scan::SCAN_ROUTE,
            &crescent_wire::scan::ScanRequest::page(cursor, limit),
        )
        .await
    }

    /// Registers (or re-registers) a storage owner. Idempotent for one incarnation, so it is
    /// retried across a failover.
    pub async fn register_owner(
        &self,
        req: &RegisterOwnerRequest,
    ) -> Result<RegisterOwnerReply, ClientError> {
        self.post_to(
            "register_owner",
            Retry::Idempotent,
            |r| &r.register_owner,
            req,
        )
        .await
    }

    /// Mounts a segment (idempotent for identical parameters).
    pub async fn mount_segment(
        &self,
        req: &MountSegmentRequest,
    ) -> Result<CommandReply, ClientError> {
        self.post_to("mount", Retry::Idempotent, |r| &r.mount, req)
            .await
    }

    /// Unmounts a segment (not retried after a failure that may follow its execution: a
    /// second unmount would fail NOT_FOUND after the first succeeded).
    pub async fn unmount_segment(&self, segment_id: &str) -> Result<CommandReply, ClientError> {
        let req = UnmountSegmentRequest {
            segment_id: segment_id.to_string(),
        };
        self.post_to("unmount", Retry::NotIdempotent, |r| &r.unmount, &req)
            .await
    }

    /// Revokes token `token_id` (admin); true when it was not revoked before. Idempotent.
    pub async fn revoke_token(
        &self,
        token_id: &str,
        expires_secs: Option<u64>,
    ) -> Result<bool, ClientError> {
        let req = crescent_wire::auth::RevokeTokenRequest {
            token_id: token_id.to_string(),
            expires_secs,
        };
        let reply: crescent_wire::auth::RevokeTokenReply = self
            .post_route(
                "revoke_token",
                Retry::Idempotent,
                crescent_wire::auth::routes::REVOKE,
                &req,
            )
            .await?;
        Ok(reply.newly_revoked)
    }

    /// Lists owners and mounted segments.
    pub async fn list_segments(&self) -> Result<SegmentList, ClientError> {
        self.get_from("list_segments", |r| &r.segments).await
    }

    /// One owner heartbeat; the answer says how often to send them, and carries the releases
    /// in the owner's segments after `releases_applied` (the highest release sequence the
    /// owner has applied; `None` before the first).
    pub async fn heartbeat(
        &self,
        owner_id: &str,
        incarnation: u64,
        releases_applied: Option<u64>,
    ) -> Result<HeartbeatReply, ClientError> {
        let req = HeartbeatRequest {
            owner_id: owner_id.to_string(),
            incarnation,
            releases_applied,
        };
        self.call(crescent_wire::rpc::RpcOp::Heartbeat, &req).await
    }
}
