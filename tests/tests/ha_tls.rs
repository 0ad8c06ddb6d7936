//! An HA pair with `[tls]` and `[auth]` on a real etcd (CRESCENT_TEST_ETCD, started by
//! scripts/test.sh): the standby reaches in-sync over TLS replication, clients find the active
//! through etcd (the leader key carries `https://`) with `crescent --ca-file`, the replication
//! port refuses a plain-text peer, and after the active is SIGKILLed the standby takes over
//! with everything acknowledged (docs/security.md "TLS", docs/ha.md).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crescent_tests::auth::AuthKey;
use crescent_tests::binaries::crescent_command;
use crescent_tests::crescentd::log_tail;
use crescent_tests::ha_pair::{cluster_name, etcd};
use crescent_tests::tls_node::{health, https_client, TestPki, TlsNode};

/// Waits until one of `nodes` is active with an in-sync standby; returns its index.
async fn wait_in_sync(client: &reqwest::Client, nodes: &[&TlsNode]) -> usize {
    let started = Instant::now();
    loop {
        for (i, n) in nodes.iter().enumerate() {
            if let Some(h) = health(client, n.addr).await {
                if h["role"] == "active" && h["ha"]["standby_in_sync"] == true {
                    return i;
                }
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no active with an in-sync standby over TLS within 30 s:\n{}\n---\n{}",
            log_tail(&nodes[0].log_path, 30),
            log_tail(&nodes[1].log_path, 30)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `crescent --etcd E --cluster C --ca-file CA --token T ARGS`: (exit code, stdout, stderr).
fn cli(
    etcd: &str,
    cluster: &str,
    pki: &TestPki,
    token: &str,
    args: &[&str],
) -> (i32, String, String) {
    let ca = pki.ca_file.display().to_string();
    let globals = [
        "--etcd",
        etcd,
        "--cluster",
        cluster,
        "--ca-file",
        &ca,
        "--token",
        token,
    ];
    let out = crescent_command(&globals)
        .args(args)
        .output()
        .expect("running crescent");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `crescent --json token issue` for a client of `tenant`: (token, id).
fn issue(key: &AuthKey, tenant: &str) -> (String, String) {
    let out = crescent_command(&["--json", "--tenant", tenant])
        .args(["token", "issue", "--role", "client", "--secret-file"])
        .arg(&key.path)
        .output()
        .expect("token issue");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    (
        v["token"].as_str().unwrap().into(),
        v["id"].as_str().unwrap().into(),
    )
}

/// A plain-text Hello on the TLS replication port: the connection closes without a
/// replication message.
fn plain_peer_gets_nothing(repl: SocketAddr) -> Vec<u8> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(&repl, Duration::from_secs(2)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = s.write_all(b"\x00\x00\x00\x20crescent replication hello, in clear");
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_pair_replicates_over_tls_and_fails_over() {
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::localhost(&dir.path().join("pki"));
    let key = AuthKey::new();
    let config = dir.path().join("node.toml");
    let text = format!(
        "{}{}[ha]\nlease_ttl_secs = 2\nsync_timeout_ms = 1000\n",
        key.config_section(),
        pki.config_section()
    );
    std::fs::write(&config, text).unwrap();
    let (etcd, cluster) = (etcd(), cluster_name());
    let client = https_client(&pki);
    let mut nodes = [
        Some(TlsNode::start(dir.path(), "a", &config, &etcd, &cluster, &client).await),
        Some(TlsNode::start(dir.path(), "b", &config, &etcd, &cluster, &client).await),
    ];
    let active = {
        let [a, b] = &nodes;
        wait_in_sync(&client, &[a.as_ref().unwrap(), b.as_ref().unwrap()]).await
    };
    let standby = 1 - active;
    let active_addr = nodes[active].as_ref().unwrap().addr;
    let h = health(&client, active_addr).await.unwrap();
    assert_eq!(h["tls"], true, "{h}");
    let repl: SocketAddr = h["ha"]["replication_address"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();

    // The replication port speaks TLS only: bytes in clear get no journal byte back.
    let got = tokio::task::spawn_blocking(move || plain_peer_gets_nothing(repl))
        .await
        .unwrap();
    let answer = crescent_journal::replication::protocol::read_message(&mut got.as_slice());
    assert!(answer.is_err(), "a plain peer got {answer:?}");
    let metrics = client
        .get(format!("https://{active_addr}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.lines().any(|l| l
            .starts_with("crescent_tls_handshake_failures_total{listener=\"replication\"")
            && !l.ends_with(" 0")),
        "the refused plain peer is counted"
    );

    // Through etcd with the CA: a journaled revocation and a refusal, on the active.
    let admin = key.issue_for("admin", None, None, Some(600)).0;
    let (revoked, revoked_id) = issue(&key, "t");
    let (kept, _) = issue(&key, "t");
    let (code, _, err) = cli(
        &etcd,
        &cluster,
        &pki,
        &admin,
        &["token", "revoke", &revoked_id],
    );
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = cli(&etcd, &cluster, &pki, &revoked, &["ls"]);
    assert_eq!(code, 10, "revoked: {err}");
    let (code, _, err) = cli(&etcd, &cluster, &pki, &kept, &["ls"]);
    assert_eq!(code, 0, "{err}");
    // Still in sync: the revocation reached the standby over TLS before it was acknowledged.
    let h = health(&client, active_addr).await.unwrap();
    assert_eq!(h["ha"]["standby_in_sync"], true, "{h}");

    // The active dies; the standby takes over with the revocation.
    let started = Instant::now();
    nodes[active].take().unwrap().guard.sigkill();
    let survivor = nodes[standby].as_ref().unwrap();
    loop {
        if let Some(h) = health(&client, survivor.addr).await {
            if h["role"] == "active" {
                break;
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no failover:\n{}",
            log_tail(&survivor.log_path, 40)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (code, _, err) = cli(&etcd, &cluster, &pki, &revoked, &["ls"]);
    assert_eq!(code, 10, "the revocation survived the failover: {err}");
    let (code, _, err) = cli(&etcd, &cluster, &pki, &kept, &["ls"]);
    assert_eq!(code, 0, "{err}\n{}", log_tail(&survivor.log_path, 40));
    // Without the CA the new active is refused as well, at once.
    let t = Instant::now();
    let out = crescent_command(&["--etcd", &etcd, "--cluster", &cluster, "--token", &kept])
        .arg("ls")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("--ca-file") && t.elapsed() < Duration::from_secs(5),
        "{err}"
    );
}
