//! Cold tier calls: device list, offload now, evict the hot replicas, stat.

use crescent_wire::cold::{routes, ColdDevicesReply, ColdObjectRequest, ObjectStat};

use crate::client::CrescentClient;
use crate::error::ClientError;
use crate::failover::Retry;

impl CrescentClient {
    fn cold_request(&self, key: &str) -> Result<ColdObjectRequest, ClientError> {
        Ok(ColdObjectRequest {
            id: self.scope.object_id(key)?,
        })
    }

    /// The cold devices with their capacity accounting (`crescent cold ls`).
    pub async fn cold_devices(&self) -> Result<ColdDevicesReply, ClientError> {
        self.get_route("cold_devices", routes::COLD_DEVICES).await
    }

    /// Materializes KEY on a cold device now (`crescent offload KEY`).
    pub async fn offload(&self, key: &str) -> Result<ObjectStat, ClientError> {
        let req = self.cold_request(key)?;
        self.post_route("offload", Retry::NotIdempotent, routes::OFFLOAD, &req)
            .await
    }

    /// Drops KEY's hot replicas; refused (CONFLICT) unless its cold copy is materialized
    /// (`crescent evict KEY --hot`).
    pub async fn evict_hot(&self, key: &str) -> Result<ObjectStat, ClientError> {
        let req = self.cold_request(key)?;
        self.post_route("evict_hot", Retry::NotIdempotent, routes::EVICT_HOT, &req)
            .await
    }

    /// KEY's replicas and cold backing (`crescent stat KEY`).
    pub async fn stat(&self, key: &str) -> Result<ObjectStat, ClientError> {
        let req = self.cold_request(key)?;
        self.post_route("stat", Retry::Idempotent, routes::STAT, &req)
            .await
    }
}
