//! A throwaway redis-server for the HA tests on Redis run outside scripts/test.sh: loopback, no
//! persistence, killed with its guard.
//!
//! The tests read the URL from `CRESCENT_TEST_REDIS` (scripts/test.sh starts one);
//! [`test_redis`] starts one under a directory when it is not set.

use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::crescentd::log_tail;
use crate::process::{free_local_port, kill_with_parent, ChildGuard};

/// A running redis-server, SIGKILLed when dropped.
#[derive(Debug)]
pub struct RedisProcess {
    pub guard: ChildGuard,
    pub url: String,
}

impl RedisProcess {
    /// Starts `redis-server` (from PATH) on a free loopback port, without persistence, its log
    /// under `dir`; waits until it accepts connections.
    pub fn start(dir: &Path) -> Result<RedisProcess, String> {
        let port = free_local_port();
        let log_path = dir.join("redis.log");
        let log = std::fs::File::create(&log_path)
            .map_err(|e| format!("redis log {}: {e}", log_path.display()))?;
        let mut cmd = Command::new("redis-server");
        cmd.args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone().map_err(|e| e.to_string())?))
            .stderr(Stdio::from(log));
        kill_with_parent(&mut cmd);
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot run redis-server ({e}); set CRESCENT_TEST_REDIS"))?;
        let url = format!("redis://127.0.0.1:{port}");
        let mut guard = ChildGuard::new(format!("redis-server on {url}"), child);
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let started = Instant::now();
        loop {
            if let Some(status) = guard.try_exit_status() {
                return Err(format!(
                    "redis-server exited ({status}); log:\n{}",
                    log_tail(&log_path, 20)
                ));
            }
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return Ok(RedisProcess { guard, url });
            }
            if started.elapsed() > Duration::from_secs(10) {
                return Err(format!(
                    "redis-server did not listen on {url}; log:\n{}",
                    log_tail(&log_path, 20)
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The Redis URL to use: `CRESCENT_TEST_REDIS` when set (no process), else a fresh
/// redis-server started under `dir` (kept alive by the returned guard).
pub fn test_redis(dir: &Path) -> (String, Option<RedisProcess>) {
    match std::env::var("CRESCENT_TEST_REDIS") {
        Ok(url) if !url.trim().is_empty() => (url, None),
        _ => {
            let redis = RedisProcess::start(dir).unwrap_or_else(|e| panic!("{e}"));
            (redis.url.clone(), Some(redis))
        }
    }
}
