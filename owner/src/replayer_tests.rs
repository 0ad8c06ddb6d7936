//! The replayer against a small in-process crescentd stand-in: a real `ObjectDirectory` and
//! `RebuildGate` from crescent-store behind the `RebuildSink` trait (the server wires the same
//! two calls to its endpoints).

use std::sync::atomic::{AtomicU32, AtomicU64};
use std::sync::{Arc, Mutex};

use crescent_store::{MountSpec, ObjectDirectory, RebuildGate, StoreConfig};
use crescent_wire::rebuild::{compose_put_id, GateState, NoticeOutcome};
use crescent_wire::segments::TransportKind;
use crescent_wire::store::{DataType, ObjectId};
use prometheus::IntGauge;

use super::*;
use crescent_client::ownership::OwnedReplica;

const T0: i64 = 1_700_000_000_000;
const TERM: u64 = 9;

/// crescentd's rebuild endpoints, in process.
#[derive(Clone)]
struct FakeServer {
    dir: Arc<ObjectDirectory>,
    gate: Arc<Mutex<RebuildGate>>,
    /// Fail this many calls with UNAVAILABLE first.
    fail_first: Arc<AtomicU32>,
    calls: Arc<AtomicU64>,
    /// Runs inside each replay call (while the replayer waits for the answer).
    during_replay: Arc<dyn Fn() + Send + Sync>,
}

impl FakeServer {
    fn new(owners: &[&str]) -> Self {
        let dir = ObjectDirectory::new(StoreConfig::default(), T0).unwrap();
        for o in owners {
            dir.mount_segment(
                MountSpec {
                    segment_id: format!("{o}/seg0"),
                    owner_id: o.to_string(),
                    endpoint: Some("127.0.0.1:1".into()),
                    transport: TransportKind::Tcp,
                    size: 1 << 20,
                },
                T0,
            )
            .unwrap();
        }
        dir.begin_incarnation(2, TERM).unwrap();
        Self {
            dir: Arc::new(dir),
            gate: Arc::new(Mutex::new(RebuildGate::begin(
                TERM,
                owners.iter().copied(),
                T0,
                120_000,
            ))),
            fail_first: Arc::default(),
            calls: Arc::default(),
            during_replay: Arc::new(|| {}),
        }
    }

    fn unavailable(&self) -> Option<ClientError> {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let left = self.fail_first.load(std::sync::atomic::Ordering::SeqCst);
        (left > 0).then(|| {
            self.fail_first
                .store(left - 1, std::sync::atomic::Ordering::SeqCst);
            ClientError::Api(ApiError::new(ErrorCode::Unavailable, "not yet"))
        })
    }
}

fn api(e: crescent_store::StoreError) -> ClientError {
    ClientError::Api(e.into())
}

impl RebuildSink for FakeServer {
    fn replay<'a>(
        &'a self,
        req: &'a RebuildReplayRequest,
    ) -> BoxFuture<'a, Result<RebuildReplayReply, ClientError>> {
        Box::pin(async move {
            if let Some(e) = self.unavailable() {
                return Err(e);
            }
            (self.during_replay)();
            let outcomes = self
                .dir
                .rebuild_replay(&req.owner_id, req.term, &req.entries, T0)
                .map_err(api)?;
            let mut gate = self.gate.lock().unwrap();
            gate.record_replay(&outcomes);
            Ok(RebuildReplayReply {
                version: REBUILD_WIRE_VERSION,
                outcomes,
                gate: gate.status(),
            })
        })
    }

    fn complete<'a>(
        &'a self,
        req: &'a RebuildCompleteRequest,
    ) -> BoxFuture<'a, Result<RebuildCompleteReply, ClientError>> {
        Box::pin(async move {
            if let Some(e) = self.unavailable() {
                return Err(e);
            }
            let mut gate = self.gate.lock().unwrap();
            gate.complete(&req.owner_id, req.term, req.counts, T0 + 1)
                .map_err(api)?;
            Ok(RebuildCompleteReply {
                version: REBUILD_WIRE_VERSION,
                gate: gate.status(),
            })
        })
    }
}

fn table_of(owner: &str, n: u64) -> Arc<OwnershipTable> {
    let t = Arc::new(OwnershipTable::new(IntGauge::new("g", "g").unwrap()));
    let seg = format!("{owner}/seg0");
    t.serve_segment(&seg, 1 << 20);
    for i in 0..n {
        assert_eq!(
            t.record(replica(&format!("{owner}-k{i}"), i + 1, &seg, i * 64)),
            NoticeOutcome::Recorded
        );
    }
    t
}

fn replica(key: &str, seq: u64, seg: &str, offset: u64) -> OwnedReplica {
    OwnedReplica {
        id: ObjectId::new(key),
        put_id: compose_put_id(1, seq).unwrap(),
        segment_id: Arc::from(seg),
        offset,
        length: 64,
        checksum: Some(7),
        data_type: DataType::Kvcache,
    }
}

fn quick() -> ReplayConfig {
    ReplayConfig {
        batch_entries: 3,
        batches_in_flight: 2,
        initial_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(4),
        max_attempts: 5,
    }
}

fn always(_: u64) -> bool {
    true
}

#[tokio::test]
async fn replays_in_bounded_batches_then_completes() {
    let server = FakeServer::new(&["a"]);
    let table = table_of("a", 10);
    let metrics = RebuildMetrics::unregistered();
    let report = replay_table(&server, &table, "a", TERM, &always, &quick(), &metrics)
        .await
        .unwrap();
    assert_eq!(report.batches, 4, "10 entries in batches of 3");
    assert_eq!(report.counts.replayed, 10);
    assert_eq!(report.gate.state, GateState::Serving);
    assert_eq!(metrics.count("batches", "ok"), 4);
    assert_eq!(metrics.count("entries", "replayed"), 10);
    for i in 0..10 {
        let got = server
            .dir
            .get(&ObjectId::new(format!("a-k{i}")), T0)
            .unwrap();
        assert_eq!(
            (got.size, got.replicas[0].offset, got.checksum),
            (64, i * 64, Some(7))
        );
    }
    // A retried replay (the answer was lost) is all duplicates and changes nothing.
    let again = replay_table(&server, &table, "a", TERM, &always, &quick(), &metrics)
        .await
        .unwrap();
    assert_eq!(again.counts.duplicate, 10);
    assert_eq!(server.dir.stats().objects, 10);
}

#[tokio::test]
async fn one_bad_entry_fails_only_itself_and_stale_ones_leave_the_table() {
    let server = FakeServer::new(&["a", "b"]);
    let table = table_of("a", 4);
    // An entry in b's segment (this process served it once) is not a's to replay.
    table.serve_segment("b/seg0", 1 << 20);
    table.record(replica("foreign", 50, "b/seg0", 0));
    // crescentd already holds a newer version of a-k0 (another owner replayed it).
    let newer = replica("a-k0", 99, "b/seg0", 4096).to_entry();
    server.dir.rebuild_replay("b", TERM, &[newer], T0).unwrap();
    let report = replay_table(
        &server,
        &table,
        "a",
        TERM,
        &always,
        &quick(),
        &RebuildMetrics::unregistered(),
    )
    .await
    .unwrap();
    assert_eq!(
        (
            report.counts.replayed,
            report.counts.stale,
            report.counts.rejected
        ),
        (3, 1, 1)
    );
    assert_eq!(report.dropped_stale, 1);
    assert!(table.lookup(&ObjectId::new("a-k0"), "a/seg0").is_none());
    assert!(
        table.lookup(&ObjectId::new("foreign"), "b/seg0").is_some(),
        "rejected stays"
    );
}

#[tokio::test]
async fn transient_failures_are_retried_with_backoff() {
    let server = FakeServer::new(&["a"]);
    server
        .fail_first
        .store(3, std::sync::atomic::Ordering::SeqCst);
    let metrics = RebuildMetrics::unregistered();
    let report = replay_table(
        &server,
        &table_of("a", 2),
        "a",
        TERM,
        &always,
        &quick(),
        &metrics,
    )
    .await
    .unwrap();
    assert_eq!(report.counts.replayed, 2);
    assert_eq!(metrics.count("batches", "retried"), 3);
    // Out of attempts: the replay fails (the owner retries it later) and completes nothing.
    let server = FakeServer::new(&["a"]);
    server
        .fail_first
        .store(100, std::sync::atomic::Ordering::SeqCst);
    let e = replay_table(
        &server,
        &table_of("a", 2),
        "a",
        TERM,
        &always,
        &quick(),
        &metrics,
    )
    .await
    .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::Unavailable));
    assert_eq!(server.calls.load(std::sync::atomic::Ordering::SeqCst), 5);
    assert_eq!(server.gate.lock().unwrap().state(), GateState::Rebuilding);
}

#[tokio::test]
async fn a_newer_term_supersedes_the_replay() {
    let server = FakeServer::new(&["a"]);
    let e = replay_table(
        &server,
        &table_of("a", 2),
        "a",
        TERM,
        &|_| false,
        &quick(),
        &RebuildMetrics::unregistered(),
    )
    .await
    .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::StaleGeneration));
    // A replay naming an old term is refused by crescentd as a whole.
    let e = replay_table(
        &server,
        &table_of("a", 2),
        "a",
        TERM - 1,
        &always,
        &quick(),
        &RebuildMetrics::unregistered(),
    )
    .await
    .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::StaleGeneration));
}

#[tokio::test]
async fn the_table_lock_is_not_held_across_the_rpc() {
    let mut server = FakeServer::new(&["a"]);
    let table = table_of("a", 5);
    let during = table.clone();
    let recorded = Arc::new(AtomicU64::new(0));
    let count = recorded.clone();
    // A notice arriving while the replay waits for crescentd must be recorded, not wait.
    server.during_replay = Arc::new(move || {
        let n = count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let r = replica(&format!("late{n}"), 1000 + n, "a/seg0", 8192 + n * 64);
        assert_eq!(during.record(r), NoticeOutcome::Recorded);
    });
    let report = tokio::time::timeout(
        Duration::from_secs(5),
        replay_table(
            &server,
            &table,
            "a",
            TERM,
            &always,
            &quick(),
            &RebuildMetrics::unregistered(),
        ),
    )
    .await
    .expect("no deadlock")
    .unwrap();
    assert_eq!(
        report.counts.replayed, 5,
        "the snapshot was taken before the late notices"
    );
    assert_eq!(
        table.len(),
        5 + recorded.load(std::sync::atomic::Ordering::SeqCst) as usize
    );
}

#[tokio::test]
async fn a_permanently_offline_owner_blocks_neither_completion_nor_serving() {
    // Owners a and b replay; c never comes back.
    let server = FakeServer::new(&["a", "b", "c"]);
    let metrics = RebuildMetrics::unregistered();
    let a = replay_table(
        &server,
        &table_of("a", 3),
        "a",
        TERM,
        &always,
        &quick(),
        &metrics,
    )
    .await
    .unwrap();
    assert_eq!(
        a.gate.owners_completed, 1,
        "a completed although c never replays"
    );
    let b = replay_table(
        &server,
        &table_of("b", 2),
        "b",
        TERM,
        &always,
        &quick(),
        &metrics,
    )
    .await
    .unwrap();
    assert_eq!(
        (b.gate.owners_completed, b.gate.state),
        (2, GateState::Rebuilding)
    );
    // Their objects are in the directory; the gate opens DEGRADED at the timeout.
    assert!(server.dir.get(&ObjectId::new("b-k1"), T0).is_ok());
    let mut gate = server.gate.lock().unwrap();
    assert_eq!(gate.poll(T0 + 120_000), GateState::Degraded);
    assert_eq!(gate.status().waiting_for, vec!["c".to_string()]);
}
