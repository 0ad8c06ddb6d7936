//! Replay speed of SegmentRegistry events: the path startup recovery, the snapshotter and
//! crescent-replay all take (journal frames -> records -> decode + upcast -> World::apply).
//!
//! Builds a file journal of N SegmentRegistry events (mount/unmount cycles over many segments
//! and owners, produced by the aggregate's own `decide`), then measures on one thread:
//! - `read`: `read_from(1)` alone (frame CRC + decode into records);
//! - `replay`: `World::catch_up` (the journal's in-place visit + `World::apply_ref` of every
//!   record: the full replay, as recovery runs it).
//!
//! Target: replay >= 1M events/s on one core. "On one core" is measured as events per
//! CPU-second of the replaying thread (CLOCK_THREAD_CPUTIME_ID), which the other processes of a
//! shared machine do not inflate; wall-clock rates are printed beside it. The workload cycles 4096 segments over
//! 200 owners (a large fleet).
//! Run: `cargo bench -p crescent-actors --bench replay [-- N] [--json]`

use std::time::Instant;

use crescent_actors::event_codec::new_record;
use crescent_actors::segment_registry::{
    SegmentRegistry, SegmentRegistryCommand, TransportKind, INSTANCE_ID,
};
use crescent_actors::{Aggregate, Ctx, World};
use crescent_journal::file::{FileBackend, FileOptions};
use crescent_journal::{Journal, JournalOptions};

fn build_journal(dir: &std::path::Path, events: u64) -> Journal {
    let backend = FileBackend::open(dir, FileOptions::default()).expect("open journal");
    let journal = Journal::open(Box::new(backend), JournalOptions::default()).expect("journal");
    let mut state = SegmentRegistry::default();
    let mut written = 0u64;
    let mut i = 0u64;
    let mut batch = Vec::with_capacity(1024);
    while written < events {
        let segment_id = format!("segment-{:06}", i % 4096);
        let cmd = if state.segment(&segment_id).is_some() {
            SegmentRegistryCommand::UnmountSegment { segment_id }
        } else {
            SegmentRegistryCommand::MountSegment {
                segment_id,
                owner_id: format!("owner-{:03}", i % 200),
                base: i << 20,
                size: 1 << 30,
                transport: TransportKind::Tcp,
            }
        };
        let ctx = Ctx::at(1_700_000_000_000 + i as i64);
        for event in state.decide(&cmd, &ctx).expect("valid command") {
            state.apply(&event);
            batch.push(new_record::<SegmentRegistry>(
                INSTANCE_ID,
                &event,
                ctx.now_ms,
            ));
            written += 1;
        }
        if batch.len() >= 1000 {
            journal
                .submit(1, std::mem::take(&mut batch))
                .expect("submit")
                .wait_blocking()
                .expect("durable");
        }
        i += 1;
    }
    if !batch.is_empty() {
        journal
            .submit(1, batch)
            .expect("submit")
            .wait_blocking()
            .expect("durable");
    }
    journal
}

/// CPU time consumed by this thread so far: "events/s on one core" counts the replaying
/// thread's own CPU time, not the wall clock of a shared 2-core machine.
fn thread_cpu_secs() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime only writes the timespec we pass, which lives on this stack frame.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let json = args.iter().any(|a| a == "--json");
    let events: u64 = args
        .iter()
        .find_map(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let dir = tempfile::tempdir().expect("tempdir");
    let journal = build_journal(dir.path(), events);
    let total = journal.durable().get();

    // Warm the page cache once so both measurements read from memory.
    let warm = journal.read_from(1).expect("read").count() as u64;
    assert_eq!(warm, total);

    // The machine is shared and noisy: take each measurement several times, interleaved, and
    // report the median (and the best).
    let mut read_rates = Vec::new();
    let mut replay_rates = Vec::new();
    let mut replay_cpu_rates = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let mut n = 0u64;
        for rec in journal.read_from(1).expect("read") {
            rec.expect("record");
            n += 1;
        }
        read_rates.push(n as f64 / t.elapsed().as_secs_f64());

        let t = Instant::now();
        let cpu = thread_cpu_secs();
        let mut world = World::standard();
        world.catch_up(&journal, u64::MAX).expect("replay");
        replay_cpu_rates.push(total as f64 / (thread_cpu_secs() - cpu));
        replay_rates.push(total as f64 / t.elapsed().as_secs_f64());
        assert_eq!(world.last_seq(), total);
    }
    journal.shutdown().expect("shutdown");
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        (v[v.len() / 2], v[v.len() - 1])
    };
    let (read_rate, read_best) = median(&mut read_rates);
    let (replay_rate, replay_best) = median(&mut replay_rates);
    let (replay_cpu_rate, _) = median(&mut replay_cpu_rates);

    if json {
        println!(
            "{}",
            serde_json::json!({
                "events": total,
                "read_events_per_s": read_rate.round(),
                "read_events_per_s_best": read_best.round(),
                "replay_events_per_s": replay_rate.round(),
                "replay_events_per_s_best": replay_best.round(),
                "replay_events_per_cpu_s": replay_cpu_rate.round(),
                "replay_per_core_vs_target_1m": replay_cpu_rate / 1e6,
            })
        );
    } else {
        println!("SegmentRegistry replay over {total} events (one thread)");
        println!("  median of 5 (best in brackets)");
        println!("  read_from (CRC + decode):        {read_rate:>12.0} events/s  ({read_best:.0})");
        println!(
            "  World::catch_up (replay):        {replay_rate:>12.0} events/s  ({replay_best:.0})"
        );
        println!(
            "  World::catch_up (replay):        {replay_cpu_rate:>12.0} events per CPU-second of the replaying thread"
        );
        println!(
            "  per-core replay / 1M target:     {:>12.2}x",
            replay_cpu_rate / 1e6
        );
    }
}
