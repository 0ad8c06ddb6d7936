//! The storage-owner role against a real crescentd: register, mount, serve, unmount, both in
//! process and as a separate `crescent owner` process.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use common::{crescent_bin, Proc, Server};
use crescent_owner::{Owner, OwnerConfig};

#[tokio::test]
async fn owner_registers_mounts_and_unmounts_its_segment() {
    let server = Server::start();
    let client = server.owner_client("node-a");
    // Listing segments is an operator's call (docs/security.md).
    let admin = server.admin_client();
    let owner = Owner::start(
        &client,
        OwnerConfig {
            owner_id: Some("node-a".into()),
            size: 8 << 20,
            incarnation: Some(7),
            ..OwnerConfig::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(owner.segment_id(), "node-a/seg0");
    assert_eq!(client.own_segment().as_deref(), Some("node-a/seg0"));
    let list = admin.list_segments().await.unwrap();
    let seg = list
        .segments
        .iter()
        .find(|s| s.segment_id == "node-a/seg0")
        .expect("mounted");
    assert_eq!((seg.owner_id.as_str(), seg.size), ("node-a", 8 << 20));
    let o = list.owners.iter().find(|o| o.owner_id == "node-a").unwrap();
    assert_eq!(o.endpoint.as_deref(), Some(owner.endpoint()));
    assert_eq!(o.incarnation, 7);

    // A second owner with the same id and an older incarnation is refused.
    let other = server.owner_client("node-a");
    let stale = Owner::start(
        &other,
        OwnerConfig {
            owner_id: Some("node-a".into()),
            size: 1 << 20,
            incarnation: Some(6),
            ..OwnerConfig::default()
        },
    )
    .await
    .unwrap_err();
    assert_eq!(stale.code_str(), "STALE_GENERATION", "{stale}");

    assert_eq!(owner.shutdown().await.unwrap(), 0);
    assert_eq!(client.own_segment(), None);
    let list = admin.list_segments().await.unwrap();
    assert!(list.segments.iter().all(|s| s.segment_id != "node-a/seg0"));
}

#[test]
fn crescent_owner_process_mounts_until_sigterm() {
    let server = Server::start();
    let mut cmd = Command::new(crescent_bin());
    if let Some(token) = server.owner_token("proc-owner") {
        cmd.env("CRESCENT_TOKEN", token);
    }
    let child = cmd
        .args([
            "--server",
            &server.server(),
            "--json",
            "owner",
            "--size",
            "4M",
            "--id",
            "proc-owner",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut proc = Proc(child);
    let mut lines = BufReader::new(proc.0.stdout.take().unwrap()).lines();
    let ready: serde_json::Value =
        serde_json::from_str(&lines.next().expect("ready line").unwrap()).unwrap();
    assert_eq!(ready["segment_id"], "proc-owner/seg0");
    assert_eq!(ready["size"], 4 << 20);

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = server.admin_client();
    let list = rt.block_on(client.list_segments()).unwrap();
    assert!(list
        .segments
        .iter()
        .any(|s| s.segment_id == "proc-owner/seg0"));

    proc.signal(libc::SIGTERM);
    let stopped: serde_json::Value =
        serde_json::from_str(&lines.next().expect("stop line").unwrap()).unwrap();
    assert_eq!(stopped["stopped"], true);
    let status = proc.0.wait().unwrap();
    assert!(status.success(), "{status}");
    let list = rt.block_on(client.list_segments()).unwrap();
    assert!(list
        .segments
        .iter()
        .all(|s| s.segment_id != "proc-owner/seg0"));
}

/// `GET path` on `addr`: the whole answer (HTTP/1.1, connection closed by the server).
fn http_get(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nhost: {addr}\r\n\r\n").unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer
}

#[test]
fn crescent_owner_serves_its_metrics() {
    let server = Server::start();
    let mut cmd = Command::new(crescent_bin());
    if let Some(token) = server.owner_token("metrics-owner") {
        cmd.env("CRESCENT_TOKEN", token);
    }
    let child = cmd
        .args([
            "--server",
            &server.server(),
            "--json",
            "owner",
            "--size",
            "4M",
        ])
        .args(["--id", "metrics-owner", "--metrics-listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut proc = Proc(child);
    let mut lines = BufReader::new(proc.0.stdout.take().unwrap()).lines();
    let ready: serde_json::Value =
        serde_json::from_str(&lines.next().expect("ready line").unwrap()).unwrap();
    let addr = ready["metrics"]
        .as_str()
        .expect("metrics address")
        .to_string();

    assert!(http_get(&addr, "/healthz").starts_with("HTTP/1.1 200"));
    assert!(http_get(&addr, "/nothing").starts_with("HTTP/1.1 404"));
    // The process's own families at once; the owner's heartbeats once one has gone out.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let scrape = loop {
        let scrape = http_get(&addr, "/metrics");
        assert!(scrape.starts_with("HTTP/1.1 200"), "{scrape}");
        if scrape.contains("crescent_client_heartbeats_total{outcome=\"ok\"}")
            || std::time::Instant::now() > deadline
        {
            break scrape;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    for family in [
        "process_resident_memory_bytes",
        "process_open_fds",
        "crescent_build_info",
        "crescent_client_heartbeats_total{outcome=\"ok\"}",
        "crescent_client_owned_replicas",
    ] {
        assert!(scrape.contains(family), "{family} missing from:\n{scrape}");
    }

    proc.signal(libc::SIGTERM);
    let status = proc.0.wait().unwrap();
    assert!(status.success(), "{status}");
}
