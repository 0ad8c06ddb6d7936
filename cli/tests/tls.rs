//! crescentd with `[tls]` and `[auth]` on (docs/security.md, "TLS"), driven through real
//! `crescent` processes and the library: HTTP and the RPC fast path speak TLS only, clients
//! verify the server against the CA file, and a client without it (or with another CA) is
//! refused at once with a clear message.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::auth::AuthKey;
use common::{crescent, crescent_bin, Server};
use crescent_client::{BearerToken, ClientOptions, CrescentClient};
use crescent_tls::test_certs::TestPki;
use serde_json::Value;

/// A crescentd with `[tls]` (a CA and a certificate for localhost and 127.0.0.1 made now) and
/// `[auth]`.
struct TlsServer {
    server: Server,
    pki: TestPki,
    key: AuthKey,
    _pki_dir: tempfile::TempDir,
}

impl TlsServer {
    fn start() -> TlsServer {
        Self::start_with("")
    }

    /// With `extra` TOML after the `[tls]` section.
    fn start_with(extra: &str) -> TlsServer {
        let pki_dir = tempfile::tempdir().unwrap();
        let pki = TestPki::localhost(pki_dir.path());
        let config = pki_dir.path().join("crescentd.toml");
        std::fs::write(&config, format!("{extra}\n{}", pki.config_section())).unwrap();
        let key = AuthKey::new();
        let mut args = key.server_args();
        args.extend(["--config".into(), config.display().to_string()]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        TlsServer {
            server: Server::start_with(&args),
            pki,
            key,
            _pki_dir: pki_dir,
        }
    }

    /// The address as a user of the certificate's name gives it.
    fn https(&self) -> String {
        format!("https://localhost:{}", self.server.addr.port())
    }

    fn ca(&self) -> String {
        self.pki.ca_file.display().to_string()
    }

    /// `GET path` over HTTPS, verified with the CA: (status, body).
    fn get(&self, path: &str, token: Option<&str>) -> (u16, String) {
        let ca = std::fs::read(&self.pki.ca_file).unwrap();
        common::cold::runtime().block_on(async {
            let client = reqwest::Client::builder()
                .add_root_certificate(reqwest::Certificate::from_pem(&ca).unwrap())
                .build()
                .unwrap();
            let mut req = client.get(format!("{}{path}", self.https()));
            if let Some(t) = token {
                req = req.bearer_auth(t);
            }
            let resp = req.send().await.expect("https request");
            let status = resp.status().as_u16();
            (status, resp.text().await.unwrap_or_default())
        })
    }

    /// The sum of the samples of `family` whose labels contain every one of `filters`.
    fn counted(&self, family: &str, filters: &[&str]) -> u64 {
        let (_, text) = self.get("/metrics", None);
        text.lines()
            .filter(|l| l.starts_with(family) && filters.iter().all(|f| l.contains(f)))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    }
}

/// `crescent` with the environment given (the CA file through `CRESCENT_CA_FILE`).
fn crescent_env(env: &[(&str, &str)], args: &[&str]) -> (i32, String, String) {
    let mut cmd = Command::new(crescent_bin());
    cmd.env_remove("CRESCENT_CA_FILE")
        .env_remove("CRESCENT_TOKEN")
        .envs(env.iter().copied())
        .args(args)
        .stdin(Stdio::null());
    let out = cmd.output().expect("spawning crescent");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs `crescent ARGS` that must be refused quickly (no failover wait) with exit status 3
/// (UNAVAILABLE) and a message containing `words`.
fn refused_at_once(server: &str, args: &[&str], words: &str) {
    let started = Instant::now();
    let (code, out, err) = crescent(server, args, None);
    let took = started.elapsed();
    assert_eq!(code, 3, "{args:?}: {}{err}", String::from_utf8_lossy(&out));
    assert!(err.contains("UNAVAILABLE") && err.contains(words), "{err}");
    assert!(
        took < Duration::from_secs(5),
        "refused after {took:?}: {err}"
    );
}

#[test]
fn the_cli_works_over_tls_with_the_ca_and_is_refused_without_it() {
    let s = TlsServer::start();
    let token = s.key.token("client", Some("t"), None);
    let (https, ca) = (s.https(), s.ca());

    let (code, _, err) = crescent(
        &https,
        &["--ca-file", &ca, "--token", &token, "put", "k1", "-"],
        Some(b"over tls"),
    );
    assert_eq!(code, 0, "{err}\n{}", s.server.log());
    // The CA from the environment; a bare HOST:PORT is reached with https:// then.
    let bare = format!("127.0.0.1:{}", s.server.addr.port());
    let env = [
        ("CRESCENT_CA_FILE", ca.as_str()),
        ("CRESCENT_TOKEN", &token),
    ];
    let (code, out, err) = crescent_env(&env, &["--server", &bare, "get", "k1"]);
    assert_eq!((code, out.as_str()), (0, "over tls"), "{err}");
    let (code, out, err) = crescent_env(&env, &["--server", &https, "--json", "ls"]);
    assert_eq!(code, 0, "{err}");
    let listed: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(listed["count"], 1, "{listed}");

    // The object operations took the RPC fast path, over TLS.
    let get_ok = s.counted(
        "crescent_rpc_requests_total",
        &["op=\"get\"", "code=\"OK\""],
    );
    assert!(get_ok >= 1, "the get went over RPC");

    // Without the CA, or with another one: refused at the handshake, at once, saying why.
    let untrusted = "not signed by a trusted CA";
    refused_at_once(&https, &["--token", &token, "get", "k1"], untrusted);
    let other_dir = tempfile::tempdir().unwrap();
    let other = TestPki::generate(other_dir.path(), "another CA", &["localhost", "127.0.0.1"]);
    let other_ca = other.ca_file.display().to_string();
    refused_at_once(
        &https,
        &["--ca-file", &other_ca, "--token", &token, "get", "k1"],
        untrusted,
    );
    // Plain HTTP to the TLS port is no way around it, and says what to do.
    refused_at_once(&bare, &["--token", &token, "get", "k1"], "https://");
    // A CA file for a server without TLS: its plain answer is no TLS handshake.
    let plain_args = s.key.server_args();
    let plain_args: Vec<&str> = plain_args.iter().map(String::as_str).collect();
    let plain = Server::start_with(&plain_args);
    refused_at_once(
        &plain.server(),
        &["--ca-file", &ca, "--token", &token, "ls"],
        "does not speak TLS",
    );
    // A missing CA file is the caller's mistake.
    let (code, _, err) = crescent(&https, &["--ca-file", "/nonexistent/ca.pem", "ls"], None);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--ca-file"), "{err}");
}

#[test]
fn the_library_reaches_rpc_over_tls_and_the_listener_refuses_plain_and_untrusted_peers() {
    let s = TlsServer::start();
    let token = s.key.token("client", Some("lib"), None);
    let rt = common::cold::runtime();
    let options = ClientOptions::servers(&s.https())
        .with_token(BearerToken::new(&token))
        .with_ca_file(&s.pki.ca_file);
    let c = rt.block_on(CrescentClient::connect(options)).unwrap();
    rt.block_on(async {
        c.put("r1", b"hello").await.unwrap();
        assert_eq!(c.get("r1").await.unwrap(), b"hello");
        let keys = ["b0", "b1"];
        let values = [b"x".to_vec(), b"y".to_vec()];
        for r in c.put_batch(&keys, &values).await.unwrap() {
            r.unwrap();
        }
        let got = c.get_batch(&keys).await.unwrap();
        assert_eq!(
            got.into_iter().map(Result::unwrap).collect::<Vec<_>>(),
            values
        );
        c.settle().await;
    });
    let rpc_ok = |op: &str| {
        let op = format!("op=\"{op}\"");
        s.counted("crescent_rpc_requests_total", &[&op, "code=\"OK\""])
    };
    assert!(
        rpc_ok("put_start") >= 1 && rpc_ok("get") >= 1,
        "object ops over RPC"
    );
    assert_eq!(
        s.counted("crescent_http_requests_total", &["/objects/"]),
        0,
        "no HTTP fallback"
    );

    // The server says where TLS is, so no client guesses.
    let (status, info) = s.get("/v1/rpc", Some(&token));
    assert_eq!(status, 200, "{info}");
    let info: Value = serde_json::from_str(&info).unwrap();
    assert_eq!(info["tls"], true, "{info}");
    let (_, health) = s.get("/healthz", None);
    let health: Value = serde_json::from_str(&health).unwrap();
    assert_eq!(health["tls"], true, "{health}");

    // The RPC listener: a plain handshake is closed, an untrusting client's refusal counted.
    let addr: std::net::SocketAddr = info["address"].as_str().unwrap().parse().unwrap();
    assert!(
        plain_rpc_is_closed(addr),
        "plain RPC bytes must not be answered"
    );
    let other_dir = tempfile::tempdir().unwrap();
    let other = TestPki::generate(other_dir.path(), "another CA", &["localhost", "127.0.0.1"]);
    let e = rt
        .block_on(tls_connect(&other.ca_file, addr))
        .expect_err("another CA must not verify");
    assert_eq!(crescent_tls::failure_reason(&e), "unknown_ca", "{e}");
    let failures = |reason: &str| {
        let reason = format!("reason=\"{reason}\"");
        s.counted(
            "crescent_tls_handshake_failures_total",
            &["listener=\"rpc\"", &reason],
        )
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while failures("not_tls") + failures("peer_refused_certificate") < 2 {
        let (_, metrics) = s.get("/metrics", None);
        let tls: Vec<&str> = metrics
            .lines()
            .filter(|l| l.contains("tls_handshake"))
            .collect();
        assert!(Instant::now() < deadline, "{tls:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !s.server.log().contains(&token),
        "a token must never be logged"
    );
}

/// Sends an RPC hello in clear to a TLS listener: it must close without an RPC answer.
fn plain_rpc_is_closed(addr: std::net::SocketAddr) -> bool {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(&crescent_wire::rpc::client_hello()).unwrap();
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    !got.starts_with(b"CRPC")
}

async fn tls_connect(ca: &Path, addr: std::net::SocketAddr) -> std::io::Result<()> {
    let config = crescent_tls::client_config(ca).unwrap();
    let connector = crescent_tls::TlsConnector::from(std::sync::Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let name = crescent_tls::server_name("localhost").unwrap();
    connector.connect(name, tcp).await.map(drop)
}

#[test]
fn an_owner_registers_over_tls_and_serves_puts() {
    use std::io::{BufRead, BufReader};
    let s = TlsServer::start_with("[store]\nembedded_segment_bytes = 0\n");
    let owner_token = s.key.token("owner", None, Some("tls-owner"));
    let (https, ca) = (s.https(), s.ca());
    let child = Command::new(crescent_bin())
        .env_remove("CRESCENT_CA_FILE")
        .args([
            "--server",
            &https,
            "--ca-file",
            &ca,
            "--token",
            &owner_token,
        ])
        .args(["--json", "owner", "--size", "16M", "--id", "tls-owner"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawning crescent owner");
    let mut owner = common::Proc(child);
    let mut lines = BufReader::new(owner.0.stdout.take().unwrap()).lines();
    let ready: Value = serde_json::from_str(&lines.next().expect("ready line").unwrap()).unwrap();
    std::thread::spawn(move || for _ in lines {});
    assert!(ready["segment_id"].is_string(), "{ready}");

    // A client's put lands in the owner's segment (registered and mounted over HTTPS).
    let token = s.key.token("client", Some("t"), None);
    let put = ["--ca-file", &ca, "--token", &token, "put", "owned", "-"];
    let (code, _, err) = crescent(&https, &put, Some(b"in the owner"));
    assert_eq!(code, 0, "{err}\n{}", s.server.log());
    let (code, out, err) = crescent(
        &https,
        &["--ca-file", &ca, "--token", &token, "get", "owned"],
        None,
    );
    assert_eq!((code, out.as_slice()), (0, &b"in the owner"[..]), "{err}");
}

#[test]
fn crescentd_refuses_a_key_file_others_can_read() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::localhost(dir.path());
    std::fs::set_permissions(&pki.key_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let config = dir.path().join("crescentd.toml");
    std::fs::write(&config, pki.config_section()).unwrap();
    let out = Command::new(common::crescentd_bin())
        .arg("--config")
        .arg(&config)
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .env_remove("CRESCENT_CONFIG")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("tls.key_file") && err.contains("chmod 600"),
        "{err}"
    );
    assert!(
        !dir.path().join("data").exists(),
        "nothing is opened before the check"
    );
}
