//! Spawning a real crescentd (and `crescent` processes) for the client's integration tests.
//! crescentd runs with `[auth]` on (a key in its dir) unless a test asks for open mode; the
//! harness gives the `crescent` processes it runs a token fitting their command
//! ([`auth::AuthKey::token_for_cli`]) and its library clients theirs.
#![allow(dead_code)]

pub mod auth;
pub mod cold;
pub mod cold_owner;

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use auth::AuthKey;
use crescent_client::{BearerToken, ClientOptions, CrescentClient};

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

/// The directory of the workspace binaries of this test's profile.
fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    let deps = exe.parent().expect("parent");
    if deps.file_name().is_some_and(|n| n == "deps") {
        deps.parent().expect("profile dir").to_path_buf()
    } else {
        deps.to_path_buf()
    }
}

/// crescentd: `CRESCENTD_BIN`, else built (a no-op when up to date) into this profile's dir.
pub fn crescentd_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("CRESCENTD_BIN") {
        return PathBuf::from(p);
    }
    static BUILD: std::sync::Once = std::sync::Once::new();
    BUILD.call_once(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        cmd.current_dir(root)
            .args(["build", "-p", "crescent-server", "--bin", "crescentd"]);
        if bin_dir().file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        let out = cmd.output().expect("running cargo build");
        assert!(
            out.status.success(),
            "building crescentd failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    });
    bin_dir().join("crescentd")
}

/// The `crescent` CLI: `CRESCENT_BIN` (e.g. an older build, to show a reproduction fails
/// there), else the one built with these tests.
pub fn crescent_bin() -> PathBuf {
    std::env::var_os("CRESCENT_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_crescent")))
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Waits until the crescentd just spawned (`proc`, logging to `log` from byte `log_from` on)
/// listens on `addr`: its own log says it bound the address, and the address answers. A
/// connect alone could reach another process that took the port between `free_port` and the
/// bind (an owner's transfer listener, another test's RPC listener), while ours failed to
/// bind. `false` when the child exited (port taken, crash): the caller tries another port.
fn wait_listening(proc: &mut Proc, addr: SocketAddr, log: &Path, log_from: u64) -> bool {
    use std::io::{Read, Seek, SeekFrom};
    let bound = format!("listening on: {addr}");
    let started = Instant::now();
    loop {
        if let Ok(Some(_)) = proc.0.try_wait() {
            return false;
        }
        let mut ours = String::new();
        if let Ok(mut f) = std::fs::File::open(log) {
            let _ = f.seek(SeekFrom::Start(log_from));
            let _ = f.read_to_string(&mut ours);
        }
        if ours.contains(&bound)
            && TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_ok()
        {
            return true;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "crescentd did not start:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Keeps actix's "listening on" line in crescentd's log (what [`wait_listening`] waits for)
/// when the tests run with a `RUST_LOG` of their own.
fn keep_bind_line(cmd: &mut Command) {
    if let Ok(filter) = std::env::var("RUST_LOG") {
        cmd.env("RUST_LOG", format!("{filter},actix_server=info"));
    }
}

fn log_len(log: &Path) -> u64 {
    std::fs::metadata(log).map(|m| m.len()).unwrap_or(0)
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

/// Records the harness key of the crescentd at `addr`, after checking that it refuses a
/// request without a token (a test meant to run with credentials cannot pass in open mode).
fn register_key(addr: SocketAddr, key: &AuthKey) {
    use std::io::{Read, Write};
    let mut s = TcpStream::connect(addr).unwrap();
    write!(s, "GET /v1/status HTTP/1.0\r\nHost: crescentd\r\n\r\n").unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    assert!(
        answer.starts_with("HTTP/1.0 401") || answer.starts_with("HTTP/1.1 401"),
        "crescentd on {addr} should run with [auth]: {answer}"
    );
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

/// `extra` with `--auth-secret-file DIR/auth.key` unless `open` or the test passes its own
/// key; the harness key, if any.
fn auth_args(dir: &Path, extra: &[String], open: bool) -> (Vec<String>, Option<AuthKey>) {
    if open || extra.iter().any(|a| a == "--auth-secret-file") {
        return (extra.to_vec(), None);
    }
    let key = AuthKey::at(&dir.join("auth.key"));
    let mut args = extra.to_vec();
    args.extend(key.server_args());
    (args, Some(key))
}

/// Starts crescentd on `<dir>/data` with `args` and `env` (its log appended to
/// `<dir>/crescentd.log`; `CRESCENT_CONFIG` and `CRESCENT_CRASH_AT` cleared unless `env` sets
/// them) on `fixed` or a free port, and waits until it listens; records `key` as its harness
/// key. The one place the cli tests spawn a long-running crescentd.
fn spawn_crescentd(
    dir: &Path,
    args: &[String],
    env: &[(&str, &str)],
    fixed: Option<SocketAddr>,
    key: Option<&AuthKey>,
) -> (SocketAddr, Proc) {
    let bin = crescentd_bin();
    let log_path = dir.join("crescentd.log");
    for _ in 0..5 {
        let addr: SocketAddr = fixed.unwrap_or_else(|| ([127, 0, 0, 1], free_port()).into());
        let log_from = log_len(&log_path);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .unwrap();
        let mut cmd = Command::new(&bin);
        keep_bind_line(&mut cmd);
        let child = cmd
            .arg("--data-dir")
            .arg(dir.join("data"))
            .arg("--listen")
            .arg(addr.to_string())
            .args(args)
            .env_remove("CRESCENT_CONFIG")
            .env_remove(crescent_crash::CRASH_AT_ENV)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("spawning crescentd");
        let mut proc = Proc(child);
        if wait_listening(&mut proc, addr, &log_path, log_from) {
            if let Some(k) = key {
                register_key(addr, k);
            }
            return (addr, proc);
        }
        drop(proc); // port taken or crash: try again, then report
    }
    panic!("crescentd would not start:\n{}", self_log(dir));
}

/// A running crescentd on a temporary data dir.
#[derive(Debug)]
pub struct Server {
    pub addr: SocketAddr,
    pub proc: Proc,
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
        self.restart(|proc, dir| {
            use std::os::unix::process::ExitStatusExt;
            let deadline = Instant::now() + Duration::from_secs(30);
            let status = loop {
                if let Some(status) = proc.0.try_wait().expect("waiting for crescentd") {
                    break status;
                }
                assert!(
                    Instant::now() < deadline,
                    "crescentd did not reach its crash point:\n{}",
                    self_log(dir)
                );
                std::thread::sleep(Duration::from_millis(20));
            };
            assert_eq!(status.signal(), Some(libc::SIGKILL), "{status}");
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
        self.restart(|proc, _| {
            proc.signal(libc::SIGTERM);
            let status = proc.0.wait().expect("waiting for crescentd");
            assert!(status.success(), "crescentd stopped with {status}");
        })
    }

    /// Ends this crescentd with `stop` (given its process and data dir; the process is then
    /// dropped, which kills it if it still runs) and starts it again, with its arguments but
    /// no crash point, on the same data dir and address.
    fn restart(self, stop: impl FnOnce(&mut Proc, &Path)) -> Server {
        let Server {
            addr,
            mut proc,
            dir,
            args,
            open,
            ..
        } = self;
        stop(&mut proc, dir.path());
        drop(proc);
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
        let (with_auth, key) = auth_args(dir.path(), &args, open);
        let (addr, proc) = spawn_crescentd(dir.path(), &with_auth, env, fixed, key.as_ref());
        Server {
            addr,
            proc,
            dir,
            args,
            key,
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
    pub proc: Proc,
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
        let mut args = Vec::new();
        if let Some(text) = config {
            let path = dir.join("crescentd.toml");
            std::fs::write(&path, text).unwrap();
            args = vec!["--config".to_string(), path.display().to_string()];
        }
        let (args, key) = auth_args(dir, &args, open);
        let (addr, proc) = spawn_crescentd(dir, &args, env, fixed, key.as_ref());
        DirNode {
            addr,
            proc,
            log: dir.join("crescentd.log"),
            key,
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

    /// Waits for the node to kill itself (fault injection: SIGKILL at a kill point).
    pub fn wait_killed(mut self) {
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = self.proc.0.try_wait() {
                use std::os::unix::process::ExitStatusExt;
                assert_eq!(status.signal(), Some(libc::SIGKILL), "{}", self.log());
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
    use std::io::{BufRead, BufReader};
    let mut cmd = Command::new(crescent_bin());
    cmd.env_remove("CRESCENT_TOKEN");
    if let Some(key) = key_of(server) {
        cmd.env("CRESCENT_TOKEN", key.owner(id));
    }
    let child = cmd
        .args([
            "--server", server, "--json", "owner", "--size", size, "--id", id,
        ])
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
