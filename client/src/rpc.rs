//! The RPC fast path to crescentd (`crescent_wire::rpc`): pooled persistent TCP connections
//! carrying the object operations as small binary frames, with the same msgpack bodies as HTTP.
//!
//! The listener is discovered through `GET /v1/rpc` on first use. A server without it (older
//! version, or `store.rpc_listen = "off"`) answers 404 and the client stays on HTTP, asking
//! again after [`RECHECK_HTTP_ONLY`]. A request that never left (no connection could be made)
//! falls back to HTTP; one that was sent and then lost its connection fails like a broken HTTP
//! request would (retryable), since the server may have run it. Each connection presents the
//! client's token in its handshake (`crate::rpc_connect`); a refused credential fails the
//! request with the server's UNAUTHENTICATED (HTTP would refuse it the same way).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crescent_wire::rpc::{
    decode_body, encode_request, FrameHeader, RpcError, RpcInfo, RpcOp, RpcStatus,
};
use crescent_wire::store::{ReleaseRequest, MAX_BATCH};
use crescent_wire::{ApiError, ErrorCode};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::net::TcpStream;

use crate::client_options::BearerToken;
use crate::error::ClientError;
use crate::http::HttpConn;
use crate::rpc_connect::{handshake, resolve, tls_connect_failure, version_for, HandshakeFailure};
use crate::rpc_io::{SPIN, SPIN_BATCH};
use crate::rpc_release::{PendingReleases, RELEASE_LINGER};
use crate::rpc_wire::{ClientWire, RpcTls};
use crescent_tls::frames::StreamFrames;
use crescent_transport::frame_input::{FrameInput, ReadFailure};

/// How long a server found without the RPC route is left on HTTP before asking again.
pub(crate) const RECHECK_HTTP_ONLY: Duration = Duration::from_secs(60);
/// Connect and handshake deadline (as for HTTP).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Whole-request deadline (as for HTTP).
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest answer accepted (a batch get of `MAX_BATCH` keys with replicas is well below).
const MAX_REPLY_BYTES: usize = crescent_wire::rpc::MAX_REPLY_FRAME_BYTES;
/// Idle connections kept per client.
const MAX_IDLE: usize = 64;
/// Buffers that grew past this (one huge batch) are not kept.
const KEEP_BUFFER: usize = 1 << 20;

/// One established connection, used by one request at a time.
struct RpcConn {
    wire: ClientWire,
    out: Vec<u8>,
    next_id: u64,
    /// Requests sent without waiting for their answer ([`RpcPool::send`]); their answers come
    /// first (the server answers in order) and are read and dropped before the next one.
    unanswered: u32,
}

impl RpcConn {
    async fn connect(
        addr: SocketAddr,
        version: u16,
        token: Option<&BearerToken>,
        tls: Option<&RpcTls>,
    ) -> Result<RpcConn, HandshakeFailure> {
        let mut stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let wire = match tls {
            None => {
                handshake(&mut stream, version, token).await?;
                ClientWire::Plain {
                    input: FrameInput::new(&stream)?,
                    stream,
                }
            }
            Some(tls) => {
                let mut stream = tls
                    .connector
                    .connect(tls.name.clone(), stream)
                    .await
                    .map_err(tls_connect_failure)?;
                handshake(&mut stream, version, token).await?;
                ClientWire::Tls {
                    stream: Box::new(stream),
                    input: StreamFrames::default(),
                }
            }
        };
        Ok(RpcConn::over(wire))
    }

    /// A connection to the server's local socket at `path` (docs/api.md, "Local socket").
    async fn connect_local(
        path: &std::path::Path,
        version: u16,
        token: Option<&BearerToken>,
    ) -> Result<RpcConn, HandshakeFailure> {
        let mut stream = tokio::net::UnixStream::connect(path).await?;
        handshake(&mut stream, version, token).await?;
        let wire = ClientWire::Local {
            input: FrameInput::new(&stream)?,
            stream,
        };
        Ok(RpcConn::over(wire))
    }

    fn over(wire: ClientWire) -> RpcConn {
        RpcConn {
            wire,
            out: Vec::with_capacity(4096),
            next_id: 1,
            unanswered: 0,
        }
    }

    /// Whether an idle pooled connection is still open (the server may have restarted or
    /// closed it); a closed one is never used, so no request is lost on it.
    fn still_open(&mut self) -> bool {
        // Answers still due would look like unexpected bytes: such a connection is used as is.
        self.unanswered > 0 || !self.wire.peer_gone()
    }

    /// Sends one request without waiting for its answer.
    async fn send<B: Serialize + ?Sized>(
        &mut self,
        op: RpcOp,
        body: &B,
    ) -> Result<(), CallFailure> {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        self.out.clear();
        encode_request(&mut self.out, op, id, body).map_err(CallFailure::Encode)?;
        self.wire
            .write_all(&self.out)
            .await
            .map_err(CallFailure::Io)?;
        self.unanswered += 1;
        Ok(())
    }

    /// Reads and drops the answers still due for sent-only requests.
    async fn settle(&mut self) -> Result<(), CallFailure> {
        while self.unanswered > 0 {
            let header = self.read_header(SPIN).await?;
            self.wire.take_body(header.body_len);
            self.unanswered -= 1;
        }
        Ok(())
    }

    async fn read_header(&mut self, spin: Duration) -> Result<FrameHeader, CallFailure> {
        self.wire
            .read_frame(MAX_REPLY_BYTES, spin)
            .await
            .map_err(|e| match e {
                ReadFailure::Io(e) => CallFailure::Io(e),
                ReadFailure::Frame(e) => CallFailure::Frame(e),
            })
    }

    /// Sends one request and reads its answer: `Ok(Ok(reply))`, `Ok(Err(api_error))`, or an
    /// error after which the connection must be dropped. Lease releases in `releases` ride
    /// in front of it as one sent-only batch_release, in the same write.
    async fn call<B: Serialize + ?Sized, T: DeserializeOwned>(
        &mut self,
        releases: &[ReleaseRequest],
        op: RpcOp,
        body: &B,
    ) -> Result<Result<T, ApiError>, CallFailure> {
        self.out.clear();
        // One frame per MAX_BATCH releases: the server refuses a larger batch whole, which
        // would leave every lease in it held until its deadline (docs/api.md, "Read leases").
        let frames = releases.chunks(MAX_BATCH);
        let release_frames = frames.len() as u32;
        for chunk in frames {
            let id = self.next_id;
            self.next_id = self.next_id.wrapping_add(1);
            let batch = BatchRequestRef { items: chunk };
            encode_request(&mut self.out, RpcOp::BatchRelease, id, &batch)
                .map_err(CallFailure::Encode)?;
        }
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        encode_request(&mut self.out, op, id, body).map_err(CallFailure::Encode)?;
        self.wire
            .write_all(&self.out)
            .await
            .map_err(CallFailure::Io)?;
        self.unanswered += release_frames;
        let mut header = self.read_header(spin_for(op)).await?;
        // Answers of earlier sent-only requests come first: drop them.
        while header.request_id != id && self.unanswered > 0 {
            self.wire.take_body(header.body_len);
            self.unanswered -= 1;
            header = self.read_header(spin_for(op)).await?;
        }
        let body = self.wire.take_body(header.body_len);
        if header.request_id != id {
            return Err(CallFailure::Frame(RpcError::Decode(format!(
                "answer for request {} while waiting for {id}",
                header.request_id
            ))));
        }
        let status = RpcStatus::from_u8(header.tag).map_err(CallFailure::Frame)?;
        let answer = match status {
            RpcStatus::Ok => Ok(decode_body(body).map_err(CallFailure::Frame)?),
            RpcStatus::Error => Err(decode_body(body).map_err(CallFailure::Frame)?),
        };
        self.wire.shrink(KEEP_BUFFER);
        if self.out.capacity() > KEEP_BUFFER {
            self.out = Vec::new();
        }
        Ok(answer)
    }
}

/// How long to busy-poll for the answer to `op`.
fn spin_for(op: RpcOp) -> Duration {
    match op {
        RpcOp::BatchPutStart
        | RpcOp::BatchPutStartCompact
        | RpcOp::BatchGetCompact
        | RpcOp::BatchPutEnd
        | RpcOp::BatchPutEndCompact
        | RpcOp::BatchPutRevoke
        | RpcOp::BatchGet
        | RpcOp::BatchExist
        | RpcOp::BatchRemove => SPIN_BATCH,
        _ => SPIN,
    }
}

enum CallFailure {
    /// The request could not be encoded; nothing was sent, the connection is fine.
    Encode(RpcError),
    Io(std::io::Error),
    Frame(RpcError),
}

/// How a fast-path call went wrong.
pub(crate) enum RpcFailure {
    /// Nothing reached the server (no connection could be made): HTTP may be tried instead.
    NotSent(ClientError),
    /// The request may have run: report the error as is.
    Failed(ClientError),
}

/// A batch_release body borrowing its items (encodes exactly as `BatchRequest`).
#[derive(Serialize)]
struct BatchRequestRef<'a> {
    items: &'a [ReleaseRequest],
}

/// The connections to one RPC listener.
pub(crate) struct RpcPool {
    addr: SocketAddr,
    /// The optional features the server listed in `GET /v1/rpc`.
    features: Vec<String>,
    /// The handshake version spoken (`crate::rpc_connect::version_for`).
    version: u16,
    token: Option<BearerToken>,
    /// Set when the listener speaks TLS (`RpcInfo::tls`).
    tls: Option<RpcTls>,
    /// The server's local socket, while it is worth trying (`RpcInfo::local`, for a server
    /// reached on a loopback address); cleared when a connect there fails.
    local: Mutex<Option<std::path::PathBuf>>,
    idle: Mutex<Vec<RpcConn>>,
    releases: PendingReleases,
}

impl RpcPool {
    fn new(
        addr: SocketAddr,
        info: &RpcInfo,
        token: Option<BearerToken>,
        tls: Option<RpcTls>,
        local: Option<std::path::PathBuf>,
    ) -> Self {
        Self {
            addr,
            features: info.features.clone(),
            version: version_for(info.version),
            token,
            tls,
            local: Mutex::new(local),
            idle: Mutex::new(Vec::new()),
            releases: PendingReleases::default(),
        }
    }

    /// Whether the server serves the optional feature `name`.
    pub(crate) fn has_feature(&self, name: &str) -> bool {
        self.features.iter().any(|f| f == name)
    }

    fn checkout(&self) -> Option<RpcConn> {
        let mut idle = self.idle.lock().expect("rpc pool mutex");
        while let Some(mut conn) = idle.pop() {
            if conn.still_open() {
                return Some(conn);
            }
        }
        None
    }

    fn checkin(&self, conn: RpcConn) {
        let mut idle = self.idle.lock().expect("rpc pool mutex");
        if idle.len() < MAX_IDLE {
            idle.push(conn);
        }
    }

    fn lost(&self, e: std::io::Error) -> ClientError {
        ClientError::Rpc {
            server: self.addr.to_string(),
            source: e,
        }
    }

    /// An idle connection, or a new one (to the local socket when there is one).
    async fn connection(&self) -> Result<RpcConn, RpcFailure> {
        if let Some(c) = self.checkout() {
            return Ok(c);
        }
        if let Some(c) = self.connect_local().await? {
            return Ok(c);
        }
        let connect = RpcConn::connect(
            self.addr,
            self.version,
            self.token.as_ref(),
            self.tls.as_ref(),
        );
        match tokio::time::timeout(CONNECT_TIMEOUT, connect).await {
            Ok(Ok(c)) => Ok(c),
            Ok(Err(e)) => Err(self.connect_failure(e)),
            Err(_) => {
                let e = std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out");
                Err(RpcFailure::NotSent(self.lost(e)))
            }
        }
    }

    /// A connection to the local socket, if there is one to try. One that cannot be reached
    /// (gone, not permitted, another host's path) is not tried again: TCP serves instead.
    async fn connect_local(&self) -> Result<Option<RpcConn>, RpcFailure> {
        let Some(path) = self.local.lock().expect("rpc pool mutex").clone() else {
            return Ok(None);
        };
        let connect = RpcConn::connect_local(&path, self.version, self.token.as_ref());
        match tokio::time::timeout(CONNECT_TIMEOUT, connect).await {
            Ok(Ok(c)) => Ok(Some(c)),
            Ok(Err(HandshakeFailure::Refused(e))) => Err(RpcFailure::Failed(ClientError::Api(e))),
            Ok(Err(e)) => {
                let detail = match e {
                    HandshakeFailure::Io(e) => e.to_string(),
                    _ => "handshake failed".to_string(),
                };
                tracing::debug!(path = %path.display(), error = %detail, "RPC local socket unusable; using TCP");
                *self.local.lock().expect("rpc pool mutex") = None;
                Ok(None)
            }
            Err(_) => {
                *self.local.lock().expect("rpc pool mutex") = None;
                Ok(None)
            }
        }
    }

    fn connect_failure(&self, e: HandshakeFailure) -> RpcFailure {
        match e {
            HandshakeFailure::Io(e) => RpcFailure::NotSent(self.lost(e)),
            HandshakeFailure::Refused(e) => RpcFailure::Failed(ClientError::Api(e)),
            HandshakeFailure::Tls(detail) => RpcFailure::Failed(ClientError::Tls {
                server: self.addr.to_string(),
                detail,
            }),
        }
    }

    /// Sends a request without waiting for its answer (which is read and dropped on that
    /// connection's next use): for requests whose outcome nobody acts on, such as lease
    /// releases. Ordered before every later request on the same connection.
    pub(crate) async fn send<B: Serialize + ?Sized>(
        &self,
        op: RpcOp,
        body: &B,
    ) -> Result<(), RpcFailure> {
        let mut conn = self.connection().await?;
        let outcome = tokio::time::timeout(CALL_TIMEOUT, conn.send(op, body)).await;
        self.finish(conn, outcome)
    }

    /// Sends the queued lease releases, then waits until every sent-only request on the idle
    /// connections has been answered (so the server has run it); a connection that fails
    /// meanwhile is dropped.
    pub(crate) async fn settle(&self) {
        self.flush_releases().await;
        let idle: Vec<RpcConn> = std::mem::take(&mut *self.idle.lock().expect("rpc pool mutex"));
        for mut conn in idle {
            match tokio::time::timeout(CALL_TIMEOUT, conn.settle()).await {
                Ok(Ok(())) => self.checkin(conn),
                _ => tracing::debug!(server = %self.addr, "RPC connection dropped while settling"),
            }
        }
    }

    pub(crate) async fn call<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        op: RpcOp,
        body: &B,
    ) -> Result<T, RpcFailure> {
        let _gate = match self.releases.must_precede(op) {
            true => Some(self.releases.gate.lock().await),
            false => None,
        };
        let releases = self.releases.take_for(op);
        let mut conn = match self.connection().await {
            Ok(conn) => conn,
            Err(e) => {
                if !releases.is_empty() {
                    tracing::debug!(server = %self.addr, count = releases.len(), "lease releases lost; the leases expire at their deadline");
                }
                return Err(e);
            }
        };
        let outcome = tokio::time::timeout(CALL_TIMEOUT, conn.call(&releases, op, body)).await;
        self.finish(conn, outcome)?
            .map_err(|e| RpcFailure::Failed(ClientError::Api(e)))
    }

    /// Queues a lease release to ride on a later request of this pool (see
    /// [`PendingReleases`]); a timer sends what is still queued after [`RELEASE_LINGER`].
    pub(crate) fn defer_releases(self: &Arc<Self>, releases: Vec<ReleaseRequest>) {
        if self.releases.push(releases) {
            let pool = Arc::downgrade(self);
            tokio::spawn(async move {
                tokio::time::sleep(RELEASE_LINGER).await;
                if let Some(pool) = pool.upgrade() {
                    pool.flush_releases().await;
                }
            });
        }
    }

    /// Sends the queued releases now and waits for the server to have run them (so a request
    /// sent afterwards on any connection finds the leases released).
    pub(crate) async fn flush_releases(&self) {
        let _gate = self.releases.gate.lock().await;
        let releases = self.releases.take_all();
        if releases.is_empty() {
            return;
        }
        for chunk in releases.chunks(MAX_BATCH) {
            let count = chunk.len();
            let body = BatchRequestRef { items: chunk };
            let answered: Result<serde::de::IgnoredAny, _> =
                self.call_plain(RpcOp::BatchRelease, &body).await;
            if answered.is_err() {
                tracing::debug!(server = %self.addr, count, "lease releases lost; the leases expire at their deadline");
            }
        }
    }

    /// A call that carries no queued releases.
    async fn call_plain<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        op: RpcOp,
        body: &B,
    ) -> Result<T, RpcFailure> {
        let mut conn = self.connection().await?;
        let outcome = tokio::time::timeout(CALL_TIMEOUT, conn.call(&[], op, body)).await;
        self.finish(conn, outcome)?
            .map_err(|e| RpcFailure::Failed(ClientError::Api(e)))
    }

    /// Keeps the connection of an exchange that went through (or failed before sending
    /// anything) and turns a failure into the caller's error; a broken connection is dropped.
    fn finish<T>(
        &self,
        conn: RpcConn,
        outcome: Result<Result<T, CallFailure>, tokio::time::error::Elapsed>,
    ) -> Result<T, RpcFailure> {
        match outcome {
            Ok(Ok(done)) => {
                self.checkin(conn);
                Ok(done)
            }
            Ok(Err(CallFailure::Encode(e))) => {
                self.checkin(conn);
                Err(RpcFailure::Failed(ClientError::InvalidArgument(format!(
                    "cannot encode request: {e}"
                ))))
            }
            Ok(Err(CallFailure::Io(e))) => Err(RpcFailure::Failed(self.lost(e))),
            Ok(Err(CallFailure::Frame(e))) => Err(RpcFailure::Failed(ClientError::Protocol(
                format!("RPC answer from {}: {e}", self.addr),
            ))),
            Err(_) => Err(RpcFailure::Failed(self.lost(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no answer within {CALL_TIMEOUT:?}"),
            )))),
        }
    }
}

enum Discovery {
    Unknown,
    HttpOnly { since: Instant },
    Ready(Arc<RpcPool>),
}

/// Which transport the object operations use, found out once and shared by a client's clones.
pub(crate) struct RpcLink {
    state: Mutex<Discovery>,
    /// Presented in every connection's handshake.
    token: Option<BearerToken>,
    /// The client's TLS setup (with a CA file), for a listener that says `tls`.
    tls: Option<Arc<crescent_tls::ClientConfig>>,
}

impl std::fmt::Debug for RpcLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &*self.state.lock().expect("rpc link mutex") {
            Discovery::Unknown => "unknown".to_string(),
            Discovery::HttpOnly { .. } => "http-only".to_string(),
            Discovery::Ready(p) => format!("rpc {}", p.addr),
        };
        f.debug_struct("RpcLink").field("state", &state).finish()
    }
}

impl RpcLink {
    pub(crate) fn new(
        token: Option<BearerToken>,
        tls: Option<Arc<crescent_tls::ClientConfig>>,
    ) -> Self {
        Self {
            state: Mutex::new(Discovery::Unknown),
            token,
            tls,
        }
    }

    /// The pool to use, discovering the listener if not known yet; `None` means HTTP.
    pub(crate) async fn pool(&self, http: &HttpConn) -> Option<Arc<RpcPool>> {
        match &*self.state.lock().expect("rpc link mutex") {
            Discovery::Ready(p) => return Some(p.clone()),
            Discovery::HttpOnly { since } if since.elapsed() < RECHECK_HTTP_ONLY => return None,
            _ => {}
        }
        let found = match http.get::<RpcInfo>(&http.routes.rpc).await {
            Ok(info) => match (resolve(http, &info).await, self.tls_for(http, &info)) {
                (Some(addr), Ok(tls)) => {
                    let local = local_socket(http, &info);
                    let pool = RpcPool::new(addr, &info, self.token.clone(), tls, local);
                    Discovery::Ready(Arc::new(pool))
                }
                _ => Discovery::HttpOnly {
                    since: Instant::now(),
                },
            },
            Err(ClientError::Api(e)) if e.code == ErrorCode::NotFound => {
                tracing::debug!(server = http.server(), "no RPC fast path; using HTTP");
                Discovery::HttpOnly {
                    since: Instant::now(),
                }
            }
            // Unreachable or odd: decide later; the HTTP call reports the problem now.
            Err(e) => {
                tracing::debug!(server = http.server(), error = %e, "RPC discovery failed");
                return None;
            }
        };
        let mut state = self.state.lock().expect("rpc link mutex");
        if let Discovery::Ready(p) = &*state {
            return Some(p.clone()); // a concurrent discovery won
        }
        *state = found;
        match &*state {
            Discovery::Ready(p) => Some(p.clone()),
            _ => None,
        }
    }

    /// How to reach a listener that `info` describes: TLS when it says so, verified against
    /// the client's CA with the host the HTTP API was reached on. `Err` (stay on HTTP) when the
    /// listener speaks TLS and this client has no CA file.
    fn tls_for(&self, http: &HttpConn, info: &RpcInfo) -> Result<Option<RpcTls>, ()> {
        if !info.tls {
            return Ok(None);
        }
        let host = http.routes.healthz.host_str().unwrap_or_default();
        match self.tls.clone().and_then(|c| RpcTls::new(c, host)) {
            Some(tls) => Ok(Some(tls)),
            None => {
                tracing::warn!(
                    server = http.server(),
                    "the RPC listener speaks TLS and no CA file was given; using HTTP"
                );
                Err(())
            }
        }
    }

    /// Forgets the listener (it could not be reached): the next call discovers it again.
    pub(crate) fn forget(&self) {
        *self.state.lock().expect("rpc link mutex") = Discovery::Unknown;
    }
}

/// The server's local socket, when `info` names one and the HTTP API was reached on a
/// loopback address (so the server runs on this host; docs/api.md, "Local socket").
fn local_socket(http: &HttpConn, info: &RpcInfo) -> Option<std::path::PathBuf> {
    let path = info.local.as_deref()?;
    let host = http.routes.healthz.host_str()?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let loopback = host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    loopback.then(|| std::path::PathBuf::from(path))
}
