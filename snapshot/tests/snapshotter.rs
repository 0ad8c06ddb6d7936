//! The shadow-replay snapshotter: triggers, retention, journal truncation, faults, stop.

mod common;

use std::time::{Duration, Instant};

use common::{records, records_after, tally_of, Tally};
use crescent_journal::EventData;
use crescent_snapshot::{
    restore, JournalSource, RecordBuffer, ReplayState, SnapshotDir, SnapshotError, SnapshotMetrics,
    Snapshotter, SnapshotterConfig,
};

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn config(every_events: u64, every: Duration) -> SnapshotterConfig {
    SnapshotterConfig {
        every_events,
        every,
        retain: 2,
        truncate_journal: true,
        retry_backoff: Duration::from_millis(50),
    }
}

#[test]
fn snapshots_by_event_count_then_retains_and_truncates() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = SnapshotDir::new(tmp.path());
    let journal = RecordBuffer::new();
    let metrics = SnapshotMetrics::new();
    let snapshotter = Snapshotter::start(
        Tally::default(),
        journal.clone(),
        dir.clone(),
        config(10, Duration::from_secs(3600)),
        metrics.clone(),
    )
    .unwrap();
    let all = records(35);
    for chunk in all.chunks(5) {
        journal.push(chunk.to_vec()).unwrap();
        let last = chunk.last().unwrap().seq;
        wait_until("the shadow state to catch up", || {
            snapshotter.status().applied.seq == last
        });
    }
    let seqs: Vec<u64> = dir.list().unwrap().iter().map(|e| e.seq).collect();
    assert_eq!(seqs, [20, 30], "snapshots at 10, 20, 30; two retained");
    assert_eq!(metrics.written.get(), 3);
    assert_eq!(metrics.last_seq.get(), 30);
    assert!(metrics.bytes_written.get() > 0);
    assert_eq!(metrics.applied_seq.get(), 35);
    assert_eq!(
        journal.first_seq(),
        21,
        "journal truncated behind the oldest retained"
    );
    let status = snapshotter.status();
    assert_eq!(status.last_snapshot.as_ref().unwrap().position.seq, 30);
    assert_eq!(status.last_error, None);
    snapshotter.stop().unwrap();
    // What it left behind restores to the full state.
    let r = restore(&dir, &journal, Tally::default()).unwrap();
    assert_eq!(r.state, tally_of(&all));
    assert_eq!(r.replayed, 5);
}

#[test]
fn snapshots_by_time_when_there_are_new_events() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = SnapshotDir::new(tmp.path());
    let journal = RecordBuffer::new();
    let snapshotter = Snapshotter::start(
        Tally::default(),
        journal.clone(),
        dir.clone(),
        config(1_000_000, Duration::from_millis(100)),
        SnapshotMetrics::new(),
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(250));
    assert!(dir.list().unwrap().is_empty(), "no new events: no snapshot");
    journal.push(records(3)).unwrap();
    wait_until("a timed snapshot", || {
        dir.list().unwrap().iter().any(|e| e.seq == 3)
    });
    snapshotter.stop().unwrap();
}

#[test]
fn snapshot_now_and_resume_from_a_restored_state() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = SnapshotDir::new(tmp.path());
    let journal = RecordBuffer::new();
    let first = records(7);
    journal.push(first.clone()).unwrap();
    let snapshotter = Snapshotter::start(
        Tally::default(),
        journal.clone(),
        dir.clone(),
        config(1_000, Duration::from_secs(3600)),
        SnapshotMetrics::new(),
    )
    .unwrap();
    let info = snapshotter.snapshot_now().unwrap();
    assert_eq!(info.position.seq, 7);
    assert!(info.path.ends_with("snap-00000000000000000007.crsnap"));
    // Nothing new: the same snapshot comes back without a rewrite.
    assert_eq!(snapshotter.snapshot_now().unwrap(), info);
    drop(snapshotter);

    // A restarted process restores, then starts the snapshotter from the restored state.
    let more = records_after(tally_of(&first).position(), 4);
    journal.push(more.clone()).unwrap();
    let restored = restore(&dir, &journal, Tally::default()).unwrap();
    assert_eq!(restored.last_applied_seq(), 11);
    let snapshotter = Snapshotter::start(
        restored.state,
        journal.clone(),
        dir.clone(),
        config(1_000, Duration::from_secs(3600)),
        SnapshotMetrics::new(),
    )
    .unwrap();
    let info = snapshotter.snapshot_now().unwrap();
    assert_eq!(info.position.seq, 11);
    snapshotter.stop().unwrap();
}

#[test]
fn snapshot_now_async_works_from_a_runtime() {
    let tmp = tempfile::tempdir().unwrap();
    let journal = RecordBuffer::new();
    journal.push(records(2)).unwrap();
    let snapshotter = Snapshotter::start(
        Tally::default(),
        journal,
        SnapshotDir::new(tmp.path()),
        config(1_000, Duration::from_secs(3600)),
        SnapshotMetrics::new(),
    )
    .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let info = rt.block_on(snapshotter.snapshot_now_async()).unwrap();
    assert_eq!(info.position.seq, 2);
}

#[test]
fn a_record_it_cannot_replay_stops_it_closed() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = SnapshotDir::new(tmp.path());
    let journal = RecordBuffer::new();
    let mut recs = records(4);
    recs[2].event = EventData {
        kind: "poison".into(),
        version: 1,
        payload: vec![],
    };
    let snapshotter = Snapshotter::start(
        Tally::default(),
        journal.clone(),
        dir.clone(),
        config(1, Duration::from_secs(3600)),
        SnapshotMetrics::new(),
    )
    .unwrap();
    journal.push(recs).unwrap();
    wait_until("the snapshotter to stop", || snapshotter.status().stopped);
    let status = snapshotter.status();
    assert_eq!(status.applied.seq, 2);
    assert!(status.last_error.unwrap().contains("seq 3"));
    assert!(matches!(
        snapshotter.snapshot_now(),
        Err(SnapshotError::Stopped(_))
    ));
    assert!(matches!(
        snapshotter.stop(),
        Err(SnapshotError::State { .. })
    ));
    // Nothing was written past the record it could not replay.
    assert!(dir.list().unwrap().iter().all(|e| e.seq <= 2));
}

#[test]
fn exits_when_the_journal_closes() {
    let tmp = tempfile::tempdir().unwrap();
    let journal = RecordBuffer::new();
    let snapshotter = Snapshotter::start(
        Tally::default(),
        journal.clone(),
        SnapshotDir::new(tmp.path()),
        config(1_000, Duration::from_secs(3600)),
        SnapshotMetrics::new(),
    )
    .unwrap();
    journal.push(records(3)).unwrap();
    journal.close();
    wait_until("the snapshotter to exit", || snapshotter.status().stopped);
    assert_eq!(snapshotter.status().applied.seq, 3);
    snapshotter.stop().unwrap();
}

#[test]
fn a_failed_write_is_retried() {
    let tmp = tempfile::tempdir().unwrap();
    let dir_path = tmp.path().join("snaps");
    let journal = RecordBuffer::new();
    let metrics = SnapshotMetrics::new();
    let snapshotter = Snapshotter::start(
        Tally::default(),
        journal.clone(),
        SnapshotDir::new(&dir_path),
        config(2, Duration::from_secs(3600)),
        metrics.clone(),
    )
    .unwrap();
    // Pull the directory away: writes fail until it is back.
    std::fs::remove_dir(&dir_path).unwrap();
    journal.push(records(2)).unwrap();
    wait_until("a failure", || metrics.failures.get() >= 1);
    assert!(snapshotter.status().last_error.is_some());
    assert!(
        !snapshotter.status().stopped,
        "write failures are not fatal"
    );
    std::fs::create_dir(&dir_path).unwrap();
    wait_until("the retry", || metrics.written.get() == 1);
    assert_eq!(snapshotter.status().last_error, None);
    snapshotter.stop().unwrap();
}

#[test]
fn after_retention_the_oldest_retained_snapshot_still_restores() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = SnapshotDir::new(tmp.path());
    let journal = RecordBuffer::new();
    let snapshotter = Snapshotter::start(
        Tally::default(),
        journal.clone(),
        dir.clone(),
        config(10, Duration::from_secs(3600)),
        SnapshotMetrics::new(),
    )
    .unwrap();
    let all = records(35);
    for chunk in all.chunks(5) {
        journal.push(chunk.to_vec()).unwrap();
        let last = chunk.last().unwrap().seq;
        wait_until("the shadow state to catch up", || {
            snapshotter.status().applied.seq == last
        });
    }
    snapshotter.stop().unwrap();
    // The newest snapshot is damaged: restore falls back to the oldest retained one, and the
    // journal the snapshotter truncated must still continue its chain.
    let newest = tmp.path().join(SnapshotDir::file_name(30));
    let mut bytes = std::fs::read(&newest).unwrap();
    bytes[100] ^= 0x01;
    std::fs::write(&newest, bytes).unwrap();
    let r = restore(&dir, &journal, Tally::default()).unwrap();
    assert_eq!(r.snapshot.as_ref().unwrap().1.seq, 20);
    assert_eq!(r.state, tally_of(&all));
    assert_eq!(r.replayed, 15);
}
