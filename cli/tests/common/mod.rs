//! The CLI's integration tests' view of a real crescentd (and the `crescent` processes they
//! run). crescentd is started by the shared harness, `crescent_testkit::crescentd`, on
//! `<dir>/data` with `[auth]` on (a key at `<dir>/auth.key`) unless a test asks for open mode;
//! this module gives the `crescent` processes it runs a token fitting their command
//! ([`auth::AuthKey::token_for_cli`]) and its library clients theirs.
#![allow(dead_code)]

pub mod cold;
pub mod cold_owner;
pub mod tenant;

pub use crescent_testkit::auth;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use auth::AuthKey;
use crescent_client::{BearerToken, ClientOptions, CrescentClient};
use crescent_testkit::crescentd::{Auth, CrescentdProcess, Launch, Probe};
use crescent_testkit::process::killed_by_sigkill;

/// A storage owner `id` of `size` bytes on `server` (a client with its owner token), and a
/// writer sharing its data plane (so its own segment is local) with a `client` token of the
/// default tenant: a process that is both a storage owner and an application.
pub async fn owner_and_writer(
    server: &str,
    id: &str,
    size: u64,
) -> (crescent_owner::Owner, CrescentClient) {
    let key = key_of(server);
    let owner_client = connect(with_token(
        ClientOptions::servers(server),
        key.as_ref().map(|k| k.owner(id)),
    ));
    let config = crescent_owner::OwnerConfig {
        owner_id: Some(id.to_string()),
        size,
        ..crescent_owner::OwnerConfig::default()
    };
    let owner = crescent_owner::Owner::start(&owner_client, config)
        .await
        .unwrap();
    let writer = match key {
        Some(k) => owner_client
            .with_token(BearerToken::new(k.client(auth::DEFAULT_TENANT)))
            .unwrap(),
        None => owner_client,
    };
    (owner, writer)
}

/// A library client of `server` in the default tenant (its harness token, if any).
pub fn client_of(server: &str) -> CrescentClient {
    let token = key_of(server).map(|k| k.client(auth::DEFAULT_TENANT));
    connect(with_token(ClientOptions::servers(server), token))
}

/// `req` with a `client` token of the default tenant of `server`'s crescentd, if it has a
/// harness key: an application's raw HTTP call.
pub fn as_client(req: reqwest::RequestBuilder, server: &str) -> reqwest::RequestBuilder {
    match key_of(server) {
        Some(k) => req.bearer_auth(k.client(auth::DEFAULT_TENANT)),
        None => req,
    }
}

/// `req` with the admin token of `url`'s crescentd (`http://HOST:PORT/...`), if it has one:
/// the harness's own HTTP calls (metrics of protected routes, status, snapshots).
pub fn as_admin(req: reqwest::RequestBuilder, server: &str) -> reqwest::RequestBuilder {
    match key_of(server) {
        Some(k) => req.bearer_auth(k.admin()),
        None => req,
    }
}

/// A client of a static server list (nothing is contacted, so no runtime is needed).
pub fn connect(options: ClientOptions) -> CrescentClient {
    futures::executor::block_on(CrescentClient::connect(options)).unwrap()
}

/// `options` sending `token` with every request (open mode: none).
pub fn with_token(options: ClientOptions, token: Option<String>) -> ClientOptions {
    match token {
        Some(t) => options.with_token(BearerToken::new(t)),
        None => options,
    }
}

/// crescentd: `CRESCENTD_BIN`, else built (a no-op when up to date) into this profile's dir.
pub fn crescentd_bin() -> PathBuf {
    crescent_testkit::binaries::crescentd_bin()
}

/// The `crescent` CLI: `CRESCENT_BIN` (e.g. an older build, to show a reproduction fails
/// there), else the one built with these tests (also for the harness's `crescent token issue`).
pub fn crescent_bin() -> PathBuf {
    crescent_testkit::binaries::use_crescent_bin(Path::new(env!("CARGO_BIN_EXE_crescent")));
    crescent_testkit::binaries::crescent_bin()
}

/// A child process killed (SIGKILL) when dropped.
#[derive(Debug)]
pub struct Proc(pub Child);

impl Proc {
    pub fn signal(&self, sig: libc::c_int) {
        // SAFETY: kill(2) on our own child's pid has no memory-safety preconditions.
        #[allow(unsafe_code)]
        unsafe {
            libc::kill(self.0.id() as libc::pid_t, sig);
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The keys of the crescentd processes the harness started with its own key, by address:
/// how [`crescent`] and [`start_owner`], which are given an address, find their token.
static KEYS: std::sync::Mutex<Vec<(String, AuthKey)>> = std::sync::Mutex::new(Vec::new());

/// Records the harness key of the crescentd at `addr` (the launch checked that it refuses a
/// request without a token: a test meant to run with credentials cannot pass in open mode).
fn register_key(addr: SocketAddr, key: &AuthKey) {
    let mut keys = KEYS.lock().unwrap();
    keys.retain(|(a, _)| *a != addr.to_string());
    keys.push((addr.to_string(), key.clone()));
}

/// The harness key of the crescentd at `server` (`None`: open mode, or a test that runs
/// `[auth]` itself and passes its own tokens).
pub fn key_of(server: &str) -> Option<AuthKey> {
    let keys = KEYS.lock().unwrap();
    keys.iter()
        .find(|(a, _)| server.split(',').any(|s| s == a))
        .map(|(_, k)| k.clone())
}

/// How the harness runs `[auth]` for a node in `dir` started with `extra`: its key file
/// `<dir>/auth.key`, unless `open` or the test passes its own key.
fn auth_mode(dir: &Path, extra: &[String], open: bool) -> Auth {
    if open {
        Auth::Open
    } else if extra.iter().any(|a| a == "--auth-secret-file") {
        Auth::Own
    } else {
        Auth::File(dir.join("auth.key"))
    }
}

/// Starts crescentd on `<dir>/data` with `args`, `config` (TOML text, written to
/// `<dir>/crescentd.toml` and passed with `--config`) when given, and `env` (its log appended to
/// `<dir>/crescentd.log`; `CRESCENT_CONFIG` and `CRESCENT_CRASH_AT` cleared unless `env` sets
/// them) on `fixed` or a free port, through the shared harness; records its harness key. The
/// one place the cli tests spawn a long-running crescentd. Readiness is the bind line in its
/// log and a connect (a plain `/healthz` cannot probe a node whose config file sets `[tls]`).
fn spawn_crescentd(
    dir: &Path,
    args: &[String],
    config: Option<&str>,
    env: &[(&str, &str)],
    fixed: Option<SocketAddr>,
    auth: Auth,
) -> CrescentdProcess {
    let mut launch = Launch::new(
        &crescentd_bin(),
        &dir.join("data"),
        &dir.join("crescentd.log"),
    )
    .with_args(args)
    .with_env(env)
    .with_auth(auth)
    .probed_by(Probe::Connect);
    if let Some(addr) = fixed {
        launch = launch.at(addr);
    }
    if let Some(text) = config {
        launch = launch.with_config(&dir.join("crescentd.toml"), text);
    }
    let node = CrescentdProcess::launch(&launch)
        .unwrap_or_else(|e| panic!("crescentd would not start: {e}"));
    if let Some(key) = &node.auth {
        register_key(node.addr, key);
    }
    node
}

/// A running crescentd on a temporary data dir.
#[derive(Debug)]
pub struct Server {
    pub addr: SocketAddr,
    pub node: CrescentdProcess,
    pub dir: tempfile::TempDir,
    args: Vec<String>,
    /// The harness's key (`None` in open mode, or when the test passed its own).
    pub key: Option<AuthKey>,
    open: bool,
}

impl Server {
    pub fn start() -> Server {
        Self::start_with(&[])
    }

    pub fn start_with(extra: &[&str]) -> Server {
        Self::launch(extra, None, false)
    }

    /// [`Server::start_with`] in open mode (no `[auth]`): only for tests whose subject is
    /// open mode or that cannot run with credentials (each says why).
    pub fn start_open_with(extra: &[&str]) -> Server {
        Self::launch(extra, None, true)
    }

    /// A fresh node on a given HTTP address (e.g. where a stopped one listened), with the key
    /// of the node that listened there (the same deployment: its clients' tokens stay valid).
    pub fn start_at(addr: &str) -> Server {
        let dir = tempfile::tempdir().unwrap();
        if let Some(key) = key_of(addr) {
            key.write_to(&dir.path().join("auth.key"));
        }
        Self::launch_in(dir, &[], Some(addr.parse().expect("HOST:PORT")), false, &[])
    }

    fn launch(extra: &[&str], fixed: Option<SocketAddr>, open: bool) -> Server {
        Self::launch_in(tempfile::tempdir().unwrap(), extra, fixed, open, &[])
    }

    /// [`Server::start_with`], armed to SIGKILL itself the first time it reaches the crash
    /// point `point` (`crescent_crash`, docs/testing.md).
    pub fn start_crashing_at(extra: &[&str], point: &str) -> Server {
        let env = [(crescent_crash::CRASH_AT_ENV, point)];
        Self::launch_in(tempfile::tempdir().unwrap(), extra, None, false, &env)
    }

    /// Waits for this crescentd to have killed itself at its crash point (SIGKILL), then
    /// starts it again, unarmed, on the same data dir and address.
    pub fn restart_after_crash(self) -> Server {
        self.restart(|node, dir| {
            let deadline = Instant::now() + Duration::from_secs(30);
            let status = loop {
                if let Some(status) = node.guard.try_exit_status() {
                    break status;
                }
                assert!(
                    Instant::now() < deadline,
                    "crescentd did not reach its crash point:\n{}",
                    self_log(dir)
                );
                std::thread::sleep(Duration::from_millis(20));
            };
            assert!(killed_by_sigkill(&status), "{status}");
        })
    }

    /// An `admin` token of this node (`None` without a harness key).
    pub fn admin_token(&self) -> Option<String> {
        self.key.as_ref().map(AuthKey::admin)
    }

    /// A `client` token of `tenant` (`None` without a harness key).
    pub fn client_token(&self, tenant: &str) -> Option<String> {
        self.key.as_ref().map(|k| k.client(tenant))
    }

    /// An `owner` token for `owner` (`None` without a harness key).
    pub fn owner_token(&self, owner: &str) -> Option<String> {
        self.key.as_ref().map(|k| k.owner(owner))
    }

    /// Client options for this node with `token` (open mode: none).
    pub fn options_with(&self, token: Option<String>) -> ClientOptions {
        with_token(ClientOptions::servers(&self.server()), token)
    }

    /// A library client of the default tenant.
    pub fn client(&self) -> CrescentClient {
        connect(self.options_with(self.client_token(auth::DEFAULT_TENANT)))
    }

    /// A library client holding the owner token of `owner`, for a [`crescent_owner::Owner`]
    /// started with that owner id.
    pub fn owner_client(&self, owner: &str) -> CrescentClient {
        connect(self.options_with(self.owner_token(owner)))
    }

    /// A library client holding the admin token (operator calls).
    pub fn admin_client(&self) -> CrescentClient {
        connect(self.options_with(self.admin_token()))
    }

    /// SIGKILLs this crescentd and starts it again on the same data dir and address.
    pub fn kill_and_restart(self) -> Server {
        // Dropping the process kills it.
        self.restart(|_, _| {})
    }

    /// Stops this crescentd cleanly (SIGTERM, waits for its exit) and starts it again on the
    /// same data dir and address.
    pub fn terminate_and_restart(self) -> Server {
        self.restart(|node, _| {
            node.guard.signal(libc::SIGTERM);
            let status = node.guard.wait();
            assert!(status.success(), "crescentd stopped with {status}");
        })
    }

    /// Ends this crescentd with `stop` (given its process and data dir; the process is then
    /// dropped, which kills it if it still runs) and starts it again, with its arguments but
    /// no crash point, on the same data dir and address.
    fn restart(self, stop: impl FnOnce(&mut CrescentdProcess, &Path)) -> Server {
        let Server {
            addr,
            mut node,
            dir,
            args,
            open,
            ..
        } = self;
        stop(&mut node, dir.path());
        drop(node);
        let extra: Vec<&str> = args.iter().map(String::as_str).collect();
        Self::launch_in(dir, &extra, Some(addr), open, &[])
    }

    fn launch_in(
        dir: tempfile::TempDir,
        extra: &[&str],
        fixed: Option<SocketAddr>,
        open: bool,
        env: &[(&str, &str)],
    ) -> Server {
        let args: Vec<String> = extra.iter().map(|a| a.to_string()).collect();
        let auth = auth_mode(dir.path(), &args, open);
        let node = spawn_crescentd(dir.path(), &args, None, env, fixed, auth);
        Server {
            addr: node.addr,
            key: node.auth.clone(),
            node,
            dir,
            args,
            open,
        }
    }

    pub fn server(&self) -> String {
        self.addr.to_string()
    }

    /// Waits until the rebuild gate is SERVING (every owner replayed its table into this
    /// crescentd after a restart).
    pub fn wait_serving(&self) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let client = self.client();
        let started = Instant::now();
        loop {
            let state = rt.block_on(client.rebuild_status()).map(|s| s.state);
            if matches!(state, Ok(crescent_wire::rebuild::GateState::Serving)) {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "gate not SERVING within 60 s (last: {state:?})\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn log(&self) -> String {
        self_log(self.dir.path())
    }
}

fn self_log(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("crescentd.log")).unwrap_or_default()
}

/// Parses a CLI's JSON output, showing it when it is not JSON.
pub fn json(out: &[u8]) -> serde_json::Value {
    serde_json::from_slice(out).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(out)))
}

/// Polls `crescent get` of `tenant`'s `key` until it answers (after a restart, once the owner
/// replayed its table into crescentd).
pub fn wait_readable(server: &str, tenant: &str, key: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (code, _, err) = crescent(server, &["--tenant", tenant, "get", key], None);
        if code == 0 {
            return;
        }
        assert!(Instant::now() < deadline, "{key} never readable: {err}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Runs `crescent --server S ARGS...`, returning (exit code, stdout, stderr). Unless `args`
/// carry a `--token`, it gets the token its command needs from the harness key of `S`.
pub fn crescent(server: &str, args: &[&str], stdin: Option<&[u8]>) -> (i32, Vec<u8>, String) {
    use std::io::Write;
    let mut cmd = Command::new(crescent_bin());
    cmd.env_remove("CRESCENT_TOKEN");
    if let Some(key) = key_of(server).filter(|_| !args.contains(&"--token")) {
        cmd.env("CRESCENT_TOKEN", key.token_for_cli(args));
    }
    let mut child = cmd
        .arg("--server")
        .arg(server)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning crescent");
    if let Some(input) = stdin {
        child.stdin.take().unwrap().write_all(input).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        out.stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A crescentd on a data dir that outlives it (`<dir>/data`: restarts and SIGKILL tests
/// reuse it), its log appended to `<dir>/crescentd.log`. Shared by the cold-tier and the
/// managed-weight end-to-end tests.
#[derive(Debug)]
pub struct DirNode {
    pub addr: SocketAddr,
    pub node: CrescentdProcess,
    pub log: PathBuf,
    /// The harness's key (`<dir>/auth.key`; `None` in open mode).
    pub key: Option<AuthKey>,
}

impl DirNode {
    /// Starts crescentd on `<dir>/data` with `config` (TOML text, written to
    /// `<dir>/crescentd.toml` and passed with `--config`) when given, and extra environment.
    /// `CRESCENT_CRASH_AT` is cleared unless `env` sets it.
    pub fn start(dir: &Path, config: Option<&str>, env: &[(&str, &str)]) -> DirNode {
        Self::start_at(dir, config, env, None)
    }

    /// [`DirNode::start`] on a given address (a restart where storage owners, which follow
    /// the address they were given, find it again), or a free port when `None`.
    pub fn start_at(
        dir: &Path,
        config: Option<&str>,
        env: &[(&str, &str)],
        fixed: Option<SocketAddr>,
    ) -> DirNode {
        Self::launch(dir, config, env, fixed, false)
    }

    /// [`DirNode::start_at`] in open mode (no `[auth]`): only for tests that cannot run with
    /// credentials (each says why).
    pub fn start_open_at(
        dir: &Path,
        config: Option<&str>,
        env: &[(&str, &str)],
        fixed: Option<SocketAddr>,
    ) -> DirNode {
        Self::launch(dir, config, env, fixed, true)
    }

    fn launch(
        dir: &Path,
        config: Option<&str>,
        env: &[(&str, &str)],
        fixed: Option<SocketAddr>,
        open: bool,
    ) -> DirNode {
        let auth = auth_mode(dir, &[], open);
        let node = spawn_crescentd(dir, &[], config, env, fixed, auth);
        DirNode {
            addr: node.addr,
            log: dir.join("crescentd.log"),
            key: node.auth.clone(),
            node,
        }
    }

    pub fn s(&self) -> String {
        self.addr.to_string()
    }

    /// Client options for this node with `token` (open mode: none).
    pub fn options_with(&self, token: Option<String>) -> ClientOptions {
        with_token(ClientOptions::servers(&self.s()), token)
    }

    /// A library client of the default tenant.
    pub fn client(&self) -> CrescentClient {
        let token = self.key.as_ref().map(|k| k.client(auth::DEFAULT_TENANT));
        connect(self.options_with(token))
    }

    /// A library client holding the owner token of `owner`.
    pub fn owner_client(&self, owner: &str) -> CrescentClient {
        connect(self.options_with(self.key.as_ref().map(|k| k.owner(owner))))
    }

    /// A library client holding the admin token (operator calls: cold tier, weights).
    pub fn admin_client(&self) -> CrescentClient {
        connect(self.options_with(self.key.as_ref().map(AuthKey::admin)))
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGKILLs this crescentd (without waiting: [`DirNode::wait_killed`] or dropping the
    /// node reaps it).
    pub fn kill9(&self) {
        let pid = libc::pid_t::try_from(self.node.guard.pid()).expect("pid fits pid_t");
        // SAFETY: kill(2) only takes integers; `pid` is our own child, reaped only by this
        // node's guard, so it cannot name an unrelated process.
        #[allow(unsafe_code)]
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
    }

    /// Waits for the node to kill itself (fault injection: SIGKILL at a kill point).
    pub fn wait_killed(mut self) {
        let started = Instant::now();
        loop {
            if let Some(status) = self.node.guard.try_exit_status() {
                assert!(killed_by_sigkill(&status), "{status}: {}", self.log());
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "crescentd did not reach its kill point:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A `crescent owner` process serving a segment of `size` (e.g. "16M") as owner `id`; ready
/// once it printed its ready line (JSON: segment_id, size, ...).
pub fn start_owner(server: &str, id: &str, size: &str) -> (Proc, String) {
    let token = key_of(server).map(|key| key.owner(id));
    let args = ["--json", "owner", "--size", size, "--id", id];
    spawn_owner(server, &args, &[], token)
}

/// `crescent --server S ARGS` (an `owner` command line) with `env` and, when given, `token`
/// as its CRESCENT_TOKEN; returns the process once it printed its ready line, and that line.
pub fn spawn_owner(
    server: &str,
    args: &[&str],
    env: &[(&str, String)],
    token: Option<String>,
) -> (Proc, String) {
    use std::io::{BufRead, BufReader};
    let mut cmd = Command::new(crescent_bin());
    cmd.env_remove("CRESCENT_TOKEN");
    if let Some(token) = token {
        cmd.env("CRESCENT_TOKEN", token);
    }
    let child = cmd
        .envs(env.iter().map(|(k, v)| (*k, v)))
        .arg("--server")
        .arg(server)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawning crescent owner");
    let mut proc = Proc(child);
    let mut lines = BufReader::new(proc.0.stdout.take().unwrap()).lines();
    let ready = lines.next().expect("owner ready line").unwrap();
    // Keep draining its stdout so it never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    (proc, ready)
}
