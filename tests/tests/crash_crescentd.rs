//! Crash test of crescentd: concurrent HTTP clients mount and unmount segments while crescentd
//! is SIGKILLed at a random moment; after each restart on the same data dir, every acknowledged
//! mount must be listed (unless its unmount was acknowledged) and every acknowledged unmount
//! must stay absent. Between rounds `crescent-replay verify` (when built) must pass on the data
//! dir. Half the rounds snapshot every 20 events, so crashes also land in snapshot writing and
//! journal prefix truncation.
//!
//! `CRESCENT_CRASH_ROUNDS` sets the number of rounds (default 50).

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crescent_tests::binaries::{ensure_workspace_binary, optional_workspace_binary};
use crescent_tests::crash_rounds;
use crescent_tests::crescentd::{log_tail, CrescentdProcess, Outcome, SegmentsClient};
use crescent_tests::process::killed_by_sigkill;
use crescent_tests::segment_model::{MountRequest, SegmentModel};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const CLIENTS: u32 = 4;
const OWNERS: u32 = 4;
const ID_PADDING: &str = concat!(
    "padpadpadpadpadpadpadpadpadpadpadpadpadpadpadpadpadpadpadpadpadpadpadpadpad",
    "padpadpadpadpadpadpadpadpadpadpadpadpadpadpadpadpadpadpadpadpadpadpadpadpad",
    "padpadpadpadpadpadpadpadpadpadpadpad",
);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

type SharedModel = Arc<Mutex<SegmentModel>>;

fn lock(model: &SharedModel) -> std::sync::MutexGuard<'_, SegmentModel> {
    model.lock().unwrap_or_else(|p| p.into_inner())
}

/// One client: mounts fresh segments and now and then unmounts an acknowledged one, until it is
/// told to stop or gets no answer (the server is gone). Returns the requests it sent.
async fn client_loop(
    client: SegmentsClient,
    model: SharedModel,
    stop: Arc<AtomicBool>,
    round: u32,
    client_id: u32,
    seed: u64,
) -> u64 {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut sent = 0u64;
    let mut n = 0u32;
    while !stop.load(Ordering::Relaxed) {
        sent += 1;
        let outcome = if rng.gen_ratio(1, 4) {
            let candidate = lock(&model).take_unmount_candidate(|len| rng.gen_range(0..len));
            let Some(segment_id) = candidate else {
                continue;
            };
            let outcome = client.unmount(&segment_id).await;
            lock(&model).record_unmount(&segment_id, round, &outcome);
            outcome
        } else {
            // Long ids make the journal outgrow its 1 MiB segments within the test, so snapshots
            // really truncate (whole) segments behind them.
            let segment_id = format!("r{round:03}-c{client_id}-{n:05}-{ID_PADDING}");
            n += 1;
            let request = MountRequest {
                owner_id: format!("owner-{}", rng.gen_range(0..OWNERS)),
                size: rng.gen_range(1..=1u64 << 30),
                round,
            };
            let outcome = client
                .mount(&request.owner_id, &segment_id, request.size)
                .await;
            lock(&model).record_mount(&segment_id, request, &outcome);
            outcome
        };
        if matches!(outcome, Outcome::Unknown(_)) {
            break;
        }
    }
    sent
}

/// Sorted names of the files in `dir` ending in `suffix` (empty when `dir` is missing).
fn files_with_suffix(dir: &Path, suffix: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.ends_with(suffix))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Runs `crescent-replay verify DIR` and requires exit 0.
fn replay_verify(replay: &Path, data_dir: &Path, round: u32) {
    let out = Command::new(replay)
        .arg("verify")
        .arg(data_dir)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", replay.display()));
    assert!(
        out.status.success(),
        "round {round}: `crescent-replay verify {}` failed ({}):\nstdout:\n{}\nstderr:\n{}",
        data_dir.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Lists the segments of a freshly started server and checks them against the model.
fn check_recovery(
    rt: &tokio::runtime::Runtime,
    server: &CrescentdProcess,
    model: &SharedModel,
    round: u32,
) {
    let client = server.segments_client(REQUEST_TIMEOUT);
    let listing = rt
        .block_on(client.list())
        .unwrap_or_else(|e| panic!("round {round}: {e}"));
    if let Err(e) = lock(model).check_recovered(&listing, round) {
        panic!(
            "{e}\ncrescentd log {}:\n{}",
            server.log_path.display(),
            log_tail(&server.log_path, 30)
        );
    }
}

#[test]
fn crescentd_keeps_every_acknowledged_segment_command_across_sigkills() {
    let started = Instant::now();
    let rounds = crash_rounds(50);
    let crescentd = ensure_workspace_binary("crescent-server", "crescentd");
    let replay = optional_workspace_binary("crescent-replay");
    if replay.is_none() {
        println!(
            "NOTE: crescent-replay is not built next to {}; skipping `crescent-replay verify` \
             (build it with `cargo build -p crescent-replay-tools`)",
            crescentd.display()
        );
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let data_dir = tmp.path().join("data");
    let logs = tmp.path().join("logs");
    std::fs::create_dir_all(&logs).expect("logs dir");
    // The smallest segment size crescentd accepts: recovery scans whole preallocated segments,
    // and a long journal rotates.
    let config = tmp.path().join("crescentd.toml");
    // No embedded segment: every segment the listing shows must be one this test mounted.
    std::fs::write(
        &config,
        "[journal]\nsegment_bytes = 1048576\n\n[store]\nembedded_segment_bytes = 0\n",
    )
    .expect("config file");
    let base_args = vec!["--config".to_string(), config.display().to_string()];
    let seed: u64 = rand::random();
    eprintln!("crescentd crash test: {rounds} rounds, rng seed {seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let model: SharedModel = Arc::default();
    let mut requests = 0u64;
    let mut startup_total = Duration::ZERO;
    let mut replay_verified = 0u32;
    let mut snapshot_rounds = 0u32;

    for round in 1..=rounds {
        let small_snapshots = round % 2 == 0;
        snapshot_rounds += u32::from(small_snapshots);
        let mut args = base_args.clone();
        if small_snapshots {
            args.extend(["--snapshot-every-events".into(), "20".into()]);
        }
        let log = logs.join(format!("round-{round:03}.log"));
        let mut server = CrescentdProcess::start(&crescentd, &data_dir, &log, &args)
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        startup_total += server.startup;
        // The restart recovers what the previous round's crash left.
        check_recovery(&rt, &server, &model, round);

        let stop = Arc::new(AtomicBool::new(false));
        let clients: Vec<_> = (0..CLIENTS)
            .map(|client_id| {
                rt.spawn(client_loop(
                    server.segments_client(REQUEST_TIMEOUT),
                    model.clone(),
                    stop.clone(),
                    round,
                    client_id,
                    rng.gen(),
                ))
            })
            .collect();
        std::thread::sleep(Duration::from_millis(rng.gen_range(5..=400)));
        let status = server.guard.sigkill();
        stop.store(true, Ordering::Relaxed);
        assert!(
            killed_by_sigkill(&status),
            "round {round}: crescentd exited on its own ({status}) before the kill; log:\n{}",
            log_tail(&log, 40)
        );
        for c in clients {
            requests += rt.block_on(c).expect("client task");
        }
        if let Some(replay) = &replay {
            replay_verify(replay, &data_dir, round);
            replay_verified += 1;
        }
    }

    // The last crash is checked by one more start, which then shuts down cleanly.
    let log = logs.join("final.log");
    let mut server = CrescentdProcess::start(&crescentd, &data_dir, &log, &base_args)
        .unwrap_or_else(|e| panic!("final restart: {e}"));
    check_recovery(&rt, &server, &model, rounds + 1);
    server.guard.signal(libc::SIGTERM);
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = server.guard.try_exit_status() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "crescentd did not exit within 20 s of SIGTERM; log:\n{}",
            log_tail(&log, 40)
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        status.success(),
        "crescentd exited with {status} after SIGTERM; log:\n{}",
        log_tail(&log, 40)
    );
    if let Some(replay) = &replay {
        replay_verify(replay, &data_dir, rounds + 1);
        replay_verified += 1;
    }

    let journal_segments = files_with_suffix(&data_dir.join("journal"), ".seg");
    let snapshots = files_with_suffix(&data_dir.join("snapshots"), ".crsnap");
    let model = lock(&model);
    let stats = &model.stats;
    println!(
        "SUMMARY crash_crescentd rounds={rounds} requests={requests} acked_mounts={} \
         acked_unmounts={} unanswered={} settled_present={} settled_absent={} \
         segments_expected_at_end={} snapshot_every_20_rounds={snapshot_rounds} \
         replay_verify_runs={replay_verified} journal_segments={} first_segment={} \
         snapshots={} avg_startup={:.0}ms elapsed={:.1}s",
        stats.acked_mounts,
        stats.acked_unmounts,
        stats.unanswered,
        stats.settled_present,
        stats.settled_absent,
        model.expected_present(),
        journal_segments.len(),
        journal_segments.first().map_or("none", String::as_str),
        snapshots.len(),
        startup_total.as_secs_f64() * 1000.0 / f64::from(rounds + 1),
        started.elapsed().as_secs_f64()
    );
    assert!(
        stats.acked_mounts > 0 && stats.acked_unmounts > 0,
        "the crash test acknowledged no mounts or no unmounts: it proved nothing"
    );
}
