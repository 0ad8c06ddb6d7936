//! A real etcd for the integration tests: `CRESCENT_TEST_ETCD` if set (scripts/test.sh starts
//! one), else one `etcd` from PATH per test binary, on free loopback ports in a temp dir.
//!
//! The spawned etcd runs under a small shell that waits on a pipe from this process: when the
//! test binary exits (however it exits), the pipe closes and the shell kills etcd and removes
//! its directory. A static child would otherwise outlive the tests.

#![allow(dead_code)]

pub mod conformance;
pub mod servers;

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crescent_ha::{ElectorConfig, HaMetrics, Role};
use tokio::sync::watch;

struct SpawnedEtcd {
    endpoint: String,
    _child: Child,
    _lifeline: Mutex<ChildStdin>,
}

static ETCD: OnceLock<Result<String, String>> = OnceLock::new();
static SPAWNED: OnceLock<SpawnedEtcd> = OnceLock::new();

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind a loopback port")
        .port()
}

fn spawn_etcd() -> Result<String, String> {
    let dir = tempfile::Builder::new()
        .prefix("crescent-ha-etcd")
        .tempdir()
        .map_err(|e| format!("temp dir: {e}"))?
        .keep();
    let (client, peer) = (free_port(), free_port());
    let endpoint = format!("http://127.0.0.1:{client}");
    let peer_url = format!("http://127.0.0.1:{peer}");
    let script = r#"
etcd --name crescent-ha-test --data-dir "$1/data" \
  --listen-client-urls "$2" --advertise-client-urls "$2" \
  --listen-peer-urls "$3" --initial-advertise-peer-urls "$3" \
  --initial-cluster "crescent-ha-test=$3" >"$1/etcd.log" 2>&1 &
pid=$!
echo started
read -r _ignored
kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
rm -rf "$1"
"#;
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg("sh")
        .arg(&dir)
        .arg(&endpoint)
        .arg(&peer_url)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run sh to start etcd: {e}"))?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("piped"))
        .read_line(&mut line)
        .map_err(|e| format!("etcd launcher: {e}"))?;
    let lifeline = child.stdin.take().expect("piped");
    // Wait for the client port to accept connections.
    let started = Instant::now();
    loop {
        if std::net::TcpStream::connect(("127.0.0.1", client)).is_ok() {
            break;
        }
        if started.elapsed() > Duration::from_secs(20) {
            let log = std::fs::read_to_string(dir.join("etcd.log")).unwrap_or_default();
            return Err(format!(
                "etcd from PATH did not listen on {endpoint} within 20 s; log:\n{log}"
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = SPAWNED.set(SpawnedEtcd {
        endpoint: endpoint.clone(),
        _child: child,
        _lifeline: Mutex::new(lifeline),
    });
    Ok(endpoint)
}

/// The etcd endpoint every test of this binary shares; panics with a clear message if there is
/// none.
pub fn etcd_endpoint() -> String {
    let endpoint = ETCD.get_or_init(|| match std::env::var("CRESCENT_TEST_ETCD") {
        Ok(url) if !url.trim().is_empty() => Ok(url),
        _ => spawn_etcd(),
    });
    match endpoint {
        Ok(url) => url.clone(),
        Err(e) => panic!(
            "these tests need etcd: set CRESCENT_TEST_ETCD to an endpoint URL, or put the \
             `etcd` binary (Debian package etcd-server) on PATH. Spawning it failed: {e}"
        ),
    }
}

/// A fresh cluster name, so tests can share one etcd.
pub fn cluster() -> String {
    format!("test-{}", uuid::Uuid::new_v4().simple())
}

pub fn config(cluster: &str, node: &str, ttl_secs: u64) -> ElectorConfig {
    let mut c = ElectorConfig::new(
        vec![etcd_endpoint()],
        cluster,
        node,
        format!("{node}.example:7000"),
    )
    .with_lease_ttl(Duration::from_secs(ttl_secs));
    c.retry_interval = Duration::from_millis(100);
    c.recheck_interval = Duration::from_millis(500);
    c
}

pub fn metrics() -> HaMetrics {
    HaMetrics::unregistered()
}

/// Waits until the role satisfies `pred`, at most `within`; returns it and when it was seen.
pub async fn wait_role(
    rx: &mut watch::Receiver<Role>,
    within: Duration,
    what: &str,
    pred: impl Fn(&Role) -> bool,
) -> (Role, Instant) {
    let found = match tokio::time::timeout(within, rx.wait_for(|r| pred(r))).await {
        Ok(Ok(role)) => Ok(role.clone()),
        Ok(Err(_)) => Err(format!("elector stopped while waiting for {what}")),
        Err(_) => Err(format!("no {what} within {within:?}")),
    };
    match found {
        Ok(role) => (role, Instant::now()),
        Err(e) => panic!("{e}; role is {:?}", *rx.borrow()),
    }
}

pub fn is_leader(r: &Role) -> bool {
    matches!(r, Role::Leader { .. })
}

pub fn term_of(r: &Role) -> u64 {
    match r {
        Role::Leader { term } | Role::SteppedDown { term, .. } => *term,
        Role::Follower { leader } => leader.term,
        Role::Candidate { .. } => panic!("a candidate has no term: {r:?}"),
    }
}

/// Polls two electors until one leads and the other follows it; returns (leader index, term).
pub async fn single_leader(electors: [&crescent_ha::Elector; 2], within: Duration) -> (usize, u64) {
    let started = Instant::now();
    loop {
        let roles = [electors[0].role(), electors[1].role()];
        for i in 0..2 {
            if let (Role::Leader { term }, Role::Follower { leader }) = (&roles[i], &roles[1 - i]) {
                if leader.term == *term && leader.node == electors[i].node_name() {
                    return (i, *term);
                }
            }
        }
        assert!(
            !matches!(
                (&roles[0], &roles[1]),
                (Role::Leader { .. }, Role::Leader { .. })
            ),
            "two leaders at once: {roles:?}"
        );
        if started.elapsed() > within {
            panic!("no single leader within {within:?}: {roles:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A plain etcd client for checking what the electors wrote.
pub async fn etcd() -> crescent_ha::etcd_client::Client {
    crescent_ha::connect(&[etcd_endpoint()])
        .await
        .expect("connect to etcd")
}

/// Starts elector `node` of `cluster` with a lease TTL of `ttl_secs`.
pub async fn start(cluster: &str, node: &str, ttl_secs: u64) -> crescent_ha::Elector {
    crescent_ha::Elector::start(config(cluster, node, ttl_secs), metrics())
        .await
        .unwrap_or_else(|e| panic!("elector {node} did not start: {e}"))
}

/// Starts elector `node` and waits until it leads; returns it and its term.
pub async fn start_leader(cluster: &str, node: &str, ttl_secs: u64) -> (crescent_ha::Elector, u64) {
    let elector = start(cluster, node, ttl_secs).await;
    let mut rx = elector.subscribe();
    let (role, _) = wait_role(&mut rx, Duration::from_secs(10), "leader", is_leader).await;
    (elector, term_of(&role))
}

/// Starts elector `node` and waits until it follows a leader.
pub async fn start_follower(cluster: &str, node: &str, ttl_secs: u64) -> crescent_ha::Elector {
    let elector = start(cluster, node, ttl_secs).await;
    let mut rx = elector.subscribe();
    wait_role(&mut rx, Duration::from_secs(10), "follower", |r| {
        matches!(r, Role::Follower { .. })
    })
    .await;
    elector
}

/// Starts electors "a" and "b" and waits until one leads and the other follows it; returns
/// (leader, follower, term).
pub async fn elected_pair(
    cluster: &str,
    ttl_secs: u64,
) -> (crescent_ha::Elector, crescent_ha::Elector, u64) {
    let a = start(cluster, "a", ttl_secs).await;
    let b = start(cluster, "b", ttl_secs).await;
    let (idx, term) = single_leader([&a, &b], Duration::from_secs(10)).await;
    if idx == 0 {
        (a, b, term)
    } else {
        (b, a, term)
    }
}
