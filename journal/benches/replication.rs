//! Sync replication throughput against standalone, same run (issue 4's benchmark).
//!
//! Journaled commands as crescentd's actors issue them: each appender submits one record and
//! waits for the commit watermark to pass it. Standalone: commit = local durable. Sync: an
//! active journal replicates to a standby journal (own directory, loopback TCP, the real
//! protocol) and commit = min(local durable, standby ack). Slices of each alternate so the
//! noise of a shared machine hits both; the medians and their ratio are printed.
//! Target: sync >= 0.60 x standalone.
//! Run: `cargo bench -p crescent-journal --bench replication [-- APPENDERS]`

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crescent_journal::file::{FileBackend, FileOptions};
use crescent_journal::replication::{
    CommitTracker, Follower, FollowerConfig, ReplicationSource, SourceConfig,
};
use crescent_journal::{EventData, Journal, JournalOptions, NewRecord, StreamId, Watermark};

fn open(dir: &std::path::Path) -> Journal {
    let backend = FileBackend::open(dir, FileOptions::default()).expect("open");
    Journal::open(Box::new(backend), JournalOptions::default()).expect("journal")
}

fn record(i: u64) -> NewRecord {
    NewRecord {
        stream: StreamId::new("segment_registry", "cluster"),
        event: EventData {
            kind: "segment_mounted".into(),
            version: 2,
            payload: vec![(i % 251) as u8; 120],
        },
        timestamp_ms: i as i64,
    }
}

/// Commands per second over `slice`, `appenders` threads each submitting and waiting for
/// `commit`.
fn measure(journal: &Journal, commit: &Watermark, appenders: usize, slice: Duration) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..appenders)
        .map(|t| {
            let (j, c, stop, done) = (journal.clone(), commit.clone(), stop.clone(), done.clone());
            std::thread::spawn(move || {
                let mut i = t as u64;
                while !stop.load(Ordering::Relaxed) {
                    let ticket = j.submit(1, vec![record(i)]).expect("submit");
                    c.wait_for_blocking(ticket.last_seq).expect("commit");
                    done.fetch_add(1, Ordering::Relaxed);
                    i += appenders as u64;
                }
            })
        })
        .collect();
    let started = Instant::now();
    std::thread::sleep(slice);
    stop.store(true, Ordering::Relaxed);
    let n = done.load(Ordering::Relaxed);
    let secs = started.elapsed().as_secs_f64();
    for t in threads {
        t.join().expect("appender");
    }
    n as f64 / secs
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let appenders: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(16);
    let dirs: Vec<_> = (0..3)
        .map(|_| tempfile::tempdir().expect("tempdir"))
        .collect();

    let standalone = open(dirs[0].path());
    let standalone_commit = CommitTracker::start(standalone.durable());

    let active = open(dirs[1].path());
    let tracker = CommitTracker::start(active.durable());
    let source = ReplicationSource::start(
        active.clone(),
        "127.0.0.1:0".parse().expect("addr"),
        tracker.clone(),
        Arc::new(|| Some(1)),
        Arc::new(|_: &[(String, u16)]| Ok(())),
        SourceConfig::default(),
    )
    .expect("source");
    let standby = open(dirs[2].path());
    let addr = source.local_addr();
    let follower = Follower::start(
        standby.clone(),
        Arc::new(move || Some(addr)),
        Arc::new(|_| {}),
        FollowerConfig::default(),
    )
    .expect("follower");
    tracker.require_standby();
    while follower.status().term == 0 {
        std::thread::sleep(Duration::from_millis(10));
    }

    let slice = Duration::from_secs(2);
    let (mut alone, mut sync) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        alone.push(measure(
            &standalone,
            &standalone_commit.commit(),
            appenders,
            slice,
        ));
        sync.push(measure(&active, &tracker.commit(), appenders, slice));
    }
    let (a, s) = (median(alone), median(sync));
    println!("journaled commands, {appenders} appenders, each waiting for commit (median of 3 x 2 s slices)");
    println!("  standalone (commit = local durable):            {a:>10.0} /s");
    println!("  sync replication (commit = min(local, standby)): {s:>10.0} /s");
    println!("  sync / standalone: {:.2} (target >= 0.60)", s / a);
    assert_eq!(
        tracker.mode(),
        crescent_journal::replication::CommitMode::Sync,
        "the run stayed in sync mode"
    );
    follower.stop();
    source.stop();
}
