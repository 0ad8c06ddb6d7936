//! An acknowledged remove stays removed after a crescentd restart, also when the owner still
//! holds older versions of the key (docs/rebuild.md, "Removes are journaled"):
//! - the version an upsert replaced on another owner, whose release had not reached that owner
//!   when the key was removed and crescentd was SIGKILLed (found by the chaos soak,
//!   tests/tests/chaos_soak.rs);
//! - the version a replay replaced (both owners replayed their version after a restart);
//! - a put of an earlier run, replayed to this run and then removed, when the owner's replay
//!   completion reaches crescentd again after the remove (a retried `rebuild_complete`): that
//!   settles only the removes the run started with, never this run's.
//!
//! Removes and reads are `crescent` processes, puts go through the library (to choose the
//! owner), against two separate `crescent owner` processes; owners
//! heartbeat every 5 s (a long client TTL), so releases are not delivered within the few
//! hundred milliseconds between a remove and the kill (several keys, so that one heartbeat
//! landing in between cannot hide the failure).

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{crescent, crescent_bin, Proc, Server};
use crescent_client::PutOptions;
use crescent_wire::rebuild::GateState;

const KEYS: usize = 6;

fn config(dir: &std::path::Path) -> String {
    let path = dir.join("crescentd.toml");
    std::fs::write(
        &path,
        "[store]\nembedded_segment_bytes = 0\nrebuild_degraded_timeout_secs = 120\n\
         client_ttl_secs = 60\n",
    )
    .unwrap();
    path.to_str().unwrap().to_string()
}

/// The two owners' segments: a key's first version goes to the first, its upsert to the other.
const SEGMENTS: [&str; 2] = ["removes-a/seg0", "removes-b/seg0"];

fn start_owner(server: &Server, id: &str) -> Proc {
    let mut cmd = Command::new(crescent_bin());
    if let Some(token) = server.owner_token(id) {
        cmd.env("CRESCENT_TOKEN", token);
    }
    let child = cmd
        .args(["--server", &server.server(), "--json", "owner"])
        .args(["--size", "16M", "--id", id])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut proc = Proc(child);
    let mut lines = BufReader::new(proc.0.stdout.take().unwrap()).lines();
    lines.next().expect("ready line").unwrap();
    std::thread::spawn(move || for _ in lines {});
    proc
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Waits until the rebuild gate is SERVING; returns its term.
fn wait_serving(server: &Server) -> u64 {
    let client = server.client();
    let started = Instant::now();
    loop {
        if let Ok(s) = rt().block_on(client.rebuild_status()) {
            if s.state == GateState::Serving {
                return s.term;
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "gate not SERVING within 60 s\n{}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn run(server: &Server, args: &[&str], stdin: Option<&[u8]>) {
    let (code, _, err) = crescent(&server.server(), args, stdin);
    assert_eq!(code, 0, "crescent {args:?}: {err}");
}

fn start_owners(server: &Server) -> [Proc; 2] {
    [
        start_owner(server, "removes-a"),
        start_owner(server, "removes-b"),
    ]
}

/// A put (`upsert`: an upsert) into segment `SEGMENTS[segment]`, by a library writer.
fn put(server: &Server, key: &str, value: &[u8], segment: usize, upsert: bool) {
    let client = server.client();
    let opts = PutOptions {
        upsert,
        preferred_segment: Some(SEGMENTS[segment].to_string()),
        ..PutOptions::default()
    };
    let out = rt()
        .block_on(client.put_with(key, value, &opts))
        .unwrap_or_else(|e| panic!("put {key}: {e}"));
    assert_eq!(out.replicas, 1, "{key}: {out:?}");
}

fn assert_removed(server: &Server, keys: &[String], after: &str) {
    for key in keys {
        let (code, out, err) = crescent(&server.server(), &["get", key], None);
        assert!(
            code != 0 && err.contains("NOT_FOUND"),
            "{key} was removed (acknowledged) but after {after} it reads back {:?} \
             (exit {code}, {err})",
            String::from_utf8_lossy(&out)
        );
    }
}

fn keys(prefix: &str) -> Vec<String> {
    (0..KEYS).map(|i| format!("{prefix}/{i}")).collect()
}

#[test]
fn a_removed_key_does_not_come_back_as_the_version_an_upsert_replaced() {
    let cfg_dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(&["--config", &config(cfg_dir.path())]);
    let _owners = start_owners(&server);
    let keys = keys("upserted");
    for k in &keys {
        put(&server, k, b"first version", 0, false);
        put(&server, k, b"second version, upserted", 1, true);
        run(&server, &["rm", k], None);
    }
    let server = server.kill_and_restart();
    wait_serving(&server);
    assert_removed(&server, &keys, "a SIGKILL restart");
}

#[test]
fn a_removed_key_does_not_come_back_as_the_version_a_replay_replaced() {
    let cfg_dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(&["--config", &config(cfg_dir.path())]);
    let _owners = start_owners(&server);
    let keys = keys("replayed");
    for k in &keys {
        put(&server, k, b"first version", 0, false);
        put(&server, k, b"second version, upserted", 1, true);
    }
    // Each owner replays its version of each key; the second wins, the first is let go.
    let server = server.kill_and_restart();
    wait_serving(&server);
    for k in &keys {
        run(&server, &["rm", k], None);
    }
    let server = server.kill_and_restart();
    wait_serving(&server);
    assert_removed(&server, &keys, "a second SIGKILL restart");
}

#[test]
fn a_repeated_replay_completion_does_not_forget_this_runs_removes() {
    let cfg_dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(&["--config", &config(cfg_dir.path())]);
    let _owner = start_owner(&server, "removes-a");
    let keys = keys("earlier-run");
    for k in &keys {
        put(&server, k, b"put before the restart", 0, false);
    }
    let server = server.kill_and_restart();
    let term = wait_serving(&server);
    for k in &keys {
        run(&server, &["rm", k], None);
    }
    // The owner's completion again, as a retry whose first answer was lost would send it.
    let body = serde_json::json!({
        "owner_id": "removes-a",
        "term": term,
        "counts": {"replayed": 0, "duplicate": 0, "stale": 0, "rejected": 0},
    });
    let owner_token = server.owner_token("removes-a");
    let status = rt().block_on(async {
        let req = reqwest::Client::builder()
            .no_proxy()
            .build()
            .unwrap()
            .post(format!("http://{}/v1/rebuild/complete", server.server()));
        match owner_token {
            Some(t) => req.bearer_auth(t),
            None => req,
        }
        .json(&body)
        .send()
        .await
        .unwrap()
        .status()
    });
    assert!(status.is_success(), "rebuild_complete: {status}");
    // The settle it triggers is journaled in the background.
    std::thread::sleep(Duration::from_millis(300));
    let server = server.kill_and_restart();
    wait_serving(&server);
    assert_removed(&server, &keys, "a second SIGKILL restart");
}
