//! Running a real `crescentd` on a data dir: the one place the tests start it. It runs with
//! `[auth]` on unless a test asks for open mode ([`Auth`]); the harness issues the tokens.
//! [`Launch`] names everything a start can vary (arguments, a config file, environment, a fixed
//! address for a restart, the descriptor limit, how readiness is probed); the `start*`
//! functions are its common cases.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::auth::AuthKey;
use crate::process::{free_local_port, kill_with_parent, ChildGuard};
pub use crate::segments_api::{ApiError, ListedSegment, Outcome, SegmentListing, SegmentsClient};

/// The fault-injection variable of `crescent_crash` (docs/testing.md): cleared for every
/// start unless the launch sets it, so a test's own environment never arms a crash point.
const CRASH_AT_ENV: &str = crescent_crash::CRASH_AT_ENV;

/// How long a starting crescentd may take to answer `/healthz` (it recovers its journal first).
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// A running crescentd, SIGKILLed when dropped.
#[derive(Debug)]
pub struct CrescentdProcess {
    pub guard: ChildGuard,
    pub addr: SocketAddr,
    pub log_path: PathBuf,
    /// From spawn to serving (the bind line in its log and the probe answered).
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
    /// `[auth]` on with the key file at this path (made when absent, kept for restarts):
    /// like `Default`, the node is checked to refuse a request without a token.
    File(PathBuf),
    /// `[auth]` on with this key (both nodes of an HA pair load the same one; a standby
    /// answers some routes without a token, so nothing is checked).
    Key(AuthKey),
    /// The test passes its own `--auth-secret-file` and tokens: the harness holds no key.
    Own,
    /// Open mode: only for tests whose subject is running without `[auth]` (the caller says
    /// why).
    Open,
}

impl Auth {
    /// The key this mode runs with for crescentd on `data_dir`, if any.
    fn key(&self, data_dir: &Path) -> Option<AuthKey> {
        match self {
            Auth::Default => Some(AuthKey::at(&data_dir.with_extension("key"))),
            Auth::File(path) => Some(AuthKey::at(path)),
            Auth::Key(k) => Some(k.clone()),
            Auth::Own | Auth::Open => None,
        }
    }
}

/// How a start decides that crescentd serves, once its log says it bound the address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// `GET /healthz` over plain HTTP answers 200: the default.
    Healthz,
    /// The address accepts a TCP connection: for listeners a plain request cannot probe
    /// (`[tls]` set in a config file).
    Connect,
}

/// One start of crescentd: `bin --data-dir DATA_DIR --listen ADDR ARGS...`, its output appended
/// to `log_path`. Built with [`Launch::new`] and the `with_*` setters, run by
/// [`CrescentdProcess::launch`].
#[derive(Debug, Clone)]
pub struct Launch {
    pub bin: PathBuf,
    pub data_dir: PathBuf,
    pub log_path: PathBuf,
    /// Extra arguments; `{listen}` in one becomes the address.
    pub args: Vec<String>,
    /// Extra environment. `CRESCENT_CONFIG` and the crash-point variable are cleared unless
    /// set here.
    pub env: Vec<(String, String)>,
    pub auth: Auth,
    /// A fixed address (a restart that owners and writers, which follow the address they were
    /// given, find again); a free port when `None`.
    pub addr: Option<SocketAddr>,
    /// The child's RLIMIT_NOFILE (soft and hard) when set.
    pub nofile: Option<u64>,
    pub probe: Probe,
}

impl Launch {
    /// A start of `bin` on `data_dir` logging to `log_path`, with `[auth]` on
    /// ([`Auth::Default`]), on a free port, probed by `/healthz`.
    pub fn new(bin: &Path, data_dir: &Path, log_path: &Path) -> Launch {
        Launch {
            bin: bin.to_path_buf(),
            data_dir: data_dir.to_path_buf(),
            log_path: log_path.to_path_buf(),
            args: Vec::new(),
            env: Vec::new(),
            auth: Auth::Default,
            addr: None,
            nofile: None,
            probe: Probe::Healthz,
        }
    }

    pub fn with_args(mut self, args: &[String]) -> Launch {
        self.args.extend_from_slice(args);
        self
    }

    /// Writes `toml` to `path` and passes it with `--config`.
    pub fn with_config(mut self, path: &Path, toml: &str) -> Launch {
        std::fs::write(path, toml)
            .unwrap_or_else(|e| panic!("writing config {}: {e}", path.display()));
        self.args
            .extend(["--config".to_string(), path.display().to_string()]);
        self
    }

    pub fn with_env(mut self, env: &[(&str, &str)]) -> Launch {
        self.env
            .extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        self
    }

    /// Arms crash point `point` (`crescent_crash`, docs/testing.md): the process SIGKILLs
    /// itself the first time it reaches it.
    pub fn crashing_at(self, point: &str) -> Launch {
        self.with_env(&[(CRASH_AT_ENV, point)])
    }

    pub fn with_auth(mut self, auth: Auth) -> Launch {
        self.auth = auth;
        self
    }

    pub fn at(mut self, addr: SocketAddr) -> Launch {
        self.addr = Some(addr);
        self
    }

    pub fn with_nofile(mut self, nofile: Option<u64>) -> Launch {
        self.nofile = nofile;
        self
    }

    pub fn probed_by(mut self, probe: Probe) -> Launch {
        self.probe = probe;
        self
    }
}

impl CrescentdProcess {
    /// Starts crescentd as `launch` says and waits until it serves (its log says it bound the
    /// address and [`Launch::probe`] succeeds). On a free port it retries with another port
    /// when the chosen one was taken meanwhile; on a fixed address it retries for a few
    /// seconds while the address is still taken. Any other early exit fails with the log's
    /// tail. With [`Auth::Default`] and [`Auth::File`] it checks that the node refuses a request without a token.
    pub fn launch(launch: &Launch) -> Result<CrescentdProcess, String> {
        let key = launch.auth.key(&launch.data_dir);
        let args = with_auth_args(&launch.args, key.as_ref());
        let attempts = if launch.addr.is_some() { 20 } else { 5 };
        let mut last_err = String::new();
        for _attempt in 0..attempts {
            let addr = launch
                .addr
                .unwrap_or_else(|| ([127, 0, 0, 1], free_local_port()).into());
            match Self::start_once(launch, &args, addr) {
                Ok(p) if matches!(launch.auth, Auth::Default | Auth::File(_)) => {
                    return Ok(p.with_key(key).assert_refuses_anonymous())
                }
                Ok(p) => return Ok(p.with_key(key)),
                Err(StartError::PortTaken(e)) => last_err = e,
                Err(StartError::Failed(e)) => return Err(e),
            }
            if launch.addr.is_some() {
                std::thread::sleep(Duration::from_millis(250));
            }
        }
        Err(match launch.addr {
            Some(addr) => format!("{addr} stayed taken: {last_err}"),
            None => format!("no free port after {attempts} attempts: {last_err}"),
        })
    }

    /// Starts `bin --data-dir DATA_DIR --listen 127.0.0.1:PORT EXTRA...` on a free port with
    /// `[auth]` on ([`Auth::Default`]), logging to `log_path` ([`CrescentdProcess::launch`]).
    pub fn start(
        bin: &Path,
        data_dir: &Path,
        log_path: &Path,
        extra_args: &[String],
    ) -> Result<CrescentdProcess, String> {
        Self::launch(&Launch::new(bin, data_dir, log_path).with_args(extra_args))
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
        let launch = Launch::new(bin, data_dir, log_path)
            .with_args(extra_args)
            .with_nofile(nofile)
            .with_auth(auth);
        Self::launch(&launch)
    }

    /// [`CrescentdProcess::start`] on a given address: a restart that storage owners and
    /// writers, which follow the address they were given, find again.
    pub fn start_at(
        bin: &Path,
        data_dir: &Path,
        log_path: &Path,
        extra_args: &[String],
        addr: SocketAddr,
    ) -> Result<CrescentdProcess, String> {
        Self::launch(
            &Launch::new(bin, data_dir, log_path)
                .with_args(extra_args)
                .at(addr),
        )
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
        launch: &Launch,
        args: &[String],
        addr: SocketAddr,
    ) -> Result<CrescentdProcess, StartError> {
        let log_from = std::fs::metadata(&launch.log_path).map_or(0, |m| m.len());
        let mut cmd = Self::command(launch, args, addr)?;
        let started = Instant::now();
        let child = cmd
            .spawn()
            .map_err(|e| StartError::Failed(format!("spawning {}: {e}", launch.bin.display())))?;
        let mut guard = ChildGuard::new(format!("crescentd on {addr}"), child);
        Self::wait_serving(launch, &mut guard, addr, log_from)?;
        Ok(CrescentdProcess {
            guard,
            addr,
            log_path: launch.log_path.clone(),
            startup: started.elapsed(),
            auth: None,
        })
    }

    /// The command line and environment of one start on `addr`, output appended to the log.
    fn command(launch: &Launch, args: &[String], addr: SocketAddr) -> Result<Command, StartError> {
        let log_path = &launch.log_path;
        let log_err =
            |e: std::io::Error| StartError::Failed(format!("log {}: {e}", log_path.display()));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log_path)
            .map_err(log_err)?;
        let mut cmd = Command::new(&launch.bin);
        keep_bind_line(&mut cmd);
        cmd.arg("--data-dir")
            .arg(&launch.data_dir)
            .arg("--listen")
            .arg(addr.to_string())
            .args(
                args.iter()
                    .map(|a| a.replace("{listen}", &addr.to_string())),
            )
            .env_remove("CRESCENT_CONFIG")
            .env_remove(CRASH_AT_ENV)
            .envs(launch.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone().map_err(log_err)?))
            .stderr(Stdio::from(log));
        kill_with_parent(&mut cmd);
        if let Some(n) = launch.nofile {
            limit_descriptors(&mut cmd, n);
        }
        Ok(cmd)
    }

    /// Waits until the crescentd just spawned serves on `addr`: its own log (from byte
    /// `log_from` on) says it bound the address, and the probe succeeds. A probe alone could
    /// reach another process that took the port between picking it and the bind (an owner's
    /// transfer listener, another test's crescentd) while ours failed to bind.
    fn wait_serving(
        launch: &Launch,
        guard: &mut ChildGuard,
        addr: SocketAddr,
        log_from: u64,
    ) -> Result<(), StartError> {
        let bound = format!("listening on: {addr}");
        let started = Instant::now();
        loop {
            if let Some(status) = guard.try_exit_status() {
                let ours = log_since(&launch.log_path, log_from);
                let msg = format!(
                    "crescentd exited ({status}) before serving on {addr}; log {}:\n{}",
                    launch.log_path.display(),
                    log_tail(&launch.log_path, 40)
                );
                return Err(if ours.contains("in use") {
                    StartError::PortTaken(msg)
                } else {
                    StartError::Failed(msg)
                });
            }
            if log_since(&launch.log_path, log_from).contains(&bound) && probe(launch.probe, addr) {
                return Ok(());
            }
            if started.elapsed() > READY_TIMEOUT {
                return Err(StartError::Failed(format!(
                    "crescentd on {addr} did not serve ({:?}) within {READY_TIMEOUT:?}; log:\n{}",
                    launch.probe,
                    log_tail(&launch.log_path, 40)
                )));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// Whether `addr` passes `probe`.
fn probe(probe: Probe, addr: SocketAddr) -> bool {
    match probe {
        Probe::Healthz => matches!(http_status(addr, "/healthz"), Ok(200)),
        Probe::Connect => TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_ok(),
    }
}

/// Keeps actix's "listening on" line in crescentd's log (what readiness waits for) when the
/// tests run with a `RUST_LOG` of their own.
fn keep_bind_line(cmd: &mut Command) {
    if let Ok(filter) = std::env::var("RUST_LOG") {
        cmd.env("RUST_LOG", format!("{filter},actix_server=info"));
    }
}

/// What the log at `path` gained from byte `from` on (this start's part of an appended log).
fn log_since(path: &Path, from: u64) -> String {
    use std::io::Seek;
    let mut text = String::new();
    if let Ok(mut f) = std::fs::File::open(path) {
        if f.seek(std::io::SeekFrom::Start(from)).is_ok() {
            let _ = f.read_to_string(&mut text);
        }
    }
    text
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
