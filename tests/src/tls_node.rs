//! crescentd with `[tls]` for the TLS tests (docs/security.md, "TLS"): a test PKI, a node
//! process of an HA pair reached over HTTPS, and an HTTPS client that trusts the test CA.
//! The plain-HTTP harness ([`crate::crescentd`]) waits on `http://`, so TLS nodes start here.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub use crescent_tls::test_certs::TestPki;

use crate::binaries::ensure_workspace_binary;
use crate::crescentd::log_tail;
use crate::process::{free_local_port, kill_with_parent, ChildGuard};

/// An HTTPS client trusting `pki`'s CA only.
pub fn https_client(pki: &TestPki) -> reqwest::Client {
    let ca = std::fs::read(&pki.ca_file).expect("reading the test CA");
    reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&ca).expect("PEM CA"))
        .tls_built_in_root_certs(false)
        .timeout(Duration::from_millis(1000))
        .no_proxy()
        .build()
        .expect("https client")
}

/// `GET https://127.0.0.1:PORT/healthz` (verified with the CA), or `None`.
pub async fn health(client: &reqwest::Client, addr: SocketAddr) -> Option<serde_json::Value> {
    let url = format!("https://{addr}/healthz");
    client.get(url).send().await.ok()?.json().await.ok()
}

/// One crescentd node of an HA pair with `[tls]`, SIGKILLed when dropped.
#[derive(Debug)]
pub struct TlsNode {
    pub guard: ChildGuard,
    pub addr: SocketAddr,
    pub log_path: PathBuf,
}

impl TlsNode {
    /// Starts node `name` (data `dir/name`, log `dir/name.log`) with config `config` as a
    /// candidate of `cluster` on `etcd`, and waits until its `/healthz` answers over HTTPS.
    pub async fn start(
        dir: &Path,
        name: &str,
        config: &Path,
        etcd: &str,
        cluster: &str,
        client: &reqwest::Client,
    ) -> TlsNode {
        let bin = ensure_workspace_binary("crescent-server", "crescentd");
        let addr: SocketAddr = ([127, 0, 0, 1], free_local_port()).into();
        let log_path = dir.join(format!("{name}.log"));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .expect("node log");
        let mut cmd = Command::new(bin);
        cmd.arg("--data-dir")
            .arg(dir.join(name))
            .args([
                "--listen",
                &addr.to_string(),
                "--advertise",
                &addr.to_string(),
            ])
            .arg("--config")
            .arg(config)
            .args(["--etcd", etcd, "--cluster", cluster])
            .env_remove("CRESCENT_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone().expect("log")))
            .stderr(Stdio::from(log));
        kill_with_parent(&mut cmd);
        let child = cmd.spawn().expect("spawning crescentd");
        let mut node = TlsNode {
            guard: ChildGuard::new(format!("crescentd {name} on {addr}"), child),
            addr,
            log_path,
        };
        let started = Instant::now();
        while health(client, addr).await.is_none() {
            if let Some(status) = node.guard.try_exit_status() {
                panic!(
                    "{name} exited ({status}):\n{}",
                    log_tail(&node.log_path, 40)
                );
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "{name} did not answer over HTTPS:\n{}",
                log_tail(&node.log_path, 40)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        node
    }
}
