//! Restore throughput of the `local_dir` read-and-verify path (header check, length check,
//! CRC32C of the payload) against a plain sequential `std::fs::read` of the same files in the
//! same run: the physical limit of this machine's page cache / disk for this access pattern.
//!
//! Objects: 4096 x 4 KiB and 32 x 4 MiB, written once through `LocalDirDevice::write`. Both
//! paths read every file of a set per iteration. After the criterion groups, a direct
//! interleaved measurement prints GiB/s, objects/s and the ratio verify/plain per size.
//! Run: `cargo bench -p crescent-cold --bench restore`

use std::hint::black_box;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crescent_cold::local_dir::LocalDirDevice;
use crescent_cold::{payload_checksum, ColdOpId};
use criterion::{criterion_group, BenchmarkId, Criterion, Throughput};

struct Set {
    label: &'static str,
    size: usize,
    objects: Vec<(String, PathBuf, u64, u32)>,
}

fn build(dev: &LocalDirDevice, label: &'static str, size: usize, count: usize, base: u128) -> Set {
    let mut objects = Vec::with_capacity(count);
    for i in 0..count {
        let payload: Vec<u8> = (0..size)
            .map(|b| (b as u64 ^ (i as u64 * 2654435761)) as u8)
            .collect();
        let r = dev
            .write(ColdOpId(uuid::Uuid::from_u128(base + i as u128)), &payload)
            .expect("write");
        assert_eq!(r.checksum, payload_checksum(&payload));
        let path = dev.path_of(&r.locator).expect("path");
        objects.push((r.locator, path, r.length, r.checksum));
    }
    Set {
        label,
        size,
        objects,
    }
}

fn restore_all(dev: &LocalDirDevice, set: &Set, buf: &mut Vec<u8>) -> usize {
    let mut total = 0;
    for (locator, _, len, crc) in &set.objects {
        dev.read_into(locator, *len, *crc, buf)
            .expect("verified read");
        total += black_box(&buf).len();
    }
    total
}

fn plain_all(set: &Set) -> usize {
    let mut total = 0;
    for (_, path, _, _) in &set.objects {
        total += black_box(std::fs::read(path).expect("read")).len();
    }
    total
}

fn fresh_restore_all(dev: &LocalDirDevice, set: &Set) -> usize {
    let mut total = 0;
    for (locator, _, len, crc) in &set.objects {
        total += black_box(dev.read(locator, *len, *crc).expect("verified read")).len();
    }
    total
}

fn sets() -> (tempfile::TempDir, LocalDirDevice, Vec<Set>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = LocalDirDevice::open("bench", dir.path().join("bench")).expect("device");
    let sets = vec![
        build(&dev, "4KiB", 4 << 10, 4096, 0),
        build(&dev, "4MiB", 4 << 20, 32, 1 << 64),
    ];
    (dir, dev, sets)
}

fn bench(c: &mut Criterion) {
    let (_dir, dev, sets) = sets();
    for set in &sets {
        let mut group = c.benchmark_group(format!("restore_{}", set.label));
        group.throughput(Throughput::Bytes((set.size * set.objects.len()) as u64));
        group.bench_function(BenchmarkId::new("verify", set.objects.len()), |b| {
            b.iter(|| fresh_restore_all(&dev, set))
        });
        group.bench_function(BenchmarkId::new("plain_read", set.objects.len()), |b| {
            b.iter(|| plain_all(set))
        });
        group.finish();
    }
}

/// Interleaved rounds of both paths; the median round of each gives the ratio.
fn report() {
    let (_dir, dev, sets) = sets();
    let mut buf = Vec::new();
    println!("\nrestore vs plain sequential read (median of interleaved rounds):");
    for set in &sets {
        let rounds = if set.size > 1 << 20 { 15 } else { 31 };
        let (mut verify, mut fresh, mut plain) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..rounds {
            let t = Instant::now();
            restore_all(&dev, set, &mut buf);
            verify.push(t.elapsed());
            let t = Instant::now();
            fresh_restore_all(&dev, set);
            fresh.push(t.elapsed());
            let t = Instant::now();
            plain_all(set);
            plain.push(t.elapsed());
        }
        let median = |v: &mut Vec<Duration>| {
            v.sort();
            v[v.len() / 2]
        };
        let (v, f, p) = (median(&mut verify), median(&mut fresh), median(&mut plain));
        let bytes = (set.size * set.objects.len()) as f64;
        let n = set.objects.len() as f64;
        let gib = |d: Duration| bytes / d.as_secs_f64() / (1u64 << 30) as f64;
        let ops = |d: Duration| n / d.as_secs_f64();
        println!(
            "  {:>5}: verify (reused buffer) {:6.2} GiB/s {:9.0} obj/s | verify (new Vec) {:6.2} GiB/s {:9.0} obj/s | plain read {:6.2} GiB/s {:9.0} obj/s | ratio {:.2} / {:.2}",
            set.label,
            gib(v),
            ops(v),
            gib(f),
            ops(f),
            gib(p),
            ops(p),
            p.as_secs_f64() / v.as_secs_f64(),
            p.as_secs_f64() / f.as_secs_f64(),
        );
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = bench
}

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    report();
}
