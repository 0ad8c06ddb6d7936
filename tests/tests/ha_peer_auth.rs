//! The replication listener of a real HA pair against peers that must not get in
//! (docs/security.md "Replication peers", docs/ha.md "Which acks count"), on a real etcd
//! (CRESCENT_TEST_ETCD, started by scripts/test.sh):
//!
//! - `an_auth_pair_refuses_fake_standbys_and_survives_a_failover`: both nodes load one key file
//!   (`[auth]`); the pair reaches in-sync with the standby's own peer token; fake standbys
//!   (no token, a client token, a peer token signed by another key, the old protocol version)
//!   are each refused with their code and receive no journal byte while writes keep being
//!   acknowledged and the real standby stays named and in sync; then the active is killed, the
//!   standby takes over with every acknowledged write, and the old active rejoins as its
//!   in-sync standby.
//! - `a_flood_on_the_replication_listener_never_displaces_the_standby`: garbage,
//!   lying lengths, half-sent Hellos and silent connections past the listener's cap while
//!   writes keep being acknowledged; the standby is never displaced nor marked out of sync.
//!   The standby's own HTTP listener closes a request head that never ends at
//!   `net.http_head_timeout_ms`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crescent_journal::replication::protocol::{read_message, write_message};
use crescent_journal::replication::{refusal, Credential, Message, PROTOCOL_VERSION};
use crescent_tests::auth::AuthKey;
use crescent_tests::crescentd::{http_status, log_tail, Outcome, SegmentsClient};
use crescent_tests::ha_pair::{health, wait_active, HaPair};
use crescent_tests::store_e2e::counter;

/// Mounts segments through `client` until `stop`; the acknowledged ones are pushed to `acked`.
fn spawn_writer(
    client: SegmentsClient,
    acked: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut i = 0;
        while !stop.load(Ordering::Acquire) {
            let seg = format!("seg-{i}");
            i += 1;
            match client.mount("owner-w", &seg, 1 << 20).await {
                Outcome::Acked => acked.lock().unwrap().push(seg),
                Outcome::Rejected { status, error } => {
                    panic!("mount refused: {status} {}: {}", error.code, error.message)
                }
                Outcome::Unknown(e) => panic!("mount without an answer: {e}"),
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
}

/// What the active's replication address answered a Hello: every message until it closed.
fn fake_standby(addr: SocketAddr, version: u16, token: Option<String>) -> Vec<Message> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let hello = Message::Hello {
        version,
        node: "intruder".into(),
        last_seq: 0,
        last_term: 0,
        last_digest: crescent_journal::GENESIS_DIGEST.to_vec(),
        capabilities: Vec::new(),
        token: token.map(Credential),
        reseed: false,
    };
    write_message(&mut s, &hello).expect("hello");
    let mut got = Vec::new();
    while let Ok(m) = read_message(&mut s) {
        got.push(m);
    }
    got
}

/// The standby's own routes need a credential as the active's do: `/v1/status` and the
/// NOT_LEADER answer of every other route are 401 without a valid token (only `/healthz` and
/// `/metrics` stay open).
async fn assert_standby_routes_need_a_token(standby: SocketAddr, token: &str) {
    assert_eq!(http_status(standby, "/healthz").unwrap(), 200);
    assert_eq!(http_status(standby, "/v1/status").unwrap(), 401);
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let status = |req: reqwest::RequestBuilder| async move {
        req.send()
            .await
            .expect("the standby answers")
            .status()
            .as_u16()
    };
    let url = |path: &str| format!("http://{standby}{path}");
    assert_eq!(
        status(http.get(url("/v1/status")).bearer_auth(token)).await,
        200
    );
    assert_eq!(
        status(http.get(url("/v1/status")).bearer_auth("forged")).await,
        401
    );
    let get = || {
        http.post(url("/v1/objects/get"))
            .json(&serde_json::json!({"id": {"key": "k"}}))
    };
    assert_eq!(status(get()).await, 401);
    let not_leader = crescent_wire::ErrorCode::NotLeader.http_status();
    assert_eq!(status(get().bearer_auth(token)).await, not_leader);
}

/// The `ha` part of `node`'s health, asserting the standby `name` is connected and in sync.
async fn assert_standby_in_sync(active: SocketAddr, name: &str) {
    let h = health(active).await.expect("active answers");
    let ha = &h["ha"];
    assert_eq!(ha["standby"], name, "{ha}");
    assert_eq!(ha["standby_connected"], true, "{ha}");
    assert_eq!(ha["standby_in_sync"], true, "{ha}");
    assert_eq!(ha["marker_standby"], name, "{ha}");
}

async fn ha_counters(base: &str) -> (u64, u64) {
    (
        counter(base, "crescent_ha_standby_named_total", "").await,
        counter(base, "crescent_ha_standby_out_of_sync_total", "").await,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_auth_pair_refuses_fake_standbys_and_survives_a_failover() {
    let mut pair = HaPair::start(false).await;
    let key = pair.key();
    let active = pair.wait_in_sync().await;
    let standby = 1 - active;
    let active_addr = pair.node(active).addr;
    let base = pair.node(active).base_url();
    let h = health(active_addr).await.unwrap();
    let standby_name = h["ha"]["standby"].as_str().unwrap().to_string();
    let repl: SocketAddr = h["ha"]["replication_address"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let admin = key.issue_for("admin", None, None, Some(600)).0;
    let unauthenticated = SegmentsClient::new(&base, Duration::from_secs(5));
    assert!(
        matches!(
            unauthenticated.mount("o", "s", 1 << 20).await,
            Outcome::Rejected { status: 401, .. }
        ),
        "auth is on"
    );
    assert_standby_routes_need_a_token(pair.node(standby).addr, &admin).await;
    let before = ha_counters(&base).await;

    let acked: Arc<Mutex<Vec<String>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let client = SegmentsClient::new(&base, Duration::from_secs(5)).with_token(&admin);
    let writer = spawn_writer(client, acked.clone(), stop.clone());

    let other_key = AuthKey::new();
    let cases = [
        (PROTOCOL_VERSION, None, refusal::UNAUTHENTICATED, "missing"),
        (
            PROTOCOL_VERSION,
            Some(key.issue_for("client", Some("acme"), None, Some(600)).0),
            refusal::PERMISSION_DENIED,
            "role",
        ),
        (
            PROTOCOL_VERSION,
            Some(other_key.issue_for("peer", None, None, Some(600)).0),
            refusal::UNAUTHENTICATED,
            "invalid",
        ),
        (
            1,
            Some(key.issue_for("peer", None, None, Some(600)).0),
            refusal::INCOMPATIBLE,
            "",
        ),
    ];
    for round in 0..3 {
        for (version, token, code, reason) in &cases {
            let got = tokio::task::spawn_blocking({
                let token = token.clone();
                let version = *version;
                move || fake_standby(repl, version, token)
            })
            .await
            .unwrap();
            assert_eq!(
                got.len(),
                1,
                "round {round}, {code}: only a refusal: {got:?}"
            );
            match &got[0] {
                Message::Refused { code: c, .. } => assert_eq!(c, code, "{got:?}"),
                other => panic!("expected {code}, got {other:?}"),
            }
            if !reason.is_empty() {
                let label = format!("class=\"replication\",reason=\"{reason}\"");
                let n = counter(&base, "crescent_auth_refusals_total", &label).await;
                assert_eq!(n, round + 1, "{label}");
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_standby_in_sync(active_addr, &standby_name).await;
    }
    let during = acked.lock().unwrap().len();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        acked.lock().unwrap().len() > during,
        "writes keep being acknowledged"
    );
    assert_eq!(
        ha_counters(&base).await,
        before,
        "no standby named or marked out of sync"
    );
    assert_eq!(
        counter(
            &base,
            "crescent_net_connections_closed_total",
            "reason=\"handshake\""
        )
        .await,
        3,
        "the old-version Hellos"
    );

    // Failover: the in-sync standby takes over with every acknowledged write.
    stop.store(true, Ordering::Release);
    writer.await.unwrap();
    pair.node_mut(active).guard.sigkill();
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() > 20, "too little load: {}", acked.len());
    wait_active(pair.node(standby), Duration::from_secs(20)).await;
    let survivor = pair.segments_client(standby, Duration::from_secs(5));
    let started = Instant::now();
    while !matches!(
        survivor.mount("owner-x", "after", 1 << 20).await,
        Outcome::Acked
    ) {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no write accepted after the failover; log:\n{}",
            log_tail(&pair.node(standby).log_path, 30)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    survivor.assert_listed(&acked, "after failover").await;

    // The old active rejoins as the new active's standby, proving itself the same way.
    pair.restart_as_standby(active);
    assert_eq!(pair.wait_in_sync().await, standby);
}

/// Opens connections to `repl` that never complete a Hello, until `stop`: garbage, a length
/// far past the Hello's limit, half a Hello, and silent ones held open.
fn flood(repl: SocketAddr, stop: &AtomicBool) -> usize {
    let mut hello = Vec::new();
    write_message(
        &mut hello,
        &Message::Hello {
            version: PROTOCOL_VERSION,
            node: "flood".into(),
            last_seq: 0,
            last_term: 0,
            last_digest: crescent_journal::GENESIS_DIGEST.to_vec(),
            capabilities: Vec::new(),
            token: None,
            reseed: false,
        },
    )
    .unwrap();
    let mut held = Vec::new();
    let mut opened = 0;
    while !stop.load(Ordering::Acquire) {
        for kind in 0..4 {
            let Ok(mut s) = TcpStream::connect_timeout(&repl, Duration::from_secs(1)) else {
                continue;
            };
            opened += 1;
            let _ = match kind {
                0 => s.write_all(&[0xc1; 512]),
                1 => s.write_all(&u32::MAX.to_le_bytes()),
                2 => s.write_all(&hello[..hello.len() / 2]),
                _ => Ok(()),
            };
            held.push(s);
        }
        if held.len() > 64 {
            held.drain(..32);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    opened
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_flood_on_the_replication_listener_never_displaces_the_standby() {
    let net = "[net]\nreplication_handshake_timeout_ms = 500\nreplication_max_connections = 4\n\
               http_head_timeout_ms = 1000\n";
    let pair = HaPair::start_with(false, net).await;
    let active = pair.wait_in_sync().await;
    let (active_addr, standby_addr) = (pair.node(active).addr, pair.node(1 - active).addr);
    let base = pair.node(active).base_url();
    let h = health(active_addr).await.unwrap();
    let standby_name = h["ha"]["standby"].as_str().unwrap().to_string();
    let repl: SocketAddr = h["ha"]["replication_address"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let before = ha_counters(&base).await;

    let acked: Arc<Mutex<Vec<String>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let client = pair.segments_client(active, Duration::from_secs(5));
    let writer = spawn_writer(client, acked.clone(), stop.clone());
    let flooding = Arc::new(AtomicBool::new(false));
    let flooder = std::thread::spawn({
        let flooding = flooding.clone();
        move || {
            let stop = AtomicBool::new(false);
            std::thread::scope(|s| {
                let workers: Vec<_> = (0..3).map(|_| s.spawn(|| flood(repl, &stop))).collect();
                while !flooding.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_millis(10));
                }
                stop.store(true, Ordering::Release);
                workers
                    .into_iter()
                    .map(|w| w.join().unwrap())
                    .sum::<usize>()
            })
        }
    });
    // Four seconds of flood; every 200 ms the standby must still be the connected, in-sync one
    // and writes must keep being acknowledged.
    let started = Instant::now();
    let mut last = 0;
    while started.elapsed() < Duration::from_secs(4) {
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_standby_in_sync(active_addr, &standby_name).await;
        let n = acked.lock().unwrap().len();
        if started.elapsed() > Duration::from_secs(1) {
            assert!(n > last, "no write acknowledged in 200 ms ({n})");
        }
        last = n;
    }
    flooding.store(true, Ordering::Release);
    let opened = tokio::task::spawn_blocking(move || flooder.join().unwrap())
        .await
        .unwrap();
    stop.store(true, Ordering::Release);
    writer.await.unwrap();
    assert!(opened > 100, "only {opened} flood connections");
    assert_eq!(
        ha_counters(&base).await,
        before,
        "no standby named or marked out of sync"
    );
    let over = counter(
        &base,
        "crescent_net_connections_closed_total",
        "reason=\"over_limit\"",
    );
    assert!(over.await > 0, "the cap refused some");
    let closed = counter(
        &base,
        "crescent_net_connections_closed_total",
        "reason=\"handshake\"",
    );
    assert!(closed.await > 0, "handshakes closed");
    assert_standby_in_sync(active_addr, &standby_name).await;

    // The standby's HTTP listener has the node's bounds: a head that never ends is closed at
    // `http_head_timeout_ms` (1 s here; 5 s by default), and a body that never ends is not
    // waited for (answered at once, here UNAUTHENTICATED as it carries no token, then closed).
    let head = b"GET /healthz HTTP/1.1\r\nHost: x\r\n".as_slice();
    let (took, answer) = tokio::task::spawn_blocking(move || until_closed(standby_addr, head))
        .await
        .unwrap();
    assert!(
        took < Duration::from_millis(3500),
        "the standby kept a partial head open for {took:?}: {answer}"
    );
    let body = b"POST /v1/segments/mount HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
                 Content-Length: 100\r\n\r\n0123456789"
        .as_slice();
    let (took, answer) = tokio::task::spawn_blocking(move || until_closed(standby_addr, body))
        .await
        .unwrap();
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    assert!(
        took < Duration::from_secs(3),
        "the standby kept a partial body open for {took:?}"
    );
}

/// Sends `bytes` to `addr` and reads until it closes: (how long after the send, what came).
fn until_closed(addr: SocketAddr, bytes: &[u8]) -> (Duration, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(bytes).unwrap();
    let started = Instant::now();
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    (started.elapsed(), String::from_utf8_lossy(&buf).to_string())
}
