//! The data plane with `[auth]` on (docs/security.md, "The data plane"): a transfer-plane
//! OPEN + READ or WRITE of an owner's segment needs the grant crescentd issued for that range
//! and operation. Real binaries: crescentd, a `crescent owner` process with an owner token,
//! `crescent` CLI writers and readers, and a raw transfer-plane client as the attacker.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use common::auth::AuthKey;
use common::{crescent, crescent_bin, Proc, Server};
use crescent_transport::tcp::{TcpConfig, TcpTransport};
use crescent_transport::{
    Grant, RemoteSegment, SegmentMemory, TransferDescriptor, TransferOp, Transport, TransportError,
    TransportMetrics,
};
use crescent_wire::rebuild::{
    NoticeOutcome, OwnerNotice, OwnerNoticeReply, ReplayEntry, REBUILD_WIRE_VERSION,
};
use crescent_wire::store::{DataType, ObjectId};
use serde_json::{json, Value};

fn start(key: &AuthKey, dir: &std::path::Path) -> Server {
    let config = dir.join("crescentd.toml");
    std::fs::write(&config, "[store]\nembedded_segment_bytes = 0\n").unwrap();
    let mut args = key.server_args();
    args.extend(["--config".to_string(), config.display().to_string()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Server::start_with(&args)
}

/// A `crescent owner` process (owner token) serving 16 MiB, once mounted.
fn start_owner(server: &Server, token: &str, id: &str) -> Proc {
    let child = Command::new(crescent_bin())
        .env("CRESCENT_TOKEN", token)
        .args(["--server", &server.server(), "--json", "owner"])
        .args(["--size", "16M", "--id", id])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawning crescent owner");
    let mut proc = Proc(child);
    let mut lines = BufReader::new(proc.0.stdout.take().unwrap()).lines();
    let ready = lines.next().expect("owner ready line").unwrap();
    assert!(ready.contains("segment"), "{ready}");
    std::thread::spawn(move || for _ in lines {});
    proc
}

/// crescentd with `[auth]` and no embedded segment, one `crescent owner` (`o1`) with an owner
/// token, and client tokens of tenants A (alice) and B (bob).
struct Setup {
    server: Server,
    alice: String,
    bob: String,
    _owner: Proc,
    _key: AuthKey,
    _dir: tempfile::TempDir,
}

impl Setup {
    fn start() -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let key = AuthKey::new();
        let server = start(&key, dir.path());
        let owner = start_owner(&server, &key.token("owner", None, Some("o1")), "o1");
        Setup {
            alice: key.token("client", Some("A"), None),
            bob: key.token("client", Some("B"), None),
            server,
            _owner: owner,
            _key: key,
            _dir: dir,
        }
    }
}

fn cli(server: &Server, token: &str, args: &[&str], stdin: Option<&[u8]>) -> Vec<u8> {
    let mut full = vec!["--token", token];
    full.extend_from_slice(args);
    let (code, out, err) = crescent(&server.server(), &full, stdin);
    assert_eq!(code, 0, "{args:?}: {err}\n{}", server.log());
    out
}

/// POST a JSON body as `token`; the JSON answer.
fn post(server: &Server, token: &str, path: &str, body: Value) -> Value {
    let rt = common::cold::runtime();
    rt.block_on(async {
        let resp = reqwest::Client::new()
            .post(format!("http://{}{path}", server.addr))
            .bearer_auth(token)
            .json(&body)
            .send()
            .await
            .expect("http request");
        assert!(resp.status().is_success(), "{path}: {}", resp.status());
        resp.json().await.unwrap()
    })
}

/// One transfer against `replica` (a get or put_start answer's replica) from a fresh
/// client-only transport: `Ok(bytes read)` or the transport's error.
fn transfer(
    replica: &Value,
    op: TransferOp,
    offset_in_replica: u64,
    len: u64,
    grant: Option<Grant>,
) -> Result<Vec<u8>, TransportError> {
    let rt = common::cold::runtime();
    rt.block_on(async {
        let t = TcpTransport::start(TcpConfig::default(), TransportMetrics::unregistered())
            .await
            .unwrap();
        let memory = std::sync::Arc::new(SegmentMemory::allocate(len as usize).unwrap());
        memory.write_at(0, &vec![0xEE; len as usize]).await.unwrap();
        let local = t.register(memory.clone()).unwrap();
        let remote = RemoteSegment::new(
            replica["endpoint"].as_str().unwrap(),
            replica["segment_id"].as_str().unwrap(),
        );
        let d = TransferDescriptor {
            op,
            remote,
            remote_offset: replica["offset"].as_u64().unwrap() + offset_in_replica,
            local,
            local_offset: 0,
            length: len,
            grant,
        };
        let done = t.submit(&[d]).await.unwrap().into_result();
        let mut out = vec![0u8; len as usize];
        memory.read_at(0, &mut out).await.unwrap();
        done.map(|()| out)
    })
}

fn grant_of(replica: &Value) -> Grant {
    let bytes: Vec<u8> = serde_json::from_value(replica["grant"].clone()).unwrap();
    Grant::decode(&bytes).expect("a well-formed grant")
}

fn denied(r: Result<Vec<u8>, TransportError>) {
    match r {
        Err(TransportError::PermissionDenied { .. }) => {}
        other => panic!("expected PERMISSION_DENIED, got {other:?}"),
    }
}

#[test]
fn an_owners_segment_opens_only_to_the_grants_crescentd_issued() {
    // Moved out field by field: the owner and the key live on in `setup` to the end.
    let setup = Setup::start();
    let (server, alice, bob) = (setup.server, setup.alice, setup.bob);

    // The legitimate paths: CLI processes that exit after each command.
    let secret = b"tenant A's secret value, 40 bytes long!!".to_vec();
    cli(&server, &alice, &["put", "k", "-"], Some(&secret));
    assert_eq!(cli(&server, &alice, &["get", "k"], None), secret);
    cli(&server, &bob, &["put", "b", "-"], Some(b"bob's own value"));

    // Alice's replica, as her own get describes it (Bob cannot even get that far).
    let got = post(
        &server,
        &alice,
        "/v1/objects/get",
        json!({"id": {"key": "k"}}),
    );
    let replica = got["replicas"][0].clone();
    assert!(replica["grant"].is_array(), "{got}");
    let len = secret.len() as u64;

    // Reading or writing Alice's range by segment name alone is refused.
    denied(transfer(&replica, TransferOp::Read, 0, len, None));
    denied(transfer(&replica, TransferOp::Write, 0, len, None));
    // Bob's own read grant does not reach Alice's range, nor does a write with it.
    let bobs = post(
        &server,
        &bob,
        "/v1/objects/get",
        json!({"id": {"key": "b"}}),
    );
    let bob_grant = grant_of(&bobs["replicas"][0]);
    denied(transfer(
        &replica,
        TransferOp::Read,
        0,
        len,
        Some(bob_grant),
    ));
    // Alice's read grant reads (whole and part) but cannot write.
    let read = grant_of(&replica);
    assert_eq!(
        transfer(&replica, TransferOp::Read, 0, len, Some(read)).unwrap(),
        secret
    );
    assert_eq!(
        transfer(&replica, TransferOp::Read, 7, 8, Some(read)).unwrap(),
        secret[7..15]
    );
    denied(transfer(&replica, TransferOp::Write, 0, len, Some(read)));
    // A tampered grant (widened to the whole segment) is refused.
    let mut wide = read;
    wide.offset = 0;
    wide.length = 16 << 20;
    denied(transfer(&replica, TransferOp::Read, 0, len, Some(wide)));

    // Nothing of Alice's changed.
    assert_eq!(cli(&server, &alice, &["get", "k"], None), secret);
}

/// Sends one owner notice with `entries` to the listener of `replica`; the outcomes.
fn notify(replica: &Value, owner_id: &str, entries: Vec<ReplayEntry>) -> Vec<NoticeOutcome> {
    let rt = common::cold::runtime();
    rt.block_on(async {
        let t = TcpTransport::start(TcpConfig::default(), TransportMetrics::unregistered())
            .await
            .unwrap();
        let notice = OwnerNotice {
            version: REBUILD_WIRE_VERSION,
            owner_id: owner_id.into(),
            entries,
        };
        let body = rmp_serde::to_vec_named(&notice).unwrap();
        let answer = t
            .notify(replica["endpoint"].as_str().unwrap(), &body)
            .await
            .unwrap();
        rmp_serde::from_slice::<OwnerNoticeReply>(&answer)
            .unwrap()
            .outcomes
    })
}

/// An owner records a notice entry only with the write grant of that range and put: a
/// forged entry, or one carrying another put's grant, would otherwise be replayed into
/// crescentd's directory after a restart (docs/rebuild.md).
#[test]
fn an_owner_records_only_notices_backed_by_their_write_grant() {
    let setup = Setup::start();
    let (server, bob) = (setup.server, setup.bob);
    let started = post(
        &server,
        &bob,
        "/v1/objects/put_start",
        json!({"id": {"key": "b"}, "size": 16}),
    );
    let replica = started["replicas"][0].clone();
    let put_id = started["put_id"].as_u64().unwrap();
    let entry = |tenant: &str, key: &str, put_id: u64, grant: Option<Vec<u8>>| ReplayEntry {
        id: ObjectId::scoped(Some(tenant), None, key),
        put_id,
        segment_id: replica["segment_id"].as_str().unwrap().into(),
        offset: replica["offset"].as_u64().unwrap(),
        length: 16,
        checksum: None,
        data_type: DataType::default(),
        grant,
    };
    let bobs: Vec<u8> = serde_json::from_value(replica["grant"].clone()).unwrap();
    let outcomes = notify(
        &replica,
        "o1",
        vec![
            // No grant; Bob's grant naming tenant A's key; Bob's grant for another put.
            entry("A", "evil", put_id, None),
            entry("A", "evil", put_id, Some(bobs.clone())),
            entry("B", "b", put_id + 1, Some(bobs.clone())),
            // Bob's own entry with its grant: recorded.
            entry("B", "b", put_id, Some(bobs)),
        ],
    );
    use NoticeOutcome::{Recorded, Rejected};
    assert_eq!(outcomes, vec![Rejected, Rejected, Rejected, Recorded]);
}

/// A CLI writer with a `client` token that names no tenant: its owner notice names the
/// token's tenant, so after a kill -9 of crescentd the owner's replay brings the object back
/// in that tenant, readable by its writer and by no one else.
#[test]
fn a_tenants_cli_put_survives_a_crescentd_kill_in_its_tenant() {
    // Moved out field by field: the owner and the key live on in `setup` to the end.
    let setup = Setup::start();
    let (server, alice, bob) = (setup.server, setup.alice, setup.bob);
    cli(&server, &alice, &["put", "k", "-"], Some(b"alice's value"));

    let server = server.kill_and_restart();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (code, out, err) = crescent(&server.server(), &["--token", &alice, "get", "k"], None);
        if code == 0 {
            assert_eq!(out, b"alice's value");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never readable again: {err}\n{}",
            server.log()
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let (code, _, err) = crescent(&server.server(), &["--token", &bob, "get", "k"], None);
    assert_ne!(code, 0, "tenant B read tenant A's key");
    assert!(err.contains("NOT_FOUND"), "{err}");
}
