//! The HTTP connection to crescentd (msgpack bodies, wire version 1).

use std::time::Duration;

use crescent_wire::segments::{
    CommandReply, MountSegmentRequest, RegisterOwnerRequest, SegmentList, UnmountSegmentRequest,
};
use crescent_wire::ApiError;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::ClientError;

const MSGPACK: &str = "application/msgpack";

/// A connection to one crescentd.
#[derive(Debug, Clone)]
pub struct CrescentClient {
    server: String,
    base: String,
    http: reqwest::Client,
}

impl CrescentClient {
    /// `server` is `HOST:PORT` (or a full `http://` URL).
    pub fn new(server: &str) -> Result<Self, ClientError> {
        if server.trim().is_empty() {
            return Err(ClientError::InvalidArgument(
                "server address is empty".into(),
            ));
        }
        let base = if server.starts_with("http://") || server.starts_with("https://") {
            server.trim_end_matches('/').to_string()
        } else {
            format!("http://{server}")
        };
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .connect_timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| ClientError::Protocol(format!("cannot build http client: {e}")))?;
        Ok(Self {
            server: server.to_string(),
            base,
            http,
        })
    }

    pub fn server(&self) -> &str {
        &self.server
    }

    fn connect_err(&self, source: reqwest::Error) -> ClientError {
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
        let bytes = resp.bytes().await.map_err(|e| self.connect_err(e))?;
        if !status.is_success() {
            return Err(match serde_json::from_slice::<ApiError>(&bytes) {
                Ok(api) => ClientError::Api(api),
                Err(_) => ClientError::Protocol(format!(
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

    async fn post<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, ClientError> {
        let bytes = rmp_serde::to_vec_named(body)
            .map_err(|e| ClientError::InvalidArgument(format!("cannot encode request: {e}")))?;
        let resp = self
            .http
            .post(format!("{}{path}", self.base))
            .header(reqwest::header::CONTENT_TYPE, MSGPACK)
            .header(reqwest::header::ACCEPT, MSGPACK)
            .body(bytes)
            .send()
            .await
            .map_err(|e| self.connect_err(e))?;
        self.decode(resp).await
    }

    async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        let resp = self
            .http
            .get(format!("{}{path}", self.base))
            .header(reqwest::header::ACCEPT, MSGPACK)
            .send()
            .await
            .map_err(|e| self.connect_err(e))?;
        self.decode(resp).await
    }

    /// `GET /healthz`: the server's health document.
    pub async fn health(&self) -> Result<serde_json::Value, ClientError> {
        self.get("/healthz").await
    }

    /// Registers (or re-registers) a storage owner.
    pub async fn register_owner(
        &self,
        req: &RegisterOwnerRequest,
    ) -> Result<CommandReply, ClientError> {
        self.post("/v1/owners/register", req).await
    }

    /// Mounts a segment (idempotent for identical parameters).
    pub async fn mount_segment(
        &self,
        req: &MountSegmentRequest,
    ) -> Result<CommandReply, ClientError> {
        self.post("/v1/segments/mount", req).await
    }

    /// Unmounts a segment.
    pub async fn unmount_segment(&self, segment_id: &str) -> Result<CommandReply, ClientError> {
        let req = UnmountSegmentRequest {
            segment_id: segment_id.to_string(),
        };
        self.post("/v1/segments/unmount", &req).await
    }

    /// Lists owners and mounted segments.
    pub async fn list_segments(&self) -> Result<SegmentList, ClientError> {
        self.get("/v1/segments").await
    }
}
