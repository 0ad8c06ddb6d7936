//! The `crescent` CLI against a real crescentd: put/get/exist/rm/ls with --json, exit codes,
//! `admin snapshot`, `bench` (`--json`; progress bars on a terminal only), and every JSON shape
//! docs/api.md ("CLI JSON") documents.

mod common;

use common::{crescent, crescent_bin, json, key_of, Server};

#[test]
fn put_get_exist_rm_ls() {
    let server = Server::start();
    let s = server.server();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("in.bin");
    let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(&file, &data).unwrap();

    let (code, out, err) = crescent(&s, &["--json", "put", "a/1", file.to_str().unwrap()], None);
    assert_eq!(code, 0, "{err}");
    assert_eq!(json(&out)["size"], 100_000);
    let (code, _, err) = crescent(&s, &["put", "a/2", "-"], Some(b"from stdin"));
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = crescent(&s, &["--tenant", "t9", "put", "a/1", "-"], Some(b"t9"));
    assert_eq!(code, 0, "{err}");

    let outfile = dir.path().join("out.bin");
    let (code, _, err) = crescent(&s, &["get", "a/1", "-o", outfile.to_str().unwrap()], None);
    assert_eq!(code, 0, "{err}");
    assert_eq!(std::fs::read(&outfile).unwrap(), data);
    let (code, out, _) = crescent(&s, &["get", "a/2"], None);
    assert_eq!((code, out.as_slice()), (0, &b"from stdin"[..]));
    let (_, out, _) = crescent(&s, &["--tenant", "t9", "--json", "get", "a/1"], None);
    assert_eq!(json(&out)["value_utf8"], "t9");

    let (code, out, _) = crescent(&s, &["--json", "exist", "a/2"], None);
    assert_eq!(
        (code, json(&out)["exists"].clone()),
        (0, serde_json::json!(true))
    );
    let (code, _, _) = crescent(&s, &["exist", "nope"], None);
    assert_eq!(code, 1);

    let (code, out, _) = crescent(&s, &["--json", "ls", "a/"], None);
    assert_eq!(code, 0);
    assert_eq!(json(&out)["count"], 2);
    // a/2 was just read: `get` released its read lease when done, so `rm` right after works.
    let (code, _, err) = crescent(&s, &["rm", "a/2"], None);
    assert_eq!(code, 0, "{err}");
    // A lease nobody released (a reader still copying: here a bare HTTP get) refuses a plain
    // remove (BUSY, retryable: exit 3); a forced one goes through.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let leased: serde_json::Value = runtime.block_on(async {
        let req = reqwest::Client::new().post(format!("http://{s}/v1/objects/get"));
        match server.client_token(common::auth::DEFAULT_TENANT) {
            Some(t) => req.bearer_auth(t),
            None => req,
        }
        .json(&serde_json::json!({"id": {"key": "a/1"}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
    });
    assert!(leased["lease_until_ms"].as_i64().unwrap() > 0, "{leased}");
    let (code, out, _) = crescent(&s, &["--json", "rm", "a/1"], None);
    assert_eq!(code, 3);
    assert_eq!(json(&out)["error"]["code"], "BUSY");
    let (code, _, err) = crescent(&s, &["rm", "--force", "a/1"], None);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = crescent(&s, &["--json", "get", "a/1"], None);
    assert_eq!(code, 4, "NOT_FOUND exit status; {err}");
    assert_eq!(json(&out)["error"]["code"], "NOT_FOUND");
    assert!(err.contains("NOT_FOUND"), "{err}");
    let (code, _, err) = crescent(&s, &["put", "k", "/nonexistent/file"], None);
    assert_eq!(code, 7, "{err}");
    assert!(err.contains("IO_ERROR"), "{err}");
    let (code, _, err) = crescent(&s, &["--tenant", "bad tenant", "exist", "k"], None);
    assert_eq!(code, 2, "{err}");
    let (code, out, _) = crescent(&s, &["--json", "status"], None);
    assert_eq!(code, 0);
    let status = json(&out);
    assert_eq!(status["health"]["status"], "serving");
    // the fields scripts rely on
    assert_eq!(status["role"], "standalone", "{status}");
    assert_eq!(status["gate"], "SERVING", "{status}");
    assert!(status["term"].as_u64().unwrap() >= 1, "{status}");
    assert!(status["commit_seq"].as_u64().is_some(), "{status}");
}

#[test]
fn unreachable_server_is_exit_3() {
    // One static server and nothing listening: no failover wait (the bound is loose on
    // purpose; the wait it replaces is the 15 s failover deadline).
    let started = std::time::Instant::now();
    let (code, _, err) = crescent("127.0.0.1:1", &["exist", "k"], None);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "{err}"
    );
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("UNAVAILABLE"), "{err}");
    assert!(err.contains("connection refused"), "{err}");
    assert!(err.contains("127.0.0.1:1"), "{err}");
}

#[test]
fn warnings_have_no_colour_codes_when_stderr_is_not_a_terminal() {
    // Two dead servers: the client follows the list until the deadline, then warns.
    let (code, _, err) = crescent(
        "127.0.0.1:1,127.0.0.1:2",
        &["--failover-timeout-ms", "300", "exist", "k"],
        None,
    );
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("WARN"), "a warning was printed: {err}");
    assert!(
        !err.contains('\x1b'),
        "ANSI escape in piped stderr: {err:?}"
    );
}

/// Runs `crescent --server S ARGS` with stdout on `stdout`; returns the exit code and stderr.
fn crescent_to(server: &str, args: &[&str], stdout: std::process::Stdio) -> (i32, String) {
    let mut cmd = std::process::Command::new(common::crescent_bin());
    if let Some(key) = common::key_of(server) {
        cmd.env("CRESCENT_TOKEN", key.token_for_cli(args));
    }
    let out = cmd
        .arg("--server")
        .arg(server)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(stdout)
        .stderr(std::process::Stdio::piped())
        .output()
        .expect("spawning crescent");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn full_or_closed_stdout_is_an_io_error_not_a_panic() {
    let server = Server::start();
    let s = server.server();
    let (code, _, err) = crescent(&s, &["put", "k", "-"], Some(b"value"));
    assert_eq!(code, 0, "{err}");
    for args in [&["health"][..], &["--json", "ls"], &["get", "k"]] {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let (code, err) = crescent_to(&s, args, full.into());
        assert_eq!(code, 7, "{args:?}: {err}");
        assert!(err.contains("IO_ERROR"), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        // A pipe whose reader is gone (`crescent ls | head` after head exits): EPIPE.
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let (code, err) = crescent_to(&s, args, writer.into());
        assert_eq!(code, 7, "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn bench_json_has_the_five_figures() {
    let server = Server::start();
    let (code, out, err) = crescent(&server.server(), &["bench", "--n", "2000", "--json"], None);
    assert_eq!(code, 0, "{err}");
    let text = String::from_utf8(out).unwrap();
    assert_eq!(text.trim().lines().count(), 1, "one JSON object: {text}");
    let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    for field in ["put", "get", "put_batch", "get_batch", "exist"] {
        let f = v[field]
            .as_f64()
            .unwrap_or_else(|| panic!("{field} in {text}"));
        assert!(f > 0.0, "{field} = {f}");
    }
}

#[test]
fn bench_draws_no_progress_when_stdout_is_not_a_terminal() {
    let server = Server::start();
    let (code, out, err) = crescent(&server.server(), &["bench", "--n", "300"], None);
    assert_eq!(code, 0, "{err}");
    let text = String::from_utf8(out).unwrap();
    assert_eq!(text.lines().count(), 1, "the report line only: {text:?}");
    assert!(
        text.starts_with("crescent n=300 size=4096: put "),
        "{text:?}"
    );
    for mark in ["ETA", " ops ", "["] {
        assert!(
            !err.contains(mark),
            "progress on a pipe ({mark:?}): {err:?}"
        );
        assert!(
            !text.contains(mark),
            "progress on stdout ({mark:?}): {text:?}"
        );
    }
}

/// On a terminal (a pty from `script(1)`, when installed) each phase draws a bar on stderr;
/// `--json` draws none there either.
#[test]
fn bench_on_a_terminal_draws_progress_unless_json() {
    if std::process::Command::new("script")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("script(1) is not installed: no pty to run crescent on; skipped");
        return;
    }
    let server = Server::start();
    let s = server.server();
    let on_a_pty = |args: &[&str]| {
        let line = format!(
            "{} --server {s} {}",
            crescent_bin().display(),
            args.join(" ")
        );
        let mut cmd = std::process::Command::new("script");
        cmd.env_remove("CRESCENT_TOKEN");
        if let Some(key) = key_of(&s) {
            cmd.env("CRESCENT_TOKEN", key.token_for_cli(args));
        }
        let out = cmd.args(["-qec", &line, "/dev/null"]).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "{args:?}: {text}");
        text
    };
    // Enough operations that the bar is drawn at least once per phase (it redraws at most
    // 20 times a second).
    let text = on_a_pty(&["bench", "--n", "3000", "--only", "put,exist"]);
    assert!(
        text.contains("put ["),
        "no put progress on a terminal: {text:?}"
    );
    assert!(text.contains(" ops "), "{text:?}");
    assert!(text.contains("crescent n=3000 size=4096: put "), "{text:?}");
    let text = on_a_pty(&["--json", "bench", "--n", "300", "--only", "put"]);
    assert!(!text.contains("ETA"), "progress with --json: {text:?}");
    assert!(text.contains("\"put\":"), "{text:?}");
}

#[test]
fn an_empty_value_round_trips_through_the_cli() {
    let server = Server::start();
    let s = server.server();
    // `echo -n | crescent put k -`
    let (code, out, err) = crescent(&s, &["--json", "put", "empty", "-"], Some(b""));
    assert_eq!(code, 0, "{err}");
    assert_eq!(json(&out)["size"], 0);
    let (code, out, err) = crescent(&s, &["get", "empty"], None);
    assert_eq!((code, out.len()), (0, 0), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let outfile = dir.path().join("out.bin");
    std::fs::write(&outfile, b"stale").unwrap();
    let (code, _, err) = crescent(&s, &["get", "empty", "-o", outfile.to_str().unwrap()], None);
    assert_eq!(code, 0, "{err}");
    assert_eq!(std::fs::read(&outfile).unwrap(), b"");
    let (code, _, err) = crescent(&s, &["exist", "empty"], None);
    assert_eq!(code, 0, "{err}");
    let (code, out, _) = crescent(&s, &["--json", "ls", "empty"], None);
    assert_eq!(code, 0);
    assert_eq!(json(&out)["count"], 1);
    // The same empty content again is an idempotent success; other content a conflict.
    let (code, _, err) = crescent(&s, &["put", "empty", "-"], Some(b""));
    assert_eq!(code, 0, "{err}");
    let (code, out, _) = crescent(&s, &["--json", "put", "empty", "-"], Some(b"x"));
    assert_ne!(code, 0);
    assert_eq!(json(&out)["error"]["code"], "CONFLICT");
    let (code, _, err) = crescent(&s, &["rm", "empty"], None);
    assert_eq!(code, 0, "{err}");
    let (code, _, _) = crescent(&s, &["exist", "empty"], None);
    assert_eq!(code, 1);
}

#[test]
fn a_value_the_store_has_no_room_for_is_out_of_space_exit_8() {
    // A 1 MiB embedded segment and nothing else mounted: a 2 MiB value fits nowhere, even
    // after eviction. That is the store's space, not a tenant's quota (docs/api.md).
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("crescentd.toml");
    std::fs::write(&config, "[store]\nembedded_segment_bytes = 1048576\n").unwrap();
    let server = Server::start_with(&["--config", config.to_str().unwrap()]);
    let s = server.server();
    let big = vec![7u8; 2 << 20];
    let (code, out, err) = crescent(&s, &["--json", "put", "big", "-"], Some(&big));
    assert_eq!(code, 8, "{err}");
    assert_eq!(json(&out)["error"]["code"], "OUT_OF_SPACE", "{err}");
    let (code, _, err) = crescent(&s, &["put", "small", "-"], Some(b"fits"));
    assert_eq!(code, 0, "{err}");
}

#[test]
fn admin_snapshot_writes_one_and_needs_an_admin() {
    let server = Server::start();
    let s = server.server();
    let (code, _, err) = crescent(&s, &["put", "snap/1", "-"], Some(b"v"));
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = crescent(&s, &["--json", "admin", "snapshot"], None);
    assert_eq!(code, 0, "{err}");
    let first = json(&out);
    let seq = first["seq"].as_u64().unwrap();
    assert!(seq > 0, "{first}");
    let file = std::path::Path::new(first["path"].as_str().unwrap())
        .file_name()
        .unwrap();
    let on_disk = server.dir.path().join("data/snapshots").join(file);
    assert_eq!(
        std::fs::metadata(&on_disk).unwrap().len(),
        first["bytes"].as_u64().unwrap()
    );
    // Nothing new: the same snapshot again, in text too.
    let (code, out, err) = crescent(&s, &["admin", "snapshot"], None);
    assert_eq!(code, 0, "{err}");
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.starts_with(&format!("snapshot at seq {seq} ")),
        "{text}"
    );
    // A client token is not enough.
    let client = server.client_token(common::auth::DEFAULT_TENANT).unwrap();
    let (code, _, err) = crescent(&s, &["--token", &client, "admin", "snapshot"], None);
    assert_eq!(code, 10, "{err}");
    assert!(err.contains("PERMISSION_DENIED"), "{err}");
}

/// `crescent completion` and `crescent man` come from the command definitions and need no
/// server: the server given here is a port nothing listens on.
#[test]
fn completion_scripts_and_man_pages_cover_every_command() {
    const NOBODY: &str = "127.0.0.1:1";
    let commands = [
        "put",
        "get",
        "exist",
        "rm",
        "ls",
        "owner",
        "weights",
        "completion",
        "man",
    ];
    for shell in ["bash", "zsh", "fish"] {
        let (code, out, err) = crescent(NOBODY, &["completion", shell], None);
        assert_eq!(code, 0, "{shell}: {err}");
        let script = String::from_utf8(out).unwrap();
        for command in commands {
            assert!(script.contains(command), "{shell} script lacks {command}");
        }
    }
    let (code, _, err) = crescent(NOBODY, &["completion", "tcsh"], None);
    assert_eq!(code, 2, "an unknown shell is a usage error: {err}");

    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("man1");
    let (code, out, err) = crescent(
        NOBODY,
        &["--json", "man", "--dir", target.to_str().unwrap()],
        None,
    );
    assert_eq!(code, 0, "{err}");
    let written = json(&out)["written"].as_array().unwrap().len();
    for page in [
        "crescent.1",
        "crescent-put.1",
        "crescent-weights-get.1",
        "crescent-owner.1",
    ] {
        let text = std::fs::read_to_string(target.join(page)).unwrap();
        assert!(text.contains(".TH"), "{page} is not a man page");
    }
    assert_eq!(std::fs::read_dir(&target).unwrap().count(), written);
}

/// The commands and fields docs/api.md ("CLI JSON") names, as `(command, [fields])`: each
/// `` `cmd` `{a, b, ...}` `` pair of that section. `...` (more fields may follow) is dropped.
fn documented_json_shapes() -> Vec<(String, Vec<String>)> {
    let api = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/api.md"))
        .expect("docs/api.md");
    let section = api
        .split("### CLI JSON")
        .nth(1)
        .expect("a CLI JSON section")
        .split("\n#")
        .next()
        .unwrap();
    let flat = section.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut shapes = Vec::new();
    let mut rest = flat.as_str();
    // "`ls` `{count, keys}`": a code span, a space, a code span that opens with `{`.
    while let Some(at) = rest.find("` `{") {
        let command = rest[..at].rsplit('`').next().unwrap().to_string();
        let body = &rest[at + 4..];
        let end = body.find("}`").expect("a closed field list");
        let fields = body[..end]
            .split(',')
            .map(str::trim)
            .filter(|f| !f.is_empty() && *f != "...")
            .map(String::from)
            .collect();
        shapes.push((command, fields));
        rest = &body[end..];
    }
    shapes
}

/// A documented command, the arguments that run it, and its standard input.
type ShapeRun<'a> = (&'a str, &'a [&'a str], Option<&'a [u8]>);

#[test]
fn every_documented_json_shape_is_what_the_command_prints() {
    let server = Server::start();
    let s = server.server();
    let pages = tempfile::tempdir().unwrap();
    let man_dir = pages.path().to_str().unwrap();
    // How each documented command is run here; a documented command missing from this table
    // fails the test, so the doc cannot name a shape nothing checks.
    let runs: &[ShapeRun] = &[
        ("put", &["put", "shape/k", "-"], Some(b"value".as_slice())),
        ("exist", &["exist", "shape/k"], None),
        ("ls", &["ls", "shape/"], None),
        ("rm", &["rm", "shape/k"], None),
        ("segments ls", &["segments", "ls"], None),
        ("cold ls", &["cold", "ls"], None),
        ("tenant ls", &["tenant", "ls"], None),
        ("status", &["status"], None),
        ("man", &["man", "--dir", man_dir], None),
    ];
    let shapes = documented_json_shapes();
    assert!(
        shapes.len() >= 8,
        "too few shapes read from docs/api.md: {shapes:?}"
    );
    for (command, fields) in &shapes {
        let (_, args, stdin) = runs
            .iter()
            .find(|(name, _, _)| name == command)
            .unwrap_or_else(|| panic!("docs/api.md documents `{command}`: add it to `runs`"));
        let mut argv = vec!["--json"];
        argv.extend_from_slice(args);
        let (code, out, err) = crescent(&s, &argv, *stdin);
        assert_eq!(code, 0, "{command}: {err}");
        let printed = json(&out);
        let object = printed
            .as_object()
            .unwrap_or_else(|| panic!("{command} printed no object: {printed}"));
        for field in fields {
            assert!(
                object.contains_key(field),
                "{command} lacks {field}: {printed}"
            );
        }
    }
    // Errors: one object too, `{"error": {code, message}}`.
    let (code, out, _) = crescent(&s, &["--json", "get", "shape/absent"], None);
    assert_ne!(code, 0);
    let printed = json(&out);
    assert!(printed["error"]["code"].is_string(), "{printed}");
    assert!(printed["error"]["message"].is_string(), "{printed}");
}
