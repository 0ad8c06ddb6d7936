//! The object promise, as a user meets it (docs/architecture.md, "The object promise"):
//! `crescent put` processes that exit right after their ack write into a separate `crescent
//! owner` process; crescentd is then SIGKILLed and restarted, and later stopped cleanly
//! (SIGTERM) and restarted, on the same data dir. Every acknowledged object reads back
//! byte-identical after each restart (the owner recorded each put before it was acknowledged
//! and replays it), and every acknowledged `crescent rm`, made just before the kill (long before
//! the owner's next heartbeat could carry the release), stays removed (it was journaled).

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use common::{crescent, crescent_bin, Proc, Server};
use rand::{Rng, RngCore, SeedableRng};

fn config(dir: &std::path::Path) -> String {
    let path = dir.join("crescentd.toml");
    std::fs::write(
        &path,
        // A long TTL: owners heartbeat every 5 s, so a release cannot reach the owner between
        // a remove and the kill right after it.
        "[store]\nembedded_segment_bytes = 0\nrebuild_degraded_timeout_secs = 120\n\
         client_ttl_secs = 60\n",
    )
    .unwrap();
    path.to_str().unwrap().to_string()
}

/// A `crescent owner` process with a 16 MiB segment, once its segment is mounted.
fn start_owner(server: &Server) -> Proc {
    let mut cmd = Command::new(crescent_bin());
    if let Some(token) = server.owner_token("durable-owner") {
        cmd.env("CRESCENT_TOKEN", token);
    }
    let child = cmd
        .args(["--server", &server.server(), "--json", "owner"])
        .args(["--size", "16M", "--id", "durable-owner"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut proc = Proc(child);
    let mut lines = BufReader::new(proc.0.stdout.take().unwrap()).lines();
    let ready: serde_json::Value =
        serde_json::from_str(&lines.next().expect("ready line").unwrap()).unwrap();
    assert_eq!(ready["segment_id"], "durable-owner/seg0");
    // Keep reading its stdout so the owner never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    proc
}

/// Removes `key` with a `crescent rm` process.
fn remove(server: &Server, key: &str) {
    let (code, _, err) = crescent(&server.server(), &["rm", key], None);
    assert_eq!(code, 0, "rm {key}: {err}");
}

/// `key` answers NOT_FOUND.
fn assert_removed(server: &Server, key: &str, after: &str) {
    let (code, _, err) = crescent(&server.server(), &["get", key], None);
    assert!(
        code != 0 && err.contains("NOT_FOUND"),
        "{key} after {after}: exit {code}, {err}"
    );
}

/// Every object reads back byte-identical through a fresh `crescent get` process.
fn assert_all_readable(server: &Server, objects: &[(String, Vec<u8>)], after: &str) {
    for (key, value) in objects {
        let (code, out, err) = crescent(&server.server(), &["get", key], None);
        assert_eq!(code, 0, "{key} after {after}: {err}");
        assert!(out == *value, "{key} after {after}: bytes differ");
    }
}

#[test]
fn cli_puts_into_an_owner_survive_sigkill_and_sigterm_restarts() {
    let cfg_dir = tempfile::tempdir().unwrap();
    let cfg = config(cfg_dir.path());
    let server = Server::start_with(&["--config", &cfg]);
    let _owner = start_owner(&server);

    let files = tempfile::tempdir().unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(15);
    let mut objects = Vec::new();
    for i in 0..12 {
        let mut value = vec![0u8; rng.gen_range(1..200_000)];
        rng.fill_bytes(&mut value);
        let key = format!("cli/{i}");
        let path = files.path().join(format!("v{i}"));
        std::fs::write(&path, &value).unwrap();
        // Each put is its own process, which exits as soon as it is acknowledged.
        let (code, _, err) = crescent(
            &server.server(),
            &["put", &key, path.to_str().unwrap()],
            None,
        );
        assert_eq!(code, 0, "put {key}: {err}");
        objects.push((key, value));
    }
    // Through stdin too.
    let (code, _, err) = crescent(
        &server.server(),
        &["put", "cli/stdin", "-"],
        Some(b"from stdin"),
    );
    assert_eq!(code, 0, "{err}");
    objects.push(("cli/stdin".into(), b"from stdin".to_vec()));

    // One acknowledged remove, then at once the kill.
    let (gone, _) = objects.remove(0);
    remove(&server, &gone);
    let server = server.kill_and_restart();
    server.wait_serving();
    assert_all_readable(&server, &objects, "a SIGKILL restart");
    assert_removed(&server, &gone, "a SIGKILL restart");

    // More puts and a remove of an object of the first run, then a clean stop and start.
    let (code, _, err) = crescent(
        &server.server(),
        &["put", "cli/second-run", "-"],
        Some(b"two"),
    );
    assert_eq!(code, 0, "{err}");
    objects.push(("cli/second-run".into(), b"two".to_vec()));
    let (gone_too, _) = objects.remove(0);
    remove(&server, &gone_too);
    let server = server.terminate_and_restart();
    server.wait_serving();
    assert_all_readable(&server, &objects, "a SIGTERM restart");
    for key in [&gone, &gone_too] {
        assert_removed(&server, key, "a SIGTERM restart");
    }
    // And once more: the journaled removes still fence the replay of a later start.
    let server = server.kill_and_restart();
    server.wait_serving();
    assert_all_readable(&server, &objects, "a second SIGKILL restart");
    assert_removed(&server, &gone, "a second SIGKILL restart");
}
