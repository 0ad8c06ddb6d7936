//! The segment endpoints of crescentd's HTTP API as the crash and failover tests see them:
//! listings, error bodies, and how a mutating request ended.

use std::time::Duration;

use serde::Deserialize;

/// One segment of `GET /v1/segments`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ListedSegment {
    pub segment_id: String,
    pub owner_id: String,
    pub base: u64,
    pub size: u64,
}

/// The body of `GET /v1/segments` (the fields this test relies on).
#[derive(Debug, Clone, Deserialize)]
pub struct SegmentListing {
    pub segments: Vec<ListedSegment>,
}

/// An error body of the HTTP API.
#[derive(Debug, Clone, Deserialize)]
pub struct ApiError {
    pub code: String,
    pub message: String,
    pub retryable: bool,
}

/// How a mutating request ended, from the client's point of view.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// 200: the command is durable.
    Acked,
    /// The server answered with an error body.
    Rejected { status: u16, error: ApiError },
    /// No usable answer (connection refused or reset, timeout, unreadable body): the command
    /// may or may not have been applied.
    Unknown(String),
}

/// A thin async client of the segment endpoints.
#[derive(Debug, Clone)]
pub struct SegmentsClient {
    http: reqwest::Client,
    base: String,
    /// Sent as `Authorization: Bearer` (crescentd with `[auth]`).
    token: Option<String>,
}

impl SegmentsClient {
    pub fn new(base_url: &str, timeout: Duration) -> SegmentsClient {
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .no_proxy()
            .build()
            .expect("reqwest client");
        SegmentsClient {
            http,
            base: base_url.trim_end_matches('/').to_string(),
            token: None,
        }
    }

    /// This client with a bearer token on every request.
    pub fn with_token(mut self, token: &str) -> SegmentsClient {
        self.token = Some(token.to_string());
        self
    }

    /// [`SegmentsClient::with_token`] when there is one (open mode: none).
    pub fn with_optional_token(mut self, token: Option<String>) -> SegmentsClient {
        self.token = token;
        self
    }

    fn authorized(&self, req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.token {
            Some(t) => req.bearer_auth(t),
            None => req,
        }
    }

    async fn post(&self, path: &str, body: serde_json::Value) -> Outcome {
        let resp = match self
            .authorized(self.http.post(format!("{}{path}", self.base)))
            .json(&body)
            .send()
            .await
        {
            Ok(r) => r,
            Err(e) => return Outcome::Unknown(format!("POST {path}: {e}")),
        };
        let status = resp.status().as_u16();
        // Read the whole body even for a 200: a response cut short by the crash is no answer.
        let bytes = match resp.bytes().await {
            Ok(b) => b,
            Err(e) => return Outcome::Unknown(format!("POST {path}: reading body: {e}")),
        };
        if status == 200 {
            return match serde_json::from_slice::<serde_json::Value>(&bytes) {
                Ok(v) if v.get("events").is_some() => Outcome::Acked,
                _ => Outcome::Unknown(format!(
                    "POST {path}: 200 with an unexpected body {:?}",
                    String::from_utf8_lossy(&bytes)
                )),
            };
        }
        match serde_json::from_slice::<ApiError>(&bytes) {
            Ok(error) => Outcome::Rejected { status, error },
            Err(_) => Outcome::Unknown(format!(
                "POST {path}: status {status} with body {:?}",
                String::from_utf8_lossy(&bytes)
            )),
        }
    }

    pub async fn mount(&self, owner_id: &str, segment_id: &str, size: u64) -> Outcome {
        self.post(
            "/v1/segments/mount",
            serde_json::json!({"owner_id": owner_id, "segment_id": segment_id, "size": size}),
        )
        .await
    }

    pub async fn unmount(&self, segment_id: &str) -> Outcome {
        self.post(
            "/v1/segments/unmount",
            serde_json::json!({"segment_id": segment_id}),
        )
        .await
    }

    /// Lists the segments and asserts that every id in `acked` is there (acknowledged mounts
    /// survive whatever `what` names: a failover, a round); returns the listed ids.
    pub async fn assert_listed(
        &self,
        acked: &[String],
        what: &str,
    ) -> std::collections::HashSet<String> {
        let listed = self.list().await.expect("list segments");
        let present: std::collections::HashSet<String> = listed
            .segments
            .iter()
            .map(|s| s.segment_id.clone())
            .collect();
        let missing: Vec<&String> = acked.iter().filter(|s| !present.contains(*s)).collect();
        assert!(
            missing.is_empty(),
            "{what}: {} of {} acknowledged mounts missing, e.g. {:?}",
            missing.len(),
            acked.len(),
            &missing[..missing.len().min(5)]
        );
        present
    }

    pub async fn list(&self) -> Result<SegmentListing, String> {
        let resp = self
            .authorized(self.http.get(format!("{}/v1/segments", self.base)))
            .send()
            .await
            .map_err(|e| format!("GET /v1/segments: {e}"))?;
        let status = resp.status();
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| format!("GET /v1/segments: reading body: {e}"))?;
        if !status.is_success() {
            return Err(format!(
                "GET /v1/segments: status {status}: {}",
                String::from_utf8_lossy(&bytes)
            ));
        }
        serde_json::from_slice(&bytes).map_err(|e| format!("GET /v1/segments: bad body: {e}"))
    }
}
