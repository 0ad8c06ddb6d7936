//! Spawning a real crescentd (and `crescent` processes) for the client's integration tests.
#![allow(dead_code)]

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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

pub fn crescent_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_crescent"))
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
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

/// A running crescentd on a temporary data dir.
#[derive(Debug)]
pub struct Server {
    pub addr: SocketAddr,
    pub proc: Proc,
    pub dir: tempfile::TempDir,
    args: Vec<String>,
}

impl Server {
    pub fn start() -> Server {
        Self::start_with(&[])
    }

    pub fn start_with(extra: &[&str]) -> Server {
        Self::launch(extra, None)
    }

    /// A fresh node on a given HTTP address (e.g. where a stopped one listened).
    pub fn start_at(addr: &str) -> Server {
        Self::launch(&[], Some(addr.parse().expect("HOST:PORT")))
    }

    fn launch(extra: &[&str], fixed: Option<SocketAddr>) -> Server {
        Self::launch_in(tempfile::tempdir().unwrap(), extra, fixed)
    }

    /// SIGKILLs this crescentd and starts it again on the same data dir and address.
    pub fn kill_and_restart(self) -> Server {
        let Server {
            addr,
            proc,
            dir,
            args,
        } = self;
        drop(proc);
        let extra: Vec<&str> = args.iter().map(String::as_str).collect();
        Self::launch_in(dir, &extra, Some(addr))
    }

    fn launch_in(dir: tempfile::TempDir, extra: &[&str], fixed: Option<SocketAddr>) -> Server {
        let bin = crescentd_bin();
        let args: Vec<String> = extra.iter().map(|a| a.to_string()).collect();
        for _ in 0..5 {
            let addr: SocketAddr = fixed.unwrap_or_else(|| ([127, 0, 0, 1], free_port()).into());
            let log = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(dir.path().join("crescentd.log"))
                .unwrap();
            let child = Command::new(&bin)
                .arg("--data-dir")
                .arg(dir.path().join("data"))
                .arg("--listen")
                .arg(addr.to_string())
                .args(extra)
                .env_remove("CRESCENT_CONFIG")
                .stdin(Stdio::null())
                .stdout(Stdio::from(log.try_clone().unwrap()))
                .stderr(Stdio::from(log))
                .spawn()
                .expect("spawning crescentd");
            let mut proc = Proc(child);
            let started = Instant::now();
            loop {
                if let Ok(Some(_)) = proc.0.try_wait() {
                    break; // port taken or crash: try again, then report
                }
                if TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_ok() {
                    return Server {
                        addr,
                        proc,
                        dir,
                        args,
                    };
                }
                assert!(
                    started.elapsed() < Duration::from_secs(60),
                    "crescentd did not start:\n{}",
                    self_log(dir.path())
                );
                std::thread::sleep(Duration::from_millis(10));
            }
            drop(proc);
        }
        panic!("crescentd would not start:\n{}", self_log(dir.path()));
    }

    pub fn server(&self) -> String {
        self.addr.to_string()
    }

    pub fn log(&self) -> String {
        self_log(self.dir.path())
    }
}

fn self_log(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("crescentd.log")).unwrap_or_default()
}

/// Runs `crescent --server S ARGS...`, returning (exit code, stdout, stderr).
pub fn crescent(server: &str, args: &[&str], stdin: Option<&[u8]>) -> (i32, Vec<u8>, String) {
    use std::io::Write;
    let mut child = Command::new(crescent_bin())
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
