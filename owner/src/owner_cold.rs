//! The cold side of a storage owner: the remote-restore staging region of its cold devices
//! and the devices themselves, started after its segment is served and mounted.

use std::sync::Arc;

use crescent_client::{ClientError, CrescentClient};
use crescent_transport::tcp::TcpTransport;
use crescent_transport::Transport;

use crate::cold_device::{OwnerColdDevice, OwnerColdDeviceConfig};
use crate::owner::now_ms;
use crate::owner_staging::OwnerStaging;

/// Starts the staging region (when there are devices and `staging.0` bytes for it) and each
/// cold device, for the owner `(owner_id, incarnation, endpoint)`.
pub(crate) async fn start_cold(
    client: &CrescentClient,
    transport: &TcpTransport,
    (owner_id, incarnation, endpoint): (&str, u64, &str),
    devices: Vec<OwnerColdDeviceConfig>,
    (staging_bytes, staging_ttl_ms): (u64, u64),
) -> Result<(Vec<OwnerColdDevice>, Option<Arc<OwnerStaging>>), ClientError> {
    let cold_staging = match devices.is_empty() || staging_bytes == 0 {
        true => None,
        false => Some(start_cold_staging(
            client,
            transport,
            owner_id,
            staging_bytes,
            staging_ttl_ms,
        )?),
    };
    let mut cold_devices = Vec::with_capacity(devices.len());
    for device in devices {
        cold_devices.push(
            OwnerColdDevice::start_with_staging(
                client,
                owner_id,
                incarnation,
                endpoint,
                device,
                cold_staging.clone(),
            )
            .await?,
        );
    }
    Ok((cold_devices, cold_staging))
}

/// Allocates the cold devices' staging region and serves it on the owner's listener.
fn start_cold_staging(
    client: &CrescentClient,
    transport: &TcpTransport,
    owner_id: &str,
    bytes: u64,
    ttl_ms: u64,
) -> Result<Arc<OwnerStaging>, ClientError> {
    use crate::owner_staging::{first_owner_staging_id, staging_segment_id_for};
    let staging = OwnerStaging::new(
        staging_segment_id_for(owner_id),
        bytes,
        ttl_ms,
        client.metrics().owner_staging().clone(),
        first_owner_staging_id(now_ms()),
    )
    .map_err(|e| ClientError::InvalidArgument(format!("cold staging region: {e}")))?;
    transport.serve_segment(staging.segment_id(), staging.region())?;
    tracing::info!(
        segment = staging.segment_id(),
        bytes = staging.capacity_bytes(),
        "owner remote-restore staging region served"
    );
    Ok(Arc::new(staging))
}
