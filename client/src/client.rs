//! [`CrescentClient`]: a handle on one crescentd. Clones and [`CrescentClient::with_scope`]
//! share the HTTP connection pool, the data plane and the storage-owner role.

use std::sync::Arc;

use crescent_wire::rpc::RpcOp;
use prometheus::Registry;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::dataplane::DataPlane;
use crate::error::ClientError;
use crate::http::HttpConn;
use crate::metrics::ClientMetrics;
use crate::options::Scope;
use crate::ownership::OwnershipTable;
use crate::rpc::{RpcFailure, RpcLink};

/// A connection to one crescentd: the admin API, the object API (see `store.rs` and
/// `batch.rs`) and, with an [`crate::Owner`], the storage-owner role.
#[derive(Debug, Clone)]
pub struct CrescentClient {
    pub(crate) http: Arc<HttpConn>,
    pub(crate) scope: Scope,
    pub(crate) data: Arc<DataPlane>,
    /// The RPC fast path for the object operations (HTTP when the server has none).
    pub(crate) rpc: Arc<RpcLink>,
}

impl CrescentClient {
    /// `server` is `HOST:PORT` (or a full `http://` URL). Nothing is contacted yet.
    pub fn new(server: &str) -> Result<Self, ClientError> {
        Self::build(server, ClientMetrics::unregistered())
    }

    /// Like [`CrescentClient::new`], exporting the client's and its data plane's metrics on
    /// `registry`.
    pub fn with_registry(server: &str, registry: &Registry) -> Result<Self, ClientError> {
        let metrics = ClientMetrics::register(registry)
            .map_err(|e| ClientError::InvalidArgument(format!("cannot register metrics: {e}")))?;
        Self::build(server, metrics)
    }

    fn build(server: &str, metrics: ClientMetrics) -> Result<Self, ClientError> {
        Ok(Self {
            http: Arc::new(HttpConn::new(server)?),
            scope: Scope::default(),
            data: DataPlane::new(metrics),
            rpc: Arc::new(RpcLink::new()),
        })
    }

    /// The same client working in another namespace (tenant `None` = `default`). Shares the
    /// connection, registered buffers and owner role.
    pub fn with_scope(
        &self,
        tenant: Option<&str>,
        domain: Option<&str>,
    ) -> Result<Self, ClientError> {
        Ok(Self {
            http: self.http.clone(),
            scope: Scope::new(tenant, domain)?,
            data: self.data.clone(),
            rpc: self.rpc.clone(),
        })
    }

    /// Runs one object operation: over the RPC fast path when the server offers it, else (or
    /// when no RPC connection can be made) over HTTP. Same bodies, same errors either way.
    pub(crate) async fn call<B, T>(&self, op: RpcOp, body: &B) -> Result<T, ClientError>
    where
        B: Serialize,
        T: DeserializeOwned,
    {
        if let Some(pool) = self.rpc.pool(&self.http).await {
            match pool.call(op, body).await {
                Ok(reply) => return Ok(reply),
                Err(RpcFailure::Failed(e)) => return Err(e),
                Err(RpcFailure::NotSent(e)) => {
                    tracing::debug!(error = %e, op = op.as_str(), "RPC unreachable; using HTTP");
                    self.rpc.forget();
                }
            }
        }
        self.http.post(self.http.routes.for_op(op), body).await
    }

    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    pub fn server(&self) -> &str {
        self.http.server()
    }

    pub fn metrics(&self) -> &ClientMetrics {
        &self.data.metrics
    }

    /// The segment this process serves as a storage owner, if any.
    pub fn own_segment(&self) -> Option<String> {
        self.data.own_segment_id().map(|s| s.to_string())
    }

    /// The ownership table of this process's own segment, while it is an owner.
    pub fn ownership(&self) -> Option<Arc<OwnershipTable>> {
        self.data.local().map(|l| l.table)
    }
}
