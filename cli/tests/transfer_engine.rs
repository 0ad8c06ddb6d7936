//! A segment mounted with transport `transfer_engine`, end to end with real binaries and the
//! bundled C engine (docs/transport.md, "Transfer-engine segments"): crescentd without an
//! embedded segment, `crescent owner --transport transfer-engine`, `crescent put` and
//! `crescent get` processes and a library client's batches, every byte through the engine.
//! The owner's TCP listener moves none of their bytes (its served-bytes counter stays at zero;
//! it takes the writers' owner notices) and the library client counts its transfers under
//! `transport="ffi"` only. Acknowledged puts survive a SIGKILL restart of crescentd: the owner
//! recorded them and replays them (docs/rebuild.md, "Owners record before the ack").

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{crescent_bin, key_of, with_token, Proc, Server};
use crescent_client::ClientOptions;
use crescent_transport::ffi::{FfiConfig, LIBRARY_ENV, METADATA_ENV};

/// The bundled engine (`transport-ffi/c`), compiled with the system C compiler into `dir`.
fn mini_engine(dir: &Path) -> PathBuf {
    let c = Path::new(env!("CARGO_MANIFEST_DIR")).join("../transport-ffi/c");
    let out = dir.join("libmini_transfer_engine.so");
    let status = Command::new("cc")
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(&out)
        .arg(c.join("mini_transfer_engine.c"))
        .arg(c.join("mini_transfer_engine_net.c"))
        .arg("-lpthread")
        .status()
        .expect("the system C compiler `cc` runs");
    assert!(status.success(), "cc failed");
    out
}

/// The engine's library and metadata directory, as every process of the test gets them.
struct Engine {
    library: PathBuf,
    metadata: String,
}

impl Engine {
    fn env(&self) -> [(&'static str, String); 2] {
        [
            (LIBRARY_ENV, self.library.display().to_string()),
            (METADATA_ENV, self.metadata.clone()),
        ]
    }
}

/// `crescent --server S ARGS` with the harness token its command needs and `env`: (exit
/// code, stdout, stderr).
fn crescent_with(
    server: &str,
    args: &[&str],
    stdin: Option<&[u8]>,
    env: &[(&str, String)],
) -> (i32, Vec<u8>, String) {
    let mut cmd = Command::new(crescent_bin());
    cmd.env_remove("CRESCENT_TOKEN")
        .env_remove(LIBRARY_ENV)
        .env_remove(METADATA_ENV);
    if let Some(key) = key_of(server) {
        cmd.env("CRESCENT_TOKEN", key.token_for_cli(args));
    }
    let mut child = cmd
        .envs(env.iter().map(|(k, v)| (k, v)))
        .arg("--server")
        .arg(server)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning crescent");
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.unwrap_or_default()).unwrap();
    drop(input);
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code().unwrap_or(-1), out.stdout, err)
}

/// `crescent owner --transport transfer-engine` with a metrics listener, once mounted: the
/// process and its ready line.
fn start_owner(server: &str, engine: &Engine) -> (Proc, serde_json::Value) {
    let args = [
        "--json",
        "owner",
        "--size",
        "16M",
        "--id",
        "te-owner",
        "--transport",
        "transfer-engine",
        "--metrics-listen",
        "127.0.0.1:0",
    ];
    let token = key_of(server).map(|key| key.token_for_cli(&args));
    let (proc, ready) = common::spawn_owner(server, &args, &engine.env(), token);
    (proc, common::json(ready.as_bytes()))
}

/// The sum of the samples of `family` whose labels contain every one of `labels`.
fn sample(text: &str, family: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(family) && labels.iter().all(|f| l.contains(f)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn data(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// The engine's files, and crescentd placing only on owners (no embedded segment) with the
/// engine in its `[transport]` section.
fn setup(dir: &Path) -> (Server, Engine) {
    let metadata = dir.join("engine-metadata");
    std::fs::create_dir(&metadata).unwrap();
    let engine = Engine {
        library: mini_engine(dir),
        metadata: format!("file://{}", metadata.display()),
    };
    let config = dir.join("crescentd.toml");
    let text = format!(
        "[store]\nembedded_segment_bytes = 0\n\n[transport]\ntransfer_engine_lib = {:?}\n\
         transfer_engine_metadata = {:?}\n",
        engine.library.display().to_string(),
        engine.metadata
    );
    std::fs::write(&config, text).unwrap();
    let server = Server::start_with(&["--config", config.to_str().unwrap()]);
    (server, engine)
}

/// `crescent --json ARGS` (the harness's token for it): the parsed answer, once it succeeded.
fn ok_json(server: &Server, args: &[&str]) -> serde_json::Value {
    let mut full = vec!["--json"];
    full.extend_from_slice(args);
    let (code, out, err) = common::crescent(&server.server(), &full, None);
    assert_eq!(code, 0, "{args:?}: {err}\n{}", server.log());
    common::json(&out)
}

/// A library client of the default tenant with the engine in its options (its metrics in
/// `registry`).
async fn engine_client(
    server: &Server,
    engine: &Engine,
    registry: &prometheus::Registry,
) -> crescent_client::CrescentClient {
    let options = ClientOptions {
        transfer_engine: Some(FfiConfig {
            library: engine.library.display().to_string(),
            metadata_conn_string: engine.metadata.clone(),
            local_server_name: "te-test-client".into(),
            ..FfiConfig::default()
        }),
        ..ClientOptions::servers(&server.server())
    };
    let token = server.client_token(common::auth::DEFAULT_TENANT);
    let options = with_token(options, token);
    crescent_client::CrescentClient::connect_with_registry(options, registry)
        .await
        .unwrap()
}

/// crescentd's own transfers through the engine (the cold tier's), in bytes.
async fn crescentd_engine_bytes(server: &Server, op: &str) -> f64 {
    let text = reqwest::get(format!("http://{}/metrics", server.server()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let op = format!("op=\"{op}\"");
    sample(
        &text,
        "crescent_transport_bytes_total",
        &[&op, "transport=\"ffi\""],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transfer_engine_segment_is_written_and_read_through_the_engine() {
    let dir = tempfile::tempdir().unwrap();
    let (server, engine) = setup(dir.path());
    let s = server.server();

    // Without the library the owner refuses to start, with a stable code.
    let (code, _, err) = crescent_with(
        &s,
        &["owner", "--size", "1M", "--transport", "transfer-engine"],
        None,
        &[],
    );
    assert_ne!(code, 0);
    assert!(
        err.contains("INVALID_ARGUMENT") && err.contains(LIBRARY_ENV),
        "{err}"
    );

    let (_owner, ready) = start_owner(&s, &engine);
    assert_eq!(ready["transport"], "transfer_engine", "{ready}");
    let env = engine.env();

    // `crescent put` and `crescent get` in processes of their own.
    let value = data(7, 300_000);
    let (code, _, err) = crescent_with(&s, &["put", "te/one", "-"], Some(&value), &env);
    assert_eq!(code, 0, "put: {err}\n{}", server.log());
    let (code, got, err) = crescent_with(&s, &["get", "te/one"], None, &env);
    assert_eq!(code, 0, "get: {err}");
    assert!(got == value, "get returned other bytes");

    // A reader without the engine cannot reach the replica, and says why.
    let (code, _, err) = crescent_with(&s, &["get", "te/one"], None, &[]);
    assert_ne!(code, 0, "read a transfer-engine replica without the engine");
    assert!(err.contains(LIBRARY_ENV), "{err}");

    // Batches of a library client configured through its options.
    let registry = prometheus::Registry::new();
    let client = engine_client(&server, &engine, &registry).await;
    let keys: Vec<String> = (0..16).map(|i| format!("te/batch/{i}")).collect();
    let values: Vec<Vec<u8>> = (0..16).map(|i| data(i as u8, 1000 + 4096 * i)).collect();
    for r in client.put_batch(&keys, &values).await.unwrap() {
        r.unwrap();
    }
    for (got, want) in client
        .get_batch(&keys)
        .await
        .unwrap()
        .into_iter()
        .zip(&values)
    {
        assert!(&got.unwrap() == want, "batch get returned other bytes");
    }
    let encoder = prometheus::TextEncoder::new();
    let ours = encoder.encode_to_string(&registry.gather()).unwrap();
    let bytes = "crescent_transport_bytes_total";
    let written: usize = values.iter().map(Vec::len).sum();
    let through_engine = sample(&ours, bytes, &["op=\"write\"", "transport=\"ffi\""]);
    assert_eq!(through_engine as usize, written, "{ours}");
    assert!(sample(&ours, bytes, &["op=\"read\"", "transport=\"ffi\""]) >= written as f64);
    assert_eq!(sample(&ours, bytes, &["transport=\"tcp\""]), 0.0, "{ours}");

    // The owner's TCP listener moved none of these bytes.
    let metrics = ready["metrics"]
        .as_str()
        .expect("the owner's metrics address");
    let theirs = reqwest::get(format!("http://{metrics}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(
        sample(&theirs, "crescent_transport_served_bytes_total", &[]),
        0.0,
        "{theirs}"
    );

    // crescentd reaches the segment through its own engine: the cold tier reads the replica to
    // offload it, and after an eviction writes the restored value back (the promotion). A key
    // never read, so that no read lease holds its replica.
    let (code, _, err) = crescent_with(&s, &["put", "te/cold", "-"], Some(&value), &env);
    assert_eq!(code, 0, "put: {err}");
    let stat = ok_json(&server, &["offload", "te/cold"]);
    assert_eq!(stat["cold"]["state"], "materialized", "{stat}");
    assert!(crescentd_engine_bytes(&server, "read").await >= value.len() as f64);
    ok_json(&server, &["evict", "te/cold", "--hot"]);
    let (code, got, err) = crescent_with(&s, &["get", "te/cold"], None, &env);
    assert_eq!(code, 0, "cold get: {err}");
    assert!(got == value, "the cold read returned other bytes");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while ok_json(&server, &["stat", "te/cold"])["replicas"]
        .as_array()
        .is_none_or(Vec::is_empty)
    {
        assert!(std::time::Instant::now() < deadline, "never promoted");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(crescentd_engine_bytes(&server, "write").await >= value.len() as f64);
    let (code, got, err) = crescent_with(&s, &["get", "te/cold"], None, &env);
    assert_eq!(code, 0, "get of the promoted replica: {err}");
    assert!(got == value, "the promoted replica holds other bytes");
}

/// The object promise for a transfer-engine segment (docs/rebuild.md, "Owners record before
/// the ack"): `crescent put` processes that exit at once and a library client's batch write
/// through the engine, the owner records each put (a notice to its TCP listener) before it is
/// acknowledged; crescentd is SIGKILLed and restarted on its data dir, the owner replays, and
/// fresh `crescent get` processes read every object back byte-identical.
#[test]
fn acknowledged_puts_into_a_transfer_engine_segment_survive_a_crescentd_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (server, engine) = setup(dir.path());
    let s = server.server();
    let (_owner, ready) = start_owner(&s, &engine);
    assert_eq!(ready["transport"], "transfer_engine", "{ready}");
    let env = engine.env();

    let mut objects = Vec::new();
    for i in 0..4 {
        let value = data(40 + i as u8, 1 + 90_000 * i);
        let key = format!("te/durable/{i}");
        let (code, _, err) = crescent_with(&s, &["put", &key, "-"], Some(&value), &env);
        assert_eq!(code, 0, "put {key}: {err}\n{}", server.log());
        objects.push((key, value));
    }
    let keys: Vec<String> = (0..8).map(|i| format!("te/durable/batch/{i}")).collect();
    let values: Vec<Vec<u8>> = (0..8).map(|i| data(60 + i as u8, 500 + 8192 * i)).collect();
    {
        // The client and its runtime are gone before the kill.
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let client = engine_client(&server, &engine, &prometheus::Registry::new()).await;
            for r in client.put_batch(&keys, &values).await.unwrap() {
                r.unwrap();
            }
        });
    }
    objects.extend(keys.into_iter().zip(values));

    let server = server.kill_and_restart();
    server.wait_serving();
    for (key, value) in &objects {
        let (code, got, err) = crescent_with(&server.server(), &["get", key], None, &env);
        assert_eq!(
            code,
            0,
            "{key} after a SIGKILL restart: {err}\n{}",
            server.log()
        );
        assert!(got == *value, "{key} after a SIGKILL restart: bytes differ");
    }
}
