//! [`MeshClient`]: a client of a mesh of Crescent clusters (docs/scale-out.md, "Clients route
//! themselves"). It loads the mesh's membership record once and follows it
//! ([`crescent_ha::MembershipWatch`]); each object request goes straight to the leader of its
//! authority cluster (weighted rendezvous over `(tenant, domain, key)`, the routing crescentd
//! checks), batches are split by cluster and sent in parallel, and a WRONG_CLUSTER answer
//! (the client routed by an older generation) makes it wait for the generation the answer
//! names and retry once. No steady-state request reads the coordination backend.
//!
//! Needs the `etcd` feature (which covers etcd and Redis).

mod ops;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use crescent_ha::{CoordinationEndpoint, MembershipWatch};
use crescent_mesh::{Membership, RouteKey, RouteTable};
use crescent_wire::store::ObjectId;
use crescent_wire::{ApiError, ErrorCode};

use crate::client::CrescentClient;
use crate::client_options::ClientOptions;
use crate::error::ClientError;
use crate::metrics::ClientMetrics;
use crate::options::Scope;

/// How long connecting waits for the first membership record.
const FIRST_RECORD: Duration = Duration::from_secs(5);
/// How long a redirect waits for the generation it names.
const REDIRECT_WAIT: Duration = Duration::from_secs(3);

/// One generation's membership with its route table.
#[derive(Debug)]
pub(crate) struct Routing {
    pub membership: Membership,
    pub table: RouteTable,
}

struct Shared {
    mesh: String,
    watch: MembershipWatch,
    routing: RwLock<Arc<Routing>>,
    /// Per cluster: the leader address its client was made for, and the client.
    clusters: Mutex<HashMap<String, (String, CrescentClient)>>,
    /// What every cluster's client is made with (servers, backend and cluster cleared).
    template: ClientOptions,
}

/// A handle on a mesh; clones and [`MeshClient::with_scope`] share the membership watch and
/// the per-cluster clients.
#[derive(Clone)]
pub struct MeshClient {
    shared: Arc<Shared>,
    scope: Scope,
}

impl std::fmt::Debug for MeshClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MeshClient")
            .field("mesh", &self.shared.mesh)
            .field("generation", &self.generation())
            .finish_non_exhaustive()
    }
}

impl MeshClient {
    /// Follows the mesh `options.mesh` in `options.etcd_endpoints` or `options.redis`; waits
    /// for its first membership record (a mesh without one is UNAVAILABLE: no cluster has
    /// started serving in it). Needs a tokio runtime.
    pub async fn connect(options: ClientOptions) -> Result<MeshClient, ClientError> {
        options.validate()?;
        let mesh = options.mesh.clone().ok_or_else(|| {
            ClientError::InvalidArgument("a mesh client needs a mesh name (--mesh)".into())
        })?;
        let endpoint = match &options.redis {
            Some(url) => CoordinationEndpoint::Redis(url.clone()),
            None => CoordinationEndpoint::Etcd(options.etcd_endpoints.clone()),
        };
        let watch = MembershipWatch::start(&endpoint, &mesh, Duration::from_secs(2))
            .await
            .map_err(ClientError::Discovery)?;
        let first = watch
            .wait_for_generation(1, FIRST_RECORD)
            .await
            .map_err(|_| {
                ClientError::Api(ApiError::new(
                    ErrorCode::Unavailable,
                    format!("mesh {mesh} has no membership record: no cluster serves in it yet"),
                ))
            })?;
        let scope = Scope::new(
            options.token.as_ref().and_then(|t| t.tenant()).as_deref(),
            None,
        )?;
        let template = ClientOptions {
            servers: Vec::new(),
            etcd_endpoints: Vec::new(),
            redis: None,
            cluster: None,
            mesh: None,
            ..options
        };
        let routing = Arc::new(Routing {
            table: RouteTable::new(&first),
            membership: first,
        });
        let shared = Shared {
            mesh,
            watch,
            routing: RwLock::new(routing),
            clusters: Mutex::new(HashMap::new()),
            template,
        };
        Ok(MeshClient {
            shared: Arc::new(shared),
            scope,
        })
    }

    /// The same mesh client in another namespace (tenant `None`: `default`, or the token's).
    pub fn with_scope(
        &self,
        tenant: Option<&str>,
        domain: Option<&str>,
    ) -> Result<Self, ClientError> {
        let token_tenant = self.shared.template.token.as_ref().and_then(|t| t.tenant());
        Ok(MeshClient {
            shared: self.shared.clone(),
            scope: Scope::new(tenant.or(token_tenant.as_deref()), domain)?,
        })
    }

    pub fn mesh(&self) -> &str {
        &self.shared.mesh
    }

    /// The membership generation requests are routed by.
    pub fn generation(&self) -> u64 {
        self.routing().membership.generation
    }

    /// The membership requests are routed by.
    pub fn membership(&self) -> Membership {
        self.routing().membership.clone()
    }

    /// The authority cluster of `key` in this client's scope.
    pub fn authority(&self, key: &str) -> Result<String, ClientError> {
        let id = self.scope.object_id(key)?;
        Ok(route(&self.routing(), &id)?.to_string())
    }

    /// The authority cluster of a weight revision of this client's tenant: its lineage routes
    /// every generation, manifest and payload of it (docs/scale-out.md, "Authority by
    /// rendezvous").
    pub fn revision_authority(
        &self,
        namespace: &str,
        resource_id: &str,
        revision: &str,
    ) -> Result<String, ClientError> {
        let lineage = crescent_mesh::Lineage {
            tenant: self
                .scope
                .tenant()
                .unwrap_or(crescent_wire::store::DEFAULT_TENANT),
            namespace,
            resource_id,
            revision,
        };
        let routing = self.routing();
        let cluster = routing
            .table
            .route(RouteKey::revision(&lineage))
            .map_err(|e| ClientError::Api(ApiError::new(ErrorCode::Unavailable, e.to_string())))?;
        Ok(cluster.to_string())
    }

    /// A client of cluster `name` (its leader as the membership names it), in this scope.
    pub fn cluster_client(&self, name: &str) -> Result<CrescentClient, ClientError> {
        self.client_for(&self.routing(), name)
    }

    /// Waits up to `within` until the membership followed holds generation `generation` (a
    /// change this process made itself, say); the generation held then.
    pub async fn wait_for_generation(&self, generation: u64, within: Duration) -> u64 {
        if let Err(e) = self
            .shared
            .watch
            .wait_for_generation(generation, within)
            .await
        {
            tracing::warn!(generation, error = %e, "the mesh generation did not arrive");
        }
        self.generation()
    }

    /// Waits until the read leases every get released have been released (a process about to
    /// exit after gets, as `crescent get` does).
    pub async fn settle(&self) {
        let clients: Vec<CrescentClient> = self
            .shared
            .clusters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .map(|(_, c)| c.clone())
            .collect();
        for c in clients {
            c.settle().await;
        }
    }

    /// The routing of the newest generation the watch holds (rebuilt when it moved on).
    pub(crate) fn routing(&self) -> Arc<Routing> {
        let held = self
            .shared
            .routing
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        match self.shared.watch.current() {
            Some(m) if m.generation > held.membership.generation => {
                tracing::debug!(
                    generation = m.generation,
                    "routing by a new mesh generation"
                );
                let fresh = Arc::new(Routing {
                    table: RouteTable::new(&m),
                    membership: m,
                });
                let mut slot = self
                    .shared
                    .routing
                    .write()
                    .unwrap_or_else(|p| p.into_inner());
                if slot.membership.generation < fresh.membership.generation {
                    *slot = fresh.clone();
                }
                fresh
            }
            _ => held,
        }
    }

    /// After a redirect naming `generation`: waits (briefly) until the watch holds it.
    pub(crate) async fn refresh(&self, generation: u64) {
        if generation > self.generation() {
            if let Err(e) = self
                .shared
                .watch
                .wait_for_generation(generation, REDIRECT_WAIT)
                .await
            {
                tracing::warn!(generation, error = %e, "redirected to a generation not seen yet");
            }
        } else {
            // The answering cluster routed by an older generation than ours: it catches up.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The client of `cluster` under `routing` (made anew when its leader moved).
    pub(crate) fn client_for(
        &self,
        routing: &Routing,
        cluster: &str,
    ) -> Result<CrescentClient, ClientError> {
        let leader = routing
            .membership
            .cluster(cluster)
            .and_then(|c| c.leader.clone())
            .ok_or_else(|| {
                ClientError::Api(ApiError::new(
                    ErrorCode::Unavailable,
                    format!(
                        "cluster {cluster} of mesh {} has no leader in generation {}",
                        self.shared.mesh, routing.membership.generation
                    ),
                ))
            })?;
        let mut clusters = self
            .shared
            .clusters
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let client = match clusters.get(cluster) {
            Some((at, client)) if *at == leader => client.clone(),
            _ => {
                let options = ClientOptions {
                    servers: vec![leader.clone()],
                    ..self.shared.template.clone()
                };
                let client = CrescentClient::build(&options, ClientMetrics::unregistered())?;
                clusters.insert(cluster.to_string(), (leader, client.clone()));
                client
            }
        };
        drop(clusters);
        client.with_scope(self.scope.tenant(), self.scope.domain())
    }
}

/// The cluster that held `id` before the newest membership change
/// ([`crescent_mesh::previous_authority`]: the runner-up among serving and draining clusters;
/// docs/scale-out.md, "Reads after a membership change").
pub(crate) fn previous_authority(routing: &Routing, id: &ObjectId) -> Option<String> {
    let key = RouteKey::object(id.tenant(), id.domain.as_deref(), id.key.as_bytes());
    crescent_mesh::previous_authority(&routing.membership, &routing.table, key)
}

/// The authority cluster of `id` under `routing`.
pub(crate) fn route<'a>(routing: &'a Routing, id: &ObjectId) -> Result<&'a str, ClientError> {
    let key = RouteKey::object(id.tenant(), id.domain.as_deref(), id.key.as_bytes());
    routing
        .table
        .route(key)
        .map_err(|e| ClientError::Api(ApiError::new(ErrorCode::Unavailable, e.to_string())))
}
