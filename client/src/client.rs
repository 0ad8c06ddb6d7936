//! [`CrescentClient`]: a handle on a crescentd, or on the active of an HA pair (it follows the
//! leader, see [`crate::ClientOptions`] and docs/ha.md "Clients"). Clones and
//! [`CrescentClient::with_scope`] share the leader locator, the HTTP connection pool, the data
//! plane and the storage-owner role.

use std::sync::Arc;

use prometheus::Registry;

use crate::client_options::ClientOptions;
use crate::dataplane::DataPlane;
use crate::error::ClientError;
use crate::failover::FailoverConfig;
use crate::leader::LeaderLocator;
use crate::metrics::ClientMetrics;
use crate::options::Scope;
use crate::ownership::OwnershipTable;

/// A connection to crescentd: the admin API, the object API (see `store.rs` and `batch.rs`)
/// and, with a storage owner of the crescent-owner package, the storage-owner role.
#[derive(Debug, Clone)]
pub struct CrescentClient {
    pub(crate) locator: Arc<LeaderLocator>,
    pub(crate) failover: Arc<FailoverConfig>,
    pub(crate) scope: Scope,
    /// The tenant of this client's `client` token, the default of its scope.
    pub(crate) token_tenant: Option<Arc<str>>,
    pub(crate) data: Arc<DataPlane>,
    /// Batch budgets and each tenant's bytes in flight (`crate::batch::submission`).
    pub(crate) submission: Arc<crate::batch::submission::Submission>,
    /// Local restore of cold-only objects (`crate::cold_restore`).
    pub(crate) cold_restore: Arc<crate::cold_restore::LocalColdRestore>,
}

impl CrescentClient {
    /// `server` is `HOST:PORT` (or a full `http://` URL), or a comma-separated list of them
    /// (tried in order, see [`ClientOptions::servers`]). Nothing is contacted yet.
    ///
    /// ```
    /// use crescent_client::CrescentClient;
    ///
    /// let client = CrescentClient::new("127.0.0.1:7480").unwrap();
    /// // A handle on another tenant's namespace shares the connections.
    /// let acme = client.with_scope(Some("acme"), None).unwrap();
    /// # drop(acme);
    /// assert!(CrescentClient::new("http://[bad").is_err());
    /// ```
    pub fn new(server: &str) -> Result<Self, ClientError> {
        Self::build(
            &ClientOptions::servers(server),
            ClientMetrics::unregistered(),
        )
    }

    /// Like [`CrescentClient::new`], exporting the client's and its data plane's metrics on
    /// `registry`.
    pub fn with_registry(server: &str, registry: &Registry) -> Result<Self, ClientError> {
        let client = Self::build(&ClientOptions::servers(server), register(registry)?)?;
        client.cold_restore.register(registry)?;
        Ok(client)
    }

    /// A client following the leader as `options` say: with etcd endpoints it starts
    /// watching the cluster's leader key (needs a tokio runtime and the `etcd` feature). If
    /// etcd cannot be reached and `options.servers` is not empty, it starts on the static
    /// list and says so in the log; without servers that is an error.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use crescent_client::{BearerToken, ClientOptions, CrescentClient};
    ///
    /// # async fn run() -> Result<(), crescent_client::ClientError> {
    /// let options = ClientOptions::servers("10.0.0.1:7480,10.0.0.2:7480")
    ///     .with_failover_timeout(Duration::from_secs(30))
    ///     .with_token(BearerToken::new(std::env::var("CRESCENT_TOKEN").unwrap_or_default()));
    /// let client = CrescentClient::connect(options).await?;
    /// println!("{}", client.health().await?);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect(options: ClientOptions) -> Result<Self, ClientError> {
        Self::connect_with(options, ClientMetrics::unregistered()).await
    }

    /// [`CrescentClient::connect`], exporting metrics on `registry`.
    pub async fn connect_with_registry(
        options: ClientOptions,
        registry: &Registry,
    ) -> Result<Self, ClientError> {
        let client = Self::connect_with(options, register(registry)?).await?;
        client.cold_restore.register(registry)?;
        Ok(client)
    }

    async fn connect_with(
        options: ClientOptions,
        metrics: ClientMetrics,
    ) -> Result<Self, ClientError> {
        let client = Self::build(&options, metrics)?;
        if let (true, Some(cluster)) = (options.follows_leader(), &options.cluster) {
            client.follow_leader(&options, cluster).await?;
        }
        Ok(client)
    }

    /// Starts following the leader record of `cluster` in etcd or Redis.
    #[cfg(feature = "etcd")]
    async fn follow_leader(
        &self,
        options: &ClientOptions,
        cluster: &str,
    ) -> Result<(), ClientError> {
        let watch = match &options.redis {
            Some(url) => crescent_ha::LeaderWatch::start_redis(url, cluster),
            None => crescent_ha::LeaderWatch::connect(&options.etcd_endpoints, cluster).await,
        };
        match watch {
            Ok(watch) => self.locator.follow_watch(watch, cluster),
            Err(e) if !options.servers.is_empty() && e.class() != crescent_ha::ErrorClass::User => {
                tracing::warn!(error = %e, servers = ?options.servers,
                    "etcd unreachable; following the static server list only");
            }
            Err(e) => return Err(ClientError::Discovery(e)),
        }
        Ok(())
    }

    /// Built without etcd: a client given etcd endpoints or a Redis is refused rather than
    /// left on its static list (or none) without saying so.
    #[cfg(not(feature = "etcd"))]
    async fn follow_leader(&self, _: &ClientOptions, _: &str) -> Result<(), ClientError> {
        Err(ClientError::InvalidArgument(
            "this client was built without leader following (crescent-client feature `etcd`, \
             which covers etcd and Redis); give crescentd addresses (--server) instead"
                .into(),
        ))
    }

    pub(crate) fn build(
        options: &ClientOptions,
        metrics: ClientMetrics,
    ) -> Result<Self, ClientError> {
        options.validate()?;
        let token_tenant: Option<Arc<str>> = options
            .token
            .as_ref()
            .and_then(|t| t.tenant())
            .map(Arc::from);
        let locator = LeaderLocator::new(
            options.servers.clone(),
            crate::server_conn::Connector::with_ca_file(
                options.token.clone(),
                options.ca_file.as_deref(),
            )?,
            metrics.failover.clone(),
        )?;
        Ok(Self {
            locator,
            failover: Arc::new(options.failover.clone()),
            scope: Scope::new(token_tenant.as_deref(), None)?,
            token_tenant,
            data: DataPlane::new(
                metrics,
                options
                    .transfer_engine
                    .clone()
                    .or_else(crescent_transport::ffi::FfiConfig::from_env),
            ),
            submission: Arc::new(crate::batch::submission::Submission::new(options)),
            cold_restore: Arc::new(crate::cold_restore::LocalColdRestore::new(
                !options.no_local_cold_restore,
            )),
        })
    }

    /// The same client (namespace, data plane, storage-owner role) sending `token` instead of
    /// its own: for a process that is a storage owner with an `owner` token and a client
    /// with a `client` token (`crescent bench --owner-token`). It starts at this client's
    /// current server and follows the static server list, not etcd.
    pub fn with_token(&self, token: crate::BearerToken) -> Result<Self, ClientError> {
        let token_tenant = token.tenant().map(Arc::from).or(self.token_tenant.clone());
        let connector = self.locator.connector().with_token(token)?;
        Ok(Self {
            locator: self.locator.with_connector(connector)?,
            token_tenant,
            ..self.clone()
        })
    }

    /// The same client working in another namespace (tenant `None` = `default`, or the
    /// tenant of its `client` token, which crescentd applies anyway). Shares the connection,
    /// registered buffers and owner role.
    pub fn with_scope(
        &self,
        tenant: Option<&str>,
        domain: Option<&str>,
    ) -> Result<Self, ClientError> {
        Ok(Self {
            locator: self.locator.clone(),
            failover: self.failover.clone(),
            scope: Scope::new(tenant.or(self.token_tenant.as_deref()), domain)?,
            token_tenant: self.token_tenant.clone(),
            data: self.data.clone(),
            submission: self.submission.clone(),
            cold_restore: self.cold_restore.clone(),
        })
    }

    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// The crescentd requests go to now (empty while no leader is known).
    pub fn server(&self) -> String {
        self.locator
            .current()
            .map(|c| c.conn.server().to_string())
            .unwrap_or_default()
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

fn register(registry: &Registry) -> Result<ClientMetrics, ClientError> {
    ClientMetrics::register(registry)
        .map_err(|e| ClientError::InvalidArgument(format!("cannot register metrics: {e}")))
}
