//! crescentd with `[auth]` on (docs/security.md), driven through the real `crescent` CLI and
//! raw HTTP: each refusal gets its code, each legitimate path works.

mod common;

use common::auth::AuthKey;
use common::{crescent, crescentd_bin, Server};
use serde_json::{json, Value};

const EMBEDDED: &str = "crescentd-embedded-0";

fn start(key: &AuthKey) -> Server {
    let args = key.server_args();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Server::start_with(&args)
}

/// `crescent --token TOKEN ARGS` against `server`.
fn as_(server: &Server, token: &str, args: &[&str]) -> (i32, String, String) {
    let mut full = vec!["--token", token];
    full.extend_from_slice(args);
    let (code, out, err) = crescent(&server.server(), &full, None);
    (code, String::from_utf8_lossy(&out).into_owned(), err)
}

fn ok(server: &Server, token: &str, args: &[&str]) -> String {
    let (code, out, err) = as_(server, token, args);
    assert_eq!(code, 0, "{args:?}: {out}{err}\n{}", server.log());
    out
}

fn refused(server: &Server, token: &str, args: &[&str], code_name: &str) {
    let (code, out, err) = as_(server, token, args);
    assert_eq!(code, 10, "{args:?} should be refused: {out}{err}");
    assert!(err.contains(code_name), "{args:?}: {err}");
}

/// A raw HTTP request: (status, JSON body).
fn http(
    server: &Server,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Value,
) -> (u16, Value) {
    let rt = common::cold::runtime();
    let url = format!("http://{}{path}", server.addr);
    rt.block_on(async {
        let client = reqwest::Client::new();
        let mut req = match method {
            "GET" => client.get(&url),
            _ => client.post(&url).json(&body),
        };
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let resp = req.send().await.expect("http request");
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap_or_default();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    })
}

#[test]
fn no_or_bad_credentials_are_unauthenticated_and_health_stays_open() {
    let key = AuthKey::new();
    let server = start(&key);
    let (code, _, err) = crescent(&server.server(), &["ls"], None);
    assert_eq!(code, 10, "{err}");
    assert!(err.contains("UNAUTHENTICATED"), "{err}");
    refused(&server, "not-a-token", &["ls"], "UNAUTHENTICATED");
    // Signed by another key.
    let other = AuthKey::new();
    std::fs::write(&other.path, [9u8; 32]).unwrap();
    refused(
        &server,
        &other.token("admin", None, None),
        &["ls"],
        "UNAUTHENTICATED",
    );
    let (status, body) = http(&server, "POST", "/v1/objects/list", None, json!({}));
    assert_eq!(
        (status, body["code"].as_str()),
        (401, Some("UNAUTHENTICATED"))
    );
    assert_eq!(http(&server, "GET", "/healthz", None, Value::Null).0, 200);
    assert_eq!(http(&server, "GET", "/metrics", None, Value::Null).0, 200);
}

#[test]
fn a_client_acts_only_in_its_tenant_and_an_admin_everywhere() {
    let key = AuthKey::new();
    let server = start(&key);
    let a = key.token("client", Some("a"), None);
    let admin = key.token("admin", None, None);

    // No --tenant: the request acts in the token's tenant.
    let (code, _, err) = crescent(
        &server.server(),
        &["--token", &a, "put", "k1", "-"],
        Some(b"in a"),
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(ok(&server, &a, &["get", "k1"]), "in a");
    let listed: Value = serde_json::from_str(&ok(&server, &a, &["--json", "ls"])).unwrap();
    assert_eq!(listed["count"], 1, "{listed}");
    ok(&server, &a, &["--tenant", "a", "exist", "k1"]);

    // Naming another tenant is refused, reads and lists alike.
    refused(
        &server,
        &a,
        &["--tenant", "b", "get", "k1"],
        "PERMISSION_DENIED",
    );
    refused(&server, &a, &["--tenant", "b", "ls"], "PERMISSION_DENIED");
    refused(
        &server,
        &a,
        &["--tenant", "b", "put", "k2", "/dev/null"],
        "PERMISSION_DENIED",
    );

    // The object is in tenant a, not in the default tenant: the admin sees it only there.
    ok(&server, &admin, &["--tenant", "a", "exist", "k1"]);
    let (code, _, _) = as_(&server, &admin, &["exist", "k1"]);
    assert_eq!(code, 1, "k1 must not be in the default tenant");

    // Node and owner operations are not a client's.
    refused(
        &server,
        &a,
        &["segments", "unmount", "--segment", EMBEDDED],
        "PERMISSION_DENIED",
    );
    let segs: Value =
        serde_json::from_str(&ok(&server, &admin, &["--json", "segments", "ls"])).unwrap();
    assert!(segs.to_string().contains(EMBEDDED), "{segs}");
    let complete = json!({"owner_id": "o1", "term": 1, "counts": {}});
    let (status, body) = http(&server, "POST", "/v1/rebuild/complete", Some(&a), complete);
    assert_eq!(
        (status, body["code"].as_str()),
        (403, Some("PERMISSION_DENIED")),
        "{body}"
    );
    let replay = json!({"owner_id": "o1", "term": 1, "entries": []});
    let (status, _) = http(&server, "POST", "/v1/rebuild/replay", Some(&a), replay);
    assert_eq!(status, 403);

    // Refusals are counted by class and reason.
    let (_, metrics) = http(&server, "GET", "/metrics", None, Value::Null);
    let metrics = metrics.as_str().unwrap_or_default().to_string();
    assert!(
        metrics.contains(r#"crescent_auth_refusals_total{class="object_read",reason="tenant"}"#),
        "{metrics}"
    );
    assert!(
        !metrics.contains(&a),
        "a token must never reach the metrics"
    );
    assert!(!server.log().contains(&a), "a token must never be logged");
}

#[test]
fn an_owner_touches_only_its_own_segments() {
    let key = AuthKey::new();
    let server = start(&key);
    let o1 = key.token("owner", None, Some("o1"));
    let o2 = key.token("owner", None, Some("o2"));
    let mount = |owner: &str, seg: &str| {
        vec![
            "segments".to_string(),
            "mount".into(),
            "--owner".into(),
            owner.into(),
            "--segment".into(),
            seg.into(),
            "--size".into(),
            "1M".into(),
        ]
    };
    let args = mount("o1", "s1");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    ok(&server, &o1, &args);
    let args = mount("o1", "s2");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    refused(&server, &o2, &args, "PERMISSION_DENIED");
    refused(
        &server,
        &o2,
        &["segments", "unmount", "--segment", "s1"],
        "PERMISSION_DENIED",
    );
    refused(
        &server,
        &o1,
        &["segments", "unmount", "--segment", EMBEDDED],
        "PERMISSION_DENIED",
    );
    refused(&server, &o1, &["ls"], "PERMISSION_DENIED");
    ok(&server, &o1, &["segments", "unmount", "--segment", "s1"]);
}

#[test]
fn a_revoked_token_is_refused_across_a_restart() {
    let key = AuthKey::new();
    let server = start(&key);
    let (client, id) = key.issue("client", Some("a"), None);
    let admin = key.token("admin", None, None);
    ok(&server, &client, &["ls"]);
    refused(
        &server,
        &client,
        &["token", "revoke", &id],
        "PERMISSION_DENIED",
    );
    assert!(ok(&server, &admin, &["token", "revoke", &id]).contains("revoked"));
    refused(&server, &client, &["ls"], "UNAUTHENTICATED");
    let server = server.kill_and_restart();
    refused(&server, &client, &["ls"], "UNAUTHENTICATED");
    ok(&server, &admin, &["ls"]);
    assert!(ok(&server, &admin, &["token", "revoke", &id]).contains("already"));
}

#[test]
fn a_revocation_is_pruned_once_its_token_expired_and_the_prune_is_journaled() {
    let key = AuthKey::new();
    let server = start(&key);
    let admin = key.token("admin", None, None);
    let out = std::process::Command::new(common::crescent_bin())
        .args([
            "--json", "token", "issue", "--role", "client", "--tenant", "a",
        ])
        .args(["--ttl-secs", "2", "--secret-file"])
        .arg(&key.path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let issued: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = issued["id"].as_str().unwrap().to_string();
    let expires = issued["expires_secs"].as_u64().unwrap().to_string();
    let revoke = [
        "token",
        "revoke",
        id.as_str(),
        "--expires-secs",
        expires.as_str(),
    ];
    assert!(ok(&server, &admin, &revoke).contains("revoked"));
    assert!(ok(&server, &admin, &revoke).contains("already"));
    // Housekeeping runs every second: past the expiry, the entry goes (journaled), so the
    // same id is new to the list again, also after a restart replays the journal.
    std::thread::sleep(std::time::Duration::from_secs(4));
    let server = server.kill_and_restart();
    let again = ok(&server, &admin, &revoke);
    assert!(
        again.contains("revoked") && !again.contains("already"),
        "{again}\n{}",
        server.log()
    );
}

#[test]
fn a_key_file_others_can_read_is_refused_at_startup() {
    use std::os::unix::fs::PermissionsExt;
    let key = AuthKey::new();
    std::fs::set_permissions(&key.path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let data = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(crescentd_bin())
        .arg("--data-dir")
        .arg(data.path())
        .arg("--listen")
        .arg("127.0.0.1:0")
        .arg("--auth-secret-file")
        .arg(&key.path)
        .env_remove("CRESCENT_CONFIG")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(err.contains("chmod 600"), "{err}");
}

/// A raw request on a fresh connection; returns what arrived until the server closed it (or
/// 10 s passed) and how long that took.
fn raw_exchange(server: &Server, request: &str) -> (String, std::time::Duration) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(server.addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let started = std::time::Instant::now();
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    (
        String::from_utf8_lossy(&got).into_owned(),
        started.elapsed(),
    )
}

/// The guard reads a client's body before the handler (to scope its tenant): it must bound
/// that read as the handler does, or one token holder's slow body holds a request forever.
#[test]
fn a_scoped_body_is_bounded_by_the_http_limits_as_without_auth() {
    let key = AuthKey::new();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("crescentd.toml");
    std::fs::write(&config, "[net]\nhttp_body_timeout_ms = 500\n").unwrap();
    let mut args = key.server_args();
    args.extend(["--config".to_string(), config.display().to_string()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = Server::start_with(&args);
    let token = key.token("client", Some("acme"), None);
    let head = |len: u64| {
        format!(
            "POST /v1/objects/get HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
             Authorization: Bearer {token}\r\nContent-Length: {len}\r\n\r\n"
        )
    };
    // 10 of 100 bytes, then silence: 408 at the body timeout.
    let (answer, took) = raw_exchange(&server, &(head(100) + "{\"id\":{\"k"));
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("REQUEST_TIMEOUT"), "{answer}");
    assert!(took < std::time::Duration::from_secs(5), "{took:?}");
    // A declared length over http.max_body_bytes: 413 before any byte of it is read.
    let (answer, _) = raw_exchange(&server, &head(2_000_000_000));
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("PAYLOAD_TOO_LARGE"), "{answer}");
}
