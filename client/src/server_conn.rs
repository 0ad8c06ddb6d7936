//! [`ServerConn`]: everything the client keeps per crescentd address: the HTTP routes and the
//! RPC fast path found there. The leader locator hands one out per request; a leader change
//! makes a new one for the new address.

use std::sync::Arc;

use crescent_wire::rpc::RpcOp;
use crescent_wire::store::ReleaseRequest;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::client_options::BearerToken;
use crate::error::ClientError;
use crate::http::{base_url_with, HttpConn};
use crate::rpc::{RpcFailure, RpcLink};

/// What every server connection of one client shares: the pooled HTTP client (which sends
/// the token in every request's `Authorization` header), the token for RPC handshakes, and
/// with a CA file the TLS configuration both use (docs/security.md, "TLS").
#[derive(Clone)]
pub(crate) struct Connector {
    pub http: reqwest::Client,
    pub token: Option<BearerToken>,
    pub tls: Option<Arc<crescent_tls::ClientConfig>>,
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connector")
            .field("token", &self.token)
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

impl Connector {
    /// Without a CA file: plain HTTP and RPC (an `https://` server then fails its handshake).
    #[cfg(test)]
    pub fn new(token: Option<BearerToken>) -> Result<Self, ClientError> {
        Self::with_tls(token, None)
    }

    /// Verifies servers with the CA of `ca_file` (a file that cannot be read or holds no
    /// certificate is INVALID_ARGUMENT).
    pub fn with_ca_file(
        token: Option<BearerToken>,
        ca_file: Option<&std::path::Path>,
    ) -> Result<Self, ClientError> {
        let tls = match ca_file {
            Some(path) => Some(Arc::new(
                crescent_tls::client_config(path)
                    .map_err(|e| ClientError::InvalidArgument(format!("--ca-file: {e}")))?,
            )),
            None => None,
        };
        Self::with_tls(token, tls)
    }

    fn with_tls(
        token: Option<BearerToken>,
        tls: Option<Arc<crescent_tls::ClientConfig>>,
    ) -> Result<Self, ClientError> {
        Ok(Self {
            http: crate::http::http_client_with(token.as_ref(), tls.as_deref())?,
            token,
            tls,
        })
    }

    /// The same TLS setup presenting `token` instead.
    pub fn with_token(&self, token: BearerToken) -> Result<Self, ClientError> {
        Self::with_tls(Some(token), self.tls.clone())
    }

    /// The normalized base URL of `server` (`https://` for a bare address with TLS).
    pub fn base(&self, server: &str) -> Result<String, ClientError> {
        base_url_with(server, self.tls.is_some())
    }
}

/// One crescentd address: HTTP (shared pool) and the RPC fast path discovered there.
#[derive(Debug)]
pub(crate) struct ServerConn {
    /// The normalized base URL (`http://HOST:PORT`): the identity used to compare addresses.
    pub base: String,
    pub http: HttpConn,
    pub rpc: RpcLink,
    /// The credential, for RPC handshakes made outside the pool (the owner's server watch).
    pub token: Option<BearerToken>,
    /// The TLS setup, for the same connections (with a CA file).
    pub tls: Option<Arc<crescent_tls::ClientConfig>>,
}

impl ServerConn {
    pub fn new(server: &str, connector: &Connector) -> Result<Self, ClientError> {
        Ok(Self {
            base: connector.base(server)?,
            http: HttpConn::new(server, connector.http.clone(), connector.tls.is_some())?,
            rpc: RpcLink::new(connector.token.clone(), connector.tls.clone()),
            token: connector.token.clone(),
            tls: connector.tls.clone(),
        })
    }

    /// The address as given (`HOST:PORT` or URL).
    pub fn server(&self) -> &str {
        self.http.server()
    }

    /// Runs one object operation: over the RPC fast path when the server offers it, else (or
    /// when no RPC connection can be made) over HTTP. Same bodies, same errors either way.
    pub async fn call<B, T>(&self, op: RpcOp, body: &B) -> Result<T, ClientError>
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
        self.http.post(http_route(&self.http, op)?, body).await
    }

    /// Runs an op of an optional RPC feature: `Ok(None)` (nothing sent) when this server's
    /// fast path does not list `feature` or cannot be reached; the caller then uses the
    /// classic op, which also has an HTTP route.
    pub async fn call_feature<B, T>(
        &self,
        feature: &str,
        op: RpcOp,
        body: &B,
    ) -> Result<Option<T>, ClientError>
    where
        B: Serialize,
        T: DeserializeOwned,
    {
        let Some(pool) = self.rpc.pool(&self.http).await else {
            return Ok(None);
        };
        if !pool.has_feature(feature) {
            return Ok(None);
        }
        match pool.call(op, body).await {
            Ok(reply) => Ok(Some(reply)),
            Err(RpcFailure::Failed(e)) => Err(e),
            Err(RpcFailure::NotSent(e)) => {
                tracing::debug!(error = %e, op = op.as_str(), "RPC unreachable; using HTTP");
                self.rpc.forget();
                Ok(None)
            }
        }
    }

    /// Sends a request whose answer nobody acts on. Over the RPC fast path it is written and
    /// not waited for (the server runs it before anything sent later on that connection, and
    /// its answer is dropped on the connection's next use), so a release costs the reader one
    /// write instead of a round trip. Over HTTP it is an ordinary call.
    pub async fn send_only<B: Serialize>(&self, op: RpcOp, body: &B) -> Result<(), ClientError> {
        if let Some(pool) = self.rpc.pool(&self.http).await {
            match pool.send(op, body).await {
                Ok(()) => return Ok(()),
                Err(RpcFailure::Failed(e)) => return Err(e),
                Err(RpcFailure::NotSent(e)) => {
                    tracing::debug!(error = %e, op = op.as_str(), "RPC unreachable; using HTTP");
                    self.rpc.forget();
                }
            }
        }
        let _: serde::de::IgnoredAny = self.http.post(http_route(&self.http, op)?, body).await?;
        Ok(())
    }

    /// Queues lease releases to ride on this server's next RPC requests
    /// (`crate::rpc_release`); `Err` gives them back when the server has no RPC fast path.
    pub async fn defer_releases(
        &self,
        releases: Vec<ReleaseRequest>,
    ) -> Result<(), Vec<ReleaseRequest>> {
        match self.rpc.pool(&self.http).await {
            Some(pool) => {
                pool.defer_releases(releases);
                Ok(())
            }
            None => Err(releases),
        }
    }

    /// Waits until the server has answered everything sent with [`ServerConn::send_only`]
    /// and every queued lease release.
    pub async fn settle(&self) {
        if let Some(pool) = self.rpc.pool(&self.http).await {
            pool.settle().await;
        }
    }
}

/// The HTTP route of `op`; the fast-path-only ops have none (a caller bug to send them here).
fn http_route(http: &HttpConn, op: RpcOp) -> Result<&reqwest::Url, ClientError> {
    http.routes.for_op(op).ok_or_else(|| {
        ClientError::InvalidArgument(format!("{} exists only on the RPC fast path", op.as_str()))
    })
}
