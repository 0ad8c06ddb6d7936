//! A throwaway etcd for benchmarks run outside scripts/test.sh: one member on loopback, its data
//! in a temp dir, killed with its guard.
//!
//! The HA tests and benchmarks read the endpoint from `CRESCENT_TEST_ETCD`
//! ([`crate::ha_pair::etcd`]); [`ensure_test_etcd`] starts one and sets that variable when it is
//! not already set, so `cargo bench -p crescent-tests --bench failover` works on its own.

use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::crescentd::log_tail;
use crate::process::{free_local_port, kill_with_parent, ChildGuard};

/// How long a fresh etcd may take to accept client connections.
const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// A running etcd member, SIGKILLed when dropped.
#[derive(Debug)]
pub struct EtcdProcess {
    pub guard: ChildGuard,
    pub endpoint: String,
}

impl EtcdProcess {
    /// Starts `etcd` (from PATH; Debian's `etcd-server`) with its data and log under `dir` and
    /// waits until its client port accepts connections.
    pub fn start(dir: &Path) -> Result<EtcdProcess, String> {
        let (client, peer) = (free_local_port(), free_local_port());
        let client_url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let log_path = dir.join("etcd.log");
        let log = std::fs::File::create(&log_path)
            .map_err(|e| format!("etcd log {}: {e}", log_path.display()))?;
        let mut cmd = Command::new("etcd");
        cmd.arg("--name")
            .arg("crescent-bench")
            .arg("--data-dir")
            .arg(dir.join("etcd-data"))
            .args(["--listen-client-urls", &client_url])
            .args(["--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("crescent-bench={peer_url}")])
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone().map_err(|e| e.to_string())?))
            .stderr(Stdio::from(log));
        kill_with_parent(&mut cmd);
        let child = cmd.spawn().map_err(|e| {
            format!("cannot run etcd ({e}); install etcd-server or set CRESCENT_TEST_ETCD")
        })?;
        let mut guard = ChildGuard::new(format!("etcd on {client_url}"), child);
        let addr: SocketAddr = ([127, 0, 0, 1], client).into();
        let started = Instant::now();
        loop {
            if let Some(status) = guard.try_exit_status() {
                return Err(format!(
                    "etcd exited ({status}); log:\n{}",
                    log_tail(&log_path, 20)
                ));
            }
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return Ok(EtcdProcess {
                    guard,
                    endpoint: client_url,
                });
            }
            if started.elapsed() > READY_TIMEOUT {
                return Err(format!(
                    "etcd did not listen on {client_url} within {READY_TIMEOUT:?}; log:\n{}",
                    log_tail(&log_path, 20)
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The etcd endpoint to use: `CRESCENT_TEST_ETCD` when set (returns `None`), else a fresh etcd
/// started under `dir`, whose endpoint is then put in `CRESCENT_TEST_ETCD` for
/// [`crate::ha_pair`]. Call it before starting other threads (it sets an environment variable).
pub fn ensure_test_etcd(dir: &Path) -> Result<Option<EtcdProcess>, String> {
    if std::env::var_os("CRESCENT_TEST_ETCD").is_some() {
        return Ok(None);
    }
    let etcd = EtcdProcess::start(dir)?;
    std::env::set_var("CRESCENT_TEST_ETCD", &etcd.endpoint);
    Ok(Some(etcd))
}
