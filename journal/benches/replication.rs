//! Sync replication throughput against standalone, same run (docs/ha.md, "The sync commit path").
//!
//! Journaled commands as crescentd's actors issue them: each appender submits one record and
//! waits for the commit watermark to pass it. Standalone: commit = local durable. Sync: an
//! active journal replicates to a standby journal (own directory, loopback TCP, the real
//! protocol) and commit = min(local durable, standby ack). Short slices of each alternate in
//! ABBA order so the noise of a shared machine hits both; the figure is the median of the
//! ratios of neighbouring slices.
//! Target: sync >= 0.60 x standalone.
//! Run: `cargo bench -p crescent-journal --bench replication [-- APPENDERS]`

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crescent_journal::file::{FileBackend, FileOptions};
use crescent_journal::replication::{
    CommitTracker, Follower, FollowerConfig, ReplicationSource, SourceConfig,
};
use crescent_journal::{
    EventData, Journal, JournalMetrics, JournalOptions, NewRecord, StreamId, Watermark,
};

/// A journal in `dir` counting into its own registry (for the batch and sync figures).
fn open(dir: &std::path::Path) -> (Journal, prometheus::Registry) {
    let registry = prometheus::Registry::new();
    let metrics = JournalMetrics::register(&registry).expect("metrics");
    let backend = FileBackend::open(dir, FileOptions::default()).expect("open");
    let options = JournalOptions {
        metrics: Some(metrics),
        ..JournalOptions::default()
    };
    let journal = Journal::open(Box::new(backend), options).expect("journal");
    (journal, registry)
}

/// (mean records per batch, mean sync ms) of a journal over the whole run.
fn batch_figures(registry: &prometheus::Registry) -> (f64, f64) {
    let mean = |name: &str| {
        registry
            .gather()
            .iter()
            .filter(|f| f.name() == name)
            .flat_map(|f| f.get_metric())
            .map(|m| m.get_histogram())
            .map(|h| h.get_sample_sum() / (h.get_sample_count().max(1) as f64))
            .sum::<f64>()
    };
    (
        mean("crescent_journal_batch_records"),
        mean("crescent_journal_sync_seconds") * 1e3,
    )
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

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

fn main() {
    let appenders: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(16);
    let dirs: Vec<_> = (0..3)
        .map(|_| tempfile::tempdir().expect("tempdir"))
        .collect();

    let (standalone, standalone_metrics) = open(dirs[0].path());
    let standalone_commit = CommitTracker::start(standalone.durable());

    let (active, active_metrics) = open(dirs[1].path());
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
    let (standby, standby_metrics) = open(dirs[2].path());
    let addr = source.local_addr();
    let follower_config = FollowerConfig::default();
    // Only the standby the HA layer names counts toward commit (docs/ha.md, "Which acks
    // count"); here it is named at once.
    tracker.name_standby(Some(&follower_config.node));
    let follower = Follower::start(
        standby.clone(),
        Arc::new(move || Some(addr)),
        Arc::new(|_| {}),
        follower_config,
    )
    .expect("follower");
    tracker.require_standby();
    while follower.status().term == 0 {
        std::thread::sleep(Duration::from_millis(10));
    }

    // Short slices in ABBA order: on a shared machine the disk and CPU load drift within
    // seconds, so each ratio compares two neighbouring slices, and the median of those
    // ratios is the figure (the medians of each mode are printed too).
    let slice = Duration::from_millis(1000);
    let pairs = 8;
    let (mut alone, mut sync, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for p in 0..pairs {
        let (a, s) = if p % 2 == 0 {
            let a = measure(&standalone, &standalone_commit.commit(), appenders, slice);
            (a, measure(&active, &tracker.commit(), appenders, slice))
        } else {
            let s = measure(&active, &tracker.commit(), appenders, slice);
            (
                measure(&standalone, &standalone_commit.commit(), appenders, slice),
                s,
            )
        };
        alone.push(a);
        sync.push(s);
        ratios.push(s / a);
    }
    let (a, s, r) = (median(alone), median(sync), median(ratios));
    println!(
        "journaled commands, {appenders} appenders, each waiting for commit \
         ({pairs} pairs of 1 s slices, ABBA order; load {})",
        load_average()
    );
    println!("  standalone (commit = local durable):            {a:>10.0} /s (median)");
    println!("  sync replication (commit = min(local, standby)): {s:>10.0} /s (median)");
    println!("  sync / standalone: {r:.2} (median of the pairs' ratios; target >= 0.60)");
    for (name, registry) in [
        ("standalone", &standalone_metrics),
        ("active", &active_metrics),
        ("standby", &standby_metrics),
    ] {
        let (records, sync_ms) = batch_figures(registry);
        println!(
            "  {name:>10} journal: {records:>6.1} records/batch, {sync_ms:.3} ms/sync (means)"
        );
    }
    if let Some(breakdown) = crescent_journal::replication::round_timing::take_report() {
        print!("{breakdown}");
    }
    assert_eq!(
        tracker.mode(),
        crescent_journal::replication::CommitMode::Sync,
        "the run stayed in sync mode"
    );
    follower.stop();
    source.stop();
}
