//! Journal benchmark: durable appends/s under 1, 16 and 256 concurrent appenders for the file
//! and sled backends beside a raw write()+fdatasync baseline, and replay speed.
//!
//! Each appender thread loops `submit` + wait-for-durable of one record with a 128-byte
//! payload. The raw baseline is the ideal group commit for concurrency C: a single thread that
//! write()s C frames of the same size (one write() each) to a plain file, then fdatasyncs once.
//! Beside the thread appenders, the file backend is also measured with the same number of tokio
//! tasks on a 2-worker runtime awaiting `append` (how the actor runtime calls the journal).
//! The memory backend with thread appenders is measured too: it does no IO, so it shows the
//! ceiling that parking and waking OS threads alone put on the thread figures.
//! Replay: `read_from(1)` over a file journal of ~1M small records (CRC check + decode).
//!
//! Every measurement is time-bounded, and split into ~0.5 s slices taken in turn (raw, file,
//! sled, raw, ...) so that a shared machine's drifting load and disk speed hit all three alike.
//! Options (args after `--`, or env):
//!   --secs S      / BENCH_SECS            seconds per append measurement (default 2)
//!   --replay N    / BENCH_REPLAY_RECORDS  records in the replay journal (default 1000000)
//!   --concurrency N,M                      appender counts to measure (default 1,16,256)
//!   --json                                 print JSON instead of a table
//!   --dir D       / CRESCENT_BENCH_DIR     where to create files (default: the temp dir)
//!
//! Run: `cargo bench -p crescent-journal --bench journal_append [-- --json]`

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use crescent_journal::codec::encode_record;
use crescent_journal::file::{FileBackend, FileOptions};
use crescent_journal::memory::{MemoryBackend, MemoryStore};
use crescent_journal::sled_backend::SledBackend;
use crescent_journal::{
    chain_digest, EventData, Journal, JournalBackend, JournalMetrics, JournalOptions, NewRecord,
    Record, StreamId, GENESIS_DIGEST,
};

const CONCURRENCY: [usize; 3] = [1, 16, 256];
const PAYLOAD: usize = 128;

struct Config {
    concurrency: Vec<usize>,
    secs: f64,
    replay_records: u64,
    json: bool,
    dir: PathBuf,
}

fn config() -> Config {
    let mut c = Config {
        concurrency: CONCURRENCY.to_vec(),
        secs: env_or("BENCH_SECS", 2.0),
        replay_records: env_or("BENCH_REPLAY_RECORDS", 1_000_000.0) as u64,
        json: false,
        dir: std::env::var_os("CRESCENT_BENCH_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir),
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let next = args.get(i + 1);
        match args[i].as_str() {
            "--json" => c.json = true,
            "--concurrency" => {
                c.concurrency = next
                    .map(|v| {
                        v.split(',')
                            .map(|x| x.trim().parse().expect("--concurrency N,M,..."))
                            .collect()
                    })
                    .expect("--concurrency needs a list");
                i += 1;
            }
            "--secs" => {
                c.secs = next
                    .and_then(|v| v.parse().ok())
                    .expect("--secs needs a number");
                i += 1;
            }
            "--replay" => {
                c.replay_records = next
                    .and_then(|v| v.parse().ok())
                    .expect("--replay needs a count");
                i += 1;
            }
            "--dir" => {
                c.dir = PathBuf::from(next.expect("--dir needs a path"));
                i += 1;
            }
            _ => {} // cargo bench passes --bench; ignore what we do not know
        }
        i += 1;
    }
    c
}

fn env_or(name: &str, default: f64) -> f64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn record(n: u64) -> NewRecord {
    NewRecord {
        stream: StreamId::new("segment_registry", "bench"),
        event: EventData {
            kind: "segment_mounted".into(),
            version: 1,
            payload: vec![(n % 251) as u8; PAYLOAD],
        },
        timestamp_ms: 1_700_000_000_000 + n as i64,
    }
}

/// The frame the journal writes for one benchmark record, for the raw baseline.
fn sample_frame() -> Vec<u8> {
    let r = record(1);
    let digest = chain_digest(&GENESIS_DIGEST, 1, 1, r.timestamp_ms, &r.stream, &r.event);
    encode_record(&Record {
        seq: 1,
        term: 1,
        timestamp_ms: r.timestamp_ms,
        stream: r.stream,
        event: r.event,
        digest,
    })
}

/// Ideal group commit: one thread, C write()s then one fdatasync, for `secs`; (ops, seconds).
fn raw_baseline(dir: &Path, concurrency: usize, secs: f64) -> (u64, f64) {
    let path = dir.join(format!("raw-{concurrency}.dat"));
    let mut file = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(&path)
        .expect("raw file");
    let frame = sample_frame();
    let deadline = Duration::from_secs_f64(secs);
    let start = Instant::now();
    let mut ops = 0u64;
    while start.elapsed() < deadline {
        for _ in 0..concurrency {
            file.write_all(&frame).expect("write");
        }
        file.sync_data().expect("fdatasync");
        ops += concurrency as u64;
    }
    let elapsed = start.elapsed().as_secs_f64();
    drop(file);
    let _ = std::fs::remove_file(&path);
    (ops, elapsed)
}

/// What journal measurements saw, summed over slices.
#[derive(Debug, Clone, Copy, Default)]
struct Measured {
    ops: u64,
    secs: f64,
    batches: f64,
    batch_records: f64,
    sync_secs: f64,
}

impl Measured {
    fn add(&mut self, o: Measured) {
        self.ops += o.ops;
        self.secs += o.secs;
        self.batches += o.batches;
        self.batch_records += o.batch_records;
        self.sync_secs += o.sync_secs;
    }

    fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.secs
    }

    /// Mean records per group-commit batch.
    fn mean_batch(&self) -> f64 {
        self.batch_records / self.batches.max(1.0)
    }

    /// Mean time of one backend append (write + sync), ms.
    fn mean_sync_ms(&self) -> f64 {
        self.sync_secs * 1e3 / self.batches.max(1.0)
    }
}

/// (count, sum) of a histogram in `registry`.
fn histogram(registry: &prometheus::Registry, name: &str) -> (f64, f64) {
    registry
        .gather()
        .iter()
        .find(|f| f.name() == name)
        .map(|f| {
            let h = f.get_metric()[0].get_histogram();
            (h.get_sample_count() as f64, h.get_sample_sum())
        })
        .unwrap_or((0.0, 0.0))
}

/// `concurrency` threads each looping submit + wait of one record, for `secs`.
fn open_measured(backend: Box<dyn JournalBackend>) -> (Journal, prometheus::Registry) {
    let registry = prometheus::Registry::new();
    let metrics = JournalMetrics::register(&registry).expect("metrics");
    let journal = Journal::open(
        backend,
        JournalOptions {
            metrics: Some(metrics),
            ..JournalOptions::default()
        },
    )
    .expect("open journal");
    (journal, registry)
}

fn measured(registry: &prometheus::Registry, ops: u64, secs: f64) -> Measured {
    let (batches, batch_records) = histogram(registry, "crescent_journal_batch_records");
    let (_, sync_secs) = histogram(registry, "crescent_journal_sync_seconds");
    Measured {
        ops,
        secs,
        batches,
        batch_records,
        sync_secs,
    }
}

/// `concurrency` tokio tasks (on a 2-worker runtime, as actors run) each looping
/// `append(..).await` of one record, for `secs`.
fn async_appends(
    runtime: &tokio::runtime::Runtime,
    backend: Box<dyn JournalBackend>,
    concurrency: usize,
    secs: f64,
) -> Measured {
    let (journal, registry) = open_measured(backend);
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..concurrency)
        .map(|t| {
            let (j, stop, done) = (journal.clone(), stop.clone(), done.clone());
            runtime.spawn(async move {
                let mut n = t as u64 * 1_000_000_000;
                while !stop.load(Ordering::Relaxed) {
                    j.append(1, vec![record(n)]).await.expect("append");
                    done.fetch_add(1, Ordering::Relaxed);
                    n += 1;
                }
            })
        })
        .collect();
    let start = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(secs));
    let ops = done.load(Ordering::Relaxed);
    let elapsed = start.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    runtime.block_on(async {
        for t in tasks {
            t.await.expect("appender task");
        }
    });
    journal.shutdown().expect("shutdown");
    measured(&registry, ops, elapsed)
}

fn journal_appends(backend: Box<dyn JournalBackend>, concurrency: usize, secs: f64) -> Measured {
    let (journal, registry) = open_measured(backend);
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let barrier = Arc::new(Barrier::new(concurrency + 1));
    let threads: Vec<_> = (0..concurrency)
        .map(|t| {
            let (j, stop, done, barrier) =
                (journal.clone(), stop.clone(), done.clone(), barrier.clone());
            std::thread::Builder::new()
                .stack_size(256 << 10)
                .spawn(move || {
                    barrier.wait();
                    let mut n = t as u64 * 1_000_000_000;
                    while !stop.load(Ordering::Relaxed) {
                        j.append_blocking(1, vec![record(n)]).expect("append");
                        done.fetch_add(1, Ordering::Relaxed);
                        n += 1;
                    }
                })
                .expect("spawn appender")
        })
        .collect();
    barrier.wait();
    let start = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(secs));
    let ops = done.load(Ordering::Relaxed);
    let elapsed = start.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("appender");
    }
    journal.shutdown().expect("shutdown");
    measured(&registry, ops, elapsed)
}

struct Row {
    concurrency: usize,
    raw: f64,
    file: Measured,
    file_async: Measured,
    sled: Measured,
    memory: Measured,
}

fn replay(dir: &Path, records: u64) -> (f64, f64, u64) {
    let path = dir.join("replay");
    let j = Journal::open(
        Box::new(FileBackend::open(&path, FileOptions::default()).expect("file backend")),
        JournalOptions::default(),
    )
    .expect("open");
    let small = |n: u64| NewRecord {
        stream: StreamId::new("segment_registry", format!("owner-{}", n % 64)),
        event: EventData {
            kind: "segment_mounted".into(),
            version: 1,
            payload: vec![(n % 251) as u8; 48],
        },
        timestamp_ms: 1_700_000_000_000 + n as i64,
    };
    let mut n = 0;
    while n < records {
        let k = (records - n).min(4096);
        j.submit(1, (n..n + k).map(small).collect())
            .expect("submit");
        n += k;
    }
    j.durable().wait_for_blocking(records).expect("durable");
    let start = Instant::now();
    let mut count = 0u64;
    let mut bytes = 0u64;
    for r in j.read_from(1).expect("read") {
        let r = r.expect("record");
        bytes += r.event.payload.len() as u64;
        count += 1;
    }
    let secs = start.elapsed().as_secs_f64();
    assert_eq!(count, records, "replay read every record");
    std::hint::black_box(bytes);
    j.shutdown().expect("shutdown");
    (count as f64 / secs, secs, count)
}

fn main() {
    let cfg = config();
    std::fs::create_dir_all(&cfg.dir).expect("bench dir");
    let tmp = tempfile::Builder::new()
        .prefix("crescent-journal-bench-")
        .tempdir_in(&cfg.dir)
        .expect("tempdir");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let mut rows = Vec::new();
    let rounds = (cfg.secs / 0.5).round().max(1.0) as usize;
    let slice = cfg.secs / rounds as f64;
    for &c in &cfg.concurrency {
        let (mut raw_ops, mut raw_secs) = (0u64, 0f64);
        let mut file = Measured::default();
        let mut sled = Measured::default();
        let mut file_async = Measured::default();
        let mut memory = Measured::default();
        for round in 0..rounds {
            let (o, t) = raw_baseline(tmp.path(), c, slice);
            raw_ops += o;
            raw_secs += t;
            let file_dir = tmp.path().join(format!("file-{c}-{round}"));
            let backend =
                FileBackend::open(&file_dir, FileOptions::default()).expect("file backend");
            file.add(journal_appends(Box::new(backend), c, slice));
            let _ = std::fs::remove_dir_all(&file_dir);
            let backend =
                FileBackend::open(&file_dir, FileOptions::default()).expect("file backend");
            file_async.add(async_appends(&runtime, Box::new(backend), c, slice));
            let _ = std::fs::remove_dir_all(&file_dir);
            let sled_dir = tmp.path().join(format!("sled-{c}-{round}"));
            let backend = SledBackend::open(&sled_dir).expect("sled");
            sled.add(journal_appends(Box::new(backend), c, slice));
            let backend = MemoryBackend::new(MemoryStore::new());
            memory.add(journal_appends(Box::new(backend), c, slice));
            let _ = std::fs::remove_dir_all(&sled_dir);
        }
        let raw = raw_ops as f64 / raw_secs;
        if !cfg.json {
            eprintln!(
                "concurrency {c}: raw {raw:.0}/s, file {:.0}/s, file async {:.0}/s, sled {:.0}/s",
                file.ops_per_sec(),
                file_async.ops_per_sec(),
                sled.ops_per_sec()
            );
        }
        rows.push(Row {
            concurrency: c,
            raw,
            file,
            file_async,
            sled,
            memory,
        });
    }
    let (replay_rate, replay_secs, replay_count) = replay(tmp.path(), cfg.replay_records);

    if cfg.json {
        let out = serde_json::json!({
            "payload_bytes": PAYLOAD,
            "frame_bytes": sample_frame().len(),
            "seconds_per_measurement": cfg.secs,
            "appends": rows.iter().map(|r| serde_json::json!({
                "concurrency": r.concurrency,
                "raw_ops_per_sec": r.raw,
                "file_ops_per_sec": r.file.ops_per_sec(),
                "sled_ops_per_sec": r.sled.ops_per_sec(),
                "file_over_raw": r.file.ops_per_sec() / r.raw,
                "sled_over_raw": r.sled.ops_per_sec() / r.raw,
                "memory_threads_ops_per_sec": r.memory.ops_per_sec(),
                "file_async_ops_per_sec": r.file_async.ops_per_sec(),
                "file_async_over_raw": r.file_async.ops_per_sec() / r.raw,
                "file_async_mean_batch_records": r.file_async.mean_batch(),
                "file_mean_batch_records": r.file.mean_batch(),
                "file_mean_sync_ms": r.file.mean_sync_ms(),
                "sled_mean_batch_records": r.sled.mean_batch(),
                "sled_mean_sync_ms": r.sled.mean_sync_ms(),
            })).collect::<Vec<_>>(),
            "replay": {
                "records": replay_count,
                "seconds": replay_secs,
                "records_per_sec": replay_rate,
            },
        });
        println!("{}", serde_json::to_string_pretty(&out).expect("json"));
    } else {
        println!(
            "durable appends/s ({}-byte payload, {}-byte frames, {} s each)",
            PAYLOAD,
            sample_frame().len(),
            cfg.secs
        );
        println!(
            "{:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10} {:>10} {:>10} {:>10}",
            "appenders",
            "raw",
            "file",
            "sled",
            "file/raw",
            "sled/raw",
            "file-task",
            "task/raw",
            "file batch",
            "file sync",
            "mem-thread"
        );
        for r in &rows {
            println!(
                "{:>9} {:>9.0} {:>9.0} {:>9.0} {:>9.2} {:>9.2} {:>9.0} {:>10.2} {:>10.1} {:>8.2}ms {:>10.0}",
                r.concurrency,
                r.raw,
                r.file.ops_per_sec(),
                r.sled.ops_per_sec(),
                r.file.ops_per_sec() / r.raw,
                r.sled.ops_per_sec() / r.raw,
                r.file_async.ops_per_sec(),
                r.file_async.ops_per_sec() / r.raw,
                r.file.mean_batch(),
                r.file.mean_sync_ms(),
                r.memory.ops_per_sec()
            );
        }
        println!(
            "file, sled: OS-thread appenders (submit + wait_blocking); file-task: tokio tasks on \
             2 workers (append().await); mem-thread: OS-thread appenders over the memory backend \
             (no IO: the ceiling that thread wake-ups alone impose)"
        );
        println!(
            "replay: {replay_count} records in {replay_secs:.3} s = {replay_rate:.0} records/s (file backend, read_from(1))"
        );
    }
}
