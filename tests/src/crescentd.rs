//! Running a real `crescentd` on a data dir and talking to its HTTP API. It runs with `[auth]`
//! on unless a test asks for open mode ([`Auth`]); the harness issues the tokens.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::auth::AuthKey;
use crate::process::{free_local_port, kill_with_parent, ChildGuard};

/// How long a starting crescentd may take to answer `/healthz` (it recovers its journal first).
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// A running crescentd, SIGKILLed when dropped.
#[derive(Debug)]
pub struct CrescentdProcess {
    pub guard: ChildGuard,
    pub addr: SocketAddr,
    pub log_path: PathBuf,
    /// From spawn to the first 200 of `/healthz`.
    pub startup: Duration,
    /// The key of its `[auth]`; `None` in open mode.
    pub auth: Option<AuthKey>,
}

/// How a started crescentd authenticates (docs/security.md, "Turning it on").
#[derive(Debug, Clone)]
pub enum Auth {
    /// `[auth]` on with the key file `DATA_DIR.key` (made on the first start, kept for
    /// restarts on the same data dir): the default.
    Default,
    /// `[auth]` on with this key (both nodes of an HA pair load the same one).
    Key(AuthKey),
    /// Open mode: only for tests whose subject is running without `[auth]` (the caller says
    /// why).
    Open,
}

impl Auth {
    /// The key this mode runs with for crescentd on `data_dir`, if any.
    fn key(&self, data_dir: &Path) -> Option<AuthKey> {
        match self {
            Auth::Default => Some(AuthKey::at(&data_dir.with_extension("key"))),
            Auth::Key(k) => Some(k.clone()),
            Auth::Open => None,
        }
    }
}

impl CrescentdProcess {
    /// Starts `bin --data-dir DATA_DIR --listen 127.0.0.1:PORT EXTRA...` on a free port (`{listen}`
    /// in an extra argument becomes that address) with `[auth]` on ([`Auth::Default`]), logging
    /// to `log_path`, and waits until `/healthz` answers 200. Retries with another port when the
    /// chosen one was taken meanwhile; any other early exit fails with the log's tail.
    pub fn start(
        bin: &Path,
        data_dir: &Path,
        log_path: &Path,
        extra_args: &[String],
    ) -> Result<CrescentdProcess, String> {
        Self::start_limited(bin, data_dir, log_path, extra_args, None)
    }

    /// [`CrescentdProcess::start`] in open mode (no `[auth]`): only for tests whose subject is
    /// open mode.
    pub fn start_open(
        bin: &Path,
        data_dir: &Path,
        log_path: &Path,
        extra_args: &[String],
    ) -> Result<CrescentdProcess, String> {
        Self::start_with_auth(bin, data_dir, log_path, extra_args, None, Auth::Open)
    }

    /// [`CrescentdProcess::start`] with the child's descriptor limit (RLIMIT_NOFILE, soft and
    /// hard) set to `nofile` when given.
    pub fn start_limited(
        bin: &Path,
        data_dir: &Path,
        log_path: &Path,
        extra_args: &[String],
        nofile: Option<u64>,
    ) -> Result<CrescentdProcess, String> {
        Self::start_with_auth(bin, data_dir, log_path, extra_args, nofile, Auth::Default)
    }

    /// [`CrescentdProcess::start_limited`] authenticating as `auth` says.
    pub fn start_with_auth(
        bin: &Path,
        data_dir: &Path,
        log_path: &Path,
        extra_args: &[String],
        nofile: Option<u64>,
        auth: Auth,
    ) -> Result<CrescentdProcess, String> {
        let key = auth.key(data_dir);
        let args = with_auth_args(extra_args, key.as_ref());
        let mut last_err = String::new();
        for _attempt in 0..5 {
            let addr: SocketAddr = ([127, 0, 0, 1], free_local_port()).into();
            match Self::start_once(bin, data_dir, log_path, &args, nofile, addr) {
                Ok(p) if matches!(auth, Auth::Default) => {
                    return Ok(p.with_key(key).assert_refuses_anonymous())
                }
                Ok(p) => return Ok(p.with_key(key)),
                Err(StartError::PortTaken(e)) => last_err = e,
                Err(StartError::Failed(e)) => return Err(e),
            }
        }
        Err(format!("no free port after 5 attempts: {last_err}"))
    }

    /// [`CrescentdProcess::start`] on a given address: a restart that storage owners and
    /// writers, which follow the address they were given, find again. Retries for a few
    /// seconds while the address is still taken.
    pub fn start_at(
        bin: &Path,
        data_dir: &Path,
        log_path: &Path,
        extra_args: &[String],
        addr: SocketAddr,
    ) -> Result<CrescentdProcess, String> {
        let key = Auth::Default.key(data_dir);
        let args = with_auth_args(extra_args, key.as_ref());
        let mut last_err = String::new();
        for _attempt in 0..20 {
            match Self::start_once(bin, data_dir, log_path, &args, None, addr) {
                Ok(p) => return Ok(p.with_key(key).assert_refuses_anonymous()),
                Err(StartError::PortTaken(e)) => last_err = e,
                Err(StartError::Failed(e)) => return Err(e),
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        Err(format!("{addr} stayed taken: {last_err}"))
    }

    fn with_key(mut self, key: Option<AuthKey>) -> CrescentdProcess {
        self.auth = key;
        self
    }

    /// Checks that this standalone node refuses a request without a token, so a test meant
    /// to run with credentials cannot pass in open mode. (An HA standby's listener answers
    /// every route without a token: its status is its `/healthz`, the rest `NOT_LEADER`.)
    fn assert_refuses_anonymous(self) -> CrescentdProcess {
        let status = http_status(self.addr, "/v1/status");
        assert!(
            matches!(status, Ok(401)),
            "crescentd on {} should run with [auth]: GET /v1/status without a token gave \
             {status:?}",
            self.addr
        );
        self
    }

    /// An `admin` token for the harness's own calls; `None` in open mode.
    pub fn admin_token(&self) -> Option<String> {
        self.auth.as_ref().map(AuthKey::admin)
    }

    /// A `client` token of `tenant`; `None` in open mode.
    pub fn client_token(&self, tenant: &str) -> Option<String> {
        self.auth.as_ref().map(|k| k.client(tenant))
    }

    /// An `owner` token for owner id `owner`; `None` in open mode.
    pub fn owner_token(&self, owner: &str) -> Option<String> {
        self.auth.as_ref().map(|k| k.owner(owner))
    }

    /// Options of a library client of this node in the default tenant (with its `client`
    /// token when `[auth]` is on).
    pub fn client_options(&self) -> crescent_client::ClientOptions {
        let options = crescent_client::ClientOptions::servers(&self.addr.to_string());
        crate::auth::with_token(options, self.client_token(crate::auth::DEFAULT_TENANT))
    }

    /// A library client of this node in the default tenant ([`Self::client_options`]).
    pub async fn client(&self) -> crescent_client::CrescentClient {
        crescent_client::CrescentClient::connect(self.client_options())
            .await
            .unwrap_or_else(|e| panic!("a client of {}: {e}", self.addr))
    }

    /// A segments client of this node, with the admin token when `[auth]` is on.
    pub fn segments_client(&self, timeout: Duration) -> SegmentsClient {
        SegmentsClient::new(&self.base_url(), timeout).with_optional_token(self.admin_token())
    }

    fn start_once(
        bin: &Path,
        data_dir: &Path,
        log_path: &Path,
        extra_args: &[String],
        nofile: Option<u64>,
        addr: SocketAddr,
    ) -> Result<CrescentdProcess, StartError> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log_path)
            .map_err(|e| StartError::Failed(format!("log {}: {e}", log_path.display())))?;
        let mut cmd = Command::new(bin);
        cmd.arg("--data-dir")
            .arg(data_dir)
            .arg("--listen")
            .arg(addr.to_string())
            .args(
                extra_args
                    .iter()
                    .map(|a| a.replace("{listen}", &addr.to_string())),
            )
            .env_remove("CRESCENT_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone().map_err(|e| {
                StartError::Failed(format!("log {}: {e}", log_path.display()))
            })?))
            .stderr(Stdio::from(log));
        kill_with_parent(&mut cmd);
        if let Some(n) = nofile {
            limit_descriptors(&mut cmd, n);
        }
        let started = Instant::now();
        let child = cmd
            .spawn()
            .map_err(|e| StartError::Failed(format!("spawning {}: {e}", bin.display())))?;
        let mut guard = ChildGuard::new(format!("crescentd on {addr}"), child);
        loop {
            if let Some(status) = guard.try_exit_status() {
                let tail = log_tail(log_path, 40);
                let msg = format!(
                    "crescentd exited ({status}) before serving on {addr}; log {}:\n{tail}",
                    log_path.display()
                );
                return Err(if tail.contains("in use") {
                    StartError::PortTaken(msg)
                } else {
                    StartError::Failed(msg)
                });
            }
            if let Ok(200) = http_status(addr, "/healthz") {
                return Ok(CrescentdProcess {
                    guard,
                    addr,
                    log_path: log_path.to_path_buf(),
                    startup: started.elapsed(),
                    auth: None,
                });
            }
            if started.elapsed() > READY_TIMEOUT {
                return Err(StartError::Failed(format!(
                    "crescentd on {addr} did not answer /healthz with 200 within {READY_TIMEOUT:?}; \
                     log:\n{}",
                    log_tail(log_path, 40)
                )));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// `extra` with `--auth-secret-file KEY` when there is a key.
fn with_auth_args(extra: &[String], key: Option<&AuthKey>) -> Vec<String> {
    let mut args = extra.to_vec();
    if let Some(k) = key {
        args.push("--auth-secret-file".to_string());
        args.push(k.path.display().to_string());
    }
    args
}

/// Sets the spawned process's RLIMIT_NOFILE (soft and hard) to `n`.
fn limit_descriptors(cmd: &mut Command, n: u64) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the forked child before exec and only calls setrlimit(2),
    // which is async-signal-safe and touches no memory of the parent.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(move || {
            let lim = libc::rlimit {
                rlim_cur: n as libc::rlim_t,
                rlim_max: n as libc::rlim_t,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

enum StartError {
    PortTaken(String),
    Failed(String),
}

/// The last `lines` lines of a log file (for failure messages).
pub fn log_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// A bare blocking `GET` returning the status code (no HTTP client needed while waiting for a
/// server to come up).
pub fn http_status(addr: SocketAddr, path: &str) -> std::io::Result<u16> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(200))?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.set_write_timeout(Some(Duration::from_secs(2)))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut head = [0u8; 12];
    stream.read_exact(&mut head)?;
    // "HTTP/1.1 200"
    std::str::from_utf8(&head[9..12])
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other("malformed HTTP status line"))
}

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
