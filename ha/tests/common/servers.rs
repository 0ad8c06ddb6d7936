//! Coordination servers owned by one test: an etcd or a redis-server on free loopback ports,
//! which the test may restart (same port) or freeze (SIGSTOP) without disturbing the shared
//! ones. Each runs under a small shell holding a pipe from this process: if the test binary
//! dies, the pipe closes and the shell kills the server and removes its directory.

use std::io::{BufRead, BufReader};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use crescent_ha::CoordinationEndpoint;

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind a loopback port")
        .port()
}

/// What the conformance suite needs from a server: where it is, and how to disturb it.
pub trait ServerUnderTest: Send {
    /// `etcd` or `redis`, as the backend's metric label.
    fn backend(&self) -> &'static str;
    fn endpoint(&self) -> CoordinationEndpoint;
    /// Kills the server (SIGKILL) and starts it again on the same port: etcd on its data
    /// directory, redis-server without persistence (so it comes back empty).
    fn restart(&mut self);
    /// SIGSTOP: the server holds its connections open but answers nothing.
    fn freeze(&self);
    /// SIGCONT.
    fn thaw(&self);
}

/// One server process under its lifeline shell.
struct Launched {
    pid: i32,
    _shell: Child,
    _lifeline: ChildStdin,
}

impl Launched {
    /// Runs `command` (a shell command line using "$1" for the directory) in the background,
    /// waits until `port` accepts connections.
    fn start(dir: &Path, command: &str, port: u16) -> Launched {
        let script = format!(
            "{command} >>\"$1/server.log\" 2>&1 &\npid=$!\necho $pid\nread -r _ignored\n\
             kill -9 \"$pid\" 2>/dev/null; wait \"$pid\" 2>/dev/null\n"
        );
        let mut shell = Command::new("sh")
            .arg("-c")
            .arg(script)
            .arg("sh")
            .arg(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("run sh");
        let mut line = String::new();
        BufReader::new(shell.stdout.take().expect("piped"))
            .read_line(&mut line)
            .expect("server launcher");
        let pid: i32 = line.trim().parse().expect("the launcher prints the pid");
        let lifeline = shell.stdin.take().expect("piped");
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "{command} did not listen on {port} within 20 s; log:\n{}",
                std::fs::read_to_string(dir.join("server.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Launched {
            pid,
            _shell: shell,
            _lifeline: lifeline,
        }
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid.to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} {}", self.pid);
    }

    /// SIGKILL, then waits until the process is gone (its port is free again).
    fn kill(&self) {
        self.signal("KILL");
        let proc_dir = PathBuf::from(format!("/proc/{}", self.pid));
        let started = Instant::now();
        // The shell reaps it only at its own end; a zombie no longer holds the port.
        while proc_dir.exists()
            && !std::fs::read_to_string(proc_dir.join("stat"))
                .unwrap_or_default()
                .contains(") Z ")
        {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "server survived SIGKILL"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// A redis-server on a free loopback port, without persistence (`--save "" --appendonly no`).
pub struct OwnedRedis {
    dir: tempfile::TempDir,
    port: u16,
    process: Launched,
}

impl OwnedRedis {
    pub fn start() -> OwnedRedis {
        let dir = tempfile::Builder::new()
            .prefix("crescent-ha-redis")
            .tempdir()
            .expect("temp dir");
        let port = free_port();
        let process = Self::launch(dir.path(), port);
        OwnedRedis { dir, port, process }
    }

    fn launch(dir: &Path, port: u16) -> Launched {
        let command = format!(
            "redis-server --bind 127.0.0.1 --port {port} --save '' --appendonly no --dir \"$1\""
        );
        Launched::start(dir, &command, port)
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl ServerUnderTest for OwnedRedis {
    fn backend(&self) -> &'static str {
        "redis"
    }

    fn endpoint(&self) -> CoordinationEndpoint {
        CoordinationEndpoint::Redis(self.url())
    }

    fn restart(&mut self) {
        self.process.kill();
        self.process = Self::launch(self.dir.path(), self.port);
    }

    fn freeze(&self) {
        self.process.signal("STOP");
    }

    fn thaw(&self) {
        self.process.signal("CONT");
    }
}

/// A single-member etcd on free loopback ports, with its data directory kept across restarts.
pub struct OwnedEtcd {
    dir: tempfile::TempDir,
    client_port: u16,
    peer_port: u16,
    process: Launched,
}

impl OwnedEtcd {
    pub fn start() -> OwnedEtcd {
        let dir = tempfile::Builder::new()
            .prefix("crescent-ha-etcd-owned")
            .tempdir()
            .expect("temp dir");
        let (client_port, peer_port) = (free_port(), free_port());
        let process = Self::launch(dir.path(), client_port, peer_port);
        OwnedEtcd {
            dir,
            client_port,
            peer_port,
            process,
        }
    }

    fn launch(dir: &Path, client: u16, peer: u16) -> Launched {
        let (c, p) = (
            format!("http://127.0.0.1:{client}"),
            format!("http://127.0.0.1:{peer}"),
        );
        let command = format!(
            "etcd --name owned --data-dir \"$1/data\" --listen-client-urls {c} \
             --advertise-client-urls {c} --listen-peer-urls {p} \
             --initial-advertise-peer-urls {p} --initial-cluster owned={p}"
        );
        Launched::start(dir, &command, client)
    }
}

impl ServerUnderTest for OwnedEtcd {
    fn backend(&self) -> &'static str {
        "etcd"
    }

    fn endpoint(&self) -> CoordinationEndpoint {
        CoordinationEndpoint::Etcd(vec![format!("http://127.0.0.1:{}", self.client_port)])
    }

    fn restart(&mut self) {
        self.process.kill();
        self.process = Self::launch(self.dir.path(), self.client_port, self.peer_port);
    }

    fn freeze(&self) {
        self.process.signal("STOP");
    }

    fn thaw(&self) {
        self.process.signal("CONT");
    }
}

/// Writes `value` under `key` directly, behind any store's back (a garbage or stale
/// record for the stores to meet).
pub async fn raw_put(endpoint: &CoordinationEndpoint, key: &str, value: &[u8]) {
    match endpoint {
        CoordinationEndpoint::Etcd(urls) => {
            let client = crescent_ha::connect(urls).await.unwrap();
            client.kv_client().put(key, value, None).await.unwrap();
        }
        CoordinationEndpoint::Redis(url) => {
            let mut conn = crescent_ha::connect_redis(url, Duration::from_secs(3)).unwrap();
            let _: () = redis::AsyncCommands::set(&mut conn, key, value)
                .await
                .unwrap();
        }
    }
}
