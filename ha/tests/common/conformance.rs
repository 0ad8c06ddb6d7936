//! The coordination conformance suite: what every backend (etcd, Redis) must guarantee to the
//! elector, checked through real electors against a real server the test owns
//! ([`ServerUnderTest`]). `tests/conformance_etcd.rs` and `tests/conformance_redis.rs` run it.
//!
//! Throughout, a [`FenceMonitor`] samples every elector's fence: at no instant may two nodes
//! hold a fence, and no term may ever be held by two nodes.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crescent_ha::{
    Elector, ElectorConfig, HaError, HaMetrics, LeaderFence, ReplicationMarker, Role,
    StepDownReason,
};

use super::servers::ServerUnderTest;
use super::{cluster, is_leader, term_of, wait_role};

const TTL: Duration = Duration::from_secs(2);

/// The conformance tests each freeze or restart a server and time leases: one at a time.
pub static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn config(server: &dyn ServerUnderTest, cluster: &str, node: &str) -> ElectorConfig {
    let mut c = ElectorConfig::with_coordination(
        server.endpoint(),
        cluster,
        node,
        format!("{node}.example:7000"),
    )
    .with_lease_ttl(TTL);
    c.retry_interval = Duration::from_millis(100);
    c.recheck_interval = Duration::from_millis(500);
    c
}

async fn start(server: &dyn ServerUnderTest, cluster: &str, node: &str) -> Elector {
    let elector = Elector::start(config(server, cluster, node), HaMetrics::unregistered())
        .await
        .unwrap_or_else(|e| panic!("elector {node} did not start: {e}"));
    assert_eq!(elector.backend(), server.backend());
    elector
}

/// Samples fences every 2 ms; records which node held which term and any overlap.
pub struct FenceMonitor {
    sampler: Arc<FenceSampler>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct FenceSampler {
    fences: Vec<(String, LeaderFence)>,
    holders: Mutex<BTreeMap<u64, Vec<String>>>,
    overlaps: Mutex<Vec<String>>,
}

impl FenceSampler {
    fn sample(&self) {
        let held: Vec<(&String, u64)> = self
            .fences
            .iter()
            .filter_map(|(n, f)| f.current_term().map(|t| (n, t)))
            .collect();
        if held.len() > 1 {
            self.overlaps.lock().unwrap().push(format!("{held:?}"));
        }
        let mut holders = self.holders.lock().unwrap();
        for (node, term) in held {
            let nodes = holders.entry(term).or_default();
            if !nodes.contains(node) {
                nodes.push(node.clone());
            }
        }
    }
}

impl FenceMonitor {
    pub fn start(electors: &[&Elector]) -> FenceMonitor {
        let sampler = Arc::new(FenceSampler {
            fences: electors
                .iter()
                .map(|e| (e.node_name().to_string(), e.fence()))
                .collect(),
            ..FenceSampler::default()
        });
        let s = sampler.clone();
        let task = tokio::spawn(async move {
            loop {
                s.sample();
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        });
        FenceMonitor { sampler, task }
    }

    /// Waits (at most `within`) until a sample has seen `term` held. A leader the test saw
    /// may resign right after; on a loaded machine the sampling task can miss a short term
    /// unless the test waits for it.
    pub async fn wait_seen(&self, term: u64, within: Duration) {
        let started = Instant::now();
        while !self.sampler.holders.lock().unwrap().contains_key(&term) {
            assert!(
                started.elapsed() < within,
                "no sample saw term {term} held within {within:?}"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Stops sampling (after a last sample); asserts no overlap and one node per term;
    /// returns the terms held.
    pub fn finish(self) -> Vec<u64> {
        self.task.abort();
        self.sampler.sample();
        let overlaps = self.sampler.overlaps.lock().unwrap();
        let shown: Vec<&String> = overlaps.iter().take(3).collect();
        assert!(
            overlaps.is_empty(),
            "two fences at once in {} samples: {shown:?}",
            overlaps.len()
        );
        let holders = self.sampler.holders.lock().unwrap();
        for (term, nodes) in holders.iter() {
            assert_eq!(nodes.len(), 1, "term {term} held by {nodes:?}");
        }
        holders.keys().copied().collect()
    }
}

/// Waits until exactly one of `electors` leads and every other follows it; returns its index
/// and term.
async fn single_leader(electors: &[&Elector], within: Duration) -> (usize, u64) {
    let started = Instant::now();
    loop {
        let roles: Vec<Role> = electors.iter().map(|e| e.role()).collect();
        let leaders: Vec<usize> = (0..roles.len()).filter(|i| is_leader(&roles[*i])).collect();
        assert!(leaders.len() <= 1, "two leaders at once: {roles:?}");
        if let [i] = leaders[..] {
            let term = term_of(&roles[i]);
            let all_follow = roles.iter().enumerate().all(|(j, r)| {
                j == i
                    || matches!(r, Role::Follower { leader }
                        if leader.term == term && leader.node == electors[i].node_name())
            });
            if all_follow {
                return (i, term);
            }
        }
        assert!(
            started.elapsed() < within,
            "no single leader within {within:?}: {roles:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// N candidates start at once, several rounds: each round exactly one leads, every other
/// follows it under the same term, and terms strictly increase from round to round.
pub async fn elections_race(server: &dyn ServerUnderTest) {
    let cluster = cluster();
    let mut electors = Vec::new();
    for node in ["n0", "n1", "n2", "n3"] {
        electors.push(start(server, &cluster, node).await);
    }
    let monitor = FenceMonitor::start(&electors.iter().collect::<Vec<_>>());
    let mut terms = Vec::new();
    for _round in 0..3 {
        let refs: Vec<&Elector> = electors.iter().collect();
        let (i, term) = single_leader(&refs, Duration::from_secs(10)).await;
        terms.push(term);
        monitor.wait_seen(term, Duration::from_secs(10)).await;
        // The first round is a race of all four on a fresh cluster. Later rounds hand over:
        // the leader names a successor in sync (as a leader whose standby caught up would)
        // and resigns; the others follow whoever wins.
        let leader = electors.remove(i);
        let successor = electors[0].node_name().to_string();
        leader.mark_in_sync(&successor, 1).await.unwrap();
        leader.resign().await.unwrap();
    }
    let held = monitor.finish();
    assert!(terms.windows(2).all(|w| w[0] < w[1]), "terms {terms:?}");
    assert_eq!(held, terms, "fences held exactly the elected terms");
    for e in electors {
        e.resign().await.unwrap();
    }
}

/// Starts "a" and "b"; returns (leader, follower, term) once one leads and has named the
/// other in sync (so either may take over).
async fn elected_pair(server: &dyn ServerUnderTest) -> (Elector, Elector, u64) {
    let cluster = cluster();
    let a = start(server, &cluster, "a").await;
    let b = start(server, &cluster, "b").await;
    let (i, term) = single_leader(&[&a, &b], Duration::from_secs(10)).await;
    let (leader, follower) = if i == 0 { (a, b) } else { (b, a) };
    leader.mark_in_sync(follower.node_name(), 1).await.unwrap();
    (leader, follower, term)
}

/// Polls `fence` until it no longer holds a term; returns when that was seen.
fn deposition_probe(fence: LeaderFence) -> tokio::task::JoinHandle<Instant> {
    tokio::spawn(async move {
        while fence.current_term().is_some() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        Instant::now()
    })
}

/// A leader that stops renewing (but still runs) loses its lease; its fence reports it
/// deposed before the peer wins, and the peer's term is greater.
pub async fn paused_leader(server: &dyn ServerUnderTest) {
    let (leader, follower, term1) = elected_pair(server).await;
    let monitor = FenceMonitor::start(&[&leader, &follower]);
    let deposed = deposition_probe(leader.fence());
    let mut leader_rx = leader.subscribe();
    let mut follower_rx = follower.subscribe();
    leader.pause_keepalive_for_test(Duration::from_secs(6));
    let (role, _) = wait_role(&mut leader_rx, Duration::from_secs(5), "step-down", |r| {
        matches!(r, Role::SteppedDown { .. })
    })
    .await;
    assert_eq!(
        role,
        Role::SteppedDown {
            term: term1,
            reason: StepDownReason::DeadlinePassed
        }
    );
    let (role, won_at) = wait_role(
        &mut follower_rx,
        Duration::from_secs(10),
        "takeover",
        is_leader,
    )
    .await;
    let deposed_at = deposed.await.unwrap();
    assert!(
        deposed_at < won_at,
        "the old fence held until {:?} after the new win",
        deposed_at - won_at
    );
    let term2 = term_of(&role);
    assert!(term2 > term1, "term {term2} after {term1}");
    // The deposed leader's term can no longer write the marker.
    assert!(matches!(
        leader.mark_out_of_sync(follower.node_name(), 2).await,
        Err(HaError::NotLeader)
    ));
    assert_eq!(monitor.finish(), vec![term1, term2]);
    leader.resign().await.unwrap();
    follower.resign().await.unwrap();
}

/// The server is killed and restarted on the same port (Redis: empty, no persistence). A
/// single leader emerges again, never under a lower term, and the next election's term is
/// greater than every term before the restart.
pub async fn backend_restart(server: &mut dyn ServerUnderTest) {
    let (leader, follower, term1) = elected_pair(server).await;
    let monitor = FenceMonitor::start(&[&leader, &follower]);
    server.restart();
    // Either the leader kept its term (etcd kept the lease) or it stepped down and someone
    // won a greater term; nobody leads under a lower one.
    tokio::time::sleep(TTL).await;
    let (i, term2) = single_leader(&[&leader, &follower], Duration::from_secs(15)).await;
    assert!(term2 >= term1, "term {term2} after {term1}");
    let (now_leader, other) = if i == 0 {
        (leader, follower)
    } else {
        (follower, leader)
    };
    // A fresh election after the restart: its term exceeds all earlier ones.
    if now_leader.replication_marker().await.unwrap().is_some() {
        now_leader.mark_in_sync(other.node_name(), 2).await.unwrap();
    }
    let mut other_rx = other.subscribe();
    now_leader.resign().await.unwrap();
    let (role, _) = wait_role(
        &mut other_rx,
        Duration::from_secs(10),
        "new leader",
        is_leader,
    )
    .await;
    let term3 = term_of(&role);
    assert!(
        term3 > term2 && term3 > term1,
        "term {term3} after {term1}, {term2}"
    );
    monitor.finish();
    other.resign().await.unwrap();
}

/// The server is frozen (SIGSTOP): the leader steps down before its lease could have expired
/// in the server, a new leader wins under a greater term after SIGCONT, and no two fences
/// overlap.
pub async fn backend_frozen(server: &dyn ServerUnderTest) {
    let (leader, follower, term1) = elected_pair(server).await;
    let monitor = FenceMonitor::start(&[&leader, &follower]);
    let fence = leader.fence();
    let mut leader_rx = leader.subscribe();
    server.freeze();
    // Renewals sent from now on are never answered: the lease lives at least until the last
    // acknowledged renewal was sent plus the TTL, which is the fence's deadline plus TTL/3.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let lease_expires_no_earlier = Instant::now() + fence.remaining().unwrap_or_default() + TTL / 3;
    let step_down = wait_role(&mut leader_rx, Duration::from_secs(5), "step-down", |r| {
        matches!(r, Role::SteppedDown { .. })
    });
    let (role, _) = step_down.await;
    assert_eq!(
        role,
        Role::SteppedDown {
            term: term1,
            reason: StepDownReason::DeadlinePassed
        }
    );
    assert_eq!(fence.current_term(), None);
    assert!(
        Instant::now() < lease_expires_no_earlier,
        "the leader stepped down only after its lease could have expired"
    );
    server.thaw();
    let (_, term2) = single_leader(&[&leader, &follower], Duration::from_secs(15)).await;
    assert!(term2 > term1, "term {term2} after {term1}");
    let held = monitor.finish();
    assert_eq!(held, vec![term1, term2]);
    leader.resign().await.unwrap();
    follower.resign().await.unwrap();
}

/// A marker written under a term that is not the leader's (a former leader's term, or one
/// that never existed) is refused by the backend itself, not only by the elector's local
/// check, and nothing is written.
pub async fn stale_marker_write_is_fenced(server: &dyn ServerUnderTest) {
    let (leader, follower, term1) = elected_pair(server).await;
    let cluster = leader.cluster().to_string();
    let mut follower_rx = follower.subscribe();
    leader.resign().await.unwrap();
    let (role, _) = wait_role(
        &mut follower_rx,
        Duration::from_secs(10),
        "new leader",
        is_leader,
    )
    .await;
    let term2 = term_of(&role);
    let before = follower.replication_marker().await.unwrap();
    for term in [term1, term2 + 1000] {
        let marker = ReplicationMarker::with_standby("a", term, "b", true, 99);
        let err = raw_write_marker(server, &cluster, term, &marker)
            .await
            .unwrap_err();
        assert!(matches!(err, HaError::Fenced { .. }), "term {term}: {err}");
    }
    assert_eq!(follower.replication_marker().await.unwrap(), before);
    // The current term writes.
    let marker = ReplicationMarker::claim(follower.node_name(), term2);
    raw_write_marker(server, &cluster, term2, &marker)
        .await
        .unwrap();
    follower.resign().await.unwrap();
}

/// Writes a marker through the backend directly (no elector, no local fence).
async fn raw_write_marker(
    server: &dyn ServerUnderTest,
    cluster: &str,
    term: u64,
    marker: &ReplicationMarker,
) -> Result<(), HaError> {
    use crescent_ha::{ClusterKeys, Coordination, CoordinationEndpoint};
    let keys = ClusterKeys::new(cluster)?;
    let timeout = Duration::from_secs(2);
    match server.endpoint() {
        CoordinationEndpoint::Etcd(endpoints) => {
            let client = crescent_ha::connect(&endpoints).await?;
            crescent_ha::EtcdCoordination::new(client, keys, timeout)
                .write_marker(term, marker)
                .await
        }
        CoordinationEndpoint::Redis(url) => {
            let conn = crescent_ha::connect_redis(&url, timeout)?;
            crescent_ha::RedisCoordination::new(conn, keys, timeout)
                .write_marker(term, marker)
                .await
        }
    }
}
