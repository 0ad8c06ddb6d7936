//! Client-driven metadata rebuild end to end: crescentd is SIGKILLed and restarted on its data
//! dir while two `crescent owner` processes keep the bytes; the owners see the new term in
//! their heartbeat answers and replay their tables, the rebuild gate opens, and every object
//! reads back byte-identical. One owner that never comes back makes the gate open DEGRADED at
//! the timeout, while the other owner's objects are served as soon as it has replayed.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{crescent_bin, Proc, Server};
use crescent_client::{CrescentClient, Placement, PutOptions};
use crescent_wire::rebuild::GateState;
use rand::{Rng, RngCore, SeedableRng};

fn owner_process(server: &Server) -> (Proc, String) {
    let id = format!("owner-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    owner_process_with(server, &["--id", &id])
}

/// `crescent owner` with `args` added (`--id ID`: its owner token names it); returns once it
/// is serving its segment.
fn owner_process_with(server: &Server, args: &[&str]) -> (Proc, String) {
    let id = args[args.iter().position(|a| *a == "--id").unwrap() + 1];
    let mut cmd = Command::new(crescent_bin());
    if let Some(token) = server.owner_token(id) {
        cmd.env("CRESCENT_TOKEN", token);
    }
    let child = cmd
        .args([
            "--server",
            &server.server(),
            "--json",
            "owner",
            "--size",
            "64M",
        ])
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut proc = Proc(child);
    let mut lines = BufReader::new(proc.0.stdout.take().unwrap()).lines();
    let ready: serde_json::Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    let segment = ready["segment_id"].as_str().unwrap().to_string();
    // keep reading its output so it never blocks on a full pipe
    std::thread::spawn(move || for _ in lines {});
    (proc, segment)
}

fn config(dir: &std::path::Path, degraded_secs: u64) -> String {
    let path = dir.join("crescentd.toml");
    std::fs::write(
        &path,
        format!("[store]\nembedded_segment_bytes = 0\nrebuild_degraded_timeout_secs = {degraded_secs}\n"),
    )
    .unwrap();
    path.to_str().unwrap().to_string()
}

async fn put_objects(
    client: &CrescentClient,
    segment: &str,
    tag: &str,
    n: usize,
) -> Vec<(String, Vec<u8>)> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(n as u64);
    let opts = PutOptions {
        placement: Some(Placement::LocalFirst),
        preferred_segment: Some(segment.to_string()),
        ..PutOptions::default()
    };
    let mut out = Vec::new();
    for i in 0..n {
        // The first is empty: a 0-byte object is replayed from its owner like any other.
        let len = if i == 0 { 0 } else { rng.gen_range(1..40_000) };
        let mut v = vec![0u8; len];
        rng.fill_bytes(&mut v);
        let key = format!("{tag}/{i}");
        client.put_with(&key, &v, &opts).await.unwrap();
        out.push((key, v));
    }
    out
}

async fn wait_gate(client: &CrescentClient, want: GateState, within: Duration) {
    let started = Instant::now();
    loop {
        if let Ok(s) = client.rebuild_status().await {
            if s.state == want {
                return;
            }
        }
        assert!(
            started.elapsed() < within,
            "gate not {want:?} within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_survive_a_crescentd_restart_through_the_owners() {
    let cfg_dir = tempfile::tempdir().unwrap();
    let cfg = config(cfg_dir.path(), 120);
    let server = Server::start_with(&["--config", &cfg]);
    let (_a, seg_a) = owner_process(&server);
    let (_b, seg_b) = owner_process(&server);
    let writer = server.client();
    let mut objects = put_objects(&writer, &seg_a, "a", 150).await;
    objects.extend(put_objects(&writer, &seg_b, "b", 150).await);

    let server = server.kill_and_restart();
    let client = server.client();
    wait_gate(&client, GateState::Serving, Duration::from_secs(30)).await;
    let status = client.rebuild_status().await.unwrap();
    assert_eq!(status.owners_completed, 2, "{status:?}");
    for (key, value) in &objects {
        assert_eq!(&client.get(key).await.unwrap(), value, "{key}");
    }
    // new puts after the rebuild never collide with replayed ones
    let more = put_objects(&client, &seg_a, "after", 20).await;
    for (key, value) in objects.iter().chain(&more) {
        assert_eq!(&client.get(key).await.unwrap(), value, "{key}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_that_never_returns_opens_the_gate_degraded_at_the_timeout() {
    let cfg_dir = tempfile::tempdir().unwrap();
    let cfg = config(cfg_dir.path(), 6);
    let server = Server::start_with(&["--config", &cfg]);
    let (_a, seg_a) = owner_process(&server);
    let (b, seg_b) = owner_process(&server);
    let writer = server.client();
    let on_a = put_objects(&writer, &seg_a, "a", 50).await;
    let on_b = put_objects(&writer, &seg_b, "b", 50).await;
    drop(b); // SIGKILL: its memory and its table are gone

    let restarted_at = Instant::now();
    let server = server.kill_and_restart();
    let client = server.client();
    // Owner a replays while the gate still waits for b: a's objects are served already.
    let started = Instant::now();
    loop {
        if client.get(&on_a[0].0).await.is_ok() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "a's objects not served"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let status = client.rebuild_status().await.unwrap();
    if restarted_at.elapsed() < Duration::from_secs(5) {
        assert_eq!(status.state, GateState::Rebuilding, "{status:?}");
        // b's objects are not known yet: UNAVAILABLE (REBUILDING), not NOT_FOUND. A client
        // waits for the gate up to its failover deadline; one with a short deadline sees it.
        let impatient = common::connect(
            server
                .options_with(server.client_token(common::auth::DEFAULT_TENANT))
                .with_failover_timeout(Duration::from_millis(300)),
        );
        let err = impatient.get(&on_b[0].0).await.unwrap_err().to_string();
        assert!(err.contains("REBUILDING"), "{err}");
    }
    for (key, value) in &on_a {
        assert_eq!(&client.get(key).await.unwrap(), value, "{key}");
    }
    wait_gate(&client, GateState::Degraded, Duration::from_secs(20)).await;
    assert!(restarted_at.elapsed() >= Duration::from_secs(5));
    let health: serde_json::Value = reqwest::get(format!("http://{}/healthz", server.server()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health["gate"], "DEGRADED", "{health}");
    // b's objects are gone with b; a's are still served
    assert!(client.get(&on_b[0].0).await.is_err());
    assert_eq!(client.get(&on_a[1].0).await.unwrap(), on_a[1].1);
}

/// An owner whose process died while crescentd was down, and that comes back as a new process
/// (same owner id, higher incarnation) before its old registration could expire: the new
/// process has nothing to replay, so the gate stops waiting for the old one at once and opens
/// DEGRADED (the old process's objects are gone), long before the degraded timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_restarted_during_the_rebuild_stops_the_gate_waiting_for_its_old_process() {
    let cfg_dir = tempfile::tempdir().unwrap();
    let cfg = config(cfg_dir.path(), 120);
    let server = Server::start_with(&["--config", &cfg]);
    let (_a, seg_a) = owner_process(&server);
    let (b, seg_b) = owner_process_with(&server, &["--id", "owner-b"]);
    let writer = server.client();
    let on_a = put_objects(&writer, &seg_a, "a", 20).await;
    let on_b = put_objects(&writer, &seg_b, "b", 20).await;
    drop(b); // SIGKILL: its memory and its table are gone

    let server = server.kill_and_restart();
    let client = server.client();
    let (_b2, _) = owner_process_with(&server, &["--id", "owner-b"]);
    let back = Instant::now();
    wait_gate(&client, GateState::Degraded, Duration::from_secs(5)).await;
    let status = client.rebuild_status().await.unwrap();
    assert_eq!(status.owners_lost, 1, "{status:?}");
    assert!(back.elapsed() < Duration::from_secs(5));
    for (key, value) in &on_a {
        assert_eq!(&client.get(key).await.unwrap(), value, "{key}");
    }
    assert!(
        client.get(&on_b[0].0).await.is_err(),
        "b's objects are gone with b"
    );
}

/// An owner in this process: its server watch sees crescentd go away and come back, so it
/// heartbeats at once (a `reconnected` wake-up), learns the new term and replays; the gate
/// opens and the objects read back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_heartbeats_as_soon_as_crescentd_is_back() {
    let cfg_dir = tempfile::tempdir().unwrap();
    let cfg = config(cfg_dir.path(), 120);
    let server = Server::start_with(&["--config", &cfg]);
    let (owner, client) = common::owner_and_writer(&server.server(), "back-owner", 16 << 20).await;
    let objects = put_objects(&client, owner.segment_id(), "w", 40).await;
    let wakeups = || client.metrics().rebuild().count("wakeups", "reconnected");
    let term_before = owner.term();
    let before = wakeups();

    let server = server.kill_and_restart();
    let started = Instant::now();
    while owner.replayed_term() == term_before || owner.term() == term_before {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the owner never replayed to the restarted crescentd"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(wakeups() > before, "no wake-up after crescentd came back");
    let check = server.client();
    wait_gate(&check, GateState::Serving, Duration::from_secs(30)).await;
    for (key, value) in &objects {
        assert_eq!(&check.get(key).await.unwrap(), value, "{key}");
    }
    owner.shutdown().await.unwrap();
}
