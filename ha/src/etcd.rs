//! Connecting to etcd with the options every part of this crate relies on.

use std::time::Duration;

use etcd_client::{Client, ConnectOptions};

use crate::config::validate_endpoints;
use crate::error::HaError;

/// Connects to `endpoints` (the client balances over them).
///
/// - `require_leader`: a member cut off from its etcd quorum answers "no leader" at once
///   instead of letting a keep-alive or watch hang on it;
/// - HTTP/2 keep-alive pings (also while idle): a dead connection fails streams within a few
///   seconds, so watches reconnect instead of waiting forever.
///
/// The connection itself is lazy: an unreachable etcd shows up as errors of later requests.
pub async fn connect(endpoints: &[String]) -> Result<Client, HaError> {
    validate_endpoints(endpoints)?;
    let options = ConnectOptions::new()
        .with_require_leader(true)
        .with_connect_timeout(Duration::from_secs(2))
        .with_keep_alive(Duration::from_secs(1), Duration::from_secs(2))
        .with_keep_alive_while_idle(true);
    Client::connect(endpoints, Some(options))
        .await
        .map_err(HaError::etcd("connect"))
}

/// Bounds an etcd request by `after`.
pub(crate) async fn bounded<T>(
    op: &'static str,
    after: Duration,
    fut: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, HaError> {
    match tokio::time::timeout(after, fut).await {
        Ok(result) => result.map_err(HaError::etcd(op)),
        Err(_) => Err(HaError::Timeout { op, after }),
    }
}
