//! The HTTP connection to crescentd: one keep-alive connection pool, msgpack bodies (wire
//! version 1), errors decoded into [`ApiError`]s. Route URLs are parsed once, not per request.

use std::time::Duration;

use crescent_wire::rpc::RpcOp;
use crescent_wire::store::routes;
use crescent_wire::ApiError;
use reqwest::Url;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::ClientError;

const MSGPACK: &str = "application/msgpack";

/// Every route the client calls, parsed once.
#[derive(Debug)]
pub(crate) struct Routes {
    pub healthz: Url,
    pub stats: Url,
    pub rpc: Url,
    pub register_owner: Url,
    pub mount: Url,
    pub unmount: Url,
    pub segments: Url,
    pub heartbeat: Url,
    pub put_start: Url,
    pub put_end: Url,
    pub put_revoke: Url,
    pub get: Url,
    pub exist: Url,
    pub size: Url,
    pub remove: Url,
    pub remove_prefix: Url,
    pub list: Url,
    pub batch_put_start: Url,
    pub batch_put_end: Url,
    pub batch_put_revoke: Url,
    pub batch_get: Url,
    pub batch_exist: Url,
    pub batch_remove: Url,
    pub release: Url,
    pub batch_release: Url,
    pub rebuild_replay: Url,
    pub rebuild_complete: Url,
    pub rebuild_status: Url,
}

impl Routes {
    fn new(base: &str) -> Result<Self, ClientError> {
        let url = |path: &str| {
            Url::parse(&format!("{base}{path}")).map_err(|e| {
                ClientError::InvalidArgument(format!("bad server address {base:?}: {e}"))
            })
        };
        Ok(Self {
            healthz: url("/healthz")?,
            stats: url("/stats")?,
            rpc: url(crescent_wire::rpc::RPC_INFO_ROUTE)?,
            register_owner: url("/v1/owners/register")?,
            mount: url("/v1/segments/mount")?,
            unmount: url("/v1/segments/unmount")?,
            segments: url("/v1/segments")?,
            heartbeat: url(routes::HEARTBEAT)?,
            put_start: url(routes::PUT_START)?,
            put_end: url(routes::PUT_END)?,
            put_revoke: url(routes::PUT_REVOKE)?,
            get: url(routes::GET)?,
            exist: url(routes::EXIST)?,
            size: url(routes::SIZE)?,
            remove: url(routes::REMOVE)?,
            remove_prefix: url(routes::REMOVE_PREFIX)?,
            list: url(routes::LIST)?,
            batch_put_start: url(routes::BATCH_PUT_START)?,
            batch_put_end: url(routes::BATCH_PUT_END)?,
            batch_put_revoke: url(routes::BATCH_PUT_REVOKE)?,
            batch_get: url(routes::BATCH_GET)?,
            batch_exist: url(routes::BATCH_EXIST)?,
            batch_remove: url(routes::BATCH_REMOVE)?,
            release: url(routes::RELEASE)?,
            batch_release: url(routes::BATCH_RELEASE)?,
            rebuild_replay: url(crescent_wire::rebuild::routes::REPLAY)?,
            rebuild_complete: url(crescent_wire::rebuild::routes::COMPLETE)?,
            rebuild_status: url(crescent_wire::rebuild::routes::STATUS)?,
        })
    }
}

impl Routes {
    /// The HTTP route of an operation the RPC fast path also carries; `None` for the ops that
    /// exist only on the fast path (the compact batch forms).
    pub fn for_op(&self, op: RpcOp) -> Option<&Url> {
        Some(match op {
            RpcOp::PutStart => &self.put_start,
            RpcOp::PutEnd => &self.put_end,
            RpcOp::PutRevoke => &self.put_revoke,
            RpcOp::Get => &self.get,
            RpcOp::Exist => &self.exist,
            RpcOp::Size => &self.size,
            RpcOp::Remove => &self.remove,
            RpcOp::BatchPutStart => &self.batch_put_start,
            RpcOp::BatchPutEnd => &self.batch_put_end,
            RpcOp::BatchPutRevoke => &self.batch_put_revoke,
            RpcOp::BatchGet => &self.batch_get,
            RpcOp::BatchExist => &self.batch_exist,
            RpcOp::BatchRemove => &self.batch_remove,
            RpcOp::Heartbeat => &self.heartbeat,
            RpcOp::Release => &self.release,
            RpcOp::BatchRelease => &self.batch_release,
            RpcOp::BatchGetCompact | RpcOp::BatchPutStartCompact | RpcOp::BatchPutEndCompact => {
                return None
            }
        })
    }
}

/// The header a standby's NOT_LEADER answer names the active in (`HOST:PORT`).
pub(crate) const LEADER_HEADER: &str = "x-crescent-leader";

/// The base URL of a server address: `HOST:PORT` gets `http://`, a URL loses trailing `/`.
/// Two spellings of one server normalize to the same string, so addresses from etcd, from a
/// NOT_LEADER answer and from the static list compare equal.
pub(crate) fn base_url(server: &str) -> Result<String, ClientError> {
    base_url_with(server, false)
}

/// [`base_url`], with `https://` for a bare `HOST:PORT` when `tls` (a client given a CA file:
/// docs/security.md, "TLS").
pub(crate) fn base_url_with(server: &str, tls: bool) -> Result<String, ClientError> {
    let server = server.trim();
    if server.is_empty() {
        return Err(ClientError::InvalidArgument(
            "server address is empty".into(),
        ));
    }
    let base = if server.starts_with("http://") || server.starts_with("https://") {
        server.trim_end_matches('/').to_string()
    } else if tls {
        format!("https://{}", server.trim_end_matches('/'))
    } else {
        format!("http://{}", server.trim_end_matches('/'))
    };
    match Url::parse(&base) {
        Ok(url) if url.host_str().is_some() => Ok(base),
        Ok(_) => Err(ClientError::InvalidArgument(format!(
            "bad server address {server:?}: no host"
        ))),
        Err(e) => Err(ClientError::InvalidArgument(format!(
            "bad server address {server:?}: {e}"
        ))),
    }
}

/// The pooled keep-alive HTTP/1.1 client every server connection of one `CrescentClient`
/// shares (reqwest pools per host, so switching leaders keeps the pool of each), sending
/// `token` (marked sensitive, so it is never logged) on every request.
/// With `tls`, `https://` servers are verified against its CA only (reqwest's built-in roots
/// are not compiled in).
pub(crate) fn http_client_with(
    token: Option<&crate::client_options::BearerToken>,
    tls: Option<&crescent_tls::ClientConfig>,
) -> Result<reqwest::Client, ClientError> {
    let mut headers = reqwest::header::HeaderMap::new();
    if let Some(token) = token {
        let mut value = reqwest::header::HeaderValue::from_str(&token.header_value())
            .map_err(|_| ClientError::InvalidArgument("the token is not a valid header".into()))?;
        value.set_sensitive(true);
        headers.insert(reqwest::header::AUTHORIZATION, value);
    }
    let mut builder = reqwest::Client::builder();
    if let Some(tls) = tls {
        builder = builder.use_preconfigured_tls(tls.clone());
    }
    builder
        .default_headers(headers)
        .timeout(Duration::from_secs(30))
        .connect_timeout(Duration::from_secs(5))
        .pool_idle_timeout(Duration::from_secs(90))
        .pool_max_idle_per_host(64)
        .tcp_nodelay(true)
        .build()
        .map_err(|e| ClientError::Protocol(format!("cannot build http client: {e}")))
}

/// One crescentd, reached through the shared pooled HTTP client.
#[derive(Debug)]
pub(crate) struct HttpConn {
    server: String,
    pub routes: Routes,
    http: reqwest::Client,
}

impl HttpConn {
    /// `server` is `HOST:PORT` (or a full `http://` or `https://` URL); a bare address gets
    /// `https://` when `tls`.
    pub fn new(server: &str, http: reqwest::Client, tls: bool) -> Result<Self, ClientError> {
        let base = base_url_with(server, tls)?;
        let routes = Routes::new(&base)?;
        Ok(Self {
            server: server.trim().to_string(),
            routes,
            http,
        })
    }

    /// The URL of `route` (an absolute path such as `/v1/cold/offload`) on this server.
    pub fn url(&self, route: &str) -> Result<Url, ClientError> {
        self.routes
            .healthz
            .join(route)
            .map_err(|e| ClientError::InvalidArgument(format!("bad route {route}: {e}")))
    }

    pub fn server(&self) -> &str {
        &self.server
    }

    fn connect_err(&self, source: reqwest::Error) -> ClientError {
        if let Some(tls) = crate::error::tls_failure(&source) {
            return ClientError::Tls {
                server: self.server.clone(),
                detail: tls,
            };
        }
        // crescentd never answers HTTP with anything but HTTP: bytes that do not parse are a
        // TLS listener's alert (docs/security.md, "TLS"). Retrying would only repeat it.
        if self.routes.healthz.scheme() == "http" && crate::error::unparsable_answer(&source) {
            return ClientError::Tls {
                server: self.server.clone(),
                detail: "the server did not answer in HTTP; if it runs with [tls], use an \
                         https:// address or give --ca-file"
                    .into(),
            };
        }
        ClientError::Connect {
            server: self.server.clone(),
            source,
        }
    }

    async fn decode<T: DeserializeOwned>(&self, resp: reqwest::Response) -> Result<T, ClientError> {
        let status = resp.status();
        let is_msgpack = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with(MSGPACK));
        let leader_hint = resp
            .headers()
            .get(LEADER_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let bytes = resp.bytes().await.map_err(|e| self.connect_err(e))?;
        if !status.is_success() {
            let api = if is_msgpack {
                rmp_serde::from_slice::<ApiError>(&bytes).ok()
            } else {
                serde_json::from_slice::<ApiError>(&bytes).ok()
            };
            return Err(match api {
                Some(mut api) => {
                    // A standby names the active in a header; keep it with the error so the
                    // leader locator can follow it.
                    if api.code == crescent_wire::ErrorCode::NotLeader && api.leader.is_none() {
                        api.leader = leader_hint;
                    }
                    ClientError::Api(api)
                }
                None => ClientError::Protocol(format!(
                    "HTTP {status}: {}",
                    String::from_utf8_lossy(&bytes)
                )),
            });
        }
        if is_msgpack {
            rmp_serde::from_slice(&bytes).map_err(|e| ClientError::Protocol(e.to_string()))
        } else {
            serde_json::from_slice(&bytes).map_err(|e| ClientError::Protocol(e.to_string()))
        }
    }

    /// POSTs a msgpack body and decodes the answer.
    pub async fn post<B: Serialize, T: DeserializeOwned>(
        &self,
        url: &Url,
        body: &B,
    ) -> Result<T, ClientError> {
        let bytes = rmp_serde::to_vec_named(body)
            .map_err(|e| ClientError::InvalidArgument(format!("cannot encode request: {e}")))?;
        let resp = self
            .http
            .post(url.clone())
            .header(reqwest::header::CONTENT_TYPE, MSGPACK)
            .header(reqwest::header::ACCEPT, MSGPACK)
            .body(bytes)
            .send()
            .await
            .map_err(|e| self.connect_err(e))?;
        self.decode(resp).await
    }

    /// GETs a document (msgpack when the server offers it, else JSON).
    pub async fn get<T: DeserializeOwned>(&self, url: &Url) -> Result<T, ClientError> {
        let resp = self
            .http
            .get(url.clone())
            .header(reqwest::header::ACCEPT, MSGPACK)
            .send()
            .await
            .map_err(|e| self.connect_err(e))?;
        self.decode(resp).await
    }
}
